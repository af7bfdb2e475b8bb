"""What a conversion's `--input` is, decided before any work: a local folder (of the kind the direction reads), a
hub repo id, or for `--from timm` a safetensors file. Each wrong kind is one line that names the right one: a file
where a folder is read, a folder of the other side of the conversion (a transformers ViT given to `--to
transformers`), a local path that does not exist (never looked up on the Hub), a name that is no repo id (common/sources.py's one check)."""

from pathlib import Path

from modeling_vit_scratch.common.model_folder import TRANSFORMERS_TYPES, check_no_adapter, read_json
from modeling_vit_scratch.common.remote_code import check_no_foreign_code
from modeling_vit_scratch.common.sources import check_folder_path, check_hub_model, check_not_url, hub_commit
from modeling_vit_scratch.conversion.convert import NO_CODE_RUNS


def check_input(source: str, direction: str, revision: str | None = None) -> str | None:
    """Refuse an `--input` of the wrong kind for `direction` ("from transformers", "to transformers"; `--from
    timm` has its own check of a weights file) with a ValueError or FileNotFoundError naming the fix; a hub repo
    is looked at `revision` (default: main). Returns the full commit a hub repo's `revision` resolves to, which the
    conversion reads and records (a branch or a `refs/pr/N` moves; a commit does not); None for a local folder."""
    if not source.strip():
        raise ValueError("--input is empty: give a model folder or a hub repo id.")
    check_not_url(source, "--input")
    check_folder_path(source, "--input", "convert")
    if not Path(source).is_dir():
        return hub_commit(source, "--input", revision, "--revision")
    check_hub_model(source, "--input", revision)  # a --revision given with a local folder: one line
    check_folder_kind(Path(source), source, direction)
    return None


def check_folder_kind(folder: Path, source: str, direction: str) -> None:
    """A local folder's config.json says which side of the conversion it is on: refuse the other side, or neither."""
    if not (folder / "config.json").is_file():
        check_no_adapter(folder)  # an unmerged adapter is a model's part, not a model: said as such
        raise FileNotFoundError(
            f"--input {source!r} has no config.json: give a folder written by save_pretrained (the model's "
            "config.json beside its weights)."
        )
    check_no_foreign_code(folder, NO_CODE_RUNS)  # the security refusal first: it names the code
    model_type = read_json(folder / "config.json").get("model_type")
    if direction == "to transformers" and model_type in TRANSFORMERS_TYPES:
        raise ValueError(
            f"--input {source!r} is a transformers {TRANSFORMERS_TYPES[model_type]} folder already (config.json's model_type "
            f"is {model_type!r}): to make a vit_scratch folder of it, use --from transformers instead of --to."
        )
    if direction == "to transformers" and model_type != "vit_scratch":
        raise ValueError(
            f"--input {source!r} is not a vit_scratch folder (config.json's model_type is {model_type!r}): --to "
            "transformers converts a folder that vit-scratch saved."
        )
    if direction == "from transformers" and model_type == "vit_scratch":
        raise ValueError(
            f"--input {source!r} is a vit_scratch folder already: to make a transformers folder of it, use --to "
            "transformers instead of --from."
        )
    if direction == "from transformers" and model_type not in TRANSFORMERS_TYPES:
        raise ValueError(
            f"--input {source!r} holds a {model_type!r} model, not a transformers ViT or DeiT ('vit' or 'deit'): "
            "--from transformers converts those only."
        )
