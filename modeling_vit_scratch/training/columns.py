"""The columns and the classes of a data set read for training: its image and label columns found (or named), its
class names in order, every split's labels read by name onto the train split's, and, for pretraining, the images
alone. Training glue, never imported by the model files."""

from collections.abc import Callable
from pathlib import Path

from datasets import ClassLabel, Dataset, Features, IterableDataset
from datasets import Image as ImageFeature

from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.secrets import shown

IMAGE_COLUMN_NAMES = ("image", "img", "images", "picture", "pixel_values")


LABEL_COLUMN_NAMES = ("label", "labels", "class", "fine_label", "target", "cls")  # cls: WebDataset


UNLABELLED = "image"  # the one class of a set read without its labels (pretraining)


def find_column(dataset, wanted: str | None, kind: str, names: tuple[str, ...], feature_type) -> str:
    """The column given by the user, else the first of `feature_type`, else the first of the usual `names`."""
    columns = list(dataset.features)
    if wanted is not None:
        if wanted not in columns:
            raise UserError(f"--{kind}_column {shown(wanted)} is not a column of the data set ({columns}): fix it")
        return wanted
    typed = [name for name, feature in dataset.features.items() if isinstance(feature, feature_type)]
    found = typed or [name for name in names if name in columns]
    if not found and kind == "label" and len(columns) == 1:  # a folder of images with no class sub-folders (or one)
        raise UserError(
            "the data set has no labels (a folder with one class sub-folder, or none, gives none): put the images in "
            "one sub-folder per class, at least two"
        )
    if not found:
        raise UserError(f"no {kind} column in the data set {columns}: name it with --{kind}_column")
    return found[0]


def in_order(names: list[str]) -> list[str]:
    """Class names, in numerical order when all are plain whole numbers ("2" before "10"), else sorted as text."""
    if all(name.isascii() and name.isdigit() and str(int(name)) == name for name in names):
        return sorted(names, key=int)
    return sorted(names)


def label_values(split) -> list:
    """The distinct labels of `split` (a stream is read once, its label column alone)."""
    if isinstance(split, Dataset):
        return split.unique("label")
    return list({row["label"] for row in split.select_columns(["label"])})


def normalised(
    splits: dict, image_column: str | None, label_column: str | None, root: Path | None, labelled: bool = True
):
    """(splits with the columns `image` and `label` (ClassLabel), the class names). The train split's classes are
    the model's: a ClassLabel's names (numbers in numerical order), else its integers or text values, sorted;
    every other split's labels are read by name onto them. Not `labelled`: any labels are left unread and every
    image is of the one class UNLABELLED."""
    train = splits["train"]
    if train.features is None:
        raise UserError(
            "the stream declares no columns: give a set with features (datasets writes them), or no --streaming"
        )
    image_column = find_column(train, image_column, "image", IMAGE_COLUMN_NAMES, ImageFeature)
    if not labelled:
        return {role: unlabelled(split, image_column, root) for role, split in splits.items()}, [UNLABELLED]
    label_column = find_column(train, label_column, "label", LABEL_COLUMN_NAMES, ClassLabel)
    given = train.features[label_column]
    if isinstance(given, ClassLabel):
        names = in_order(given.names) if given.names == sorted(given.names) else list(given.names)
    else:
        labelled = train.select_columns([label_column])
        values = label_values(labelled.rename_column(label_column, "label") if label_column != "label" else labelled)
        names = [str(value) for value in sorted(values)] if not isinstance(values[0], str) else in_order(values)
    target = ClassLabel(names=names)
    out = {}
    for role, split in splits.items():
        split = image_column_of(split.select_columns([image_column, label_column]), image_column, root, label_column)
        out[role] = split.map(
            relabel(split.features["label"], names, role),
            input_columns="label",
            batched=True,
            features=Features(image=split.features["image"], label=target),
        )
    return out, names


def image_column_of(split, image_column: str, root: Path | None, label_column: str = "label"):
    """`split` with its images in the column `image` (paths inside the set made whole; decoded when read, a stream's
    as it trains) and its labels in `label`."""
    renames = {old: new for old, new in ((image_column, "image"), (label_column, "label")) if old != new}
    split = split.rename_columns(renames) if renames else split
    image = split.features["image"]
    if getattr(image, "dtype", "") in ("string", "large_string") and root is not None:  # paths inside the set
        split = split.map(
            lambda paths: {"image": [str(root / path) for path in paths]}, input_columns="image", batched=True
        )
    image = ImageFeature(decode=not isinstance(split, IterableDataset))  # a stream decodes as it trains
    return split.cast_column("image", image) if split.features["image"] != image else split


def unlabelled(split, image_column: str, root: Path | None):
    """`split`'s images alone, each of the class UNLABELLED (label 0): what pretraining reads, whatever the labels."""
    split = split.select_columns([image_column])
    features = Features({image_column: split.features[image_column], "label": ClassLabel(names=[UNLABELLED])})
    if isinstance(split, IterableDataset):  # a stream's rows stay undecoded through the map: it decodes as it trains
        if isinstance(split.features[image_column], ImageFeature):
            features[image_column] = ImageFeature(decode=False)
            split = split.cast_column(image_column, features[image_column])
        split = split.map(lambda row: {"label": 0}, features=features)
    else:
        split = split.add_column("label", [0] * len(split), feature=features["label"])
    return image_column_of(split, image_column, root)


def relabel(feature, names: list[str], role: str) -> Callable[[dict], dict]:
    """A batched map from a split's labels to the train split's class numbers, by name; -1 (datasets' "no label")
    and numbers past a ClassLabel's names are kept as -1 for `checks` to name."""
    own = feature.names if isinstance(feature, ClassLabel) else None
    index = {name: number for number, name in enumerate(names)}

    def mapped(values: list) -> dict:
        labels = []
        for value in values:
            if own is not None or isinstance(value, int):
                value = None if value < 0 or (own and value >= len(own)) else own[value] if own else value
            name = None if value is None else str(value)
            if name is not None and name not in index:
                raise UserError(
                    f"the {role} split holds the class {shown(name)}, which the train split lacks: rename or remove it"
                )
            labels.append(-1 if name is None else index[name])
        return {"label": labels}

    return mapped
