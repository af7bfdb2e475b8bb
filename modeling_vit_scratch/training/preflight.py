"""Pre-flight checks of a data set before the first training step: each failure is one line naming the file, class
or folder and the fix, instead of a stack trace at the first batch or after the whole training.

- `check_class_sizes`: at least two classes, and each class large enough for the stratified validation/test splits.
- `check_images`: every image of every split decodes (or, on very large data sets, every file exists and its header
  parses), with a progress bar.
This module is training glue, like `data.py`: the model code never imports it.
"""

import hashlib
import io
import itertools
import math
import os
import re
import time
from dataclasses import dataclass, field

import numpy as np
from datasets import DatasetDict
from datasets import Image as ImageFeature
from PIL import Image
from tqdm.auto import tqdm

from modeling_vit_scratch.common.images import ImageTooLarge, frame_count, open_bounded
from modeling_vit_scratch.common.names import shown_name
from modeling_vit_scratch.image_processing_vit_scratch import WIDE_MODES, to_model_mode

# Up to this many images are fully decoded before training, above it only opened (file found, header parsed): a
# header check is much faster than decoding large JPEGs (how fast each is: docs/training.md).
DECODE_UP_FRONT_MAX_IMAGES = 100_000
BATCH_ROWS = 1_000


def carve_out_sizes(num_rows: int, fraction: float) -> tuple[int, int]:
    """(rows kept, rows carved out) of `datasets`' `train_test_split(test_size=fraction)` on `num_rows` rows."""
    carved = math.ceil(fraction * num_rows)
    return num_rows - carved, carved


def check_class_sizes(labels: list[int], names: list[str], carve_outs: list[tuple[str, float]]) -> None:
    """Raise one-line `ValueError`s unless the stratified carve-outs of `labels` (train split) can be made.

    `carve_outs` are the (split name, fraction) carved from train one after another, e.g. [("test", 0.1),
    ("validation", 0.1)]. `datasets`' stratified split needs every class at least twice in the split it cuts, and
    at least one row per class on each side; a class must therefore keep two images after every earlier carve-out,
    which takes at most ceil(count x carved / rows) of them.
    """
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=len(names))
    present = [index for index, count in enumerate(counts) if count > 0]
    if len(present) < 2:
        only = f"only one class ({names[present[0]]!r})" if present else "no labelled images"
        raise ValueError(
            f"The training data has {only}: a classifier needs at least two classes: add images of another class."
        )
    for name, fraction in carve_outs:
        if not 0 < fraction < 1:  # a share the data set must give: it has no split of that name
            makes = f"makes no {name} split" if fraction <= 0 else f"holds out every training image for {name}"
            raise ValueError(
                f"--{name}_fraction {fraction:g} {makes}, and the data set has no {name} split of its own: a run "
                f"needs one; give a share of the training images in (0, 1), e.g. --{name}_fraction 0.1."
            )
    problem = carve_out_problem(counts, names, carve_outs)
    if problem is None:
        return
    fractions = workable_fractions(counts, names, carve_outs)
    if fractions:
        fix = "give " + " ".join(
            f"--{split}_fraction {fraction:g}" for (split, _), fraction in zip(carve_outs, fractions)
        )
    else:
        least = least_class_size(counts, names, carve_outs)
        shares = workable_fractions(filled(counts, least), names, carve_outs)
        flags = " ".join(f"--{split}_fraction {fraction:g}" for (split, _), fraction in zip(carve_outs, shares))
        fix = (
            f"add images until each class has at least {least} (then {flags} works), or give the data set its own "
            f"{' and '.join(split for split, _ in carve_outs)} split{'s' * (len(carve_outs) > 1)}"
        )
    raise ValueError(f"{problem}: {fix}.")


# The shares tried for a fix that works (`workable_fractions`): a printed fix is one that passes when followed.
FRACTION_GRID = [step / 100 for step in range(1, 51)]


def carve_out_problem(counts: np.ndarray, names: list[str], carve_outs: list[tuple[str, float]]) -> str | None:
    """What keeps the stratified carve-outs (`check_class_sizes`) of a train split of `counts` images per class from
    being made, without its fix; None where they can be made."""
    present = [index for index, count in enumerate(counts) if count > 0]
    smallest = min(present, key=lambda index: counts[index])
    minimum = minimum_class_size(int(counts.sum()), [fraction for _, fraction in carve_outs])
    count = int(counts[smallest])
    if carve_outs and count < minimum:
        return (
            f"Class {names[smallest]!r} has {count} image{'s' * (count != 1)}, fewer than the "
            f"{minimum} each class needs for the stratified {' and '.join(s for s, _ in carve_outs)} split"
            f"{'s' * (len(carve_outs) > 1)} (a stratified split needs two per class in what it cuts)"
        )
    num_rows, num_classes = int(counts.sum()), len(present)
    for split, fraction in carve_outs:
        kept, carved = carve_out_sizes(num_rows, fraction)
        if carved < num_classes:
            return (
                f"--{split}_fraction {fraction:g} of {num_rows} training images makes a {split} split of {carved}, "
                f"fewer than the {num_classes} classes (a stratified split needs one image per class)"
            )
        if kept < num_classes:
            return (
                f"--{split}_fraction {fraction:g} leaves {kept} of {num_rows} training images, fewer than the "
                f"{num_classes} classes"
            )
        num_rows = kept
    return None


def workable_fractions(counts: np.ndarray, names: list[str], carve_outs: list[tuple[str, float]]) -> list[float]:
    """The shares (of `FRACTION_GRID`, nearest the ones given) with which every carve-out of `counts` can be made,
    or [] where none can: a line offers other fractions only where some work, so following it never leads back."""
    given = [fraction for _, fraction in carve_outs]
    candidates = sorted(
        itertools.product(FRACTION_GRID, repeat=len(carve_outs)),
        key=lambda shares: sum(abs(share - fraction) for share, fraction in zip(shares, given)),
    )
    for shares in candidates:
        tried = [(split, share) for (split, _), share in zip(carve_outs, shares)]
        if carve_out_problem(counts, names, tried) is None:
            return list(shares)
    return []


def filled(counts: np.ndarray, least: int) -> np.ndarray:
    """`counts` with every class present raised to at least `least` images."""
    return np.where(counts > 0, np.maximum(counts, least), 0)


def least_class_size(counts: np.ndarray, names: list[str], carve_outs: list[tuple[str, float]]) -> int:
    """The fewest images per class (the smaller classes filled up to it) with which some shares make the carve-outs."""
    least = int(counts[counts > 0].min()) + 1
    while not workable_fractions(filled(counts, least), names, carve_outs):
        least += 1
    return least


def check_training_classes(splits: DatasetDict, names: list[str], max_train_samples: int | None = None) -> None:
    """A one-line ValueError for a class that the validation or test split scores but the training split (its first
    `max_train_samples` images, where given) holds no image of: the model would be judged on classes it never saw.
    Where --max_train_samples made the gap, the line gives the least value that keeps every class."""
    full = np.asarray(splits["train"]["label"], dtype=np.int64)
    kept = full if max_train_samples is None else full[:max_train_samples]
    scored = set(np.unique(np.concatenate([np.asarray(splits[name]["label"]) for name in ("validation", "test")])))
    missing = sorted(scored - set(np.unique(kept).tolist()))
    if not missing:
        return
    shown = ", ".join(repr(names[index]) for index in missing[:5]) + (
        f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    )
    never = [index for index in missing if index not in set(np.unique(full).tolist())]
    if never or max_train_samples is None:
        raise ValueError(
            f"The training split holds no image of {len(never)} class{'es' * (len(never) != 1)} that the validation "
            "or test split scores "
            f"({', '.join(repr(names[index]) for index in never[:5])}): add training images of them, or remove them "
            "from the held-out splits."
        )
    needed = max(int(np.argmax(full == index)) for index in scored) + 1
    raise ValueError(
        f"--max_train_samples {max_train_samples} keeps {len(kept)} training images, with no image of "
        f"{len(missing)} of the {len(scored)} classes the run is scored on ({shown}): give --max_train_samples "
        f"{needed} or more (the least that keeps every class), or leave it out."
    )


def minimum_class_size(num_rows: int, fractions: list[float]) -> int:
    """The fewest images a class needs so every carve-out in turn finds at least two of it (worst-case rounding)."""
    size = 2
    while True:
        remaining, rows = size, num_rows
        for fraction in fractions[:-1]:
            kept, carved = carve_out_sizes(rows, fraction)
            remaining -= math.ceil(remaining * carved / rows)
            rows = kept
        if remaining >= 2:
            return size
        size += 1


@dataclass
class ImageCheck:
    """What `check_images` did: how many images, whether they were fully decoded, and how long it took; when
    decoded, each image's digest with where it lies (split, label, name), to find identical files (`copies_lines`)."""

    num_images: int
    decoded: bool
    seconds: float
    places: dict[str, list[tuple[str, int, str]]] = field(default_factory=dict)  # digest -> [(split, label, name)]
    several_frames: int = 0  # files holding several frames (an animation, a multi-page TIFF): frame 1 is read

    @classmethod
    def combined(cls, checks: list["ImageCheck"]) -> "ImageCheck":
        """The check of a whole data set from the checks of its parts, made side by side."""
        places = {}
        for check in checks:
            for digest, where in check.places.items():
                places.setdefault(digest, []).extend(where)
        seconds = max(c.seconds for c in checks)
        several = sum(check.several_frames for check in checks)
        return cls(sum(check.num_images for check in checks), checks[0].decoded, seconds, places, several)

    def summary(self) -> str:
        how = "decoded" if self.decoded else "found with readable headers (not decoded: pass --check_images to decode)"
        frames = (
            f" {self.several_frames:,} file{'s hold' if self.several_frames != 1 else ' holds'} several frames (an "
            "animation or a multi-page file): frame 1 of each is trained on, the others are not read."
            if self.several_frames
            else ""
        )
        return f"Pre-flight: {self.num_images} images {how} in {self.seconds:.1f} s.{frames}"

    def copies_lines(self, labels: list[str]) -> list[str]:
        """A warning line for files with identical bytes under two class names (the model is taught two labels for
        one image), and one for files of a held-out split identical to training images (leakage: their score
        measures memory), each with the count and an example pair; none when there are none."""
        across, leaked = [], []
        for where in self.places.values():
            if len({label for _, label, _ in where}) > 1:
                first = where[0]
                across.append((first, next(other for other in where if other[1] != first[1])))
            trained = [place for place in where if place[0] == "train"]
            held = [place for place in where if place[0] != "train"]
            if trained and held:
                leaked.append((held[0], trained[0]))

        def shown(place: tuple[str, int, str]) -> str:
            split, label, name = place
            return f"{shown_name(name)} ({split}, class {labels[label]!r})" if 0 <= label < len(labels) else name

        lines = []
        if across:
            (one, other), many = across[0], len(across) != 1
            lines.append(
                f"Warning: {len(across):,} image{'s are' if many else ' is'} stored under two class names as "
                f"identical files (e.g. {shown(one)} and {shown(other)}): the model is taught two labels for "
                f"{'each' if many else 'it'}; remove the copy from the wrong class."
            )
        if leaked:
            (one, other), many = leaked[0], len(leaked) != 1
            lines.append(
                f"Warning: {len(leaked):,} image{'s' * many} of the validation or test split "
                f"{'are identical to training images' if many else 'is identical to a training image'} (e.g. "
                f"{shown(one)} and {shown(other)}): {'their' if many else 'its'} score measures memory, not "
                "generalisation; remove the copies from one side."
            )
        return lines


def open_image(cell: dict, where: str = "The image") -> Image.Image:
    """A `{"bytes", "path"}` cell of an undecoded `Image` column -> the opened (not yet decoded) PIL image; one
    that declares more pixels than allowed is an `ImageTooLarge` naming it as `where`."""
    if cell.get("bytes") is not None:
        return open_bounded(io.BytesIO(cell["bytes"]), where)
    if not cell.get("path"):
        raise ValueError("the row has neither bytes nor a path")
    if not os.path.isfile(cell["path"]):
        raise FileNotFoundError("the file does not exist")
    return open_bounded(cell["path"], where)


def check_images(
    splits: DatasetDict,
    image_column: str = "image",
    decode: bool | None = None,
    progress: bool = True,
    part: tuple[int, int] = (0, 1),
    carved_from: dict[str, str] | None = None,
) -> ImageCheck:
    """Open every image of every split; with `decode`, decode it too (`None`: decode up to 100,000 images).
    `part` (index, parts): check only that share of the images, every parts-th block of rows, so that several
    processes check a data set together, each image once (`ImageCheck.combined` adds their results up).

    Reads the stored bytes or files directly (`Image(decode=False)`, then `PIL.Image.open` and `load`): twice as
    fast as `datasets`' decoding of each row (11,600 against 6,100 small PNGs/s). Images wider than 8 bits ("I;16",
    "I", "F") also go through `to_model_mode`, which refuses values it cannot scale. Raises a one-line `ValueError`
    naming the split, the row, the file and the fix, for the first image that fails: the row as the set numbers it
    (`set_row`), in the set's split a carved split came from (`carved_from`: {"validation": "train"}).
    """
    started = time.time()
    total = sum(len(split) for split in splits.values())
    decode = total <= DECODE_UP_FRONT_MAX_IMAGES if decode is None else decode
    index, parts = part
    checked, places, several = 0, {}, 0
    with tqdm(
        total=total, desc="Decoding images" if decode else "Opening images", unit="image", disable=not progress
    ) as bar:
        for split_name, split in splits.items():
            if not isinstance(split.features.get(image_column), ImageFeature):
                raise ValueError(f"Split {split_name!r} has no image column {image_column!r}: fix --image_column.")
            labelled = "label" in split.features
            columns = [image_column, "label"] if labelled else [image_column]
            cells = split.select_columns(columns).cast_column(image_column, ImageFeature(decode=False))
            set_split = (carved_from or {}).get(split_name, split_name)
            for start in range(index * BATCH_ROWS, len(cells), parts * BATCH_ROWS):
                rows = cells[start : start + BATCH_ROWS]
                block = rows[image_column]
                for offset, (cell, label) in enumerate(zip(block, rows["label"] if labelled else [-1] * len(block))):
                    digest, frames = check_one(cell, decode, set_split, set_row(split, start + offset))
                    several += frames > 1
                    if digest is not None:
                        name = (cell or {}).get("path") or f"row {start + offset} of split {split_name!r}"
                        places.setdefault(digest, []).append((split_name, label, name))
                checked += len(block)
                bar.update(min(len(block) * parts, total - bar.n))  # the other parts keep pace: the whole set
    return ImageCheck(checked, decode, time.time() - started, places, several)


def set_row(split, row: int) -> int:
    """The row `row` of `split` as its set numbers it: a split carved by `train_test_split` (or shuffled) reads the
    set's table through an index mapping, so its own row numbers are not the set's."""
    indices = split._indices  # datasets' mapping from a split's rows to its table's; None when they are the same
    return row if indices is None else indices.column(0)[row].as_py()


def check_one(cell: dict | None, decode: bool, split_name: str, row: int) -> tuple[str | None, int]:
    """One cell opened (and decoded): or a `ValueError` naming the split, row, file and fix. Decoded, the digest of
    its bytes (a file is read once, then decoded from those bytes), else None; and its number of frames."""
    path = (cell or {}).get("path")
    where = f"Image {row} of split {split_name!r}" + (f" ({shown_name(path)})" if path else "")
    if cell is None:
        raise ValueError(f"{where} is missing (an empty cell): remove the row or add its image.")
    try:
        if decode and cell.get("bytes") is None and path and os.path.isfile(path):  # never a pipe or device
            with open(path, "rb") as file:
                cell = {"bytes": file.read(), "path": path}
        with open_image(cell, where) as image:
            frames = frame_count(image)
            if decode:
                image.load()
                if image.mode in WIDE_MODES:
                    to_model_mode(image, 1)
    except FileNotFoundError:
        raise ValueError(f"{where} does not exist: restore the file or remove the row.") from None
    except ImageTooLarge:
        raise
    except ValueError as error:  # to_model_mode's refusal, or a cell with no data
        raise ValueError(f"{where} cannot be used ({str(error).rstrip('.')}).") from None
    except Exception as error:  # noqa: BLE001 PIL raises OSError, SyntaxError, struct.error, ... for damaged files
        raise ValueError(f"{where} cannot be decoded ({pil_reason(error)}): remove or replace the file.") from None
    return (hashlib.blake2b(cell["bytes"], digest_size=16).hexdigest() if decode else None), frames


def pil_reason(error: Exception) -> str:
    """PIL's reason for a failed read, without its repetition of the file's path or object (`'...'`, `<...>`)."""
    return re.split(r" ['<]", str(error), maxsplit=1)[0] or type(error).__name__
