"""The data sets a user brings are read the same way whatever their format, and streamed or not; what cannot be
read is said in one line before training.

- Split names: one table (datasets' own, `SPLIT_KEYWORDS`) for image folders, parquet and arrow file names,
  save_to_disk sets, hub sets and streams: `eval` is a test split, `dev`/`val`/`valid` validation splits (before: a
  save_to_disk `eval` split was dropped without a word while a parquet `eval-*.parquet` was the test split). A split
  of no role is named in a warning line; two splits of one role are refused naming both.
- Text labels of a stream are class names, as in a set read whole (before: "not class names"); integer labels are
  numbers as there; where the stream cannot be read through first (a hub set), one line says so and the fixes.
- An image column of file paths (text) is read as images, from the set's folder (before: "pick the image column
  with --image_column", though the column was right); a path naming no file is one line naming the row.
- A metadata file without a label column leaves the class folders as the labels, read and streamed (before: "No
  label column found", the folders' classes hidden).
- A hub set not in the cache while HF_HUB_OFFLINE (or HF_DATASETS_OFFLINE) is set: one line naming the variable and
  the fixes (before: "could not be loaded from the hub (... OfflineModeIsEnabled)"), read and streamed.
- A stream gets the checks of a set read whole where what is read allows: class folders named as numbers in
  numerical order, and a class without training images named (from the label columns or class folders); a hub
  stream says the check was not made.
- A streamed run's card and record say what is known: "training streamed (N images seen over S steps; the set's
  size is not known)" and "S steps over a stream" (before: a training split of steps x batch and "1 epochs"); every
  count the card gives is singular or plural as it should be.
"""

import json
import os

import datasets.config
import numpy as np
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value
from datasets import Image as ImageFeature
from entry_points import Scenario, outcome, with_argument, with_arguments
from helpers import training_args, write_imagefolder
from PIL import Image

from modeling_vit_scratch.sharing.card import schedule_text, splits_text, training_record
from modeling_vit_scratch.training.data import hub_data_set_error, load_image_dataset, prepare_splits, split_roles
from modeling_vit_scratch.training.streaming import (
    StreamSource,
    stream_classes,
    stream_left_out_line,
    stream_source,
    stream_splits,
    stream_unlearnt_lines,
)

CLASSES = ClassLabel(names=["a", "b", "c"])


def tiny_split(rows: int, features: Features | None = None) -> Dataset:
    rng = np.random.default_rng(rows)
    images = [Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)) for _ in range(rows)]
    features = features or Features(image=ImageFeature(), label=CLASSES)
    return Dataset.from_dict({"image": images, "label": [i % 3 for i in range(rows)]}, features=features)


def written(folder, sizes: dict[str, int], streaming: bool):
    """A set of `sizes` (split -> rows): parquet shards named by their splits (streamed), or save_to_disk."""
    if streaming:
        folder.mkdir()
        for name, rows in sizes.items():
            tiny_split(rows).to_parquet(folder / f"{name}-0.parquet")
    else:
        DatasetDict({name: tiny_split(rows) for name, rows in sizes.items()}).save_to_disk(folder)
    return folder


def training(scenario: Scenario, dataset, streaming: bool, *extra: str) -> list[str]:
    argv = with_argument(scenario.argv("train"), "--dataset", dataset)
    return with_arguments(argv, (["--streaming", "true", "--max_steps", "1"] if streaming else []) + list(extra))


@pytest.mark.parametrize(
    "names, roles",
    [
        (["train", "eval"], {"train": "train", "eval": "test"}),
        (["training", "dev", "testing"], {"training": "train", "dev": "validation", "testing": "test"}),
        (["train", "val", "evaluation"], {"train": "train", "val": "validation", "evaluation": "test"}),
        (["Train", "VALID"], {"Train": "train", "VALID": "validation"}),
    ],
)
def test_every_split_name_of_datasets_table_plays_its_role(names, roles):
    assert split_roles(dict.fromkeys(names, 6)) == (roles, [])


def test_a_split_of_no_role_is_named_in_a_warning_with_its_size_never_dropped_silently():
    raw = DatasetDict(train=tiny_split(24), eval=tiny_split(6), extra=tiny_split(4))
    data = prepare_splits(raw, validation_fraction=0.2)
    assert len(data.splits["test"]) == 6  # `eval` is the test split, as datasets reads eval-*.parquet
    (line,) = data.notes
    assert line.startswith("Warning: split 'extra' (4 images) is not used: training reads the splits train, ")
    assert line.endswith("test: testing, eval, evaluation); rename it to use it.")


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("pair", [("validation", "dev"), ("test", "eval")])
def test_two_splits_of_one_role_are_one_line_naming_both(tmp_path, streaming, pair):
    scenario = Scenario(tmp_path)
    folder = written(tmp_path / "set", {"train": 24, pair[0]: 6, pair[1]: 6}, streaming)
    done = outcome("train", training(scenario, folder, streaming))
    role = "validation" if pair[0] == "validation" else "test"
    assert done.one_line, done
    said = f"two {role} splits, '{pair[0]}' and '{pair[1]}' "
    assert said in done.error and f"both are names of the {role} split" in done.error
    assert not (tmp_path / "out-train").exists()


def text_shards(folder, labels: list[str]):
    folder.mkdir()
    features = Features(image=ImageFeature(), label=Value("string"))
    for index in range(2):
        rows = tiny_split(len(labels)).remove_columns("label").add_column("label", labels)
        rows.cast(features).to_parquet(folder / f"train-{index}.parquet")
    return StreamSource(str(folder), "parquet", sorted(folder.glob("*.parquet")))


@pytest.mark.parametrize(
    "labels, names", [(["fox", "cat", "dog"], ["cat", "dog", "fox"]), (["10", "2", "1"], ["1", "2", "10"])]
)
def test_text_labels_of_a_stream_are_class_names_in_the_order_a_whole_set_gives(tmp_path, labels, names):
    source = text_shards(tmp_path / "shards", labels * 4)
    classes, lookup, lines = stream_classes(source, Value("string"), "label")
    whole = DatasetDict(train=tiny_split(30).remove_columns("label").add_column("label", labels * 10))
    whole = prepare_splits(whole)
    assert classes.names == names == whole.labels  # streamed or not: the same classes, in the same order
    assert lookup == {label: names.index(label) for label in labels} and lines == []


@pytest.mark.parametrize("kind", ["hub", "webdataset"])
def test_text_labels_a_stream_cannot_read_first_are_one_line_saying_so_and_the_fixes(kind):
    with pytest.raises(ValueError, match="^Label column 'label' holds class names as text, and a") as refused:
        stream_classes(StreamSource("some/set", kind, []), Value("string"), "label")
    assert "cannot be read through first to list every class: declare the column a ClassLabel" in str(refused.value)
    assert str(refused.value).endswith(
        "or leave out --streaming (the set is then read whole first and its classes listed)."
    )


def path_set(folder, paths: list[str]) -> Dataset:
    """A set whose image column holds file paths as text, and the images they name under `folder`."""
    for index, path in enumerate(paths):
        if not os.path.isabs(path) and not path.startswith(".."):
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            tiny_split(3).cast_column("image", ImageFeature())[index % 3]["image"].save(folder / path)
    features = Features(image=Value("string"), label=CLASSES)
    return Dataset.from_dict({"image": paths, "label": [i % 3 for i in range(len(paths))]}, features=features)


def test_an_image_column_of_paths_is_read_as_images_from_the_sets_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the set's folder: paths are read from the set's
    paths = [f"files/{index}.png" for index in range(30)]
    raw = DatasetDict(train=path_set(tmp_path / "set", paths))
    data = prepare_splits(raw, root=str(tmp_path / "set"))
    assert isinstance(data.splits["train"].features["image"], ImageFeature)
    assert data.splits["train"][0]["image"].size == (8, 8)


@pytest.mark.parametrize("streaming", [False, True])
def test_a_path_in_the_image_column_that_names_no_file_is_one_line_naming_the_row(tmp_path, streaming):
    folder = tmp_path / "set"
    paths = [f"files/{index}.png" for index in range(29)] + ["files/gone.png"]
    rows = path_set(folder, paths)
    (folder / "files" / "gone.png").unlink()
    rows.to_parquet(folder / "train-0.parquet") if streaming else rows.save_to_disk(folder / "saved")
    dataset = folder if streaming else folder / "saved"
    if not streaming:
        os.rename(folder / "files", folder / "saved" / "files")
    done = outcome("train", training(Scenario(tmp_path), dataset, streaming))
    assert done.one_line, done
    where = "shard '" + str(folder / "train-0.parquet") + "'" if streaming else "the train split's image column 'image'"
    assert done.error == (
        f"error: Row 29 of {where} names the file 'files/gone.png', which is not there (paths are read from the data "
        f"set folder '{dataset}'): give each image's path relative to that folder (or absolute), or pick the image "
        "column with --image_column."
    )


def test_an_image_column_of_paths_in_a_hub_set_is_one_line():
    raw = DatasetDict(train=Dataset.from_dict({"image": ["a.png"] * 3, "label": [0, 1, 2]}))
    with pytest.raises(ValueError, match="^Column 'image' holds text, not images, and a hub data set has no folder"):
        prepare_splits(raw)


def captioned(images):
    """`images` (class folders) with a metadata.csv of captions: no label column."""
    files = sorted(file.relative_to(images).as_posix() for file in images.rglob("*.png"))
    (images / "metadata.csv").write_text("\n".join(["file_name,caption", *(f"{f},a photo" for f in files)]) + "\n")
    return images


def test_a_metadata_file_without_labels_leaves_the_class_folders_as_labels(tmp_path):
    loaded = load_image_dataset(str(captioned(Scenario(tmp_path).images())))
    assert loaded["train"].features["label"].names == ["cat", "dog", "fox"]
    assert "caption" in loaded["train"].features  # the metadata's columns are kept
    paths = loaded["train"].cast_column("image", ImageFeature(decode=False))["image"]
    assert [loaded["train"].features["label"].int2str(n) for n in loaded["train"]["label"]] == [
        os.path.basename(os.path.dirname(cell["path"])) for cell in paths
    ]


@pytest.mark.integration
def test_a_streamed_folder_with_a_metadata_file_without_labels_trains_on_its_class_folders(tmp_path):
    scenario = Scenario(tmp_path)
    extra = ["--validation_fraction", "0.3", "--test_fraction", "0.3", "--eval_strategy", "steps", "--eval_steps", "1"]
    argv = training(scenario, captioned(scenario.images()), True, *extra)
    assert outcome("train", argv).code == 0
    config = json.loads((tmp_path / "out-train" / "config.json").read_text())
    assert config["id2label"] == {"0": "cat", "1": "dog", "2": "fox"}


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])
def test_a_hub_set_not_in_the_cache_while_offline_is_one_line_naming_the_variable(
    tmp_path, monkeypatch, streaming, variable
):
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # what either variable sets when datasets starts
    if variable == "HF_DATASETS_OFFLINE":
        monkeypatch.setenv(variable, "1")
    else:
        monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
        monkeypatch.setenv(variable, "1")
    done = outcome("train", training(Scenario(tmp_path), "someone/not-cached-set", streaming))
    assert done.error == (
        "error: --dataset 'someone/not-cached-set': there is no folder 'someone/not-cached-set' here, and no Hub data "
        f"set 'someone/not-cached-set' in the Hugging Face cache ({variable} is set, so the Hub was not asked): check "
        f"the folder's path (a folder name needs ./ in front), or unset {variable} to download the data set once (it "
        "is then read from the cache)."
    )


def test_a_hub_set_that_fails_online_keeps_datasets_reason(monkeypatch):
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    error = hub_data_set_error("a/b", ConnectionError("Couldn't reach 'a/b' on the Hub"), "could not be opened")
    assert str(error) == (
        "Data set 'a/b' could not be opened (Couldn't reach 'a/b' on the Hub): check the path (a folder name needs ./ "
        "in front) or the hub data set name."
    )


def test_streamed_class_folders_named_as_numbers_are_in_numerical_order_as_read_whole(tmp_path):
    folder = write_imagefolder(tmp_path / "numbers", classes=("1", "2", "10"), per_class=4)
    feature = stream_splits(stream_source(str(folder)))["train"].features["label"]
    assert feature.names == ["1", "10", "2"]  # datasets sorts folder names as text
    classes, lookup, _ = stream_classes(stream_source(str(folder)), feature, "label")
    whole = prepare_splits(load_image_dataset(str(folder)), validation_fraction=0.25, test_fraction=0.25)
    assert classes.names == whole.labels == ["1", "2", "10"]
    assert lookup == {0: 0, 1: 2, 2: 1}


@pytest.mark.parametrize("kind", ["parquet", "imagefolder", "hub"])
def test_a_streamed_class_without_training_images_is_named_as_a_set_read_whole_names_it(tmp_path, kind):
    names = ClassLabel(names=["a", "b", "c", "unused"])
    if kind == "parquet":
        (tmp_path / "set").mkdir()
        tiny_split(12).cast_column("label", names).to_parquet(tmp_path / "set" / "train-0.parquet")
    elif kind == "imagefolder":
        write_imagefolder(tmp_path / "set" / "train", classes=("a", "b", "c"), per_class=4)
        write_imagefolder(tmp_path / "set" / "test", classes=("a", "b", "c", "unused"), per_class=4)
    source = stream_source(str(tmp_path / "set")) if kind != "hub" else StreamSource("some/set", "hub", [])
    (line,) = stream_unlearnt_lines(source, "label", names)
    if kind == "hub":
        assert line.startswith("Note: a stream is not read through before training, so classes without training")
    else:
        assert line.startswith(
            "Warning: the training split holds no image of 1 class of the 4 the data set names (unused)"
        )


@pytest.mark.parametrize(
    "record, splits, schedule",
    [
        (
            {"num_train": 1, "num_validation": 1, "num_test": 2, "epochs": 1.0},
            "1 training image, 1 validation image and 2 test images",
            "1 epoch",
        ),
        (
            {"num_train": 1200, "num_validation": 6, "num_test": 6, "epochs": 2.5},
            "1,200 training images, 6 validation images and 6 test images",
            "2.5 epochs",
        ),
        (
            {"num_train": None, "streamed_images": 24, "steps": 3, "num_validation": 9, "num_test": 9, "epochs": 1.0},
            (
                "training streamed (24 images seen over 3 steps; the set's size is not known), 9 validation images and 9 "
                "test images"
            ),
            "3 steps over a stream",
        ),
        (
            {"num_train": None, "streamed_images": 8, "steps": 1, "num_validation": 3, "num_test": 3, "epochs": 1.0},
            (
                "training streamed (8 images seen over 1 step; the set's size is not known), 3 validation images and 3 "
                "test images"
            ),
            "1 step over a stream",
        ),
    ],
)
def test_the_card_says_what_is_known_of_the_splits_and_counts_in_the_right_number(record, splits, schedule):
    assert splits_text(record) == splits and schedule_text(record) == schedule


def test_a_streamed_runs_record_holds_the_images_seen_never_them_as_the_sets_size(tmp_path):
    args = training_args(tmp_path, max_steps=3)
    metrics = {"streamed_train_images": 24, "total_train_batch_size": 8, "epoch": 1.0}
    record = training_record("train", "shards", {"train": None, "validation": 9, "test": 9}, args, metrics, None)
    assert (record["num_train"], record["streamed_images"], record["steps"]) == (None, 24, 3)
    whole = training_record("train", "set", {"train": 30, "validation": 9, "test": 9}, args, {"epoch": 1.0}, None)
    assert (whole["num_train"], whole["streamed_images"], whole["steps"]) == (30, None, None)


@pytest.mark.parametrize("streaming", [True, False])
def test_a_shard_named_as_no_split_beside_split_named_shards_is_refused_naming_it(tmp_path, streaming):
    """Beside `train-0.parquet`, datasets reads `holdout-0.parquet` (or `extra-`) in no split: one line naming it
    and the split names, streamed; not streamed, the shards are refused as needing a stream first."""
    folder = written(tmp_path / "set", {"train": 12, "holdout": 3, "test": 3}, streaming=True)
    if streaming:
        with pytest.raises(ValueError) as refused:
            stream_source(str(folder))
        assert str(refused.value).startswith(
            f"Data set folder '{folder}' has shards named as splits, and 1 shard named as no split "
            "(holdout-0.parquet), which datasets would leave out without a word: rename it to a split name (train, "
            "validation, test, or another name of one: "
        )
        assert str(refused.value).endswith("), or move it out of the folder.")
    else:
        with pytest.raises(FileNotFoundError, match="shards are read as a stream: give --streaming true"):
            load_image_dataset(str(folder))
    assert stream_left_out_line(str(written(tmp_path / "named", {"train": 12, "eval": 3}, streaming=True))) is None


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("nested", [False, True])
def test_shards_beside_class_folders_are_one_line_naming_both(tmp_path, streaming, nested):
    """Parquet shards beside class folders of images: datasets reads the shards only, and the images would be left
    out without a word, streamed or not. The line names both; the fix for the images is the folder to give where
    they lie in one sub-folder, else moving the shards out."""
    folder = tmp_path / "set"
    images = write_imagefolder(folder / "all" if nested else folder, classes=("cat", "dog"), per_class=3)
    tiny_split(6).to_parquet(folder / "train-0.parquet")
    with pytest.raises(ValueError) as refused:
        stream_source(str(folder)) if streaming else load_image_dataset(str(folder))
    fix = (
        f"give --dataset '{images}' (the folder of the class folders)"
        if nested
        else "move the shards out of the folder"
    )
    shown = "all/cat/0.png, all/cat/1.png" if nested else "cat/0.png, cat/1.png"
    assert str(refused.value) == (
        f"Data set folder '{folder}' holds parquet shards (train-0.parquet) beside 6 images (e.g. {shown}, "
        f"{'all/' * nested}cat/2.png, ... 3 more), and datasets reads the shards only, leaving the images out: to "
        f"train on the images, {fix}; to train on the shards, move them into a folder of their own and give it with "
        "--streaming true --max_steps N."
    )
