"""Training data: one reader for every source, one normalisation, and the rows the Trainer reads.

`read_data` reads `--dataset` (the embedded digits, a `save_to_disk` folder, a local folder that `datasets` reads as
it does: class sub-folders, split folders, a metadata file, parquet or WebDataset shards, or a Hub data set), in
memory or streamed (`--streaming true`), and gives every source the same form: splits `train`, `validation`, `test`
with the columns `image` and `label`, a ClassLabel whose names are the classes. A missing validation or test split is
carved from train (stratified, `--split_seed`; streamed: held out by a hash of each row). `checks.check_data` then
refuses bad data in one line.

`model_inputs` turns that into what the Trainer reads: images through the model's processor (kept in memory as
tensors when they fit `--images_in_memory_mb`), training batches augmented and mixed in the collator, evaluation
views, and for a stream its position in every checkpoint. Training glue, never imported by the model files.
"""

import hashlib
import itertools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Features, IterableDataset, load_dataset, load_from_disk
from datasets import Image as ImageFeature
from datasets.data_files import SPLIT_KEYWORDS
from datasets.exceptions import DatasetNotFoundError
from PIL import Image

from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.secrets import shown
from modeling_vit_scratch.training.augmentation import (
    AugmentBatch,
    ImageTransform,
    ProcessedImages,
    RandomShiftRotate,
    read_image,
)
from modeling_vit_scratch.training.checks import ONE_CHANNEL_MODES, check_data, image_cells
from modeling_vit_scratch.training.columns import normalised
from modeling_vit_scratch.training.mixing import BatchMixing, soft_target_loss
from modeling_vit_scratch.training.policies import augmentation_policy, describe_policy, training_augmentation
from modeling_vit_scratch.training.streaming import StreamedImages, StreamPosition, held_out_splits, own_shards
from modeling_vit_scratch.training.views import EvaluationViews

logger = logging.getLogger(__name__)

DIGITS = "digits"
SPLIT_ROLES = {alias: str(role) for role, aliases in SPLIT_KEYWORDS.items() for alias in aliases}  # datasets' table


@dataclass
class ImageData:
    """A data set read and checked: `train`, `validation`, `test` have the columns `image` (PIL-decodable) and
    `label` (int, a ClassLabel whose names are `labels`)."""

    train: Dataset | IterableDataset
    validation: Dataset | None
    test: Dataset | None
    labels: list[str]
    num_channels: int  # 1 (gray) or 3
    streamed: bool
    identity: str  # digest of the rows and labels: kept in checkpoints, compared on resume
    labelled: bool = True  # False: read for pretraining, every image given the one class UNLABELLED


def digits_dataset() -> DatasetDict:
    """scikit-learn's 1,797 handwritten 8x8 digits as 8-bit grayscale images (0..16 -> round(v * 255 / 16)), labels
    "0".."9", with a stratified 20% test split (seed 0), as in the literature."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    pixels = np.rint(digits.images * 255.0 / 16.0).astype(np.uint8)
    train, test = train_test_split(np.arange(len(pixels)), test_size=0.2, stratify=digits.target, random_state=0)
    features = Features(image=ImageFeature(), label=ClassLabel(names=[str(d) for d in range(10)]))

    def split(rows: np.ndarray) -> Dataset:
        images = [Image.fromarray(pixels[i], mode="L") for i in rows]
        return Dataset.from_dict({"image": images, "label": digits.target[rows].tolist()}, features=features)

    return DatasetDict(train=split(train), test=split(test))


def load_image_dataset(source: str, config_name: str | None = None, streaming: bool = False) -> dict:
    """The splits of `source` as `datasets` reads them: {name: Dataset}, or {name: IterableDataset} when streamed."""
    path = Path(source).expanduser()
    if source == DIGITS:
        loaded = digits_dataset()
    elif path.is_file():
        raise UserError(f"--dataset {shown(source)} is a file: give the folder that holds the data set")
    elif not path.exists() and (source.startswith((".", "/", "~")) or source.count("/") > 1):
        raise UserError(f"--dataset {shown(source)}: no such folder (a Hub data set is named owner/name)")
    elif (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        loaded = load_from_disk(str(path))
    else:
        try:
            loaded = load_dataset(str(path) if path.is_dir() else source, config_name, streaming=streaming)
        except ValueError as error:  # a folder of no known format, a configuration the set lacks, ...
            raise UserError(f"--dataset {shown(source)} could not be read: {error}") from None
        except (ConnectionError, DatasetNotFoundError) as error:  # no such folder here, nor a set on the Hub
            raise UserError(
                f"--dataset {shown(source)} is no folder here, and no Hub data set of that name could be read "
                f"({' '.join(str(error).split())}): give the folder's path (e.g. ./{shown(source)}) or a Hub id"
            ) from None
    splits = dict(loaded) if isinstance(loaded, dict) else {"train": loaded}
    if streaming:
        splits = {name: as_stream(split) for name, split in splits.items()}
    return splits


def as_stream(split: Dataset | IterableDataset) -> IterableDataset:
    """An in-memory split streamed in shards, so several processes each read their own."""
    if isinstance(split, IterableDataset):
        return split
    return split.to_iterable_dataset(num_shards=max(1, min(len(split), 64)))


def by_role(splits: dict) -> dict:
    """{"train": ..., "validation": ..., "test": ...} from the set's split names (datasets' own table: `dev` and `val`
    are validation, `eval` is test); a split of no role is named in a warning, two of one role are refused."""
    roles = {}
    for name, split in splits.items():
        role = SPLIT_ROLES.get(name.lower())
        if role is None:
            logger.warning("Split %s is not used: training reads train, validation and test.", shown(name))
        elif role in roles:
            raise UserError(f"the data set has two {role} splits, one named {shown(name)}: merge or rename one")
        else:
            roles[role] = split
    if "train" not in roles:
        raise UserError(f"the data set has no train split (splits: {shown(list(splits))}): add one")
    return roles


def carved(splits: dict, data_args) -> dict:
    """`splits` with a missing test split, then a missing validation split, carved from train: stratified, seeded
    by `--split_seed`, so test images are never used for model selection; a fraction too small to hold every class
    (a few labelled images of many classes) is raised to one image of each."""
    for role in ("test", "validation"):
        if role in splits:
            continue
        fraction, train = getattr(data_args, f"{role}_fraction"), splits["train"]
        size = max(math.ceil(fraction * len(train)), len(train.features["label"].names)) if fraction else 0
        try:
            parts = train.train_test_split(
                test_size=size if 0 < size < len(train) else fraction,  # else datasets names what does not fit
                seed=data_args.split_seed,
                stratify_by_column="label",
            )
        except ValueError as error:
            raise UserError(
                f"cannot carve a {role} split from train ({error}): add images, give the set a {role} split or "
                f"change --{role}_fraction"
            ) from None
        splits["train"], splits[role] = parts["train"], parts["test"]
    return splits


def identity(splits: dict, labels: list[str], root: Path | None) -> str:
    """A digest of the labels and of every row (an image's bytes, else its path inside the set and size; its label),
    the same wherever the set lies; a stream's is that of its labels and held-out rows."""
    digest = hashlib.sha256(repr((labels, sorted(splits))).encode())
    for role in sorted(splits):
        split = splits[role]
        if isinstance(split, IterableDataset):
            digest.update(f"{role} streamed".encode())  # its held-out rows, in memory, stand for it
            continue
        for cell, label in zip(image_cells(split), split["label"], strict=True):
            if cell.get("bytes"):
                digest.update(hashlib.sha256(cell["bytes"]).digest())
            else:
                path = Path(cell["path"])
                named = path.relative_to(root) if root and path.is_relative_to(root) else path
                digest.update(f"{named.as_posix()}:{path.stat().st_size}".encode())
            digest.update(label.to_bytes(8, "little", signed=True))
    return digest.hexdigest()


def channels(split, tries: int) -> int:
    """1 when the first image that decodes (of the first `tries`) is grayscale, else 3: an image that does not decode
    is left to the data check, or skipped as a stream's training skips it. The data check makes it 3 when any image
    it opens is in colour (`read_data`)."""
    for row in itertools.islice(split, tries):
        try:
            return 1 if read_image(row["image"]).mode in ONE_CHANNEL_MODES else 3
        except (OSError, ValueError):
            continue
    return 3


def read_data(data_args, training_args, labelled: bool = True) -> ImageData:
    """Read `data_args.dataset`, normalise, carve missing splits (stratified, `split_seed`), check: one line on bad
    data (UserError). Not `labelled`: the images alone (pretraining), see `normalised`."""
    path = Path(data_args.dataset).expanduser()
    root = path.resolve() if path.is_dir() else None
    splits = by_role(load_image_dataset(data_args.dataset, data_args.dataset_config, data_args.streaming))
    splits, labels = normalised(splits, data_args.image_column, data_args.label_column, root, labelled)
    if data_args.streaming:
        splits = held_out_splits(splits, data_args, root)
    else:
        splits = carved(splits, data_args)
    if data_args.max_train_samples is not None:
        train = splits["train"]
        splits["train"] = (
            train.take(data_args.max_train_samples)
            if data_args.streaming
            else train.select(range(min(data_args.max_train_samples, len(train))))
        )
    num_channels = channels(
        splits["train"], tries=data_args.max_bad_images + 1
    )  # before a stream is split between processes: each reads the same
    if data_args.streaming:
        splits["train"] = own_shards(splits["train"], training_args)
    data = ImageData(
        train=splits["train"],
        validation=splits["validation"],
        test=splits["test"],
        labels=labels,
        num_channels=num_channels,
        streamed=data_args.streaming,
        identity=identity(splits, labels, root),
        labelled=labelled,
    )
    if check_data(data, data_args):  # a colour image among gray ones: the model sees colour, gray images as RGB
        data.num_channels = 3
    return data


@dataclass
class ModelInputs:
    """What the Trainer takes: items {"pixel_values": Tensor, "labels": int}; see each field."""

    train: object
    validation: object
    test: object
    augment: torch.nn.Module | None  # ImageTrainer(augment=...): augments and mixes each training batch
    callbacks: list = field(default_factory=list)  # Trainer(callbacks=...): a stream's position in each checkpoint
    compute_loss: Callable | None = None  # Trainer(compute_loss_func=...): soft targets when mixing, else None
    train_loader: Callable[[int], torch.utils.data.DataLoader] | None = None  # a stream's own loader, unprepared
    validation_views: int = 1  # the images, then views - 1 copies: averaged per image
    test_views: int = 1
    policy_words: str | None = None  # the augmentation in words, for the card and the record


def model_inputs(data: ImageData, processor, data_args, training_args, checkpoint: str | None = None) -> ModelInputs:
    """Transforms, augmentation, mixing and evaluation views for `data`; a stream resumes from `checkpoint`."""
    policy = augmentation_policy(data_args, training_args)
    if data_args.crop_pct is not None:
        processor.crop_pct = data_args.crop_pct  # saved with the model: inference crops as evaluation does
    whole = type(processor).from_dict({**processor.to_dict(), "crop_pct": 1.0}) if processor.crop_pct else processor
    shift_rotate = RandomShiftRotate.for_processor(processor, data_args.max_shift, data_args.max_degrees)
    mixing = BatchMixing(policy.mixup, policy.cutmix, len(data.labels)) if policy.mixes else None
    steps = training_augmentation(policy, processor, shift_rotate)
    evaluation = ImageTransform(processor)
    held = [ProcessedImages(split, evaluation, data_args.images_in_memory_mb) for split in (data.validation, data.test)]
    flips = 2 if data_args.eval_flip else 1
    validation = EvaluationViews(held[0], data_args.validation_views, flips, shift_rotate)
    test = EvaluationViews(held[1], 1, flips, shift_rotate)
    inputs = ModelInputs(
        train=None,
        validation=validation,
        test=test,
        augment=AugmentBatch(steps, mixing) if steps is not None or mixing is not None else None,
        compute_loss=soft_loss(training_args.label_smoothing_factor) if mixing else None,
        validation_views=validation.views,
        test_views=test.views,
        policy_words=describe_policy(policy, data_args),
    )
    if data.streamed:
        training_args.ignore_data_skip = True  # the stream's saved position resumes it, not the Trainer's skipping
        rows = StreamedImages(data.train, ImageTransform(whole), data_args, training_args, len(data.labels))
        if checkpoint:
            rows.load(checkpoint)
        inputs.train, inputs.callbacks = rows, [StreamPosition(rows)]
        inputs.train_loader = lambda batch_size: rows.loader(batch_size)
    else:
        inputs.train = ProcessedImages(data.train, ImageTransform(whole), data_args.images_in_memory_mb)
    return inputs


def soft_loss(label_smoothing: float) -> Callable:
    """Trainer's `compute_loss_func`: cross-entropy against soft targets (mixed batches) or class indices."""

    def loss(outputs, labels, num_items_in_batch=None):
        logits = outputs.logits[0] if isinstance(outputs.logits, tuple) else outputs.logits
        return soft_target_loss(logits, labels, label_smoothing)

    return loss
