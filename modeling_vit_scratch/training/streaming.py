"""Training on a set read while it trains (`--streaming true`): never downloaded whole, never held in memory.

The set is a `datasets` stream (`load_dataset(..., streaming=True)`): a hub set, or a local folder of parquet shards,
of WebDataset tar shards, or an imagefolder. Each process reads its own whole shards, the same every pass
(`IterableDataset.shard`; with fewer shards than processes, `split_dataset_by_node` keeps one row in N), in an order
reshuffled every pass, and the rows are shuffled in windows of `--shuffle_buffer_size`; images are decoded and
processed as they are read, and one that fails is skipped and counted (`--max_bad_images` caps them). The number of
steps comes from `--max_steps`.

Validation and test are bounded (`--max_eval_samples` each) and held in memory: the set's own `validation` /
`test` splits, else rows held out by a hash of their image (its bytes, else its path inside the set) and label
(`--validation_fraction`, `--test_fraction`), so the same image is always on the same side whatever the shard order,
the number of processes or where the set lies.

Resumption reads no skipped part again: each checkpoint holds every process's position in its stream
(`stream_state_<rank>.json`: the pass, the `datasets` state at the start of the current window, the rows of the
window already trained on, the images skipped). A resumed run reloads that state (`datasets` goes on from the
window's start inside its shard), re-reads that one window undecoded and trains on the rows the uninterrupted run
would have. Figures (peak memory per process at two set sizes):
docs/training.md, "Sets that do not fit".
"""

import copy
import itertools
import json
import logging
import os
import re
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow
import pyarrow.compute
import pyarrow.parquet
import torch
from datasets import ClassLabel, Dataset, Features, IterableDataset, load_dataset_builder
from datasets import Image as ImageFeature
from datasets.distributed import split_dataset_by_node

from modeling_vit_scratch.common.images import frame_count, upright
from modeling_vit_scratch.common.names import shown_name
from modeling_vit_scratch.common.sources import looks_like_local_path
from modeling_vit_scratch.training.data import (
    DIGITS,
    IMAGE_COLUMN_NAMES,
    LABEL_COLUMN_NAMES,
    SPLIT_ALIASES,
    TEXT_DTYPES,
    PreparedData,
    check_imagefolder_names,
    check_metadata_files,
    check_one_folder_per_class,
    check_own_splits,
    check_shards_beside_images,
    check_split_files,
    check_train_split_folder,
    class_folders,
    count,
    entry_kind,
    feature_kind,
    find_column,
    folder_files,
    folders_left_unread,
    hub_data_set_error,
    image_path,
    imagefolder_data_files,
    imagefolder_files,
    integer_order_line,
    is_image_file,
    is_integer_column,
    left_out_line,
    names_in_order,
    other_split_names,
    outside_paths_lines,
    saved_to_disk,
    shown_files,
    shown_labels,
    split_files,
    split_roles,
    unlearnt_classes_lines,
)
from modeling_vit_scratch.training.preflight import open_image

logger = logging.getLogger(__name__)

STATE_FILE = "stream_state_{rank}.json"  # in each checkpoint, one per process
SHOWN_NAMES = 5  # bad images named in the line that stops a run


@dataclass
class StreamSource:
    """What `load_dataset` reads for a `--dataset`: a local folder or a hub name (`path`), what the folder holds
    (`kind`: parquet, webdataset or imagefolder; `hub`), and the local files it will read (none for a hub set)."""

    path: str
    kind: str
    files: list[Path]
    config_name: str | None = None


def stream_source(dataset: str, config_name: str | None = None) -> StreamSource:
    """`--dataset` as a stream: a folder of `*.parquet` shards, of `*.tar` (WebDataset) shards, an imagefolder, or a
    hub data set name. A file, or a local path that does not exist, is a one-line error; so are the embedded digits,
    which are in memory already (no folder here named `digits`: that one is streamed)."""
    path = Path(dataset).expanduser()
    if dataset == DIGITS and not path.exists():
        raise ValueError(
            f"--dataset {DIGITS!r} (the embedded digits, the default) is a small set held in memory, which cannot be "
            "streamed: leave out --streaming, or stream a folder of images or parquet shards (--dataset ./FOLDER)."
        )
    if path.is_dir() and saved_to_disk(path):
        raise ValueError(
            f"--dataset {dataset!r} is a save_to_disk folder (arrow files), which cannot be streamed: leave out "
            "--streaming (it is then read from disk, memory-mapped, not loaded into memory), or write it as parquet "
            "shards (`dataset.to_parquet(...)` for each split) and stream those."
        )
    if path.is_dir():
        files = sorted(
            item
            for item in path.rglob("*")
            if not any(p.startswith((".", "__")) for p in item.relative_to(path).parts)
            and entry_kind(item, path)[0] != "not_regular"  # a pipe or device is never opened: named as left out
        )
        # `datasets` picks the builder from the files and reads the features a README.md declares (class names)
        for suffix, kind in ((".parquet", "parquet"), (".tar", "webdataset")):
            shards = [item for item in files if item.suffix == suffix]
            if shards:
                check_split_files(path)
                check_shards_beside_images(path)
                source = StreamSource(str(path), kind, shards)
                check_every_shard_in_a_split(source)
                return source
        return StreamSource(str(path), "imagefolder", [path / file for file in imagefolder_files(path)])
    if path.exists() or looks_like_local_path(dataset):
        raise FileNotFoundError(
            f"--dataset {dataset!r} is no folder: with --streaming true give a folder of parquet shards, of "
            "WebDataset .tar shards, or of class sub-folders of images, or a hub data set name."
        )
    return StreamSource(dataset, "hub", [], config_name)


def stream_left_out_line(dataset: str) -> str | None:
    """For a streamed local folder, the line naming the files the stream does not read, or None: a folder of shards
    is read through its shards (and the README.md that may declare their features), which are never named as left
    out; an imagefolder as `data.left_out_line` says."""
    source = stream_source(dataset)
    if source.kind == "hub":
        return None
    if source.kind == "imagefolder":
        return left_out_line(dataset)
    path, read = Path(source.path), set(source.files)
    others = [
        item.relative_to(path)
        for item in sorted(path.rglob("*"))
        if item.is_file()
        and item not in read
        and item.name != "README.md"
        and not any(part.startswith((".", "__")) for part in item.relative_to(path).parts)
    ]
    many = len(others) != 1
    parts = [f"{count(len(others), 'file')} that {'are not' if many else 'is not a'} {source.kind} shard{'s' * many}"]
    parts = [f"{parts[0]} (e.g. {shown_files(others)})"] if others else []
    parts += folder_files(path).unread_parts()
    return f"Left out {' and '.join(parts)}." if parts else None


def shards_of_no_split(source: StreamSource) -> list[Path]:
    """The local shards of `source` that none of the splits datasets finds (by its split names) reads: beside
    `train-0.parquet`, `extra-0.parquet` is read by no split."""

    base = Path(source.path).resolve()
    _, found = split_files(base.as_posix())
    read = {Path(file).resolve() for files in found.values() for file in files}
    return [  # a shard that is not there (a broken link) is named by `check_shards`
        file.relative_to(source.path) for file in source.files if file.exists() and file.resolve() not in read
    ]


def check_every_shard_in_a_split(source: StreamSource) -> None:
    """Where shards are named as splits (`train-0.parquet`), every shard is in one: datasets reads a shard that no
    split name matches (`holdout-0.parquet`) in no split, without a word. One line naming them and the names
    datasets reads as splits."""
    unsplit = shards_of_no_split(source)
    if not unsplit:
        return
    many = len(unsplit) != 1
    them = "them" if many else "it"
    raise ValueError(
        f"Data set folder '{shown_name(source.path)}' has shards named as splits, and {count(len(unsplit), 'shard')} "
        f"named as no split ({shown_files(unsplit)}), which datasets would leave out without a word: rename {them} "
        f"to a split name ({', '.join(SPLIT_ALIASES)}, or another name of one: {other_split_names()}), or move {them} "
        "out of the folder."
    )


def check_shards(source: StreamSource) -> None:
    """Every local shard is there and readable (a parquet footer, a tar header, an image file's first byte), or a
    one-line error naming it, before any training: a shard that fails mid-run would stop every process."""
    if not source.files and source.kind != "hub":
        raise FileNotFoundError(
            f"Data set folder '{source.path}' holds no parquet shards, .tar shards or images: give a folder that does."
        )
    for file in source.files:
        try:
            if source.kind == "parquet":
                pyarrow.parquet.read_metadata(file)
            elif source.kind == "webdataset":
                with tarfile.open(file) as tar:
                    tar.next()
            else:
                with open(file, "rb") as handle:
                    handle.read(1)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"Shard '{shown_name(file)}' is missing (a link to nothing, or removed while listed): restore it or remove it "
                "from the folder."
            ) from None
        except Exception as error:  # noqa: BLE001 pyarrow, tarfile and the OS each raise their own
            reason = " ".join(str(error).split()) or type(error).__name__
            raise ValueError(
                f"Shard '{shown_name(file)}' cannot be read ({reason}): replace it or remove it from the folder."
            ) from None


def held_out_share(row: dict, root: str | None = None) -> float:
    """A number in [0, 1) fixed by what the row holds inside its set: its image (its bytes, else its file's path
    inside the set, `path_in_set`) and its label. So where the set lies (moved, copied, mounted elsewhere, a hub
    set's revision) never moves a row from training to a held-out split."""
    cell = row["image"] or {}
    key = cell.get("bytes") or path_in_set(str(cell.get("path")), root).encode()
    return zlib.crc32(key + str(row["label"]).encode()) / 2**32


HUB_FILE = re.compile(r"^hf://datasets/[^@]+@[^/]+/")  # how `datasets` names a hub set's file: its repo at a revision


def path_in_set(path: str, root: str | None) -> str:
    """`path` from the set's own root: below `root` (a local folder) as a relative POSIX path, a hub file without its
    repo and revision; any other path as it is."""
    if root is not None:
        inside = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
        if not inside.startswith(os.pardir):
            return Path(inside).as_posix()
    return HUB_FILE.sub("", path)


def check_streaming_arguments(data_args, training_args) -> None:
    """What a stream cannot do, each as one line before any data is read."""
    if training_args.max_steps <= 0:
        raise ValueError(
            "--streaming true reads a set of unknown length, so epochs cannot set the steps: give --max_steps N "
            "(optimisation steps)."
        )
    by_epoch = [
        name
        for name in ("eval_strategy", "save_strategy", "logging_strategy")
        if str(getattr(getattr(training_args, name), "value", getattr(training_args, name))) == "epoch"
    ]
    if by_epoch:
        given = " and ".join(f"--{name} epoch" for name in by_epoch)
        fix = " ".join(f"--{name} steps" for name in by_epoch)
        raise ValueError(
            f"{given} with --streaming true: a stream has no epochs, so it would run once, at the end: give {fix} "
            "with --eval_steps / --save_steps / --logging_steps N."
        )
    if training_args.dataloader_num_workers:
        raise ValueError(
            f"--dataloader_num_workers {training_args.dataloader_num_workers} with --streaming true: the stream is "
            "read in the training process, which saves its position in each checkpoint: leave out "
            "--dataloader_num_workers."
        )
    if data_args.max_train_samples is not None:
        raise ValueError(
            "--max_train_samples needs a set of known length; with --streaming true the steps say how much is "
            "read: give --max_steps instead."
        )


@dataclass
class Stream:
    """A streamed set: this process's training rows (undecoded images, labels), and the bounded, in-memory
    `validation` and `test` splits with the label names (`held_out`)."""

    train: IterableDataset
    held_out: PreparedData
    seed: int
    window: int
    max_bad_images: int
    process_index: int
    world_size: int

    def rows(self, transform, checkpoint: str | None = None) -> "StreamedImages":
        """The training rows through `transform`, from `checkpoint`'s position when resuming."""
        rows = StreamedImages(self, transform)
        if checkpoint:
            rows.load(checkpoint)
        return rows


def open_stream(data_args, training_args, secrets: list[str] = ()) -> Stream:
    """`--dataset` opened as a stream, checked (arguments, shards, names, columns, labels, held-out rows) before
    training. An imagefolder's file and folder names are checked for `secrets` first, as `data.py` does."""
    check_streaming_arguments(data_args, training_args)
    source = stream_source(data_args.dataset, data_args.dataset_config)
    if source.kind == "imagefolder":
        check_imagefolder_names(Path(source.path), list(secrets))
        check_metadata_files(Path(source.path))
        check_one_folder_per_class(Path(source.path))
    check_shards(source)
    try:
        splits = stream_splits(source)
    except (OSError, ValueError) as error:  # offline, unknown name, private repo, missing configuration
        raise hub_data_set_error(data_args.dataset, error, "could not be opened as a stream") from None
    roles, unused_splits = split_roles(dict.fromkeys(splits))
    if "train" not in roles.values():
        if source.kind == "imagefolder":
            check_train_split_folder(Path(source.path), list(splits))
        raise ValueError(f"The data set has no 'train' split (splits: {list(splits)}): provide one.")
    splits = {role: splits[name] for name, role in roles.items()}
    if source.kind == "imagefolder":  # class folders datasets left unread (a metadata file, a backslash): read them
        names = class_folders(Path(source.path))
        if names is not None and folders_left_unread(splits["train"].features or {}):
            splits = {name: with_stream_folder_labels(split, ClassLabel(names=names)) for name, split in splits.items()}
    train = splits["train"]
    if train.features is None:
        raise ValueError(
            f"The stream of {data_args.dataset!r} does not declare its columns: declare its features (a parquet "
            "set written by `datasets`, or a dataset_info block in the folder's README.md)."
        )
    image_column = find_column(train, data_args.image_column, "image", IMAGE_COLUMN_NAMES, ImageFeature)
    label_column = find_column(train, data_args.label_column, "label", LABEL_COLUMN_NAMES, ClassLabel)
    labels, lookup, label_lines = stream_classes(source, train.features[label_column], label_column)
    paths = getattr(train.features[image_column], "dtype", "") in ("string", "large_string")  # file paths as text
    if paths:
        check_stream_paths(source, image_column)
    path_cells = []  # image cells of the shards that name a file by its path, read only where there are some
    for file in source.files if source.kind == "parquet" else []:
        check_shard_columns(file, train.features, image_column, label_column, labels.names)  # the set's columns
        path_cells += [] if paths else shard_path_cells(file, image_column)
        shard_renumbering(file, train.features)  # a class the set lacks: one line now, not mid-run
        if lookup is None:
            check_shard_labels(file, label_column, len(labels.names))  # "no label" (-1): one line now, not mid-run
    label_lines += stream_unlearnt_lines(source, label_column, labels)
    features = Features(image=ImageFeature(decode=False), label=labels)
    for name, split in splits.items():
        split = split.select_columns([image_column, label_column])
        renames = {old: new for old, new in ((image_column, "image"), (label_column, "label")) if old != new}
        split = split.rename_columns(renames) if renames else split
        if lookup is not None:  # text or integer labels: each row's class number, as the whole set names them
            split = split.map(lambda row: {"label": lookup[row["label"]]})
        if paths:  # read from the set's folder, wherever the command runs
            split = split.map(lambda row: {"image": str(Path(source.path, row["image"]))})
        splits[name] = split.cast(features)
    root = source.path if Path(source.path).is_dir() else None  # a local set's rows are named from its folder
    if paths:  # the paths read above, named where they lead outside the set
        cells = [{"bytes": None, "path": str(Path(root, path))} for path in stream_image_paths(source, image_column)]
        path_cells = [pyarrow.array(cells, ImageFeature().pa_type)]
    unused = check_own_splits(dict.fromkeys(splits), getattr(data_args, "fractions_given", {}))  # before any row
    held_out, train = held_out_splits(splits, data_args, root)
    return Stream(
        train=assign_shards(train, training_args.seed, training_args.process_index, training_args.world_size),
        held_out=PreparedData(
            held_out, labels.names, unused_splits + label_lines + unused + outside_paths_lines(path_cells, root)
        ),
        seed=training_args.seed,
        window=data_args.shuffle_buffer_size,
        max_bad_images=data_args.max_bad_images,
        process_index=training_args.process_index,
        world_size=training_args.world_size,
    )


def stream_classes(source: StreamSource, feature, column: str) -> tuple[ClassLabel, dict | None, list[str]]:
    """The classes of a stream's label column `feature`, read as a set held whole reads them (`data.prepare_splits`):
    a ClassLabel as it is; text labels (class names, sorted, numbers in numerical order) and integer labels
    (0..N-1, or other numbers in numerical order, said in a line) of local parquet shards from their label columns,
    read alone before training (`shard_label_values`). Returns the ClassLabel, each label's class number (None: the
    labels are the numbers already) and the lines to print. Text or integer labels that cannot be read first (a
    hub stream, WebDataset shards) are one line saying so and the fixes."""
    if isinstance(feature, ClassLabel):
        ordered = names_in_order(feature.names) if source.kind == "imagefolder" else feature.names
        if ordered == feature.names:
            return feature, None, []
        # class folders named 0..11, which datasets sorts as text: in numerical order, as a folder read whole
        return ClassLabel(names=ordered), {index: ordered.index(name) for index, name in enumerate(feature.names)}, []
    dtype = getattr(feature, "dtype", "")
    if not (dtype in TEXT_DTYPES or is_integer_column(feature)):
        raise ValueError(
            f"Column {column!r} holds {feature_kind(feature)}, not class labels (class names or integers): pick the "
            "label column with --label_column."
        )
    kind = "class names as text" if dtype in TEXT_DTYPES else "integer labels"
    if source.kind != "parquet":
        raise ValueError(
            f"Label column {column!r} holds {kind}, and a {'hub' if source.kind == 'hub' else source.kind} stream "
            "cannot be read through first to list every class: declare the column a ClassLabel with its names (the "
            "dataset_info block of the set's README.md, or `cast_column` before writing the shards), or leave out "
            "--streaming (the set is then read whole first and its classes listed)."
        )
    values = sorted({value for file in source.files for value in shard_label_values(file, column)})
    if dtype in TEXT_DTYPES:
        names = names_in_order([str(value) for value in values])
        return ClassLabel(names=names), {value: names.index(str(value)) for value in values}, []
    if values and values[0] < 0:
        raise ValueError(
            f"Label column {column!r} holds {values[0]}{' (datasets’ ‘no label’)' * (values[0] == -1)}, and "
            "training needs a class in every row: remove those rows from the shards or label them."
        )
    names = [str(value) for value in values]
    return ClassLabel(names=names), {value: index for index, value in enumerate(values)}, integer_order_line(values)


def stream_unlearnt_lines(source: StreamSource, column: str, labels: ClassLabel) -> list[str]:
    """The warning a set held whole gets for classes its training split holds no image of
    (`data.unlearnt_classes_lines`), from what can be read before training: the training shards' label columns
    (local parquet) or the training images' class folders (an image folder without metadata labels). Where neither
    can be read first (a hub or WebDataset stream, metadata labels) a line says the check was not made."""
    names = stream_train_class_names(source, column)
    if names is None:
        line = (
            "Note: a stream is not read through before training, so classes without training images were not looked "
            f"for ({labels.num_classes} classes named): check the set's training split, or train without --streaming."
        )
        return [line]
    used = [labels.names.index(name) for name in names if name in labels.names]
    return unlearnt_classes_lines(used, labels.names)


def stream_train_class_names(source: StreamSource, column: str) -> list[str] | None:
    """The class name of every training row of a local stream, read without its images, or None."""

    base = Path(source.path).resolve().as_posix()
    if source.kind == "imagefolder":
        files = imagefolder_data_files(Path(source.path)).get("train", [])
        if any(not is_image_file(file) for file in files) or class_folders(Path(source.path)) is None:
            return None  # labelled by its metadata files
        return [Path(file).parent.name for file in files]
    if source.kind != "parquet":
        return None
    names = []
    for file in split_files(base)[1].get("train", []):
        feature, values = shard_features(file).get(column), shard_column(file, column).to_pylist()
        names += [feature.int2str(v) if isinstance(feature, ClassLabel) else str(v) for v in values if v is not None]
    return names


def check_stream_paths(source: StreamSource, column: str) -> None:
    """Each file path of a local parquet stream's text image `column` names a file (`data.image_path`: read from the
    set's folder), checked before training from the column read alone; a hub or WebDataset stream's paths name no
    file here: one line."""
    if source.kind != "parquet":
        raise ValueError(
            f"Column {column!r} holds text, not images, and a {source.kind} stream's paths name no file here: write "
            "the images into the set (an Image column: `cast_column(column, Image())` before writing the shards)."
        )
    for file in source.files:
        for row, path in enumerate(shard_column(file, column).to_pylist()):
            image_path(path, source.path, f"Row {row} of shard '{shown_name(file)}'")


def stream_image_paths(source: StreamSource, column: str) -> list[str]:
    return [path for file in source.files for path in shard_column(file, column).to_pylist()]


def shard_column(file, column: str) -> "pyarrow.ChunkedArray":
    """The parquet shard `file`'s `column`, read alone."""
    from datasets.utils.file_utils import xopen

    with xopen(str(file), "rb") as handle:
        return pyarrow.parquet.read_table(handle, columns=[column]).column(column)


def shard_label_values(file, column: str) -> list:
    """The distinct values of the parquet shard `file`'s label column, read alone (no image)."""
    return pyarrow.compute.unique(shard_column(file, column)).drop_null().to_pylist()


def with_stream_folder_labels(split: IterableDataset, feature: ClassLabel) -> IterableDataset:
    """A streamed image folder's `split` with a `label` column read from each image's class folder, as
    `data.with_folder_labels` reads a folder held whole."""
    features = Features({**split.features, "image": ImageFeature(decode=False), "label": feature})
    split = split.cast_column("image", ImageFeature(decode=False))
    return split.map(lambda row: {"label": feature.str2int(Path(row["image"]["path"]).parent.name)}, features=features)


def stream_splits(source: StreamSource) -> dict:
    """The splits of `source` as `datasets` streams them (`load_dataset(..., streaming=True)`), a parquet set's
    labels read by their names in each shard (`shard_tables_by_label_names`)."""
    from datasets.packaged_modules.parquet.parquet import Parquet

    builder = load_dataset_builder(source.path, source.config_name)
    if isinstance(builder, Parquet):
        builder._generate_tables = shard_tables_by_label_names(builder)
    return builder.as_streaming_dataset()


def shard_tables_by_label_names(builder):
    """`builder._generate_tables` with each parquet shard's class labels read by their names: `datasets` takes the
    set's class names from one shard (or its README) and reads every shard's numbers under them, so a shard that
    lists its classes in another order would train on wrong labels. Each shard's numbers are renumbered onto the
    set's names as the shard is opened (`shard_renumbering`)."""
    from datasets.builder import Key

    generate = builder._generate_tables

    def generate_by_names(files, row_groups_list):
        for index, (file, row_groups) in enumerate(zip(files, row_groups_list)):
            renumbering = shard_renumbering(file, builder.info.features)
            for key, table in generate([file], [row_groups]):
                for column, numbers in renumbering.items():
                    renumbered = pyarrow.compute.take(numbers, table[column]).cast(table.schema.field(column).type)
                    table = table.set_column(table.schema.get_field_index(column), column, renumbered)
                yield Key(index, key.item_or_batch_id), table

    return generate_by_names


def shard_features(file) -> Features:
    """The columns the parquet shard `file` declares (its schema, read alone: no row)."""
    from datasets.utils.file_utils import xopen

    with xopen(str(file), "rb") as handle:
        return Features.from_arrow_schema(pyarrow.parquet.read_schema(handle))


def check_shard_columns(file, features: Features, image_column: str, label_column: str, names: list[str]) -> None:
    """The parquet shard `file` holds the set's image and label columns (`features`: the set's, from its first
    shard or README), its labels of a kind read onto the set's class names: class labels (renumbered by name,
    `shard_renumbering`) or integers (the set's numbers, bounded by `check_shard_labels`). Otherwise one line naming
    the shard, what it holds and the fix, as it is opened, not a pyarrow error mid-run."""
    own = shard_features(file)
    for column, wants in ((image_column, "images"), (label_column, f"class labels ({shown_labels(names)})")):
        if column not in own:
            raise ValueError(
                f"Shard '{shown_name(file)}' has no column {column!r} (its columns: {', '.join(own)}), which holds "
                f"the set's {wants}: add the column to the shard, or leave the shard out."
            )
    image, label = own[image_column], own[label_column]
    cells = isinstance(image, ImageFeature) or (isinstance(image, dict) and set(image) == {"bytes", "path"})
    if not (cells or image == features[image_column]):  # images, or file paths as the set holds them
        raise ValueError(
            f"Shard '{shown_name(file)}' holds {feature_kind(image)} in its image column {image_column!r}, where the "
            "set holds images: write the shard's images as the set's (an Image column), or leave the shard out."
        )
    text = getattr(features[label_column], "dtype", "") in TEXT_DTYPES  # the set's labels are class names as text
    if not (isinstance(label, ClassLabel) or is_integer_column(label) or (text and label == features[label_column])):
        raise ValueError(
            f"Shard '{shown_name(file)}' holds {feature_kind(label)} in its label column {label_column!r}, where the "
            f"set holds class labels ({shown_labels(names)}): write the shard with the set's ClassLabel "
            f"(`dataset.cast_column({label_column!r}, ClassLabel(names=[...]))` before `to_parquet`), or leave the "
            "shard out."
        )


def shard_path_cells(file, column: str) -> list:
    """The image cells of the parquet shard `file`'s row groups that hold rows without bytes (an image named by its
    path alone), found from the row groups' statistics: a shard of stored images is not read."""
    shard = pyarrow.parquet.ParquetFile(file)
    leaf = next(
        (
            index
            for index, name in enumerate(shard.schema.names)
            if shard.schema.column(index).path == f"{column}.bytes"
        ),
        None,
    )
    if leaf is None:
        return []
    cells = []
    for group in range(shard.num_row_groups):
        statistics = shard.metadata.row_group(group).column(leaf).statistics
        if statistics is None or not statistics.has_null_count or statistics.null_count:
            cells.append(shard.read_row_group(group, columns=[column]).column(column))
    return cells


def shard_renumbering(file, features: Features) -> dict[str, "pyarrow.Array"]:
    """For each class-label column of `features` that the parquet shard `file` declares with its names in another
    order: the set's number of each of the shard's numbers. A class the set lacks is a one-line ValueError naming
    the shard and the class."""
    declared = shard_features(file)
    renumbering = {}
    for column, feature in features.items():
        own = declared.get(column)
        if not isinstance(feature, ClassLabel) or not isinstance(own, ClassLabel) or own.names == feature.names:
            continue
        unknown = [name for name in own.names if name not in feature.names]
        if unknown:
            raise ValueError(
                f"Shard '{shown_name(file)}' declares the class {unknown[0]!r} in column {column!r}, which the set's classes "
                f"({', '.join(feature.names[:5])}{', ...' * (len(feature.names) > 5)}) lack: rename that class to "
                "one of the set's, or leave the shard out."
            )
        renumbering[column] = pyarrow.array([feature.names.index(name) for name in own.names], pyarrow.int64())
    return renumbering


def check_shard_labels(file, column: str, num_classes: int) -> None:
    """Every row of the parquet shard `file` has a class in 0..num_classes-1 (its label column read alone, not its
    images); `datasets`' -1 ("no label") or a number past the names is one line naming the shard and the fix."""
    from datasets.utils.file_utils import xopen

    with xopen(str(file), "rb") as handle:
        labels = pyarrow.parquet.read_table(handle, columns=[column]).column(column)
    bounds = pyarrow.compute.min_max(labels).as_py()
    if bounds["min"] is not None and (bounds["min"] < 0 or bounds["max"] >= num_classes):
        found = bounds["min"] if bounds["min"] < 0 else bounds["max"]
        said = "-1 (datasets' 'no label')" if found == -1 else str(found)
        raise ValueError(
            f"Shard '{shown_name(file)}' holds the label {said} in column {column!r}, and training needs a class in "
            f"0..{num_classes - 1} in every row: remove those rows from the shard or label them."
        )


def held_out_splits(splits: dict, data_args, root: str | None = None) -> tuple[dict, IterableDataset]:
    """`validation` and `test` as in-memory `Dataset`s of at most `--max_eval_samples` rows each: the set's own
    splits, else the rows whose `held_out_share` (their paths read from `root`, a local set's folder) falls in their
    fraction; and the training rows that are left."""
    train = splits["train"]
    shares = {"validation": (0.0, data_args.validation_fraction)}
    shares["test"] = (data_args.validation_fraction, data_args.validation_fraction + data_args.test_fraction)
    carved = [name for name in ("validation", "test") if name not in splits]
    if sum(data_args.validation_fraction if n == "validation" else data_args.test_fraction for n in carved) >= 1:
        raise ValueError("--validation_fraction and --test_fraction hold out every row: lower them (e.g. 0.1 each).")
    held = {}
    for name in ("validation", "test"):
        split = splits.get(name)
        if split is None:
            low, high = shares[name]
            split = train.filter(lambda row, low=low, high=high: low <= held_out_share(row, root) < high)
        rows = list(split.take(data_args.max_eval_samples))
        if not rows:
            raise ValueError(
                f"The {name} split of the stream is empty: give the set a {name} split or raise --{name}_fraction."
            )
        check_held_out_size(name, len(rows), train.features["label"].names, name in carved, data_args)
        held[name] = Dataset.from_list(rows, features=Features(image=ImageFeature(), label=train.features["label"]))
    if carved:
        kept = [shares[name] for name in carved]
        train = train.filter(lambda row: not any(low <= held_out_share(row, root) < high for low, high in kept))
    return held, train


def check_held_out_size(name: str, rows: int, classes: list[str], carved: bool, data_args) -> None:
    """A held-out split of a stream holds at least one image per class, as the in-memory path's stratified splits
    do (`preflight.check_class_sizes`), or a one-line ValueError naming the argument to raise: with fewer, some
    class is never scored and the accuracy of a few images picks the model."""
    if rows >= len(classes):
        return
    images = f"{rows} image{'s' * (rows != 1)}"
    if rows == data_args.max_eval_samples:
        fix = f"raise --max_eval_samples to at least {len(classes)}"
    elif carved:
        fix = f"raise --{name}_fraction (now {getattr(data_args, f'{name}_fraction'):g}) or add images"
    else:
        fix = f"add images to the set's {name} split"
    raise ValueError(
        f"The {name} split of the stream holds {images}, fewer than the {len(classes)} classes (a held-out split "
        f"needs one image per class): {fix}."
    )


def assign_shards(train: IterableDataset, seed: int, rank: int, world_size: int) -> IterableDataset:
    """This process's part of `train`, its shard order reshuffled every pass (`set_epoch`). With at least as many
    shards as processes each process reads its own whole shards, the same ones every pass (`shard`: shards rank,
    rank + world_size, ...); with fewer, every process reads every shard and keeps one row in `world_size`
    (`split_dataset_by_node`), which a warning says."""
    # buffer_size=1: only the shard order is shuffled (rows are shuffled in windows by StreamedImages), so the
    # `datasets` state at any row is exact and a resumed stream loses no buffered row
    if train.n_shards >= world_size:
        own = train.shard(num_shards=world_size, index=rank, contiguous=False) if world_size > 1 else train
        return own.shuffle(seed=seed, buffer_size=1)
    if rank == 0:
        logger.warning(
            "The stream has %d shards for %d processes: each process reads every shard and keeps one row in %d; "
            "split the set into at least %d shards to have each read only its own.",
            train.n_shards,
            world_size,
            world_size,
            world_size,
        )
    return split_dataset_by_node(train.shuffle(seed=seed, buffer_size=1), rank=rank, world_size=world_size)


class BufferlessShuffleNote(logging.Filter):
    """Drops `datasets`' note that a resumed shuffle buffer is refilled: the buffer here holds one row, never a
    row that is lost (`assign_shards`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "shuffle buffer" not in record.getMessage()


logging.getLogger("datasets.iterable_dataset").addFilter(BufferlessShuffleNote())


class StreamedImages(torch.utils.data.IterableDataset):
    """This process's training rows, pass after pass without end (the Trainer stops at `--max_steps`): read in
    windows of `stream.window` rows, each window shuffled by a generator seeded from (seed, pass, window), and
    each image decoded and processed as it is yielded: {"pixel_values": (C, H, W), "labels": int}.

    An image that fails to decode is skipped and named in a warning; one more than `stream.max_bad_images` stops
    the run with one line naming them. `state_dict` is where the stream stands, saved in each checkpoint (`save`)
    and loaded when resuming (`load`).
    """

    def __init__(self, stream: Stream, transform):
        self.stream, self.transform = stream, transform
        self.frames_said = False  # an image of several frames is said once per process: frame 1 is trained on
        self.state = {"epoch": 0, "window": 0, "window_start": None, "taken": 0, "bad": []}

    def state_dict(self) -> dict:
        return {**copy.deepcopy(self.state), "world_size": self.stream.world_size}

    def load_state_dict(self, state: dict) -> None:
        self.state = {key: copy.deepcopy(state[key]) for key in self.state}

    def save(self, checkpoint: str | os.PathLike) -> None:
        """This process's position, in `checkpoint` (written beside the Trainer's own states)."""
        path = Path(checkpoint) / STATE_FILE.format(rank=self.stream.process_index)
        path.write_text(json.dumps(self.state_dict()) + "\n")

    def load(self, checkpoint: str | os.PathLike) -> None:
        """The position saved in `checkpoint` by this process of a run with as many processes, or a one-line error.
        A process the run did not have (resumed with more processes) reads the run's count from the first
        process's file, so every process says the count to resume with."""
        own = Path(checkpoint) / STATE_FILE.format(rank=self.stream.process_index)
        first = Path(checkpoint) / STATE_FILE.format(rank=0)
        path = own if own.is_file() or not first.is_file() else first
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            state = None
        if state is not None and state.get("world_size") != self.stream.world_size:
            raise ValueError(
                f"Checkpoint '{checkpoint}' was trained by {state.get('world_size')} processes, each reading its own "
                f"shards; {self.stream.world_size} now would read others: resume with "
                f"--nproc_per_node {state.get('world_size')}."
            )
        if state is None or path != own:
            raise ValueError(
                f"Checkpoint '{checkpoint}' holds no stream position for process {self.stream.process_index} "
                f"({own.name}): resume a run made with --streaming true, or start anew with --overwrite_output_dir "
                "true."
            )
        self.load_state_dict(state)

    def __iter__(self):
        source, state = self.stream.train, self.state
        while True:
            source.set_epoch(state["epoch"])
            if state["window_start"] is not None:
                source.load_state_dict(copy.deepcopy(state["window_start"]))
            rows, read = iter(source), 0
            while True:
                start = source.state_dict()
                window = list(itertools.islice(rows, self.stream.window))
                if not window:
                    break
                read += len(window)
                if state["window_start"] is None:
                    state["window_start"], state["taken"] = start, 0
                seed = (self.stream.seed, state["epoch"], state["window"])
                order = np.random.default_rng(seed).permutation(len(window))
                while state["taken"] < len(window):
                    row = window[order[state["taken"]]]
                    state["taken"] += 1
                    item = self.processed(row)
                    if item is not None:
                        yield item
                state["window"] += 1
                state["window_start"], state["taken"] = None, 0
            if read == 0 and state["window"] == 0:
                raise ValueError(
                    f"Process {self.stream.process_index} found no training rows in its shards: give the set more "
                    "rows or shards, or lower --validation_fraction / --test_fraction."
                )
            state.update(epoch=state["epoch"] + 1, window=0, window_start=None, taken=0)

    def processed(self, row: dict) -> dict | None:
        """`row` decoded and through the transform, or None (counted) when its image cannot be used."""
        cell = row["image"] or {}
        try:
            with open_image(cell, shown_name(str(cell.get("path") or "A streamed image"))) as image:
                image.load()
                if frame_count(image) > 1 and not self.frames_said:
                    self.frames_said = True
                    logger.warning(
                        "%s has %d frames (an animation or a multi-page file): frame 1 of it, and of every streamed "
                        "image of several frames, is trained on; the others are not read.",
                        shown_name(str(cell.get("path") or "A streamed image")),
                        frame_count(image),
                    )
                item = self.transform({"image": [upright(image)], "label": [row["label"]]})
        except Exception as error:  # noqa: BLE001 PIL raises OSError, SyntaxError, ... for damaged images
            return self.skip(cell, error)
        return {"pixel_values": item["pixel_values"][0], "labels": item["labels"][0]}

    def skip(self, cell: dict, error: Exception) -> None:
        """Count a bad image once (by its path, else its place in this process's stream); past the cap, stop."""
        state = self.state
        name = cell.get("path") or (
            f"process {self.stream.process_index}'s pass {state['epoch']}, window {state['window']}, "
            f"row {state['taken']}"
        )
        if str(name) not in state["bad"]:  # counted once, however many passes meet it
            state["bad"].append(str(name))
            reason = shown_name(" ".join(str(error).split()))
            logger.warning("Skipped an image that cannot be decoded: %s (%s).", shown_name(str(name)), reason)
        if len(state["bad"]) > self.stream.max_bad_images:
            shown = ", ".join(map(shown_name, state["bad"][:SHOWN_NAMES]))
            more = f" and {len(state['bad']) - SHOWN_NAMES} more" if len(state["bad"]) > SHOWN_NAMES else ""
            raise ValueError(
                f"{len(state['bad'])} training images could not be decoded, more than --max_bad_images "
                f"{self.stream.max_bad_images}: {shown}{more}: remove or replace them, or raise --max_bad_images."
            )


def stream_metrics(trainer, rows: StreamedImages) -> dict[str, int]:
    """The images the run trained on (steps x global batch) and the images every process skipped, summed."""
    args = trainer.args
    per_step = args.per_device_train_batch_size * args.world_size * args.gradient_accumulation_steps
    skipped = trainer.accelerator.reduce(torch.tensor(len(rows.state["bad"])), reduction="sum")
    return {"streamed_train_images": trainer.state.global_step * per_step, "skipped_images": int(skipped)}


def streaming_trainer(trainer_class: type) -> type:
    """`trainer_class` reading its training rows from a `StreamedImages` in this process (no sharding by
    accelerate: the stream already holds this process's shards) and saving the stream's position in every
    checkpoint."""

    class StreamingTrainer(trainer_class):
        def get_train_dataloader(self) -> torch.utils.data.DataLoader:
            # in this process and unprepared: accelerate would read the rows on one process and send them out. Its
            # own generator: starting to read draws a seed, which from torch's would shift the augmentation's
            # random numbers of a resumed run (the Trainer restores them just before)
            return torch.utils.data.DataLoader(
                self.train_dataset,
                batch_size=self._train_batch_size,
                collate_fn=self.data_collator,
                generator=torch.Generator().manual_seed(self.args.seed),
            )

        def _save_rng_state(self, output_dir: str) -> None:  # each process, beside its own random state
            super()._save_rng_state(output_dir)
            self.train_dataset.save(output_dir)

    StreamingTrainer.__name__ = StreamingTrainer.__qualname__ = f"Streaming{trainer_class.__name__}"
    return StreamingTrainer
