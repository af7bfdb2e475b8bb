"""Whose code a model folder asks to run: the one test, shared by every command that reads a folder.

A folder's `config.json` / `preprocessor_config.json` may carry an `auto_map` naming classes in `.py` files that
travel with the folder (or in another Hub repo); transformers runs that code when asked to trust it, and asks on a
terminal when nobody said. The package loads a folder only with `trust_remote_code` given explicitly, and refuses,
in one line and before anything loads, a folder whose `auto_map` names anything but the package's own classes,
unless the user asked for remote code (only `explain --trust_remote_code` can).
"""

from pathlib import Path

from modeling_vit_scratch.common.model_folder import ADAPTER_CONFIG, check_buildable, read_json
from modeling_vit_scratch.common.sources import looks_like_local_path
from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig, auto_map_entry
from modeling_vit_scratch.image_processing_vit_scratch import ViTScratchImageProcessor, ViTScratchImageProcessorFast
from modeling_vit_scratch.modeling_vit_scratch import (
    ViTScratchForImageClassification,
    ViTScratchForImageClassificationWithTeacher,
    ViTScratchModel,
)

# What a saved folder's auto_map may name, per file: the classes the package registers, and nothing else.
OWN_AUTO_MAP = {
    "config.json": {
        "AutoConfig": {auto_map_entry(ViTScratchConfig)},
        "AutoModel": {auto_map_entry(ViTScratchModel)},
        "AutoModelForImageClassification": {
            auto_map_entry(ViTScratchForImageClassification),
            auto_map_entry(ViTScratchForImageClassificationWithTeacher),
        },
    },
    "preprocessor_config.json": {  # [PIL class, torchvision class]: transformers picks one by backend= / use_fast=
        "AutoImageProcessor": {(auto_map_entry(ViTScratchImageProcessor), auto_map_entry(ViTScratchImageProcessorFast))}
    },
}


def foreign_code(folder: str | Path) -> str | None:
    """What in `folder` names code other than the package's own, in words ("FOLDER/config.json maps X to 'm.C',
    which is not vit-scratch's own code"), or None when its auto_map names only the package's classes (or it has
    none). Reads JSON only; nothing is imported. A file that is not readable JSON is a damaged folder, not a question
    of trust: `read_json`'s one-line ValueError says so and how to restore it, with no remote-code advice."""
    folder = Path(folder)
    for name, allowed in OWN_AUTO_MAP.items():
        path = folder / name
        if not path.is_file():
            continue
        auto_map = read_json(path).get("auto_map")
        if auto_map is None:
            continue
        if not isinstance(auto_map, dict):
            return f"{path} has an auto_map that is not a mapping ({auto_map!r})"
        for auto_class, reference in auto_map.items():
            if (tuple(reference) if isinstance(reference, list) else reference) not in allowed.get(auto_class, ()):
                return f"{path} maps {auto_class} to {reference!r}, which is not vit-scratch's own code"
    return None


def check_no_foreign_code(
    source: str | Path, fix: str, *, trust_remote_code: bool = False, revision: str | None = None
) -> None:
    """Raise a one-line ValueError ending in `fix` when `source` (a local folder, or a hub repo id whose two JSON
    files are fetched first, at `revision`) names code other than the package's own, unless the user asked to trust it. A repo
    that cannot be fetched is left to the load, which gets `trust_remote_code` explicitly and so never prompts.
    Every command that reads a model passes here before building it, so the settings' size is checked here too,
    trusted or not, a local folder or a repo's fetched settings alike (`check_buildable`): a model no process can hold
    is refused before any memory is taken."""
    folder = source if Path(source).is_dir() else settings_of_repo(str(source), revision)
    found = foreign_code(folder) if folder and not trust_remote_code else None
    if found:
        raise ValueError(f"{found}; refusing to run it: {fix}.")
    if folder:
        check_buildable(folder)


def settings_of_repo(repo_id: str, revision: str | None = None) -> Path | None:
    """A local copy of a hub repo's config.json, preprocessor_config.json and adapter_config.json (where it has one:
    `check_buildable` refuses an adapter) at `revision` (default: main; from the cache, or downloaded), or None where `repo_id` names no repo that can be reached."""
    if looks_like_local_path(repo_id):
        return None
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=[*OWN_AUTO_MAP, ADAPTER_CONFIG]))
    except Exception:  # noqa: BLE001 - an unknown or unreachable repo: the load that follows says why
        return None
