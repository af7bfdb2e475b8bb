"""Which weight files the tooling reads, checked before anything is loaded: safetensors only, with a header that
fits its file.

A pickle (`pytorch_model.bin`, `.pt`, `.pth`, `.ckpt`) can run code when it is unpickled, so no command reads one
as weights: a folder that holds only a pickle is refused with the command that converts it, for whoever trusts the
file. A safetensors file is data, but its header is read before its tensors: a crafted header (a length past the end
of the file, malformed JSON, offsets outside the data, sizes of 2^62 bytes) is refused here in one line by
safetensors' own header check, before any large allocation. A checkpoint to resume keeps the Trainer's states as pickles (optimizer, scheduler, random state):
those are read with `weights_only=True`, and one that is more than tensors is refused before training starts.
"""

import json
import math
import os
from pathlib import Path

from modeling_vit_scratch.common.commands import printed_python

SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
# the Trainer's own states in a checkpoint, which it reads with torch.load(weights_only=True)
CHECKPOINT_STATES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state*.pth")


PICKLE_MAGIC = (b"PK\x03\x04", b"\x80")  # torch.save's zip archive, a bare pickle (protocol 2 and later)


def weights_format(path: str | Path) -> str | None:
    """The format of a weights file, "safetensors", "pickle" or None (neither), by `path`'s first bytes, never its name: safetensors when its
    8-byte little-endian header length fits the file and the header starts with `{`; only otherwise a pickle by
    its magic (a safetensors header length whose first byte is 0x80, pickle's PROTO opcode, is no pickle). The one
    sniff of a weights file's format."""
    with open(path, "rb") as file:
        head = file.read(9)
        size = os.fstat(file.fileno()).st_size
    if len(head) == 9 and 2 <= int.from_bytes(head[:8], "little") <= size - 8 and head[8:] == b"{":
        return "safetensors"
    return "pickle" if head.startswith(PICKLE_MAGIC) else None


def check_safetensors(path: str | Path) -> None:
    """Raise a one-line ValueError unless safetensors reads `path`'s header: it parses the header and checks every
    tensor's dtype, shape and offsets against the file before any tensor is read (nothing is allocated for the data,
    which is memory-mapped)."""
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    try:
        with safe_open(path, framework="np") as weights:
            shapes = {name: weights.get_slice(name).get_shape() for name in weights.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, ValueError) as error:
        said = " ".join(str(error).split()) or type(error).__name__
        raise ValueError(f"{path} is not a readable safetensors file ({said}): {_resave(path)}.") from None
    for name, shape in shapes.items():  # an empty tensor passes safetensors' size check whatever its sides
        if math.prod(max(side, 1) for side in shape) >= 2**63:
            raise ValueError(
                f"{path} gives tensor {name!r} the shape {shape}, which no tensor can have: {_resave(path)}."
            )


def check_finite(tensors, origin: str | Path):
    """`tensors` (a mapping of names to tensors, read from `origin`) if every value is finite; else a ValueError naming
    the first tensor with NaN or infinity. Such weights compute NaN (scores, figures, a conversion that could never
    match its source): every reader refuses them before using them."""
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not tensor.isfinite().all():
            raise ValueError(
                f"{origin} holds non-finite values (NaN or infinity) in tensor {name!r}: a model with such weights "
                "computes NaN; use a checkpoint saved before training diverged, or retrain."
            )
    return tensors


def check_finite_files(folder: str | Path) -> None:
    """`check_finite` on every weights file of a saved folder (`weight_files`), one file at a time."""
    from safetensors.torch import load_file

    for path in weight_files(folder):
        check_finite(load_file(path), path)


def _resave(path: Path) -> str:
    return f"save the weights again with save_pretrained, or download {path.name} again"


def weight_files(folder: str | Path) -> list[Path]:
    """The safetensors files a saved folder's weights are in (one file, or the shards its index names), each
    checked with `check_safetensors`. A folder with only a pickle, or with no weights, is one ValueError that says
    what to do."""
    folder = Path(folder)
    if (folder / SAFETENSORS).is_file():
        files = [folder / SAFETENSORS]
    elif (folder / SAFETENSORS_INDEX).is_file():
        files = [folder / shard for shard in _shards(folder / SAFETENSORS_INDEX)]
    else:
        pickles = sorted(path.name for path in folder.iterdir() if path.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise ValueError(_pickle_only(folder, pickles))
        raise ValueError(f"{folder} holds no weights ({SAFETENSORS}): give a folder written by save_pretrained.")
    for path in files:
        check_safetensors(path)
    return files


def _shards(index: Path) -> list[str]:
    """The shard file names an index names: plain names of files beside it."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{index} is not a safetensors index ({error!r}): {_resave(index)}.") from None
    for shard in shards:
        if not isinstance(shard, str) or Path(shard).name != shard or not (index.parent / shard).is_file():
            raise ValueError(f"{index} names a shard {shard!r} that is no file beside it: {_resave(index)}.")
    return shards


def _pickle_only(folder: Path, pickles: list[str]) -> str:
    """The refusal of a pickle-only folder, with the command that converts it (which unpickles it)."""
    convert = (
        f'{printed_python()} -c "import modeling_vit_scratch; from transformers import AutoModelForImageClassification as M; '
        f"M.from_pretrained('{folder}', use_safetensors=False).save_pretrained('{folder}')\""
    )
    return (
        f"{folder} holds its weights only as a pickle ({', '.join(pickles)}), which vit-scratch never reads "
        f"(unpickling a file can run code): if you trust that file, convert it to safetensors with {convert} "
        "(this unpickles it: do it only for a file you trust), then run this command again."
    )


def unreadable_weights(source: str, error: OSError) -> ValueError:
    """The one line for a model that `from_pretrained(..., use_safetensors=True)` could not load (a hub repo with no
    safetensors weights, one out of reach): what it said, and what the tooling reads."""
    said = _first_line(error)
    cause = None if Path(source).exists() else _hub_cause(source)
    if cause:
        return ValueError(f"Cannot load the weights of {source!r}: {cause}")
    return ValueError(
        f"Cannot load the weights of {source!r} ({said}): vit-scratch reads only safetensors weights "
        f"({SAFETENSORS}); give a folder or hub repo that has them (a pickle is converted as the error for a local "
        "folder says, only if you trust it)."
    )


def _hub_cause(repo_id: str) -> str | None:
    """Why a hub repo's safetensors weights could not be had, asked of huggingface_hub itself (transformers says
    "does not appear to have a file named model.safetensors" for any failure to get it: offline, out of reach, no
    access): the cause and its fix, or None when the repo truly has no safetensors weights."""
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    from modeling_vit_scratch.common.sources import hub_misanswered, hub_offline_variable

    for name in (SAFETENSORS, SAFETENSORS_INDEX):
        try:
            hf_hub_download(repo_id, name)
            return None  # there, and readable: the loader's own words stand
        except LocalEntryNotFoundError as error:  # not in the cache, and not downloaded
            misanswered = hub_misanswered(f"its {name} was not downloaded", error)  # an answer no Hub gives
            if misanswered:
                return misanswered
            if constants.HF_HUB_OFFLINE:
                variable = hub_offline_variable()  # the one really set: unsetting it works
                return (
                    f"its {name} is not in the Hugging Face cache and {variable} is set, so it was not "
                    f"downloaded: run once online (unset {variable}), or give a local folder."
                )
            return f"its {name} could not be downloaded ({_first_line(error)}): check the network, then run again."
        except EntryNotFoundError:
            continue
        except Exception as error:  # noqa: BLE001 - whatever stopped the download is the cause to show
            misanswered = hub_misanswered(f"getting its {name} failed", error)
            if misanswered:
                return misanswered
            return (
                f"getting its {name} failed ({type(error).__name__}: {_first_line(error)}): check the repo id, "
                "your access and the network, then run again."
            )
    return None


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def check_checkpoint(checkpoint: str | Path) -> None:
    """A checkpoint to resume: its weights are safetensors that fit their files, and each Trainer state the Trainer
    will read is plain tensors and numbers (read as the Trainer reads it, `weights_only=True`, memory-mapped)."""
    import torch
    from transformers.trainer_pt_utils import safe_globals

    checkpoint = Path(checkpoint)
    weight_files(checkpoint)
    for path in sorted(found for pattern in CHECKPOINT_STATES for found in checkpoint.glob(pattern)):
        try:
            with safe_globals():
                torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except Exception as error:  # noqa: BLE001 - whatever stops the read, the file is not the Trainer's state
            raise ValueError(
                f"{path} is not a state the Trainer wrote: it holds more than tensors, or is damaged "
                f"({type(error).__name__}); "
                "it was not unpickled: resume from another checkpoint, or start a new run with "
                "--overwrite_output_dir true."
            ) from None


# A model's heads: the encoder alone may be saved (no head), and a classifier loads it with a new head.
HEAD_NAMES = ("classifier", "distillation_classifier")
DIFFERENT_MODELS_FIX = "the weights and config.json are from different models: restore the folder or save it again"


def stored_shapes(folder: str | Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape, from the headers of a saved folder's safetensors files (`weight_files`): read by
    safetensors' own header reader, no tensor read. Empty for a folder with no weights."""
    from safetensors import safe_open

    folder = Path(folder)
    if not any((folder / name).is_file() for name in (SAFETENSORS, SAFETENSORS_INDEX)):
        return {}
    shapes = {}
    for path in weight_files(folder):
        with safe_open(path, framework="np") as weights:
            shapes |= {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}  # noqa: SIM118
    return shapes


def check_weights_fit(folder: str | Path, config) -> None:
    """Refuse, in one line naming the file and the first tensor that differs (its name, its shape in the file, the
    shape `config` implies), a folder whose safetensors weights are not the model its vit_scratch `config` describes:
    a tensor missing, one the model has no place for, or of another shape. Checked before any model is built: a
    config.json edited to a huge model beside small weights would otherwise allocate that model before transformers
    compares the shapes. The model is built on the `meta` device (shapes only, no memory); the names are compared
    with the `vit.` prefix dropped (the encoder saved alone loads into a classifier), and a head the weights lack or
    the model has not is left to the load (fine-tuning adds one), as is a head's count of labels (fine-tuning on
    other labels replaces the head: its input side is still compared)."""
    import torch

    from modeling_vit_scratch import modeling_vit_scratch as models

    stored = stored_shapes(folder)
    if not stored:
        return
    classes = {
        cls.__name__: cls for cls in (models.ViTScratchModel, models.ViTScratchForImageClassificationWithTeacher)
    }
    if not config.distillation_token:  # the two-headed class reads a distillation token (its load says so)
        classes.pop(models.ViTScratchForImageClassificationWithTeacher.__name__)
    model_class = next(
        (classes[name] for name in config.architectures or [] if name in classes),
        models.ViTScratchForImageClassification,
    )
    with torch.device("meta"):
        expected = {name: tuple(tensor.shape) for name, tensor in model_class(config).state_dict().items()}
    plain = lambda names: {name.removeprefix("vit."): (name, names[name]) for name in names}
    stored, expected = plain(stored), plain(expected)
    is_head = lambda name: name.split(".")[0] in HEAD_NAMES
    where = Path(folder) / (SAFETENSORS if (Path(folder) / SAFETENSORS).is_file() else SAFETENSORS_INDEX)
    for name in sorted(stored.keys() | expected.keys()):
        (shown, in_file), (wanted, implied) = stored.get(name, (None, None)), expected.get(name, (None, None))
        if in_file == implied or (is_head(name) and (in_file is None or implied is None or in_file[1:] == implied[1:])):
            continue
        # worded as the model's own load words them (loading_vit_scratch.py `checked_loading`)
        if in_file is None:
            differs = f"has no tensor {wanted!r} that config.json asks for (of shape {implied})"
        elif implied is None:
            differs = f"has a tensor {shown!r} (of shape {in_file}) that config.json has no place for"
        else:
            differs = f"holds {shown!r} of shape {in_file} where config.json asks for {implied}"
        raise ValueError(f"{where} {differs}: {DIFFERENT_MODELS_FIX}.")
