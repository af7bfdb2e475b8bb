"""Training data: one reader for every source, normalised to the columns `image` and `label` (stub; being rewritten)."""

from collections.abc import Callable
from dataclasses import dataclass, field

IMAGE_COLUMN_NAMES = ("image", "img", "images", "picture", "pixel_values")
LABEL_COLUMN_NAMES = ("label", "labels", "class", "fine_label", "target")


@dataclass
class ImageData:
    """A data set read and checked: `train`, `validation`, `test` have the columns `image` (PIL-decodable) and
    `label` (int, a ClassLabel whose names are `labels`)."""

    train: object  # datasets.Dataset | datasets.IterableDataset
    validation: object | None
    test: object | None
    labels: list[str]
    num_channels: int  # 1 (gray) or 3
    streamed: bool
    identity: str  # digest of the rows and labels: kept in checkpoints, compared on resume


def read_data(data_args, training_args) -> ImageData:
    """Read `data_args.dataset`, normalise, carve missing splits (stratified, `split_seed`), check: one line on bad
    data (UserError)."""
    raise NotImplementedError


@dataclass
class ModelInputs:
    """What the Trainer takes: items {"pixel_values": Tensor, "labels": int}."""

    train: object
    validation: object | None
    test: object | None
    collate_fn: Callable
    callbacks: list = field(default_factory=list)  # TrainerCallbacks (the stream position in checkpoints, ...)
    compute_loss: Callable | None = None  # soft-target loss when Mixup/CutMix is on (Trainer's compute_loss_func)


def model_inputs(data: ImageData, processor, data_args, training_args) -> ModelInputs:
    """Transforms (augmentation for train, eval views), images in memory when they fit `images_in_memory_mb`."""
    raise NotImplementedError
