"""Model sources: one resolver and one checked loader, used by train, explain, convert and push.

`resolve` turns what a user typed (a local folder, or a Hub repo id at a revision) into a local folder: a Hub
repo is fetched with `snapshot_download`, settings and safetensors weights only (and code only when the user asked
for remote code). `check_model_folder` reads its settings with the one JSON reader (`read_json`) and refuses, before
anything is built: a folder with no config (an unmerged PEFT adapter is named as one), weights that are not
safetensors, and an `auto_map` naming any code but the package's own unless the user passed `trust_remote_code`.
`load_model` is the two together, then transformers' `from_pretrained` with `use_safetensors=True`.

Training glue, never imported by the model files.
"""

import hashlib
import json
import os
from pathlib import Path

import torch
from safetensors import safe_open

from .configuration_vit_scratch import MODEL_FILES
from .errors import UserError, check_fits
from .secrets import shown

MAX_SETTINGS_BYTES = 16 << 20  # a config or processor file past this is no settings file
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
OWN_MODULES = {name.removesuffix(".py") for name in MODEL_FILES}
WEIGHTS = ("model.safetensors", "model.safetensors.index.json")


def read_json(path: str | os.PathLike, what: str | None = None) -> dict:
    """A JSON object from a file of at most `MAX_SETTINGS_BYTES`; anything else is one line naming the file."""
    path, what = Path(path), what or shown(path)
    if path.stat().st_size > MAX_SETTINGS_BYTES:
        raise UserError(f"{what} is {path.stat().st_size:,} bytes, too large for a settings file: restore it")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{what} is not readable JSON ({error}): restore it or save the model again") from None
    if not isinstance(value, dict):
        raise UserError(f"{what} holds {type(value).__name__}, not a JSON object: restore it or save the model again")
    return value


def is_local(spec: str) -> bool:
    return Path(spec).expanduser().exists() or spec.startswith((".", "/", "~")) or os.sep + os.sep in spec


def resolve(
    spec: str | os.PathLike, *, revision: str | None = None, trust_remote_code: bool = False, argument: str = "--model"
) -> Path:
    """A local folder for `spec`: the folder itself, or a snapshot of the Hub repo it names at `revision`."""
    spec = str(spec)
    if is_local(spec):
        folder = Path(spec).expanduser()
        if not folder.is_dir():
            raise UserError(f"{argument} {shown(spec)}: no such folder")
        return folder
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "*.md", *(["*.py"] if trust_remote_code else [])]
    return Path(snapshot_download(spec, revision=revision, allow_patterns=patterns))


def foreign_code(settings: dict) -> str | None:
    """The first `auto_map` entry of a settings file that names code other than the package's model files."""
    auto_map = settings.get("auto_map") or {}
    if not isinstance(auto_map, dict):
        return f"an auto_map that is not a mapping ({auto_map!r})"
    for auto_class, references in auto_map.items():
        for reference in references if isinstance(references, list) else [references]:
            if reference is not None and (
                not isinstance(reference, str) or "--" in reference or reference.rsplit(".", 1)[0] not in OWN_MODULES
            ):
                return f"{auto_class} -> {reference!r}"
    return None


def check_model_folder(
    folder: str | os.PathLike,
    *,
    trust_remote_code: bool = False,
    argument: str = "--model",
    trust_option: str | None = "--trust_remote_code",
) -> dict:
    """The folder's config.json as a dict, once the folder is known to hold a model that loads safely. `trust_option`
    is the command's option that lets other code run (None: the command never runs it)."""
    folder = Path(folder)
    named = f"{argument} {shown(folder)}"
    if not (folder / "config.json").is_file():
        if (folder / "adapter_config.json").is_file():
            raise UserError(
                f"{named} holds a PEFT adapter, not a model: merge it into its base model "
                "(`model.merge_and_unload().save_pretrained(folder)`) and give that folder"
            )
        raise UserError(f"{named} has no config.json: give a folder that save_pretrained wrote")
    config = read_json(folder / "config.json", f"{named}/config.json")
    if not any((folder / name).is_file() for name in WEIGHTS):
        pickles = sorted(path.name for path in folder.iterdir() if path.suffix in PICKLE_SUFFIXES)
        why = f"only pickle weights ({', '.join(pickles)}), which can run code when read" if pickles else "no weights"
        raise UserError(
            f"{named} holds {why}: vit-scratch reads safetensors only; save the model with "
            "`save_pretrained(folder, safe_serialization=True)`"
        )
    if not trust_remote_code:
        for name in ("config.json", "preprocessor_config.json"):
            settings = config if name == "config.json" else None
            if settings is None and (folder / name).is_file():
                settings = read_json(folder / name, f"{named}/{name}")
            if settings and (found := foreign_code(settings)):
                fix = f"pass {trust_option} if you trust that code" if trust_option else "remove that auto_map entry"
                raise UserError(
                    f"{named}/{name} maps {shown(found)}, code that is not vit-scratch's own: refusing to run it; {fix}"
                )
    return config


def load_model(
    spec: str | os.PathLike,
    auto_class=None,
    *,
    revision: str | None = None,
    trust_remote_code: bool = False,
    argument: str = "--model",
    trust_option: str | None = "--trust_remote_code",
    **kwargs,
):
    """The model `spec` names, built by `auto_class` (default: AutoModelForImageClassification) from safetensors, every
    tensor its config asks for loaded (`trust_option`: as `check_model_folder`)."""
    from transformers import AutoModelForImageClassification

    folder = resolve(spec, revision=revision, trust_remote_code=trust_remote_code, argument=argument)
    settings = check_model_folder(
        folder, trust_remote_code=trust_remote_code, argument=argument, trust_option=trust_option
    )
    sizes = [settings.get(name) for name in ("hidden_size", "intermediate_size", "num_hidden_layers")]
    if all(isinstance(size, int) and size > 0 for size in sizes):  # what the config asks to allocate, in float32
        hidden, intermediate, layers = sizes
        fix = "check its config.json (hidden_size, intermediate_size, num_hidden_layers)"
        check_fits(4 * layers * (4 * hidden * hidden + 2 * hidden * intermediate), f"{argument} {shown(spec)}", fix)
    auto_class = auto_class or AutoModelForImageClassification
    model, info = auto_class.from_pretrained(
        folder, use_safetensors=True, trust_remote_code=trust_remote_code, output_loading_info=True, **kwargs
    )
    if missing := sorted(info.get("missing_keys") or ()):  # transformers would have filled it from its initialiser
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise UserError(
            f"{argument} {shown(spec)}: its weights lack {shown(missing[0])!r}{more}, which its config asks for: "
            "save the model again with all its weights"
        )
    return model


def weights_sha256(folder: str | os.PathLike) -> str:
    """SHA-256 of the tensors in `folder`'s safetensors files (name, dtype, shape, bytes), whatever their sharding:
    what a training or conversion record keeps of the weights it describes, and what the card and push compare."""
    entries = []
    for path in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as weights:
            for name in weights.keys():  # noqa: SIM118 (safe_open is no dict)
                tensor = weights.get_tensor(name).contiguous()
                data = hashlib.sha256(tensor.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()
                entries.append(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|{data}\n")
    return hashlib.sha256("".join(sorted(entries)).encode()).hexdigest()
