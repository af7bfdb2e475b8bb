"""Which weight files the tooling reads, checked before anything is loaded: safetensors only, with a header that
fits its file.

A pickle (`pytorch_model.bin`, `.pt`, `.pth`, `.ckpt`) can run code when it is unpickled, so no command reads one
as weights: a folder that holds only a pickle is refused with the command that converts it, for whoever trusts the
file. A safetensors file is data, but its header is read before its tensors: a crafted header (a length past the end
of the file, malformed JSON, offsets outside the data, sizes of 2^62 bytes) is refused here in one line, before any
large allocation. A checkpoint to resume keeps the Trainer's states as pickles (optimizer, scheduler, random state):
those are read with `weights_only=True`, and one that is more than tensors is refused before training starts.
"""

import json
import math
import struct
from pathlib import Path

SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
MAX_HEADER_BYTES = 100_000_000  # safetensors' own limit on the JSON header
# bits per element of each dtype safetensors knows
DTYPE_BITS = {
    **dict.fromkeys(("F4",), 4),
    **dict.fromkeys(("F6_E2M3", "F6_E3M2"), 6),
    **dict.fromkeys(("BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0"), 8),
    **dict.fromkeys(("I16", "U16", "F16", "BF16"), 16),
    **dict.fromkeys(("I32", "U32", "F32"), 32),
    **dict.fromkeys(("C64", "I64", "U64", "F64"), 64),
}
# the Trainer's own states in a checkpoint, which it reads with torch.load(weights_only=True)
CHECKPOINT_STATES = ("optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state*.pth")


def check_safetensors(path: str | Path) -> None:
    """Raise a one-line ValueError unless `path`'s header is one safetensors reads: an 8-byte length that fits the
    file, a JSON object, and for each tensor a known dtype, a shape and offsets that cover the data exactly."""
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as file:
        head = file.read(8)
        if len(head) < 8:
            raise ValueError(f"{path} is not a safetensors file ({size} bytes, no header): {_resave(path)}.")
        (length,) = struct.unpack("<Q", head)
        if length > min(size - 8, MAX_HEADER_BYTES):
            raise ValueError(
                f"{path} declares a {length}-byte header but the file holds {size - 8} bytes after its length: "
                f"the file is truncated or not safetensors; {_resave(path)}."
            )
        raw = file.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"{path} has a header that is not JSON ({error}): {_resave(path)}.") from None
    if not raw.startswith(b"{") or not isinstance(header, dict):
        raise ValueError(f"{path} has a header that is not a JSON object: {_resave(path)}.")
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(value, str) for value in metadata.values()):
        raise ValueError(f"{path} has __metadata__ that is not text by name: {_resave(path)}.")
    _check_tensors(path, header, size - 8 - length)


def _check_tensors(path: Path, header: dict, data_bytes: int) -> None:
    """The tensors of a parsed header: each well formed, sized as its shape says, the spans tiling the data."""
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        problem = _tensor_problem(entry, data_bytes)
        if problem:
            raise ValueError(f"{path} describes tensor {name!r} wrongly ({problem}): {_resave(path)}.")
        spans.append(tuple(entry["data_offsets"]))
    position = 0
    for start, end in sorted(spans):
        if start != position:
            raise ValueError(
                f"{path} has tensor data that overlaps or leaves gaps at byte {position}: {_resave(path)}."
            )
        position = end
    if position != data_bytes:
        raise ValueError(
            f"{path} holds {data_bytes} bytes of tensor data but its header describes {position}: {_resave(path)}."
        )


def _tensor_problem(entry, data_bytes: int) -> str | None:
    """Why one header entry cannot be a tensor of this file, or None."""
    if not isinstance(entry, dict):
        return "not a JSON object"
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str):
        return f"dtype {dtype!r}"
    if not isinstance(shape, list) or not all(type(side) is int and side >= 0 for side in shape):
        return f"shape {shape!r}"
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(value) is int for value in offsets)):
        return f"data_offsets {offsets!r}"
    start, end = offsets
    if not 0 <= start <= end <= data_bytes:
        return f"data_offsets {offsets} outside the {data_bytes} bytes of data"
    if dtype not in DTYPE_BITS:
        return f"dtype {dtype!r}, which safetensors does not know"
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    if bits % 8 or bits // 8 != end - start:
        return f"shape {shape} of {dtype} needs {bits / 8:g} bytes, its offsets span {end - start}"
    return None


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
        'python -c "import modeling_vit_scratch; from transformers import AutoModelForImageClassification as M; '
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
    said = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return ValueError(
        f"Cannot load the weights of {source!r} ({said}): vit-scratch reads only safetensors weights "
        f"({SAFETENSORS}); give a folder or hub repo that has them (a pickle is converted as the error for a local "
        "folder says, only if you trust it)."
    )


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
