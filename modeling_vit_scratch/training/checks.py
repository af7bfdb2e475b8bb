"""One check of a data set read for training, the same for a set in memory and a streamed one, before any step:
at least two classes, every row labelled with one of them, every class the held-out splits score present in train,
and the images decode. Each failure is one line naming the split, the class or the file, and the fix.

Images: a set in memory is decoded whole when `--check_images` is true (default: when it holds at most
`DECODE_UP_FRONT_MAX_IMAGES`), else each file's header is read; a stream's held-out rows (in memory, bounded) are
decoded, its training rows as they are read (`streaming.StreamedImages`, `--max_bad_images`). Training glue, never
imported by the model files.
"""

import io

import numpy as np
from datasets import Dataset

from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.image_processing_vit_scratch import UnreadableImage, decode_image, open_bounded
from modeling_vit_scratch.secrets import redact, shown

DECODE_UP_FRONT_MAX_IMAGES = 100_000
ONE_CHANNEL_MODES = ("1", "L", "LA", "I", "I;16", "I;16B", "I;16L", "F", "La")  # PIL's gray modes; others are colour
SHOWN_CLASSES = 5


def check_data(data, data_args) -> bool:
    """Refuse `data` (an `ImageData`) in one line when training on it cannot give a classifier of its classes (read
    for pretraining, `data.labelled` false: when its images do not decode). Returns whether an image it opened is in
    colour (every image of a set in memory, a stream's held-out ones)."""
    held = {"validation": data.validation, "test": data.test}
    splits = {**({} if data.streamed else {"train": data.train}), **held}
    if data.labelled:
        check_classes(data, held, splits)
    total = sum(len(split) for split in splits.values())
    decode = data_args.check_images if data_args.check_images is not None else total <= DECODE_UP_FRONT_MAX_IMAGES
    checked = held.items() if data.streamed else splits.items()
    colour = [check_images(split, name, decode or data.streamed) for name, split in checked]  # every one checked
    return any(colour)


def check_classes(data, held: dict, splits: dict) -> None:
    """At least two classes, no token in their names, every row labelled, every class held out present in train."""
    names = data.labels
    if leaked := [name for name in names if redact(str(name)) != str(name)]:  # names go into every config written
        raise UserError(
            f"the class name {shown(leaked[0])} holds a Hub token (or a password in a URL): rename that class (its "
            "folder or label) before training, since class names are written into the model and its card"
        )
    if len(names) < 2:
        raise UserError(
            f"the data set has {len(names)} class ({shown(names)}): a classifier needs at least two: add images of "
            "another class (an image folder: one sub-folder per class)"
        )
    counts = {name: label_counts(split, name, len(names)) for name, split in splits.items()}
    if not data.streamed:
        missing = {
            names[label] for name in held for label in np.flatnonzero(counts[name]) if not counts["train"][label]
        }
        if missing:
            shown_names = ", ".join(shown(name) for name in sorted(missing)[:SHOWN_CLASSES])
            raise UserError(
                f"the held-out splits score {len(missing)} class(es) the train split has no image of ({shown_names}): "
                "add training images of them, or remove them from the held-out splits"
            )


def label_counts(split: Dataset, name: str, classes: int) -> np.ndarray:
    """Rows per class of `split`; a row of no class (-1, datasets' "no label") is one line naming the split."""
    labels = np.asarray(split["label"], dtype=np.int64)
    unlabelled = int(((labels < 0) | (labels >= classes)).sum())
    if unlabelled:
        leave = " (an unlabelled test split can be left out: one is then carved from train)" if name == "test" else ""
        raise UserError(
            f"{unlabelled} row(s) of the {name} split have no class (label -1 or past the {classes} class names): "
            f"label or remove them{leave}"
        )
    return np.bincount(labels, minlength=classes)


def image_cells(split: Dataset) -> list[dict]:
    """The undecoded image cells ({"bytes", "path"}) of `split`, read from its table (no image decoded)."""
    return split.with_format("arrow")["image"].to_pylist()


def check_images(split: Dataset, name: str, decode: bool) -> bool:
    """Every image of `split` opens (and decodes, when `decode`), or one line naming the file and the fix. Returns
    whether one of them is in colour (by the mode its header declares)."""
    colour = False
    for row, cell in enumerate(image_cells(split)):
        where = f"image {shown(cell['path'])}" if cell.get("path") else f"image of row {row} of the {name} split"
        try:
            with open_bounded(io.BytesIO(cell["bytes"]) if cell.get("bytes") else cell["path"], where) as image:
                colour = colour or image.mode not in ONE_CHANNEL_MODES
                if decode:
                    decode_image(image, where)
        except UnreadableImage as error:  # its line names the image, what is wrong and the fix
            also = " (or give --check_images false to check only each file's header)" if decode else ""
            raise UserError(f"{error}{also}") from None
    return colour
