"""What a saved vit_scratch folder must hold together, read from its JSON before anything is loaded.

- Its image processor fits its model (`check_processor_fits`): the processor resizes every image to the model's
  `image_size` and gives it `num_channels` channels, normalised per channel. A preprocessor_config.json edited to
  another size would feed the model images it cannot take (or allocate gigabytes first); one checked function, called
  by every command that reads a folder's processor (push, explain, train --model).
- Its model type (`check_vit_scratch_type`): a command that reads only vit_scratch models (push, explain) refuses
  another `model_type` from config.json before anything loads, and sends a transformers ViT or DeiT to the
  conversion that makes a vit_scratch folder of it.
- What its metrics describe (`described_sha256`): the metrics were measured through the config (labels, norms) and
  the processor as much as through the weights, so a training record holds the SHA-256 of each describing file;
  an edited config.json or preprocessor_config.json counts as unmeasured, as edited weights do; and the SHA-256 of
  the metrics it wrote (`content_sha256`), so a card publishes only the results the run measured.
"""

import hashlib
import json
import math
from pathlib import Path

CONFIG_FILE = "config.json"
PROCESSOR_FILE = "preprocessor_config.json"
# The files besides the weights that decide what a model computes from pixels.
DESCRIBING_FILES = (CONFIG_FILE, PROCESSOR_FILE)
# The transformers model types `vit-scratch convert --from transformers` reads, and their names in words.
TRANSFORMERS_TYPES = {"vit": "ViT", "deit": "DeiT"}
# What a user does about a settings file that does not read as JSON.
DAMAGED_FIX = (
    "the folder is damaged; restore the file (from a backup, or the repo the folder came from), or save the folder "
    "again with save_pretrained"
)
# A PEFT adapter's files: transformers finds adapter_config.json beside (or instead of) a model and loads the adapter
# over it, or loads the base model the adapter names from another repo; no from_pretrained option turns that off.
ADAPTER_CONFIG = "adapter_config.json"
# The image processors a vit_scratch folder may name: the package's own (what save_pretrained writes), and
# transformers' ViT processor, whose RGB output explain's `model_inputs` brings to a grayscale model's one channel.
OWN_PROCESSOR_TYPES = ("ViTScratchImageProcessor", "ViTScratchImageProcessorFast")
BRIDGED_PROCESSOR_TYPES = ("ViTImageProcessor", "ViTImageProcessorFast")
ADAPTER_WEIGHTS = "adapter_model.*"


def model_folder_signs(folder: str | Path) -> list[str]:
    """The files that make `folder` a saved model's folder, not a data set's: config.json beside weights
    (safetensors, an index of shards, or a pickle), or a record the package writes beside a model (a training run's,
    a conversion's). Empty for any other folder."""
    from modeling_vit_scratch.common.folders import CONVERSION_FILE, RECORD_FILE
    from modeling_vit_scratch.common.weights import PICKLE_SUFFIXES, SAFETENSORS, SAFETENSORS_INDEX

    folder = Path(folder)
    if not (folder / CONFIG_FILE).is_file():
        return []
    weights = [SAFETENSORS, SAFETENSORS_INDEX, RECORD_FILE, CONVERSION_FILE]
    found = [name for name in weights if (folder / name).is_file()]
    found += sorted(path.name for path in folder.glob("pytorch_model*") if path.suffix in PICKLE_SUFFIXES)
    return [CONFIG_FILE, *found] if found else []


def check_settings_files(folder: str | Path, named: str) -> None:
    """A FileNotFoundError naming the first of config.json and preprocessor_config.json that the local folder
    `folder` (as `named`, the argument the user gave) lacks: without it no model or processor can be loaded, and a
    loader's own message would blame something else. An adapter saved alone is named as one (`check_no_adapter`)."""
    if not (Path(folder) / CONFIG_FILE).is_file():
        check_no_adapter(folder)
    for name in DESCRIBING_FILES:
        if not (Path(folder) / name).is_file():
            raise FileNotFoundError(
                f"{named} has no {name}: restore it (from a backup, or the repo the folder came from), or give a "
                "folder written by save_pretrained with the image processor saved beside the model (vit-scratch "
                "train writes both)."
            )


# The largest settings file a command reads: far above any real one (a config of 300,000 labels is about 11 MB), far
# below what would take gigabytes of memory to parse.
MAX_SETTINGS_BYTES = 64 * 2**20


def read_json(path: Path) -> dict:
    """A JSON object from `path`; a one-line ValueError naming it when it is not one (truncated, another file's
    text, a link to one, nested too deeply to parse, larger than `MAX_SETTINGS_BYTES`, judged from its size before
    it is read): the folder is damaged, and the fix is to restore it or save it again."""
    try:
        size = path.stat().st_size
    except OSError as error:
        raise ValueError(f"{path} is not readable JSON ({error}): {DAMAGED_FIX}.") from None
    if size > MAX_SETTINGS_BYTES:
        raise ValueError(
            f"{path} is {size:,} bytes, more than the {MAX_SETTINGS_BYTES:,} a settings file may be: {DAMAGED_FIX}."
        )
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not readable JSON ({error}): {DAMAGED_FIX}.") from None
    except RecursionError:
        raise ValueError(f"{path} is not readable JSON (nested too deeply to parse): {DAMAGED_FIX}.") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} is not a JSON object: {DAMAGED_FIX}.")
    return value


def check_settings_finite(content: dict, path: Path) -> None:
    """A one-line ValueError naming the first key of `content` (read from `path`) holding NaN or an infinity
    (Python's json reads `NaN`, `Infinity` and `1e999`): a model or processor computing with it gives `nan`
    scores, and nothing in a settings file means one."""
    stack = [(key, value) for key, value in content.items()]
    while stack:
        key, value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{path} gives {key} the value {value}, which is not a finite number: {DAMAGED_FIX}.")
        if isinstance(value, dict):
            stack += [(f"{key}.{inner}", item) for inner, item in value.items()]
        elif isinstance(value, list):
            stack += [(f"{key}[{index}]", item) for index, item in enumerate(value)]


def check_no_adapter(folder: str | Path) -> None:
    """A one-line ValueError naming the PEFT adapter file in `folder` (a model folder, or a hub repo's settings fetched
    to one): a command reads the folder's own model only, and transformers would load the adapter over it (or the
    base model the adapter names, from another repo) without a word. The fix: merge the adapter into the model, or
    remove its files. A folder holding an adapter and no model (peft's `save_pretrained` before merging) is told so.
    """
    folder = Path(folder)
    found = sorted(path.name for path in folder.glob(ADAPTER_WEIGHTS) if path.is_file())
    found = [ADAPTER_CONFIG] * (folder / ADAPTER_CONFIG).is_file() + found
    if found and not (folder / CONFIG_FILE).is_file():  # peft's save_pretrained of an unmerged model: no model here
        raise ValueError(
            f"{folder} holds a PEFT adapter ({', '.join(found)}) and no model (no {CONFIG_FILE}): a command reads a "
            "whole model: merge the adapter into its base model (peft's `merge_and_unload()`, then "
            "`save_pretrained(FOLDER)`) and give that folder."
        )
    if found:
        raise ValueError(
            f"{folder / found[0]} is a PEFT adapter beside the model, which transformers would load over the model "
            "(or load the base model it names instead); a command reads the folder's own model only: merge it into "
            "the model (peft's `merge_and_unload()`, then `save_pretrained`), or remove the adapter files "
            f"({', '.join(found)})."
        )


def check_vit_scratch_type(folder: str | Path, shown: str, then: str, other: str) -> None:
    """Refuse, in one line naming `shown` (the folder or repo as the user gave it) and its type, a model whose
    config.json (in `folder`: the model's folder, or a hub repo's settings fetched to one) names a `model_type` other
    than vit_scratch. A transformers ViT or DeiT is sent to the conversion, then to `then` ("push", "explain
    --model") with the converted folder; any other type gets `other`, the fix in the command's words."""
    model_type = read_json(Path(folder) / CONFIG_FILE).get("model_type")
    if model_type == "vit_scratch":
        return
    if model_type in TRANSFORMERS_TYPES:
        what = f"a transformers {TRANSFORMERS_TYPES[model_type]} model, not a vit_scratch one"
        fix = (
            f"convert it first with `vit-scratch convert --from transformers --input {shown} --output NEW_FOLDER`, "
            f"then {then} NEW_FOLDER"
        )
    else:
        what, fix = "not a vit_scratch model", other
    raise ValueError(f"{shown} is {what} (config.json's model_type is {model_type!r}): {fix}.")


# What a command builds in memory (one process, no model parallelism): tokens per image (attention memory grows
# with their square) and parameters (float32 weights, gradients and two AdamW moments take 16 bytes each).
MAX_TOKENS = 65_536
MAX_PARAMETERS = 10**10


def check_model_size(config, fix: str | None = None) -> None:
    """A one-line ValueError for an architecture too large to build (`image_size=1048576`), before any memory is
    taken. The config itself allows any size (a user of from_pretrained may have the memory); the commands refuse
    what no single process can hold. `fix`: the fix in the reader's words (default: a new architecture's)."""
    (grid_h, grid_w), hidden = config.grid_size, config.hidden_size
    tokens = grid_h * grid_w + config.num_prefix_tokens
    if tokens > MAX_TOKENS:
        raise ValueError(
            f"image_size {config.image_size} with patch_size {config.patch_size} makes {tokens:,} tokens per image "
            f"(a {grid_h}x{grid_w} grid), more than the {MAX_TOKENS:,} a command builds: "
            f"{fix or 'lower image_size or raise patch_size'}."
        )
    cell_h, cell_w = config.cell_size
    layer = 4 * hidden * hidden + 2 * hidden * config.intermediate_size
    parameters = config.num_hidden_layers * layer + tokens * hidden + cell_h * cell_w * config.num_channels * hidden
    if parameters > MAX_PARAMETERS:
        raise ValueError(
            f"hidden_size {hidden}, intermediate_size {config.intermediate_size} and {config.num_hidden_layers} "
            f"layers make about {parameters:,} parameters, more than the {MAX_PARAMETERS:,} a command builds: "
            f"{fix or 'lower hidden_size, intermediate_size or num_hidden_layers'}."
        )


# Config keys that make transformers load code or packages besides the model's own: a quantization backend
# (bitsandbytes, ...) and an attention kernel named by hub repo (fetched and run as compiled code).
FOREIGN_LOADER_KEYS = ("quantization_config",)
ATTENTION_KEYS = ("attn_implementation", "_attn_implementation")
REMOVE_KEY_FIX = "remove the key from the file (or save the folder again)"


def supported_attention() -> list[str]:
    """The attention implementations the installed transformers runs by itself ("eager", "sdpa", flash and flex
    attention): any other name (a hub repo's kernel) is code fetched from elsewhere."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return sorted({"eager", *ALL_ATTENTION_FUNCTIONS.valid_keys()})


def check_loader_keys(content: dict, path: Path) -> None:
    """A one-line ValueError naming a key of config.json (`content`, from `path`) that would make transformers
    load code besides the model's own: refused as foreign code is, whatever the model type."""
    for key in FOREIGN_LOADER_KEYS:
        if content.get(key) is not None:
            raise ValueError(
                f"{path} has {key} ({content[key]!r}), which makes transformers load other code or packages; "
                f"refusing to run it: {REMOVE_KEY_FIX}."
            )
    for key in ATTENTION_KEYS:
        value = content.get(key)  # a name, or {sub-config: name}
        names = list(value.values()) if isinstance(value, dict) else [value]
        if any(name is not None and name not in supported_attention() for name in names):
            raise ValueError(
                f"{path} has {key} {value!r}, an attention kernel transformers would fetch and run as code; "
                f"refusing to run it: {REMOVE_KEY_FIX}, or name one transformers runs itself "
                f"({', '.join(supported_attention())})."
            )


def check_buildable(folder: str | Path) -> None:
    """Refuse, before any model is built, a folder (or a hub repo's settings fetched to one) whose config.json or
    preprocessor_config.json holds a value no model should be built from: one line naming the file, the key, the
    value and the fix (restore the file, or save the folder again), never a traceback or a later symptom. Every
    command that reads a model folder passes here (through `check_no_foreign_code`, or push's checks):

    - no PEFT adapter (`check_no_adapter`): the model read is the folder's own, never an adapter over it or another
      repo's;
    - both files: readable JSON objects of a sane size and depth (`read_json`), every number finite (`check_settings_finite`);
    - config.json: no key that loads other code (`check_loader_keys`); a vit_scratch config builds
      (`ViTScratchConfig`: any of its ValueErrors, such as a head count that does not divide hidden_size, or labels
      whose ids are not integers) and describes a model one process can hold (`check_model_size`): an edited size
      would allocate terabytes before any load could say the weights do not fit;
    - its preprocessor_config.json names a processor the model reads through (`check_processor_kind`) and fits its
      config: size, channels, a mean and std per channel (`check_processor_fits_config`);
    - its safetensors weights, where the folder holds them, are the model config.json describes: names and shapes
      from their headers against that model built on the `meta` device (`check_weights_fit`), so a config edited to
      a model the machine could hold but the weights do not fill is refused before any memory is taken."""
    folder = Path(folder)
    check_no_adapter(folder)
    for name in DESCRIBING_FILES:
        if (folder / name).is_file():
            check_settings_finite(read_json(folder / name), folder / name)
    path = folder / CONFIG_FILE
    if not path.is_file():
        return
    content = read_json(path)
    check_loader_keys(content, path)
    if content.get("model_type") != "vit_scratch":
        return
    from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig

    for key in ("id2label", "label2id"):  # transformers reads id2label's keys with int(), naming neither
        labels = content.get(key)
        ids = labels.keys() if key == "id2label" and isinstance(labels, dict) else (labels or {}).values()
        bad = [label_id for label_id in ids if not _is_label_id(label_id)] if isinstance(labels, dict) else []
        if bad:
            raise ValueError(f"{path} gives {key} the id {bad[0]!r}, which is not an integer: {DAMAGED_FIX}.")
    try:
        config = ViTScratchConfig.from_dict(content)
        check_model_size(config, "restore config.json (from a backup, or the repo the folder came from)")
    except (TypeError, ValueError, KeyError) as error:
        # the config's own line ends in the fix for a new architecture ("pick a head count"): a saved one is restored
        message = str(error).strip().rstrip(".")
        if "restore" in message:
            raise ValueError(f"{path}: {message}.") from None
        what = message.split(": ")[0] if " must " in message.split(": ")[0] else message
        raise ValueError(f"{path} does not build a model ({what}): {DAMAGED_FIX}.") from None
    if (folder / PROCESSOR_FILE).is_file():
        processor = read_json(folder / PROCESSOR_FILE)
        check_processor_kind(processor, folder / PROCESSOR_FILE)
        check_processor_fits_config(content, processor, str(folder / PROCESSOR_FILE))
    from modeling_vit_scratch.common.weights import check_weights_fit

    check_weights_fit(folder, config)


def check_processor_kind(processor: dict, path: Path) -> None:
    """A one-line ValueError naming `path` (a vit_scratch folder's preprocessor_config.json, as `processor`) where
    its `image_processor_type` is not one the model reads through: the package's own, or transformers' ViT one, which
    explain bridges. Another processor class would be loaded and fail on the model's channels naming nothing ("mean
    must have 3 elements"). Its values are `check_processor_fits_config`'s."""
    kind = processor.get("image_processor_type")  # absent: the loader takes the model type's own processor
    if kind is not None and kind not in OWN_PROCESSOR_TYPES + BRIDGED_PROCESSOR_TYPES:
        raise ValueError(
            f"{path} gives image_processor_type {kind!r}, which is not vit-scratch's own processor "
            f"({' or '.join(OWN_PROCESSOR_TYPES)}): {DAMAGED_FIX}."
        )


def _is_label_id(value) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and value.strip().lstrip("-").isdigit()


def _pair(value) -> tuple[int, int] | None:
    if isinstance(value, int):
        return value, value
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return tuple(value)
    return None


def check_processor_fits(folder: str | Path) -> None:
    """Refuse a vit_scratch folder whose preprocessor_config.json does not fit its config.json
    (`check_processor_fits_config`). Folders of other models, or without a processor, pass."""
    folder = Path(folder)
    if not (folder / CONFIG_FILE).is_file() or not (folder / PROCESSOR_FILE).is_file():
        return
    config = read_json(folder / CONFIG_FILE)
    if config.get("model_type") == "vit_scratch":
        check_processor_fits_config(config, read_json(folder / PROCESSOR_FILE), str(folder / PROCESSOR_FILE))


def check_processor_fits_config(config: dict, processor: dict, where: str) -> None:
    """Refuse a processor (`where`: its preprocessor_config.json) that does not fit a vit_scratch config: the size
    must be the model's `image_size` (height/width, or shortest_edge for a square model), `num_channels` and the
    lengths of `image_mean` / `image_std` the model's `num_channels` (for the package's own processor: another one,
    such as transformers' RGB `ViTImageProcessor` beside a converted grayscale model, is bridged by explain's
    `model_inputs`, which brings its channels to the model's)."""
    fix = (
        "restore the file (from a backup, or the repo the folder came from), or save the processor again with "
        "ViTScratchImageProcessor.for_config(config).save_pretrained(folder)"
    )
    image_size = config.get("image_size", 224)
    height, width = _pair(image_size) or (None, None)
    size = processor.get("size")
    if isinstance(size, dict) and size.get("shortest_edge") is not None and height == width:
        found, wanted, field = size["shortest_edge"], height, "size.shortest_edge"
    elif isinstance(size, dict):
        found, wanted, field = [size.get("height"), size.get("width")], [height, width], "size (height, width)"
    else:
        found, wanted, field = size, {"height": height, "width": width}, "size"
    if found != wanted:
        raise ValueError(
            f"{where} gives {field} {found}, but config.json's image_size is {image_size} (it must be {wanted}): {fix}."
        )
    own = str(processor.get("image_processor_type") or "ViTScratch").startswith("ViTScratch")  # absent: the own one
    channels = config.get("num_channels", 3)
    lengths = {channels} if own else {channels, 1, 3}  # transformers' ViT processor: explain bridges 1 or 3
    for name in ("image_mean", "image_std"):
        values = processor.get(name)
        if isinstance(values, list) and len(values) not in lengths:
            raise ValueError(
                f"{where} gives {name} {len(values)} values, but config.json's num_channels is {channels} "
                f"(it must give {channels}): {fix}."
            )
    if own and processor.get("num_channels", channels) != channels:
        raise ValueError(
            f"{where} gives num_channels {processor['num_channels']}, but config.json's num_channels is "
            f"{channels}: {fix}."
        )


def content_sha256(content: dict) -> str:
    """SHA-256 of a JSON object's content, keys sorted: the same for the same values however the file was written."""
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def described_sha256(folder: str | Path, as_written: bool = False) -> dict[str, str]:
    """{file name: SHA-256 of its JSON content} for each of `DESCRIBING_FILES` the folder holds: keys sorted and
    `transformers_version` left out, so only a changed value counts, not a re-save by another version. A vit_scratch
    config.json counts as loaded (`loaded_config`), so the config a push saves again (which drops what no field holds,
    such as the Trainer's `use_cache`) is the one the record describes; `as_written`: as the file holds it, the digest
    a record written before this rule holds."""
    folder = Path(folder)
    digests = {}
    for name in DESCRIBING_FILES:
        if (folder / name).is_file():
            content = read_json(folder / name)
            if name == CONFIG_FILE and not as_written:
                content = loaded_config(content)
            digests[name] = content_sha256(
                {key: value for key, value in content.items() if key != "transformers_version"}
            )
    return digests


def loaded_config(content: dict) -> dict:
    """A vit_scratch config.json's content as the model reads it (`ViTScratchConfig`: defaults filled in, keys that no
    field holds dropped), any other as written; as written too when it does not load (its own check says why)."""
    if content.get("model_type") != "vit_scratch":
        return content
    from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig

    try:
        return json.loads(ViTScratchConfig.from_dict(content).to_json_string())
    except (TypeError, ValueError, KeyError):
        return content
