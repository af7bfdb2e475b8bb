"""A few-label split of an imagefolder: a stratified share of the training images keep their labels, all of them
are also given without labels.

From SET (train/<class>/<image> and test/<class>/<image>, as `scripts/make_image_sets.py` writes them) it writes:

- OUT/labelled/train/<class>/: `fraction` of each class's training images (at least one), drawn with `seed`;
- OUT/labelled/test/<class>/: the whole test split;
- OUT/unlabelled/: every training image once, flat (no class folders), named by its place in an order shuffled with
  `seed` (`00000.png`, ...), so neither a folder nor a name nor the order of the names tells its class.

OUT/labelled is an imagefolder that `scripts/train.py --dataset` and `scripts/reference_vit.py` read; OUT/unlabelled
is the folder to pretrain on. Files are hard links to SET's where the file system allows (copies otherwise): the
split takes no space, and SET's files must not be edited in place afterwards. Everything is written into a hidden
sibling of OUT and renamed into place at the end, so OUT is either whole or absent. The same SET and seed give the
same split.

Training glue for experiments, never imported by the model files.
"""

import math
import os
import shutil
from pathlib import Path

import numpy as np

from lab.image_sets import IMAGE_SUFFIXES

# the random streams of a seed: the labelled draw (one per class) and the unlabelled names' shuffle
LABELLED_STREAM, UNLABELLED_STREAM = 0, 1


def class_images(split: Path) -> dict[str, list[Path]]:
    """Class name -> its image files (sorted), for a split folder of class sub-folders; classes sorted."""
    if not split.is_dir():
        raise ValueError(f"{split} is not a folder: give an imagefolder with train/<class>/ and test/<class>/.")
    classes = {
        folder.name: sorted(path for path in folder.iterdir() if path.suffix.lower() in IMAGE_SUFFIXES)
        for folder in sorted(split.iterdir())
        if folder.is_dir()
    }
    classes = {name: images for name, images in classes.items() if images}
    if not classes:
        raise ValueError(f"{split} has no class folder of images: put each class's images in {split}/<class>/.")
    return classes


def labelled_count(total: int, fraction: float) -> int:
    """How many of a class's `total` training images keep their label: `fraction` of them rounded half up, at least 1."""
    return max(1, math.floor(total * fraction + 0.5))


def draw_labelled(train: dict[str, list[Path]], fraction: float, seed: int) -> dict[str, list[Path]]:
    """The images of each class that keep their label, drawn without replacement; each class draws from its own
    generator (seed, class's place), so a class's draw does not depend on the other classes' sizes."""
    drawn = {}
    for place, (name, images) in enumerate(train.items()):
        rng = np.random.default_rng([seed, LABELLED_STREAM, place])
        chosen = rng.choice(len(images), size=labelled_count(len(images), fraction), replace=False)
        drawn[name] = [images[index] for index in sorted(chosen)]
    return drawn


def link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or one without hard links
        shutil.copy2(source, target)


def write_classes(classes: dict[str, list[Path]], root: Path) -> None:
    for name, images in classes.items():
        (root / name).mkdir(parents=True)
        for image in images:
            link_or_copy(image, root / name / image.name)


def write_unlabelled(images: list[Path], root: Path, seed: int) -> None:
    """`images` flat into `root`, named by their place in a seeded shuffle (zero-padded), each keeping its suffix."""
    root.mkdir(parents=True)
    order = np.random.default_rng([seed, UNLABELLED_STREAM]).permutation(len(images))
    digits = len(str(max(len(images) - 1, 0)))
    for place, index in enumerate(order):
        link_or_copy(images[index], root / f"{place:0{digits}d}{images[index].suffix.lower()}")


def split_few_labels(dataset: str | Path, output: str | Path, fraction: float = 0.1, seed: int = 0) -> dict:
    """Write the few-label split of the imagefolder `dataset` to `output` (see the module's docstring).

    Returns the counts: {"labelled_train": {class: n}, "test": {class: n}, "unlabelled": n}.
    """
    dataset, output = Path(dataset), Path(output)
    if not 0 < fraction <= 1:
        raise ValueError(f"--fraction is {fraction}: give the share of training images to label, in (0, 1].")
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise ValueError(f"{output} exists and is not an empty folder: give a new or empty folder to write the split.")
    train, test = class_images(dataset / "train"), class_images(dataset / "test")
    labelled = draw_labelled(train, fraction, seed)
    output.parent.mkdir(parents=True, exist_ok=True)
    stage = output.parent / f".{output.name}.partial-{os.getpid()}"
    stage.mkdir()
    try:
        write_classes(labelled, stage / "labelled" / "train")
        write_classes(test, stage / "labelled" / "test")
        write_unlabelled([image for images in train.values() for image in images], stage / "unlabelled", seed)
        if output.exists():
            output.rmdir()  # empty (checked above): a rename cannot replace a folder
        stage.rename(output)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return {
        "labelled_train": {name: len(images) for name, images in labelled.items()},
        "test": {name: len(images) for name, images in test.items()},
        "unlabelled": sum(len(images) for images in train.values()),
    }
