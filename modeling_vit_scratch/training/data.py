"""Image-classification data for training: any `datasets` image set, or the embedded handwritten digits.

Everything ends up as a `DatasetDict` with `train`, `validation` and `test` splits, an image column holding PIL
images and an integer label column with names, so the embedded default and a user's data go through one path.
This module is training glue: the model code never imports it (it needs `datasets`, scikit-learn and PIL).
"""

import glob
import json
import os
import stat
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Features, load_dataset, load_from_disk
from datasets import Image as ImageFeature
from datasets.data_files import SPLIT_KEYWORDS
from PIL import Image

from modeling_vit_scratch.common.model_folder import model_folder_signs
from modeling_vit_scratch.common.names import is_unprintable, shown_name
from modeling_vit_scratch.common.secrets import redact, refuse_secret
from modeling_vit_scratch.common.sources import (
    DIGITS,
    check_hub_endpoint,
    check_offline_cached,
    hub_misanswered,
    looks_like_local_path,
    not_cached_offline,
    offline_setting,
)
from modeling_vit_scratch.common.user_paths import refuse_variable_reference
from modeling_vit_scratch.image_processing_vit_scratch import to_model_mode
from modeling_vit_scratch.training.distributed import node_shared_array
from modeling_vit_scratch.training.preflight import check_class_sizes

IMAGE_COLUMN_NAMES = ("image", "img", "images", "picture", "pixel_values")
LABEL_COLUMN_NAMES = ("label", "labels", "class", "fine_label", "target")


def digits_dataset(test_size: float = 0.2) -> DatasetDict:
    """scikit-learn's 1,797 handwritten 8x8 digits as 8-bit grayscale PIL images, split as in the literature.

    Pixels 0..16 become round(value * 255 / 16); labels are named "0".."9"; `test` is a stratified 20% split with
    seed 0 (`train_test_split(..., stratify=y, random_state=0)`), `train` the rest.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    pixels = np.rint(digits.images * 255.0 / 16.0).astype(np.uint8)  # (1797, 8, 8)
    indices = np.arange(len(pixels))
    train_idx, test_idx = train_test_split(indices, test_size=test_size, stratify=digits.target, random_state=0)
    features = Features(image=ImageFeature(), label=ClassLabel(names=[str(d) for d in range(10)]))

    def split(idx: np.ndarray) -> Dataset:
        rows = {"image": [Image.fromarray(pixels[i], mode="L") for i in idx], "label": digits.target[idx].tolist()}
        return Dataset.from_dict(rows, features=features)

    return DatasetDict(train=split(train_idx), test=split(test_idx))


def saved_to_disk(path: Path) -> bool:
    """Whether `path` is a folder written by `datasets`' `save_to_disk` (arrow files and their JSON description).
    A folder that says it is one (its `dataset_dict.json` or `dataset_info.json`) but lacks what that file promises
    is one line naming the file (`check_saved_parts`): read and streamed sets alike pass here."""
    marked = (path / "dataset_dict.json").exists() or (path / "dataset_info.json").exists()
    if marked:
        check_saved_parts(path)
    return marked


def check_saved_parts(path: Path) -> None:
    """Refuse a folder whose `dataset_dict.json` names splits that are no saved splits beside it (or whose
    `dataset_info.json` has no `state.json` beside it), in one line naming that file: a stray copy in an image
    folder, or a save_to_disk folder with a split moved away, else datasets' "Expected to load a `Dataset`"."""
    shown = shown_name(str(path))
    fix = (
        "remove {file} to read the class folders as an image folder, or give --dataset the folder save_to_disk "
        "wrote (with each split's folder)"
    )
    if (path / "dataset_dict.json").exists():
        try:
            splits = json.loads((path / "dataset_dict.json").read_text())["splits"]
            splits = [str(split) for split in splits]
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"--dataset '{shown}' has a dataset_dict.json that lists no splits ({error!r}), so it is read as a "
                f"save_to_disk folder it is not: {fix.format(file='dataset_dict.json')}."
            ) from None
        missing = [split for split in splits if not (path / split / "state.json").is_file()]
        if missing:
            raise ValueError(
                f"--dataset '{shown}' has a dataset_dict.json, so it is read as a save_to_disk folder, but its "
                f"split{'s' * (len(missing) > 1)} {', '.join(map(repr, missing))} "
                f"{'are' if len(missing) > 1 else 'is'} not saved there (no {missing[0]}/state.json): "
                f"{fix.format(file='dataset_dict.json')}."
            )
    elif not (path / "state.json").is_file():
        raise ValueError(
            f"--dataset '{shown}' has a dataset_info.json, so it is read as a save_to_disk folder, but it has no "
            f"state.json beside it: {fix.format(file='dataset_info.json')}."
        )


def load_image_dataset(source: str, config_name: str | None = None, secrets: list[str] = ()) -> DatasetDict:
    """`"digits"`, a `save_to_disk` folder, an `imagefolder` (one sub-folder per class) or a hub dataset name.
    An image folder's file and folder names are checked for `secrets` before anything is read (`datasets` would
    keep its paths in its cache)."""
    check_dataset_source(source)
    if source == DIGITS:
        return digits_dataset()
    path = Path(source).expanduser()
    if path.exists():
        if saved_to_disk(path):
            loaded = load_from_disk(str(path))
        else:
            check_imagefolder_names(path, list(secrets))
            check_imagefolder_depths(path)
            check_metadata_files(path)
            check_one_folder_per_class(path)
            loaded = load_imagefolder(path)
    else:
        try:
            loaded = load_dataset(source, config_name)
        except (OSError, ValueError) as error:  # offline, unknown name, private repo, missing configuration
            raise hub_data_set_error(source, error, "is no folder here and could not be loaded from the hub") from None
    return loaded if isinstance(loaded, DatasetDict) else DatasetDict(train=loaded)


def hub_data_set_error(source: str, error: Exception, what: str) -> FileNotFoundError:
    """The line for a hub data set `source` that `load_dataset` could not open (`what` it could not do): not in the
    cache while offline (HF_HUB_OFFLINE or HF_DATASETS_OFFLINE set), the variable that forbade the download and the two fixes;
    otherwise datasets' reason and the names to check. Read and streamed sets alike."""
    variable = offline_setting("dataset")
    if variable and isinstance(error, ConnectionError):  # the Hub it would have asked
        return FileNotFoundError(not_cached_offline(source, "--dataset", "dataset", variable))
    misanswered = hub_misanswered(f"Data set {source!r} {what}", error)  # a server answered, but as no Hub does
    if misanswered:
        return FileNotFoundError(misanswered)
    return FileNotFoundError(
        f"Data set {source!r} {what} ({' '.join(str(error).split())}): check the path (a folder name needs ./ in "
        "front) or the hub data set name."
    )


DATA_SET_TAKES = (
    f"a folder with one sub-folder of images per class ('FOLDER/cat/1.png', 'FOLDER/dog/1.png', ...), a save_to_disk "
    f"folder, a hub data set name or {DIGITS!r}"
)


def check_dataset_source(source: str, config_name: str | None = None) -> None:
    """What `--dataset` names, checked from its name and the file system only (nothing is read), before the output
    folder is compared with it: so a wrong data set argument is named as such, not as an output inside an input. A
    file, `/`, the home folder and a local path that is not there are one line saying what --dataset takes; so is a
    `--dataset_config` (`config_name`) beside a data set that has no configurations (a folder, the digits), which
    would be ignored."""
    path = Path(source).expanduser()
    if config_name is not None and (source == DIGITS or path.exists()):
        what = "the embedded digits" if source == DIGITS else "a local folder"
        raise ValueError(
            f"--dataset_config {config_name!r} names a configuration of a hub data set, but --dataset {source!r} is "
            f"{what}, which has none: leave out --dataset_config."
        )
    if source == DIGITS:
        return
    try:
        source.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"--dataset '{os.fsencode(source).decode('ascii', 'backslashreplace')}' is not valid UTF-8, which "
            "datasets needs for every path it reads: rename the folder in UTF-8."
        ) from None
    if path.exists():
        refuse_variable_reference(source, "--dataset")
        for real in dict.fromkeys((os.path.abspath(source), os.path.realpath(source))):  # datasets reads these
            refuse_variable_reference(real, f"The folder --dataset {source!r} names")
    if path.is_file():
        raise ValueError(f"--dataset {source!r} is a file, not a data set: give {DATA_SET_TAKES}.")
    if path.is_dir():
        real = os.path.realpath(path)
        place = {os.path.realpath(os.sep): "the root folder", os.path.realpath(Path.home()): "your home folder"}
        if real in place:
            raise ValueError(f"--dataset {source!r} is {place[real]}, not a data set: give {DATA_SET_TAKES}.")
        signs = model_folder_signs(path)
        if signs:
            raise ValueError(
                f"--dataset {shown_name(source)!r} is a saved model's folder ({', '.join(signs)}), not a data set: "
                f"to train from that model give it to --model, and give --dataset {DATA_SET_TAKES}."
            )
        check_imagefolder_links(path)
    elif path.is_symlink():  # a link to nothing, or a loop: named as such, not as a folder that does not exist
        raise FileNotFoundError(
            f"--dataset '{shown_name(source)}' is {entry_kind(path, path.parent)[1]}, not a data set: point the link "
            f"at the data set folder, or give {DATA_SET_TAKES}."
        )
    elif looks_like_local_path(source):
        raise FileNotFoundError(
            f"Data set folder {source!r} does not exist: pass an existing folder (an imagefolder with one "
            f"sub-folder per class, or a save_to_disk folder), a hub dataset name, or {DIGITS!r}."
        )
    else:  # a hub data set
        check_hub_endpoint()
        check_offline_cached(source, "--dataset", "dataset")


def check_imagefolder_links(path: Path) -> None:
    """No folder under `path` is a symbolic link: `datasets` does not follow linked folders, so a linked class
    folder's images would be left out without a word and the model would learn another set of labels. Refused rather
    than followed: a link may lead anywhere, and the package reads and writes through no link it was not given. (The
    data set folder itself may be a link: that is the user's explicit choice.)"""
    for folder, subfolders, _ in os.walk(path):
        subfolders[:] = [name for name in subfolders if not name.startswith((".", "__"))]  # never read: no matter
        for name in sorted(subfolders):
            linked = Path(folder) / name
            if linked.is_symlink():
                raise ValueError(
                    f"The data set folder '{shown_name(path)}' holds a linked folder, "
                    f"'{shown_name(linked.relative_to(path))}' (a symbolic link to '{shown_name(os.readlink(linked))}'), which datasets does not read: its images would be left out. "
                    "Put the folder itself there (copy or move it in place of the link)."
                )


@dataclass
class FolderFiles:
    """The files under an image folder, relative to it: the images training reads, and the files it leaves out."""

    images: list[Path]
    not_images: list[Path]  # by their extension: `0.png.bak`, `notes.txt`
    hidden: list[Path]  # under a name starting with "." or "__" (`.DS_Store`), as datasets leaves them out
    # the hidden folders that hold images, with how many: a class (or part of one) left out, named on its own
    hidden_image_folders: dict[Path, int] = field(default_factory=dict)
    # entries that are no regular file (a device, pipe or socket, or a link to one): never opened, as one could block
    not_regular: list[Path] = field(default_factory=list)
    # links that lead to no file, with why: "a link to nothing (TARGET)" or "a link loop"
    broken_links: dict[Path, str] = field(default_factory=dict)
    # images (among `images`) that are links to files outside the folder: read, and named
    outside_links: list[Path] = field(default_factory=list)
    root: Path | None = None

    def left_out_line(self) -> str | None:
        """'Left out N files that are not images (e.g. ...)', or None when every file is read; a hidden folder
        holding images is named with their count and how to train on them, since it changes the classes; images
        read through links to files outside the folder are named too."""
        parts = []
        if self.not_images:
            parts.append(
                f"{count(len(self.not_images), 'file')} that "
                f"{'is not an image by its' if len(self.not_images) == 1 else 'are not images by their'} extension"
                f" (e.g. {shown_files(self.not_images)})"
            )
        parts += self.unread_parts()
        others = [item for item in self.hidden if item not in self.hidden_image_folders]
        if others:
            parts.append(f"{count(len(others), 'hidden file')} ({shown_files(others)})")
        sentences = [f"Left out {' and '.join([', '.join(parts[:-1]), parts[-1]] if len(parts) > 2 else parts)}."]
        sentences = sentences if parts else []
        for folder, images in self.hidden_image_folders.items():
            what = "it as a class" if len(folder.parts) == 1 else "its images"
            sentences.append(
                f"Left out the hidden folder {shown_name(folder)} ({count(images, 'image')}): rename it without the "
                f"leading '{'__' if folder.name.startswith('__') else '.'}' to train on {what}."
            )
        if self.outside_links:
            sentences.append(outside_files_line(self.outside_links, self.root or Path("."), "links"))
        return " ".join(sentences) or None

    def unread_parts(self) -> list[str]:
        """The entries no loader can read, in words: those that are no regular file, and broken links."""
        parts = []
        if self.not_regular:
            many = len(self.not_regular) != 1
            parts.append(
                f"{count(len(self.not_regular), 'file')} that {'are not regular files' if many else 'is not a regular file'}"
                f" (a device, pipe or socket, never opened: {shown_files(self.not_regular)})"
            )
        if self.broken_links:
            shown = [f"{shown_name(link)}: {why}" for link, why in list(self.broken_links.items())[:3]]
            more = len(self.broken_links) - len(shown)
            parts.append(
                f"{count(len(self.broken_links), 'link')} that {'lead' if len(self.broken_links) != 1 else 'leads'} "
                f"to no file ({'; '.join(shown)}{f'; ... {more} more' if more else ''})"
            )
        return parts


def outside_files_line(files: list, root: Path | str, how: str) -> str:
    """The line naming images read from files outside the data set folder `root`: `how` "links" (a link in the
    folder leads out) or "paths" (an image cell of the set names a file by its path): read, and named."""
    many = len(files) != 1
    refers = {"links": "are links" if many else "is a link", "paths": "refer by path" if many else "refers by path"}
    return (
        f"{count(len(files), 'image')} {refers[how]} to {'files' if many else 'a file'} outside {shown_name(root)} "
        f"(e.g. {shown_files(files)}): read as {'images' if many else 'an image'}."
    )


def path_cells_outside(cells, root: Path | str) -> list[str]:
    """The paths of the image cells among `cells` (pyarrow struct arrays or chunked arrays of {"bytes", "path"})
    that hold no bytes, so that the image is read from the file their path names, and whose path lies outside the
    folder `root` (a relative path is read from the working folder). Links inside `root` are `entry_kind`'s."""
    import pyarrow.compute

    bases = {os.path.abspath(root), os.path.realpath(root)}  # datasets names an image folder's files by either
    outside = []
    for chunk in getattr(cells, "chunks", [cells]):
        if not len(chunk) or chunk.field("bytes").null_count == 0:
            continue
        paths = chunk.field("path").filter(pyarrow.compute.is_null(chunk.field("bytes"))).drop_null()
        for path in paths.to_pylist():
            inside = [os.path.relpath(os.path.abspath(path), base) for base in bases]
            if all(part == os.pardir or part.startswith(os.pardir + os.sep) for part in inside):
                outside.append(path)
    return outside


def outside_paths_lines(columns: list, root: str | None) -> list[str]:
    """The line naming the images of a local set (`root`, its folder; None: no line) whose cells in `columns`
    (pyarrow columns of image cells) are read from files outside it by their path (`path_cells_outside`)."""
    if root is None:
        return []
    outside = list(dict.fromkeys(path for cells in columns for path in path_cells_outside(cells, root)))
    return [outside_files_line(outside, root, "paths")] if outside else []


def entry_kind(entry: Path, root: Path) -> tuple[str, str]:
    """What a file entry under the folder `root` is, found with `lstat`/`stat` only (nothing is opened: a pipe would
    block): ("file", ""), ("outside", "") for a link to a regular file outside `root`, ("not_regular", "") for a
    device, pipe or socket (or a link to one), or ("broken", why) for a link to nothing or a link loop."""
    try:
        status = entry.stat()
    except FileNotFoundError:
        return "broken", f"a link to nothing ({shown_name(os.readlink(entry))})"
    except OSError:  # ELOOP: a link that leads back to itself
        return "broken", "a link loop"
    if not stat.S_ISREG(status.st_mode):
        return "not_regular", ""
    if entry.is_symlink():
        inside = os.path.relpath(os.path.realpath(entry), os.path.realpath(root))
        if inside == os.pardir or inside.startswith(os.pardir + os.sep):
            return "outside", ""
    return "file", ""


def count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'s' * (number != 1)}"


def shown_files(files: list[Path], shown: int = 3) -> str:
    more = f", ... {len(files) - shown} more" if len(files) > shown else ""
    return ", ".join(shown_name(file) for file in files[:shown]) + more


def image_extensions() -> set[str]:
    """The extensions (lower case, with the dot) of the files datasets' imagefolder reads as images."""
    from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder

    return {extension.lower() for extension in ImageFolder.EXTENSIONS}


def is_image_file(path: str | Path) -> bool:
    """An image by its last extension: `0.png` is, `0.png.bak` is not (datasets also reads a file whose
    second-to-last extension is an image's, meant for `x.png.gz`; so would a backup copy be read twice)."""
    return Path(path).suffix.lower() in image_extensions()


def folder_files(path: Path) -> FolderFiles:
    """Every entry under `path` sorted into images, files that are not images, hidden entries (a hidden folder
    counts once, not its files), entries that are no regular file and broken links (see `FolderFiles`; each found
    with `entry_kind`, nothing opened); `datasets`' metadata files (metadata.csv, .jsonl, .parquet) are read by it,
    and so in none of them."""
    from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder

    listing = FolderFiles([], [], [], root=path)
    for folder, subfolders, files in os.walk(path):
        relative = Path(folder).relative_to(path)
        hidden = sorted(name for name in subfolders if name.startswith((".", "__")))
        subfolders[:] = sorted(name for name in subfolders if name not in hidden)
        listing.hidden += [relative / f"{name}/" for name in hidden]
        for name in hidden:
            images = count_images(Path(folder) / name)
            if images:
                listing.hidden_image_folders[relative / f"{name}/"] = images
        for name in sorted(files):
            if name in ImageFolder.METADATA_FILENAMES:
                continue
            if name.startswith((".", "__")):
                listing.hidden.append(relative / name)
                continue
            kind, why = entry_kind(Path(folder) / name, path)
            if kind == "not_regular":
                listing.not_regular.append(relative / name)
            elif kind == "broken":
                listing.broken_links[relative / name] = why
            elif is_image_file(name):
                listing.images.append(relative / name)
                if kind == "outside":
                    listing.outside_links.append(relative / name)
            else:
                listing.not_images.append(relative / name)
    return listing


def count_images(folder: Path) -> int:
    """How many image files (by extension) lie under `folder`, at any depth."""
    return sum(is_image_file(name) for _, _, files in os.walk(folder) for name in files)


def imagefolder_files(path: Path) -> list[Path]:
    """The image files training reads under `path` (hidden and `__` files and folders left out), relative to
    `path`."""
    return folder_files(path).images


def left_out_line(source: str) -> str | None:
    """For a local image folder, the line that says which of its files training leaves out (`FolderFiles`), or None
    (every file read, or no image folder)."""
    path = Path(source).expanduser()
    if source == DIGITS or not path.is_dir() or saved_to_disk(path):
        return None
    return folder_files(path).left_out_line()


def check_imagefolder_names(path: Path, secrets: list[str]) -> None:
    """No file or folder name under `path` holds a token: `datasets` keeps every path in its cache, and a class
    folder's name becomes a label in config.json and the card (never echoed); no two class folders are one name
    (`check_label_forms`), refused before datasets reads the folder."""
    for entry in sorted(path.rglob("*")):
        check_utf8_name(entry, path)
        if entry.parent == path and entry.is_dir():
            what = f"A class name of the data set {shown_name(path)}"
            check_label_text(entry.name, str(path))
            fix = "rename that class (its folder, or its label in the data set) before training"
        else:
            what, fix = (
                f"A file or folder name in the data set folder '{shown_name(path)}'",
                f"rename the file ({redact(str(entry.relative_to(path)), secrets)}) before training",
            )
        refuse_secret(what, str(entry.relative_to(path)), secrets, fix)
    check_label_forms(sorted({file.parent.name for file in imagefolder_files(path)}), str(path))


def check_utf8_name(entry: Path, path: Path) -> None:
    """A one-line ValueError, showing the name's bytes escaped, when a file or folder name under the image folder
    `path` is not valid UTF-8: datasets and pyarrow read every path as UTF-8 and fail deep in the data set's
    generation, and a class folder's name becomes a label written to config.json and the card."""
    relative = str(entry.relative_to(path))
    try:
        relative.encode("utf-8")
    except UnicodeEncodeError:
        what = "A class folder's name" if entry.parent == path and entry.is_dir() else "A file or folder name"
        raise ValueError(
            f"{what} in the data set folder '{shown_name(path)}' is not valid UTF-8 "
            f"('{os.fsencode(relative).decode('ascii', 'backslashreplace')}'): datasets reads every name as UTF-8; "
            "rename it in UTF-8 before training (e.g. `convmv -f latin1 -t utf8 -r --notest FOLDER`)."
        ) from None
    what = "A class folder's name" if entry.parent == path and entry.is_dir() else "A file or folder name"
    refuse_variable_reference(relative, f"{what} in the data set folder '{shown_name(path)}'")


def check_label_text(label: str, dataset: str) -> None:
    """A one-line ValueError, showing the name escaped, when the class name `label` holds an unprintable character
    (`common/names.py`): a label is written to the card, config.json and the logs, and shown on terminals."""
    if any(is_unprintable(character) for character in label):
        raise ValueError(
            f"A class name of the data set {dataset} holds control or invisible characters ({label!r}), which "
            "would reach the model card, config.json and terminals raw: rename that class (its folder, or its label "
            "in the data set) with printable characters only."
        )


def check_label_forms(labels: list[str], dataset: str) -> None:
    """A one-line ValueError when two class names are one name that differs only in its Unicode form (NFC "\u00e9"
    and NFD "e\u0301": folders written on macOS and on Linux), in surrounding spaces (`cat` and `cat `) or in case
    (`cat` and `Cat`, one folder on macOS and Windows): they would train as two classes that print or read alike,
    whether the names come from folders or from a label column. Both are shown escaped, so the line tells them
    apart."""
    unicode_fix = " (e.g. `convmv -r -f utf8 -t utf8 --nfc --notest FOLDER`)"
    forms = [
        (
            lambda label: unicodedata.normalize("NFC", label),
            "written in two Unicode forms (composed and decomposed characters: folders made on different systems)",
            unicode_fix,
        ),
        (lambda label: unicodedata.normalize("NFC", label).strip(), "that differs only in spaces around it", ""),
        (
            lambda label: unicodedata.normalize("NFC", label).strip().casefold(),
            "that differs only in case (one folder on macOS and Windows)",
            "",
        ),
    ]
    labels = list(map(str, labels))
    for key, how, example in forms:
        seen = {}
        for label in labels:
            same = seen.setdefault(key(label), label)
            if same != label:
                raise ValueError(
                    f"The class names {same!a} and {label!a} of the data set {shown_name(dataset)} are one name "
                    f"{how}, and would train as two classes that print alike: merge them (move one folder's images "
                    f"into the other, or give their rows one label), or rename one so that they differ plainly"
                    f"{example}."
                )


def metadata_rows(path: Path) -> list[tuple[Path, int, str, str | None]]:
    """Each row of the metadata files (`metadata.csv`, `.jsonl`, `.parquet`) under the image folder `path`, as datasets
    would read them: (the metadata file relative to `path`, its row number from 1, the image's `file_name` as written,
    the row's `label` as text or None). A file datasets cannot parse either is left to datasets' own error."""
    import pandas
    from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder

    readers = {
        ".csv": lambda file: pandas.read_csv(file, dtype=str, keep_default_na=False),
        ".jsonl": lambda file: pandas.read_json(file, lines=True, dtype=False),
        ".parquet": pandas.read_parquet,
    }
    rows = []
    for folder, subfolders, files in os.walk(path):
        subfolders[:] = sorted(name for name in subfolders if not name.startswith((".", "__")))
        for name in sorted(set(files) & set(ImageFolder.METADATA_FILENAMES)):
            try:
                table = readers[Path(name).suffix](Path(folder) / name)
            except Exception:  # noqa: BLE001, S112 a damaged file: datasets names it when it reads it
                continue
            if "file_name" not in table.columns:
                continue
            labels = table["label"] if "label" in table.columns else [None] * len(table)
            relative = (Path(folder) / name).relative_to(path)
            for row, (file_name, label) in enumerate(zip(table["file_name"], labels), start=1):
                rows.append((relative, row, str(file_name), None if label is None else str(label)))
    return rows


def check_metadata_files(path: Path) -> None:
    """The rows of an image folder's metadata files, checked before datasets reads them: each `file_name` names an
    image inside the folder that is there (one line naming the metadata file and the row, not a long
    DatasetGenerationError, and no file read from outside the set); and where an image lies in a class folder and
    its row gives a `label` too, the two agree (else one line: which is right is the user's to say; images all in
    one folder have no class folder); and every image under a metadata file's folder is named by one row (datasets
    leaves an image without one out without a word, and reads an image of two rows as two items)."""
    root = os.path.realpath(path)
    disagree, named, covering = [], {}, set()
    rows = metadata_rows(path)
    check_label_forms(sorted({label for *_, label in rows if label is not None}), str(path))
    for metadata, row, file_name, label in rows:
        covering.add(metadata.parent)
        where = f"Row {row} of {shown_name(metadata)} in the data set folder '{shown_name(path)}'"
        image = os.path.normpath(path / metadata.parent / file_name)
        inside = os.path.relpath(os.path.realpath(image), root)
        if os.path.isabs(file_name) or inside == os.pardir or inside.startswith(os.pardir + os.sep):
            raise ValueError(
                f"{where} names the image '{shown_name(file_name)}', which lies outside the data set folder: put the "
                "image inside the folder and give its path relative to the metadata file."
            )
        if not os.path.isfile(image):
            raise FileNotFoundError(
                f"{where} names the image '{shown_name(file_name)}', which is not there: restore the image or remove "
                "the row."
            )
        if Path(inside) in named:
            first = named[Path(inside)]
            raise ValueError(
                f"{where} names the image '{shown_name(inside)}', which {first} names too, and datasets would read "
                "the one file as two items: keep one row per image (remove one of the two rows)."
            )
        named[Path(inside)] = f"row {row} of {shown_name(metadata)}"
        if label is not None and Path(inside).parent.name != label and not is_split_folder(Path(inside).parent):
            disagree.append((metadata, label, Path(inside)))
    unnamed = [
        file
        for file in imagefolder_files(path)
        if file not in named and any(folder in file.parents for folder in covering)
    ]
    if unnamed:
        one = len(unnamed) == 1
        it, each = ("it", "it") if one else ("them", "each")
        raise ValueError(
            f"{count(len(unnamed), 'image')} in the data set folder '{shown_name(path)}' {'is' if one else 'are'} "
            f"named by no row of the metadata file beside or above {it}, and datasets would leave {it} out "
            f"(e.g. {shown_files(unnamed)}): add a row for {each}, or move {it} out of the data set folder."
        )
    if disagree and len({file.parent for file in imagefolder_files(path)}) > 1:  # folders read as classes
        metadata, label, image = disagree[0]
        more = f" (and {len(disagree) - 1} more)" if len(disagree) > 1 else ""
        raise ValueError(
            f"{shown_name(metadata)} says {shown_name(label)} for {shown_name(image)}{more}, whose class folder is "
            f"{shown_name(image.parent.name)}: which is right? Remove {shown_name(metadata.name)}'s label column, or "
            "move the files into the folders of their labels."
        )


def is_split_folder(folder: Path) -> bool:
    """Whether `folder` (relative to the data set folder) is a top-level folder datasets reads as a split by its name
    (`train`, `test-2`, `my_validation`): datasets' own folder patterns, so the images in it have no class folder."""
    from fnmatch import fnmatchcase

    from datasets.data_files import KEYWORDS_IN_DIR_NAME_BASE_PATTERNS

    patterns = [
        pattern.format(keyword=keyword, sep="-._ 0-9")
        for pattern in KEYWORDS_IN_DIR_NAME_BASE_PATTERNS
        for keyword in SPLIT_ROLES
    ]
    return len(folder.parts) == 1 and any(fnmatchcase(f"/{folder.as_posix()}/image", pattern) for pattern in patterns)


def check_imagefolder_depths(path: Path) -> None:
    """All images at one depth below `path`: `datasets` infers the labels (the parent folders' names) only then,
    and otherwise loads the images without any, which surfaced later as "no label column found"."""
    examples = {}
    for file in imagefolder_files(path):
        examples.setdefault(len(file.parts), file)
    if len(examples) > 1:
        shown = ", ".join(f"'{shown_name(file)}' ({depth} levels down)" for depth, file in sorted(examples.items()))
        raise ValueError(
            f"The images in '{shown_name(path)}' lie at different depths ({shown}): put every image in one level of class "
            f"sub-folders ('{path / 'cat'}/1.png', '{path / 'dog'}/1.png', ...)."
        )


def shown_labels(labels: list[str], shown: int = 5) -> str:
    """The first `shown` label names, and how many more: for an error line."""
    more = f", ... {len(labels) - shown} more" if len(labels) > shown else ""
    return ", ".join(map(str, labels[:shown])) + more


def split_files(base: str):
    """datasets' split patterns for the folder `base` and the files each finds. datasets reads a path as a glob
    pattern: `[`, `]`, `*` and `?` in a folder's name are escaped (`glob.escape`), or `data [v2]` would find nothing."""
    from datasets.data_files import DataFilesDict, get_data_patterns

    patterns = get_data_patterns(glob.escape(base))
    return patterns, DataFilesDict.from_patterns(patterns, base_path=glob.escape(base))


def as_patterns(data_files: dict[str, list[str]]) -> dict[str, list[str]]:
    """`data_files` as datasets reads them, as glob patterns: each file's name escaped, or `photo [0].png` (a
    character class) would match no file and be left out without a word."""
    return {split: [glob.escape(file) for file in files] for split, files in data_files.items()}


def imagefolder_data_files(path: Path) -> dict[str, list[str]]:
    """The files of each split `datasets`' imagefolder finds under `path` (its own split patterns: `train/`,
    `test/`, ... or one split), less those that are not `folder_files`' images (no image by their last extension,
    `is_image_file`; no regular file; a broken link) and are not its metadata files: given `data_dir`, it would read `fox/0.png.bak` as an image of class fox (a copy could land in
    train and its original in test), and a class folder holding only such files would fail its generation."""
    from datasets.data_files import DEFAULT_PATTERNS_ALL
    from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder

    check_shards_beside_images(path)
    base = path.resolve().as_posix()
    patterns, found = split_files(base)
    readable = {Path(base) / file for file in folder_files(path).images}  # no pipe, device or broken link
    kept = {
        split: [file for file in files if Path(file) in readable or Path(file).name in ImageFolder.METADATA_FILENAMES]
        for split, files in found.items()
    }
    kept = {split: files for split, files in kept.items() if any(is_image_file(file) for file in files)}
    if patterns != DEFAULT_PATTERNS_ALL:  # split folders (or files) found by their names
        check_split_files(path)
        named = sorted({Path(file).relative_to(base).parts[0] for files in found.values() for file in files})
        check_split_folders(path, base, kept, named)
    return kept


def check_split_folders(path: Path, base: str, data_files: dict[str, list[str]], named: list[str]) -> None:
    """Where datasets reads folders as splits by their names (`train/`, `test/`, `validation/`, or a name holding
    such a word set off by `-`, `_`, `.`, a space or a digit: `test-2`), each split folder must hold class folders
    and every image must lie in a split: a class folder named like a split would give its images no label, and the
    images of the other class folders would be left out without a word. A split folder that holds a metadata file
    (`train/metadata.jsonl`, datasets' documented layout) labels its images by that file's columns: a split. Where
    no split holds an image, the entries `named` as splits are shards (the line of a folder of shards) or are
    named as what they are."""
    from datasets.packaged_modules.imagefolder.imagefolder import ImageFolder

    files = {Path(file).relative_to(base) for files in data_files.values() for file in files}
    read = {file for file in files if is_image_file(file)}
    labelled = {file.parts[0] for file in files if len(file.parts) == 2 and file.name in ImageFolder.METADATA_FILENAMES}
    as_splits = sorted({file.parts[0] for file in read if len(file.parts) == 2} - labelled)
    if as_splits:
        many = len(as_splits) > 1
        raise ValueError(
            f"The class folder{'s' * many} {', '.join(map(repr, as_splits))} of the data set folder '{path}' "
            f"{'are' if many else 'is'} named as {'splits' if many else 'a split'}, and datasets reads "
            f"{'them' if many else 'it'} as the train, validation or test split, not as a class: rename "
            f"{'them' if many else 'it'} (e.g. 'test' -> 'testclass'), or, for splits, put class folders inside "
            "(FOLDER/train/cat/1.png)."
        )
    left_out = sorted(set(imagefolder_files(path)) - read)
    if left_out:
        splits = sorted({file.parts[0] for file in read}) or named
        if not read and (line := shards_line(path, f"named as splits ({shown_files(splits)})")):
            raise FileNotFoundError(line)
        kind = "folders" if all((path / name).is_dir() for name in splits) else "files or folders"
        raise ValueError(
            f"The data set folder '{shown_name(path)}' has {kind} named as splits ({', '.join(map(repr, splits))}), so "
            f"datasets reads only those, and {count(len(left_out), 'image')} elsewhere would be left out (e.g. "
            f"{shown_files(left_out)}): move them into a split folder, or rename the split-named {kind} (e.g. "
            "'test' -> 'testclass')."
        )


SHARD_KINDS = {".parquet": "parquet", ".tar": "WebDataset .tar"}


def shards_line(path: Path, what: str) -> str | None:
    """The line for a data set folder whose shards (parquet, WebDataset .tar; `what` they are beside that) are what
    datasets would read, with the two ways to train on them; None where it holds none."""
    kinds = sorted({SHARD_KINDS[file.suffix] for file in folder_files(path).not_images if file.suffix in SHARD_KINDS})
    if not kinds:
        return None
    return (
        f"Data set folder '{shown_name(path)}' holds {' and '.join(kinds)} shards, {what}, and shards are read as a "
        "stream: give --streaming true --max_steps N, or load them with datasets and save_to_disk the result, "
        "then give that folder."
    )


def images_named_by_shards(path: Path, shards: list[Path]) -> set[str]:
    """The image paths (relative to `path`, POSIX) that the text columns of the parquet `shards` under `path` name:
    shards whose image column holds paths read those images, which are then not left out. A shard that cannot be
    read names none (its own check says why)."""
    import pyarrow
    import pyarrow.parquet

    named = set()
    for shard in shards:
        if shard.suffix != ".parquet":
            continue
        try:
            schema = pyarrow.parquet.read_schema(path / shard)
            columns = [
                field.name
                for field in schema
                if pyarrow.types.is_string(field.type) or pyarrow.types.is_large_string(field.type)
            ]
            table = pyarrow.parquet.read_table(path / shard, columns=columns)
        except Exception:  # noqa: BLE001, S112 pyarrow raises its own: the shard check names the file
            continue
        for column in table.columns:
            for value in column.to_pylist():
                if isinstance(value, str) and value:
                    inside = os.path.relpath(os.path.join(path, value), path)
                    named.add(Path(inside).as_posix())
    return named


def check_shards_beside_images(path: Path) -> None:
    """A data set folder holds shards (parquet, WebDataset .tar) or images, not both: datasets reads the shards and
    leaves every image beside them out, streamed or not. One line naming both, with the folder of the images to give
    where they all lie in one sub-folder, and the way to train on the shards."""
    shards = [file for file in folder_files(path).not_images if file.suffix in SHARD_KINDS]
    if not shards:
        return
    named = images_named_by_shards(path, shards)  # a shard's column of image paths reads these
    images = [image for image in imagefolder_files(path) if image.as_posix() not in named]
    if not images:
        return
    tops = {image.parts[0] for image in images}
    (top,) = tops if len(tops) == 1 and min(len(image.parts) for image in images) >= 3 else (None,)
    images_fix = (
        f"give --dataset '{path / top}' (the folder of the class folders)"
        if top
        else "move the shards out of the folder"
    )
    kinds = " and ".join(sorted({SHARD_KINDS[file.suffix] for file in shards}))
    raise ValueError(
        f"Data set folder '{shown_name(path)}' holds {kinds} shards ({shown_files(shards)}) beside "
        f"{count(len(images), 'image')} (e.g. {shown_files(images)}), and datasets reads the shards only, leaving the "
        f"images out: to train on the images, {images_fix}; to train on the shards, move them into a folder of "
        "their own and give it with --streaming true --max_steps N."
    )


def no_images_line(path: Path) -> str:
    """The line for an image folder holding no image: a folder of shards (parquet, WebDataset .tar) is named as one,
    with the two ways to train on it; any other folder, with how to lay out images."""
    line = shards_line(path, "not image files")
    if line:
        return line
    return (
        f"Data set folder '{shown_name(path)}' holds no image files: put the images in one sub-folder per class "
        f"('{path / 'cat'}/1.png', '{path / 'dog'}/1.png', ...)."
    )


def load_imagefolder(path: Path) -> DatasetDict:
    """`load_dataset("imagefolder")` with one-line errors for an empty folder and a folder of a single class.

    `datasets` adds no label column when all images sit in one folder, which would surface later as "no label
    column found"; here it is named as the single class it is.
    """
    from datasets.data_files import EmptyDatasetError

    empty = FileNotFoundError(no_images_line(path))
    try:
        data_files = imagefolder_data_files(path)
    except EmptyDatasetError:
        raise empty from None
    if not data_files:
        raise empty
    check_train_split_folder(path, list(data_files))
    loaded = with_folder_labels(load_dataset("imagefolder", data_files=as_patterns(data_files)), path)
    if any("label" in split.features for split in loaded.values()):
        if all(isinstance(split.features.get("label"), ClassLabel) for split in loaded.values()):
            return numbers_in_order(loaded)  # class folders named 0..11: in numerical order
        return loaded
    if any(not is_image_file(file) for files in data_files.values() for file in files):
        return loaded  # labelled by its metadata file's columns, if at all: found (or refused) by `prepare_splits`
    folders = set()
    for split in loaded.values():
        cells = split.select_columns(["image"]).cast_column("image", ImageFeature(decode=False))["image"]
        folders |= {Path(cell["path"]).parent for cell in cells if cell and cell.get("path")}
    if len(folders) == 1:
        (folder,) = folders
        if folder == path.resolve() or folder == path:
            raise ValueError(
                f"The images in '{shown_name(path)}' are not in class sub-folders: put each class in its own sub-folder "
                f"('{path / 'cat'}/1.png', '{path / 'dog'}/1.png', ...)."
            )
        empty = [sub.name for sub in sorted(path.iterdir()) if sub.is_dir() and not any(sub.rglob("*.*"))]
        note = f" (no files in {', '.join(map(repr, empty))})" if empty else ""
        raise ValueError(
            f"Data set folder '{shown_name(path)}' has only one class ({folder.name!r}){note}: a classifier needs at least two "
            "classes: add a sub-folder of images of another class."
        )
    return loaded


def check_one_folder_per_class(path: Path) -> None:
    """One class name, one folder: datasets labels each image by the name of the folder holding it, so images in
    folders of one name under different paths (`cat/batch1`, `dog/batch1`; `zoo/cat`, `wild/cat`) would be merged
    into one class (or labelled by the wrong level of folders) without a word. One line naming two such folders and
    the fix. Split folders (`train/cat`, `test/cat`) are one class in two splits: checked split by split. Images
    labelled by a metadata file's `label` column are not labelled by their folders: not checked."""
    from datasets.data_files import EmptyDatasetError

    if any(label is not None for *_, label in metadata_rows(path)):
        return
    try:
        data_files = imagefolder_data_files(path)
    except EmptyDatasetError:
        return  # no image: the empty folder's own line
    base = path.resolve()
    for files in data_files.values():
        holders: dict[str, set[Path]] = {}
        for file in files:
            if is_image_file(file):
                folder = Path(file).relative_to(base).parent
                holders.setdefault(folder.name, set()).add(folder)
        for name, folders in sorted(holders.items()):
            if len(folders) > 1:
                first, second = sorted(folders)[:2]
                raise ValueError(
                    f"The images of the class {name!r} in '{shown_name(path)}' lie in "
                    f"{count(len(folders), 'folder')} of that name ('{path / first}', '{path / second}'), and a class "
                    "is one folder: the class folders must hold their images directly: move the sub-folders' images "
                    "up into their class folder, or give --dataset the folder whose sub-folders are the classes."
                )


def check_train_split_folder(path: Path, splits: list[str]) -> None:
    """An image folder whose folders are read as splits (`test/`, `validation_all/`) has a train split: one whose
    only split folder is another (`imgs/test/cat/1.png`) is most likely class folders one level too deep. One line
    naming the split folders and the folder to give (the one holding the class folders) or the train folder to add."""
    splits = sorted(str(split) for split in splits)  # datasets names them with NamedSplit
    if any(SPLIT_ROLES.get(split.lower()) == "train" for split in splits):
        return
    folders = sorted({file.parts[0] for file in imagefolder_files(path) if len(file.parts) > 2})
    give = f"give --dataset '{path / folders[0]}' if it holds your class folders, or " if len(folders) == 1 else ""
    raise ValueError(
        f"The data set folder '{shown_name(path)}' has folders read as the {' and '.join(splits)} split"
        f"{'s' * (len(splits) > 1)} ({', '.join(map(repr, folders))}) and no train split: {give}add a 'train' "
        "folder of class folders beside them."
    )


def class_folders(path: Path) -> list[str] | None:
    """The class names an image folder's folders give (the folder holding each image, sorted, numbers in numerical
    order), or None where its images lie in one folder (no classes to read)."""
    names = sorted({file.parent.name for file in imagefolder_files(path)})
    return names_in_order(names) if len(names) > 1 else None


def folders_left_unread(columns) -> bool:
    """Whether datasets gave an image folder's images no `label` column, though its class folders name classes: it
    reads the folders only where no metadata file (`metadata.csv`, ...) lies, and only where every image seems to lie
    at one depth, counting a backslash in a name as a separator (so a class folder `c\\` seems one level deeper)."""
    return "label" not in columns


def with_folder_labels(loaded: DatasetDict, path: Path) -> DatasetDict:
    """`loaded` with a `label` column read from the class folders where datasets left them unread
    (`folders_left_unread`): a metadata.csv of captions would hide the classes, and a backslash in a folder's name
    would drop them. The metadata's own columns are kept (--label_column picks one)."""
    names = class_folders(path)
    if names is None or not folders_left_unread(next(iter(loaded.values())).features):
        return loaded
    feature = ClassLabel(names=names)

    def labelled(split: Dataset) -> Dataset:
        cells = split.select_columns(["image"]).cast_column("image", ImageFeature(decode=False))["image"]
        numbers = [names.index(Path(cell["path"]).parent.name) for cell in cells]
        return split.add_column("label", numbers, feature=feature)

    return DatasetDict({name: labelled(split) for name, split in loaded.items()})


def find_column(dataset: Dataset, wanted: str | None, kind: str, names: tuple[str, ...], feature_type) -> str:
    """The column given by the user, else the first of `feature_type`, else the first of the usual `names`."""
    columns = list(dataset.features)
    if wanted is not None:
        if wanted not in columns:
            raise ValueError(
                f"{kind} column {wanted!r} is not in the data set (columns: {columns}): fix --{kind}_column."
            )
        return wanted
    typed = [name for name, feature in dataset.features.items() if isinstance(feature, feature_type)]
    found = typed or [name for name in names if name in columns]
    if not found:
        held = ", ".join(f"{name!r} ({feature_kind(feature)})" for name, feature in dataset.features.items())
        wants = {
            "label": "class labels (a ClassLabel, integers 0..N-1, or class names as text, as a metadata.csv column "
            "of names: read as one class per name, in sorted order)",
            "image": "images",
        }[kind]
        raise ValueError(
            f"No {kind} column found in the data set (columns: {held}), and a run needs a column of {wants}: name "
            f"it with --{kind}_column."
        )
    return found[0]


def path_images(split: Dataset, column: str, root: str | None, name: str) -> Dataset:
    """`split` whose image `column` holds file paths as text, read as images (`cast_column(column, Image())`, as
    datasets reads a path cell): a relative path from the set's folder `root`, not from where the command runs. Each
    path is checked first (`entry_kind`, nothing opened): a file that is not there, no regular file or a broken link
    is one line naming the row. A path outside `root` is read and named (`outside_paths_lines`). A hub set (`root`
    None) holds no files to name: one line."""
    if root is None:
        raise ValueError(
            f"Column {column!r} holds text, not images, and a hub data set has no folder its paths could name: give "
            "a set whose image column holds images (`cast_column(column, Image())` before saving it)."
        )
    where = f"the {name} split's image column {column!r}"
    absolute = [image_path(path, root, f"Row {row} of {where}") for row, path in enumerate(split[column])]
    return split.remove_columns(column).add_column(column, absolute).cast_column(column, ImageFeature())


def image_path(path: str | None, root: str, where: str) -> str:
    """The file a text image cell (`path`, `where` naming its row) names, read from the set's folder `root`; one line
    when it is not there, no regular file or a broken link (`entry_kind`: nothing is opened)."""
    image = Path(root, path or "")
    kind, why = entry_kind(image, Path(root)) if path and os.path.lexists(image) else ("missing", "")
    if kind in ("missing", "broken", "not_regular"):
        what = {"broken": why, "not_regular": "no regular file (a device, pipe or socket)"}.get(kind, "not there")
        raise FileNotFoundError(
            f"{where} names the file '{shown_name(path)}', which is {what} (paths are read from the data set folder "
            f"'{shown_name(root)}'): give each image's path relative to that folder (or absolute), or pick the "
            "image column with --image_column."
        )
    return str(image)


TEXT_DTYPES = ("string", "large_string", "bool")  # read as class names (`class_encode_column`)


def check_column_kinds(dataset: Dataset, image_column: str, label_column: str) -> None:
    """Each column a run reads holds its kind, whether the user named it or it was found: class labels (`ClassLabel`,
    integers or strings) in the label column, images in the image column (so the two are never one column). One line
    naming the column, what it holds and the argument that picks it."""
    label, image = dataset.features[label_column], dataset.features[image_column]
    dtype = getattr(label, "dtype", "")
    if not isinstance(label, ClassLabel) and not (dtype.startswith(("int", "uint")) or dtype in TEXT_DTYPES):
        raise ValueError(
            f"Column {label_column!r} holds {feature_kind(label)}, not class labels (class names or integers): pick "
            f"the label column with --label_column (columns: {list(dataset.features)})."
        )
    if not isinstance(image, ImageFeature):
        raise ValueError(
            f"Column {image_column!r} holds {feature_kind(image)}, not images: pick the image column with "
            f"--image_column (columns: {list(dataset.features)})."
        )


def feature_kind(feature) -> str:
    """What a column holds in a few words, for an error line."""
    if isinstance(feature, ImageFeature):
        return "images"
    if isinstance(feature, ClassLabel):
        return "class labels"
    if getattr(feature, "dtype", "") in ("string", "large_string"):
        return "text"
    return f"values of type {feature.dtype}" if hasattr(feature, "dtype") else f"a {type(feature).__name__}"


@dataclass
class PreparedData:
    """Splits with standard column names `image` and `label`, and the label names."""

    splits: DatasetDict
    labels: list[str]
    notes: list[str] = field(default_factory=list)  # lines printed before training: how labels were read
    # the split of the set each carved split's rows come from ({"validation": "train"}): a line names a row as the
    # set numbers it
    carved_from: dict[str, str] = field(default_factory=dict)

    @property
    def id2label(self) -> dict[int, str]:
        return dict(enumerate(self.labels))


def prepare_splits(
    raw: DatasetDict,
    image_column: str | None = None,
    label_column: str | None = None,
    validation_fraction: float = 0.1,
    test_fraction: float = 0.1,
    split_seed: int = 0,
    fractions_given: dict[str, str] | None = None,
    root: str | None = None,
) -> PreparedData:
    """Rename the columns to `image`/`label`, make the labels a `ClassLabel`, and make `validation` and `test`.

    A missing `validation` split is carved out of `train` (stratified, `split_seed`), never out of `test`, so the
    test split stays unseen by model selection; a missing `test` split is carved out of `train` first. A share
    given (`fractions_given`: "validation", "test") for a split the set has is refused or said (`check_own_splits`).
    An image column of file paths is read as images from the files they name (`path_images`; `root`, the set's
    folder: None for a hub set or the digits).
    """
    train_names = [name for name in raw if SPLIT_ROLES.get(name.lower()) == "train"]
    if not train_names:
        raise ValueError(f"The data set has no 'train' split (splits: {list(raw)}): provide one.")
    train = raw[train_names[0]]
    image_column = find_column(train, image_column, "image", IMAGE_COLUMN_NAMES, ImageFeature)
    label_column = find_column(train, label_column, "label", LABEL_COLUMN_NAMES, ClassLabel)
    if getattr(train.features[image_column], "dtype", "") in ("string", "large_string"):
        raw = DatasetDict({name: path_images(split, image_column, root, name) for name, split in raw.items()})
        train = raw[train_names[0]]
    check_column_kinds(train, image_column, label_column)
    roles, notes = split_roles({name: len(split) for name, split in raw.items()})
    splits = DatasetDict()
    for name, role in roles.items():
        split = raw[name].select_columns([image_column, label_column])
        if image_column != "image":
            split = split.rename_column(image_column, "image")
        if label_column != "label":
            split = split.rename_column(label_column, "label")
        splits[role] = split
    notes += check_own_splits({name: len(split) for name, split in splits.items()}, fractions_given or {})
    for name, split in splits.items():
        check_label_values(split, name, label_column)
    if is_integer_column(splits["train"].features["label"]):
        splits, order = integer_classes(splits)
        notes += order
    elif not isinstance(splits["train"].features["label"], ClassLabel):
        splits = numbers_in_order(splits.class_encode_column("label"))
    splits = DatasetDict({name: labels_by_name(split, name, splits["train"]) for name, split in splits.items()})
    classes = splits["train"].features["label"].num_classes
    for name, split in splits.items():  # integer labels of the other splits are read as the train split's numbers
        if not isinstance(split.features["label"], ClassLabel):
            check_label_values(split, name, label_column, classes)
    carve_outs = [
        (name, fraction)
        for name, fraction in (("test", test_fraction), ("validation", validation_fraction))
        if name not in splits
    ]
    check_class_sizes(splits["train"]["label"], splits["train"].features["label"].names, carve_outs)
    for name, fraction in carve_outs:
        try:
            parts = splits["train"].train_test_split(test_size=fraction, seed=split_seed, stratify_by_column="label")
        except ValueError as error:  # a case check_class_sizes did not foresee: still one line
            raise ValueError(
                f"Cannot carve a stratified {name} split ({error}): add images or change --{name}_fraction."
            ) from None
        splits["train"], splits[name] = parts["train"], parts["test"]
    labels = splits["train"].features["label"].names
    notes += unlearnt_classes_lines(splits["train"]["label"], labels)
    return PreparedData(
        DatasetDict({name: splits[name] for name in ("train", "validation", "test")}),
        labels,
        notes,
        carved_from={name: "train" for name, _ in carve_outs},
    )


SPLIT_ALIASES = {str(role): tuple(names) for role, names in SPLIT_KEYWORDS.items()}  # datasets' own table
SPLIT_ROLES = {alias: role for role, aliases in SPLIT_ALIASES.items() for alias in aliases}


def split_roles(sizes: dict[str, int | None]) -> tuple[dict[str, str], list[str]]:
    """Each split name of a set (`sizes`: its rows, None where unknown, as a stream's) -> the role it plays (train,
    validation, test), read through datasets' own table of split names (`SPLIT_KEYWORDS`: `eval` is a test split,
    `dev` and `val` validation), the one it applies to folder and file names: so a save_to_disk set, a hub set and
    a stream name their splits as an image folder or parquet files do. A split of no role is named in the returned
    line, never dropped without a word; two splits of one role are one line naming both."""
    roles, lines = {}, []
    for name, rows in sizes.items():
        role = SPLIT_ROLES.get(name.lower())
        if role is None:
            images = f" ({count(rows, 'image')})" if rows is not None else ""
            lines.append(
                f"Warning: split {name!r}{images} is not used: training reads the splits "
                f"{', '.join(SPLIT_ALIASES)} (and their other names: {other_split_names()}); rename it to use it."
            )
            continue
        same = [other for other, its in roles.items() if its == role]
        if same:
            raise ValueError(
                f"The data set has two {role} splits, {same[0]!r} and {name!r} (both are names of the {role} split): "
                "merge them, or rename one (e.g. to 'test' or 'validation', whichever it is)."
            )
        roles[name] = role
    return roles, lines


def check_split_files(path: Path) -> None:
    """No two split names of one role each name files or folders under the local folder `path` (`validation-0.parquet`
    and `dev-0.parquet`, `test/` and `eval/`): datasets would merge them into one split without a word, where a
    save_to_disk set with both is refused (`split_roles`). One line naming both."""
    from datasets.data_files import (
        KEYWORDS_IN_DIR_NAME_BASE_PATTERNS,
        KEYWORDS_IN_FILENAME_BASE_PATTERNS,
        resolve_pattern,
    )

    base, named = path.resolve().as_posix(), {}
    for alias, role in SPLIT_ROLES.items():
        for pattern in KEYWORDS_IN_FILENAME_BASE_PATTERNS + KEYWORDS_IN_DIR_NAME_BASE_PATTERNS:
            try:
                found = resolve_pattern(pattern.format(keyword=alias, sep="-._ 0-9"), base)
            except FileNotFoundError:
                continue
            if found:
                named.setdefault(role, [])
                if alias not in named[role]:
                    named[role].append(alias)
    for role, aliases in named.items():
        if len(aliases) > 1:
            raise ValueError(
                f"The data set folder '{shown_name(path)}' has two {role} splits, {aliases[0]!r} and {aliases[1]!r} "
                f"(files or folders named as both; both are names of the {role} split), which datasets would merge "
                "without a word: merge them, or rename one (e.g. to 'test' or 'validation', whichever it is)."
            )


def other_split_names() -> str:
    return "; ".join(f"{role}: {', '.join(names[1:])}" for role, names in SPLIT_ALIASES.items())


def unlearnt_classes_lines(labels: list[int], names: list[str]) -> list[str]:
    """A warning line naming the classes the training split holds no image of (a ClassLabel may list names no row
    uses): the model still has an output for each, which it never learns to give."""
    counts = np.bincount(np.asarray(labels, dtype=np.int64), minlength=len(names))
    unused = [names[index] for index, number in enumerate(counts) if number == 0]
    if not unused:
        return []
    many = len(unused) != 1
    line = (
        f"Warning: the training split holds no image of {len(unused)} class{'es' * many} of the {len(names)} the data "
        f"set names ({shown_labels(unused)}): the model has {'an output' if not many else 'outputs'} it never learns "
        f"to give; remove {'those names' if many else 'that name'} from the label column's ClassLabel, or add images."
    )
    return [line]


def numbers_in_order(splits: DatasetDict, column: str = "label") -> DatasetDict:
    """`splits` whose class names (`column`'s ClassLabel, made here from text labels or class folders, which sort as
    text) are all whole numbers written plainly ("0".."11"), renumbered so the classes are in numerical order:
    the model's class 2 is "2", not "10". Other names are left in their order."""
    names = splits["train"].features[column].names
    ordered = names_in_order(names)
    if ordered == names:
        return splits
    wanted = ClassLabel(names=ordered)

    def renumbered(split: Dataset) -> Dataset:
        own = split.features[column].names
        lookup = np.asarray([ordered.index(name) for name in own], dtype=np.int64)
        numbers = lookup[np.asarray(split[column], dtype=np.int64)].tolist() if len(split) else []
        return split.remove_columns(column).add_column(column, numbers, feature=wanted)

    return DatasetDict({name: renumbered(split) for name, split in splits.items()})


def names_in_order(names: list[str]) -> list[str]:
    """`names` in numerical order where all are whole numbers written plainly ("0".."11": the model's class 2 is "2",
    not "10"), else as they are."""
    if all(name.isascii() and name.isdigit() and str(int(name)) == name for name in names):
        return sorted(names, key=int)
    return names


def integer_order_line(values: list[int]) -> list[str]:
    """For integer labels that are not 0..N-1 (`values`, sorted), the line giving the model's index of each; else
    none."""
    if values == list(range(len(values))):
        return []
    pairs = ", ".join(f"{index} -> {value}" for index, value in enumerate(values[:10]))
    line = (
        f"The integer labels are not 0..{len(values) - 1} but {shown_labels([str(v) for v in values], 10)}: the "
        f"model's classes are them in numerical order, model index -> data set label: {pairs}"
        f"{', ...' * (len(values) > 10)} (config.json's id2label names each class by its label)."
    )
    return [line]


def is_integer_column(feature) -> bool:
    """Integers without names (a ClassLabel holds integers too, with names)."""
    return not isinstance(feature, ClassLabel) and getattr(feature, "dtype", "").startswith(("int", "uint"))


def check_own_splits(splits: dict[str, int | None], fractions_given: dict[str, str]) -> list[str]:
    """A --validation_fraction or --test_fraction given (`fractions_given`: split -> "command line" or "recipe") for
    a split the data set has of its own (`splits`: each split's rows, None where unknown, as a stream's) would be
    ignored: on the command line it is refused in one line; from a recipe (written for many sets) the returned line
    says it is not used."""
    lines = []
    for name, where in fractions_given.items():
        if name not in splits:
            continue
        rows = f" ({count(splits[name], 'row')})" if splits[name] is not None else ""
        if where == "command line":
            raise ValueError(
                f"The data set has its own {name} split{rows}: --{name}_fraction is for sets without one; drop it."
            )
        lines.append(f"The data set has its own {name} split{rows}: the recipe's {name}_fraction is not used.")
    return lines


def integer_classes(splits: DatasetDict) -> tuple[DatasetDict, list[str]]:
    """Integer labels without names read as numbers, not as text (`class_encode_column` would sort "10" before
    "2", so the model's output 2 would mean label 10): labels that are 0..N-1 are the model's classes 0..N-1, named
    "0".."N-1"; any other integers (3, 7, 42) are the classes in numerical order, and the returned line gives the
    model's index of each data set label (config.json's id2label keeps it: each class is named by its label)."""
    numbered = {name: split for name, split in splits.items() if is_integer_column(split.features["label"])}
    values = sorted({int(value) for split in numbered.values() for value in split.unique("label")})
    names = [str(value) for value in values]
    feature = ClassLabel(names=names)
    if values == list(range(len(values))):
        return DatasetDict(
            {**splits, **{name: split.cast_column("label", feature) for name, split in numbered.items()}}
        ), []
    lookup = np.asarray(values, dtype=np.int64)

    def renumbered(split: Dataset) -> Dataset:
        numbers = np.searchsorted(lookup, np.asarray(split["label"], dtype=np.int64)).tolist()
        return split.remove_columns("label").add_column("label", numbers, feature=feature)

    return DatasetDict({**splits, **{name: renumbered(split) for name, split in numbered.items()}}), (
        integer_order_line(values)
    )


TEST_WITHOUT_LABELS = " (an unlabelled test split can be left out of the set: a test split is then carved from train)"


def check_label_values(split: Dataset, name: str, column: str, classes: int | None = None) -> None:
    """Every row of `split` has a class: a ClassLabel's numbers lie in 0..N-1 and integer labels are not negative.
    `datasets` writes -1 for "no label" (the unlabelled test split of many hub sets); such a row is one line naming
    the split, the column, how many rows and the fix, not a NumPy error or a class named "-1". Integer labels
    without names are bounded by `classes` (the train split's) where given."""
    feature = split.features["label"]
    if not (isinstance(feature, ClassLabel) or getattr(feature, "dtype", "").startswith("int")):
        return
    labels = np.asarray(split["label"], dtype=np.int64)
    top = feature.num_classes if isinstance(feature, ClassLabel) else classes
    unlabelled = int((labels < 0).sum())
    beyond = int((labels >= top).sum()) if top is not None else 0
    if not unlabelled and not beyond:
        return
    what = [f"{count(unlabelled, 'row')} of -1 (datasets' 'no label')"] if unlabelled else []
    what += [f"{count(beyond, 'row')} of numbers past its {top} class names"] if beyond else []
    wants = f"a class in 0..{top - 1}" if top is not None else "a class number of 0 or more"
    raise ValueError(
        f"Label column {column!r} of the {name} split holds {' and '.join(what)}, and training needs {wants} in "
        f"every row: remove those rows (e.g. `split.filter(lambda row: 0 <= row[{column!r}] < N)` before save_to_disk)"
        f" or label them{TEST_WITHOUT_LABELS if name == 'test' else ''}."
    )


def labels_by_name(split: Dataset, name: str, train: Dataset) -> Dataset:
    """`split`'s labels read by their names onto the names of the `train` split: a label is its name, not its
    number, so a split whose class names come in another order (or a string column encoded on its own) is scored
    against the classes the model learnt. Integer labels without names are read as the train split's numbers. A
    name the train split lacks is a one-line ValueError naming the split and the name."""
    names, feature = train.features["label"].names, split.features["label"]
    if not isinstance(feature, ClassLabel):
        if getattr(feature, "dtype", "") not in TEXT_DTYPES:
            return split
        split = split.class_encode_column("label")
        feature = split.features["label"]
    if feature.names == names:
        return split
    labels = np.asarray(split["label"], dtype=np.int64)
    used = [feature.names[number] for number in np.unique(labels)]
    unknown = [label for label in used if label not in names]
    if unknown:
        raise ValueError(
            f"The {name} split holds the class {unknown[0]!r}, which the train split lacks (its classes: "
            f"{shown_labels(names)}): rename that class to one of the train split's, or remove its images."
        )
    to_train = np.array([names.index(label) if label in names else -1 for label in feature.names], dtype=np.int64)
    numbers = to_train[labels].tolist() if len(labels) else []
    return split.remove_columns("label").add_column("label", numbers, feature=ClassLabel(names=names))


class ImageTransform:
    """`with_transform` function: a batch of rows -> `pixel_values` through the saved image processor, + labels.

    Each image is first converted to the model's 8-bit mode (`to_model_mode`: 16-bit and float images scaled, not
    clipped; transparency on white). Training augmentation is not done here but on whole batches on the training
    device (`augmentation.AugmentingTrainer`).
    """

    def __init__(self, image_processor):
        self.image_processor = image_processor

    def __call__(self, batch: dict) -> dict:
        channels = self.image_processor.num_channels
        images = [to_model_mode(read_image(image), channels) for image in batch["image"]]
        pixel_values = self.image_processor(images, return_tensors="pt")["pixel_values"]
        return {"pixel_values": list(pixel_values), "labels": batch["label"]}


def transformed(split: Dataset, transform: ImageTransform) -> Dataset:
    """`split`'s rows through `transform`, each image read by `read_image` (not by `datasets`): a file changed since
    the pre-flight is one line naming it, wherever training or evaluation reads it."""
    return split.cast_column("image", ImageFeature(decode=False)).with_transform(transform)


class ImageChanged(ValueError):
    """An image the pre-flight read that can no longer be read (deleted, truncated, no image now): the message names
    the file and what changed; `training/command.py` adds the checkpoint kept and how to resume."""


def read_image(image) -> Image.Image:
    """A PIL image (as it is), or an undecoded `{"bytes", "path"}` cell opened and decoded; a file that fails now,
    after the pre-flight read it, is an `ImageChanged`."""
    if isinstance(image, Image.Image):
        return image
    from modeling_vit_scratch.common.images import upright
    from modeling_vit_scratch.training.preflight import open_image, pil_reason

    path = (image or {}).get("path")
    name = f"The image '{shown_name(path)}'" if path else "An image stored in the data set"
    try:
        opened = open_image(image or {}, name)
        opened.load()  # PIL closes a file it opened itself once the pixels are read
        return upright(opened)  # as `datasets` decodes an in-memory set's images
    except FileNotFoundError:
        what = "was deleted" if path and not os.path.lexists(path) else "is no longer a regular file"
    except Image.UnidentifiedImageError:
        what = "is no longer an image"
    except (OSError, SyntaxError, ValueError) as error:  # PIL's errors for damaged files
        reason = pil_reason(error)
        what = "was truncated" if "truncated" in reason.lower() else f"can no longer be decoded ({reason})"
    raise ImageChanged(f"{name} {what} after the pre-flight read it")


def collate_images(rows: list[dict]) -> dict[str, torch.Tensor]:
    """Rows from `ImageTransform` -> `{"pixel_values": (batch, channels, height, width), "labels": (batch,)}`."""
    return {
        "pixel_values": torch.stack([row["pixel_values"] for row in rows]),
        "labels": torch.tensor([row["labels"] for row in rows], dtype=torch.long),
    }


class ProcessedImages(torch.utils.data.Dataset):
    """`split`'s rows through `transform`, processed once, in chunks, and held in memory: items
    {"pixel_values": (C, H, W), "labels"}, the same as `split.with_transform(transform)` gives. A step then reads
    tensors instead of decoding, converting and resizing its images again every epoch (on the digits that took as
    long as the model).

    The chunks are written into one preallocated array, and under several processes the processes of a machine
    share that work and that array (`node_shared_array`): each image is processed once per machine, and the machine
    holds one copy of the split, not one per process.
    """

    def __init__(self, split: Dataset, transform: ImageTransform, chunk_size: int = 256):
        rows = transformed(split, transform)
        self.labels = list(split["label"])
        if not self.labels:
            self.pixel_values = torch.empty(0)
            return

        def fill(array: np.ndarray, share: range) -> None:
            for start in range(share.start, share.stop, chunk_size):
                stop = min(start + chunk_size, share.stop)
                array[start:stop] = torch.stack(rows[start:stop]["pixel_values"]).numpy()

        shape = rows[0]["pixel_values"].shape  # (C, H, W), the processor's output size
        self.pixel_values = node_shared_array((len(self.labels), *shape), fill)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict:
        return {"pixel_values": self.pixel_values[index], "labels": self.labels[index]}

    def __getitems__(self, indices: list[int]) -> list[dict]:
        return [self[index] for index in indices]


def processed_rows(split: Dataset, transform: ImageTransform, memory_limit_mb: float):
    """`split`'s rows through `transform`: processed once and kept in memory (`ProcessedImages`) when its
    pixel_values (float32) take at most `memory_limit_mb`, else processed anew each time a batch is read."""
    processor = transform.image_processor
    size = processor.size
    pixels_per_image = processor.num_channels * size.get("height", 0) * size.get("width", 0)
    if pixels_per_image and len(split) * pixels_per_image * 4 <= memory_limit_mb * 2**20:
        return ProcessedImages(split, transform)
    return transformed(split, transform)
