"""The data a run trains on, kept in each checkpoint, so that a resumed run reads the data set it started with.

A resumed run that read another data set (other images under the same class names, or the same images split by other
fractions or seeds) would train on, and then test on, other splits: images it has trained on could land in its test
split, and the card's test accuracy would say nothing. Each checkpoint therefore holds `DATA_FILE`: the `--dataset`
argument and a fingerprint of the splits (every row's label and image: its file's path and size, or a hash of its
bytes); `check_resumed_data` compares them before the pre-flight. A streamed run keeps its place in the
stream instead (`streaming.py`) and is not fingerprinted. This module is training glue: the model code never imports it.
"""

import hashlib
import json
import os
from pathlib import Path

from datasets import DatasetDict
from datasets import Image as ImageFeature
from transformers import TrainerCallback

DATA_FILE = "vit_scratch_data.json"  # in each checkpoint: {"dataset": ..., "splits_fingerprint": ...}
BATCH_ROWS = 1_000


def splits_fingerprint(splits: DatasetDict) -> str:
    """A short hash of every split's rows in order: the label and the image (a file's real path and size, or a hash
    of the stored bytes)."""
    digest = hashlib.sha256()
    for name in sorted(splits):
        split = splits[name].select_columns(["image", "label"]).cast_column("image", ImageFeature(decode=False))
        digest.update(f"{name}:{len(split)}\n".encode())
        for start in range(0, len(split), BATCH_ROWS):
            block = split[start : start + BATCH_ROWS]
            for cell, label in zip(block["image"], block["label"]):
                digest.update(f"{label}:{image_identity(cell)}\n".encode())
    return digest.hexdigest()[:16]


def image_identity(cell: dict | None) -> str:
    """What names one stored image: a hash of its bytes, or its file's real path and size."""
    cell = cell or {}
    if cell.get("bytes") is not None:
        return hashlib.sha256(cell["bytes"]).hexdigest()
    path = os.path.realpath(cell.get("path") or "")
    return f"{path}:{os.path.getsize(path) if os.path.isfile(path) else -1}"


class KeepDataIdentity(TrainerCallback):
    """Writes the data set argument and its splits' fingerprint into each checkpoint (`DATA_FILE`)."""

    def __init__(self, dataset: str, fingerprint: str):
        self.identity = {"dataset": dataset, "splits_fingerprint": fingerprint}

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir, f"checkpoint-{state.global_step}")
        if state.is_world_process_zero and folder.is_dir():
            (folder / DATA_FILE).write_text(json.dumps(self.identity, indent=2) + "\n")


def check_resumed_data(checkpoint: str, dataset: str, fingerprint: str) -> None:
    """A resumed run's splits are those its checkpoint was trained on, or one line naming both data sets and the fix.
    A checkpoint without `DATA_FILE` (written before it was kept) is not compared."""
    kept = Path(checkpoint) / DATA_FILE
    if not kept.is_file():
        return
    identity = json.loads(kept.read_text())
    if identity.get("splits_fingerprint") == fingerprint:
        return
    raise ValueError(
        f"--resume_from_checkpoint: {checkpoint} was trained on --dataset {identity.get('dataset')!r} (splits "
        f"{identity.get('splits_fingerprint')}), and this run reads --dataset {dataset!r} whose splits differ "
        f"({fingerprint}): a resumed run could test on images it trained on; resume with the same --dataset and "
        "split arguments, or start a new run in another --output_dir."
    )
