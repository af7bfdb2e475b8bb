"""Training on a set read while it trains (`--streaming true`): never downloaded whole, never held in memory.

Each process reads its own whole shards (`IterableDataset.shard`; with fewer shards than processes every process
reads all and keeps one row in N), the shard order reshuffled every pass, the rows shuffled in windows of
`--shuffle_buffer_size` by a generator seeded from (seed, pass, window). Images are decoded as they are read; one that
fails is skipped and named, more than `--max_bad_images` stop the run in one line.

Validation and test are bounded (`--max_eval_samples`) and in memory: the set's own splits, else rows held out by a
hash of their image and label, so a row is on the same side whatever the shard order or the number of processes.

Resumption is exact: each checkpoint holds every process's position (`stream_state_<rank>.json`: the pass, the
`datasets` state at the start of the current window, the rows of that window already taken, the images skipped); a
resumed run reloads it, re-reads that one window undecoded and goes on with the row the uninterrupted run would have
read next. Training glue, never imported by the model files.
"""

import copy
import hashlib
import itertools
import json
import logging
import zlib
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset, Features, IterableDataset
from datasets import Image as ImageFeature
from datasets.distributed import split_dataset_by_node
from PIL import Image
from transformers import TrainerCallback

from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.secrets import shown

logger = logging.getLogger(__name__)

STATE_FILE = "stream_state_{rank}.json"  # in each checkpoint, one per process
SHOWN_NAMES = 5  # bad images named in the line that stops a run


def held_out_share(row: dict, root: Path | None) -> float:
    """A number in [0, 1) fixed by the row's image (its bytes, else its path inside the set) and label."""
    cell = row["image"] or {}
    path = str(cell.get("path"))
    if root is not None and path.startswith(str(root)):
        path = Path(path).relative_to(root).as_posix()
    return zlib.crc32((cell.get("bytes") or path.encode()) + str(row["label"]).encode()) / 2**32


def held_out_splits(splits: dict, data_args, root: Path | None) -> dict:
    """`validation` and `test` as in-memory `Dataset`s of at most `--max_eval_samples` rows (the set's own, else the
    rows whose `held_out_share` falls in their fraction), and `train` (undecoded images) without them."""
    splits = {name: split.cast_column("image", ImageFeature(decode=False)) for name, split in splits.items()}
    train, shares = splits["train"], {}
    shares["validation"] = (0.0, data_args.validation_fraction)
    shares["test"] = (data_args.validation_fraction, data_args.validation_fraction + data_args.test_fraction)
    carved = [shares[name] for name in ("validation", "test") if name not in splits]
    features = Features(image=ImageFeature(), label=train.features["label"])
    for name in ("validation", "test"):
        split = splits.get(name)
        if split is None:
            low, high = shares[name]
            split = train.filter(lambda row, low=low, high=high: low <= held_out_share(row, root) < high)
        rows = list(split.take(data_args.max_eval_samples))
        if not rows:
            raise UserError(
                f"the streamed {name} split is empty: give the set a {name} split or raise --{name}_fraction"
            )
        splits[name] = Dataset.from_list(rows, features=features)
    if carved:
        splits["train"] = train.filter(lambda row: not any(lo <= held_out_share(row, root) < hi for lo, hi in carved))
    return splits


def own_shards(train: IterableDataset, training_args) -> IterableDataset:
    """This process's part of `train`, its shard order reshuffled every pass (`set_epoch`). buffer_size=1: only
    shards are shuffled here (rows are shuffled in windows by `StreamedImages`), so a saved state loses no row."""
    rank, world_size, seed = training_args.process_index, training_args.world_size, training_args.seed
    if train.n_shards >= world_size:
        own = train.shard(num_shards=world_size, index=rank, contiguous=False) if world_size > 1 else train
        return own.shuffle(seed=seed, buffer_size=1)
    logger.warning("The stream has %d shards for %d processes: each reads all of them.", train.n_shards, world_size)
    return split_dataset_by_node(train.shuffle(seed=seed, buffer_size=1), rank=rank, world_size=world_size)


class StreamedImages(torch.utils.data.IterableDataset):
    """This process's training rows, pass after pass without end (the Trainer stops at `--max_steps`), decoded and
    processed as they are yielded: {"pixel_values": (C, H, W), "labels": int}."""

    def __init__(self, rows: IterableDataset, transform, data_args, training_args, num_labels: int):
        self.rows, self.transform, self.num_labels = rows, transform, num_labels
        self.window, self.max_bad = data_args.shuffle_buffer_size, data_args.max_bad_images
        self.seed, self.rank, self.world_size = (
            training_args.seed,
            training_args.process_index,
            training_args.world_size,
        )
        self.state = {"epoch": 0, "window": 0, "window_start": None, "taken": 0, "bad": []}

    def save(self, checkpoint: str | Path) -> None:
        """This process's position, written into `checkpoint`."""
        state = {**self.state, "world_size": self.world_size}
        (Path(checkpoint) / STATE_FILE.format(rank=self.rank)).write_text(json.dumps(state) + "\n")

    def load(self, checkpoint: str | Path) -> None:
        """The position this process saved in `checkpoint` (a run of as many processes)."""
        path = Path(checkpoint) / STATE_FILE.format(rank=self.rank)
        if not path.is_file():
            raise UserError(
                f"checkpoint {shown(checkpoint)} holds no stream position ({path.name}): resume a run made with "
                "--streaming true, or start anew with --overwrite_output_dir true"
            )
        state = json.loads(path.read_text())
        if state.get("world_size") != self.world_size:
            raise UserError(
                f"checkpoint {shown(checkpoint)} was trained by {state.get('world_size')} processes, each reading its "
                f"own shards: resume it with {state.get('world_size')} processes"
            )
        self.state = {key: state[key] for key in self.state}

    def loader(self, batch_size: int) -> torch.utils.data.DataLoader:
        """The rows in batches, read in this process (its position is what each checkpoint saves)."""
        return torch.utils.data.DataLoader(self, batch_size=batch_size, num_workers=0)

    def __iter__(self):
        source, state = self.rows, self.state
        while True:
            source.set_epoch(state["epoch"])
            if state["window_start"] is not None:
                source.load_state_dict(copy.deepcopy(state["window_start"]))
            rows, read = iter(source), 0
            while True:
                start = source.state_dict()
                window = list(itertools.islice(rows, self.window))
                if not window:
                    break
                read += len(window)
                if state["window_start"] is None:
                    state["window_start"], state["taken"] = start, 0
                order = np.random.default_rng((self.seed, state["epoch"], state["window"])).permutation(len(window))
                while state["taken"] < len(window):
                    row = window[order[state["taken"]]]
                    state["taken"] += 1
                    item = self.processed(row)
                    if item is not None:
                        yield item
                state.update(window=state["window"] + 1, window_start=None, taken=0)
            if read == 0 and state["window"] == 0:
                raise UserError(
                    f"process {self.rank} found no training rows in its shards: give the set more rows or shards, "
                    "or lower --validation_fraction / --test_fraction"
                )
            state.update(epoch=state["epoch"] + 1, window=0, window_start=None, taken=0)

    def processed(self, row: dict) -> dict | None:
        """`row` decoded and through the transform, or None (counted) when its image cannot be decoded."""
        if not 0 <= row["label"] < self.num_labels:
            raise UserError(f"a streamed training row has the label {row['label']} (no class): label or remove it")
        try:
            item = self.transform({"image": [row["image"]], "label": [row["label"]]})
        except (
            OSError,
            SyntaxError,
            ValueError,
            Image.DecompressionBombError,
        ) as error:  # PIL's errors for a damaged or unknown image
            return self.skip(row["image"] or {}, error)
        return {"pixel_values": item["pixel_values"][0], "labels": row["label"]}

    def skip(self, cell: dict, error: Exception) -> None:
        """Count a bad image once, by its path or its bytes; past `--max_bad_images`, stop."""
        state = self.state
        stored = hashlib.sha256(cell.get("bytes") or b"").hexdigest()[:12]
        name = cell.get("path") or f"an image stored in the set (sha256 {stored}...)"  # the same in every pass
        if name not in state["bad"]:
            state["bad"].append(name)
            logger.warning("Skipped an image that cannot be decoded: %s (%s)", shown(name), shown(error))
        if len(state["bad"]) > self.max_bad:
            names = ", ".join(shown(name) for name in state["bad"][:SHOWN_NAMES])
            raise UserError(
                f"{len(state['bad'])} training images could not be decoded, more than --max_bad_images {self.max_bad} "
                f"({names}): remove or replace them, or raise --max_bad_images"
            )


class StreamPosition(TrainerCallback):
    """Saves each process's stream position into every checkpoint, beside the Trainer's own states."""

    def __init__(self, rows: StreamedImages):
        self.rows = rows

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if folder.is_dir():
            self.rows.save(folder)


def stream_metrics(trainer, rows: StreamedImages) -> dict[str, int]:
    """The images the run trained on (steps x global batch) and the images every process skipped, summed."""
    args = trainer.args
    per_step = args.per_device_train_batch_size * args.world_size * args.gradient_accumulation_steps
    skipped = trainer.accelerator.reduce(torch.tensor(len(rows.state["bad"]), device=args.device), reduction="sum")
    return {"streamed_train_images": trainer.state.global_step * per_step, "skipped_images": int(skipped)}
