"""The reader: every source kind gives the same normalised rows, in memory and streamed; the one data check refuses
bad data in one line naming the split, class or file; missing splits are carved stratified and seeded."""

import hashlib
import io
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, IterableDataset
from datasets import Image as ImageFeature
from helpers import REPO, tiny_model_file, write_imagefolder
from hub_server import local_hub  # noqa: F401  (the fixture)
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.training.arguments import DataArguments
from modeling_vit_scratch.training.columns import in_order
from modeling_vit_scratch.training.data import read_data, read_image

CLASSES = ("cat", "dog", "fox")


def one_process(**overrides):
    return SimpleNamespace(**{"seed": 0, "process_index": 0, "world_size": 1, **overrides})


def read(dataset, **overrides):
    shares = {"validation_fraction": 0.2, "test_fraction": 0.2} | overrides
    return read_data(DataArguments(dataset=str(dataset), **shares), one_process())


def image_bytes(cell) -> bytes:
    """An image's pixels, whatever holds it (a PIL image, bytes, or a path)."""
    image = read_image(cell)
    return image.convert("RGB").tobytes()


def rows(split) -> list[tuple[str, int]]:
    """(pixel digest, label) of every row of a split, in memory or streamed, without its order."""
    split = split.cast_column("image", ImageFeature(decode=False))
    return sorted((hashlib.sha256(image_bytes(row["image"])).hexdigest(), row["label"]) for row in split)


def named_rows(data) -> list[tuple[str, str]]:
    """(pixel digest, class name) of every row of every split."""
    found = []
    for split in (data.train, data.validation, data.test):
        found += [(digest, data.labels[label]) for digest, label in rows(split)]
    return sorted(found)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_imagefolder(tmp_path_factory.mktemp("set") / "images", CLASSES, per_class=10)


def as_split_folders(folder: Path, root: Path) -> Path:
    """The same images in train/ and test/ folders of class folders (the last two of each class in test)."""
    for image in sorted(folder.glob("*/*.png")):
        split = "test" if int(image.stem) >= 7 else "train"
        (root / split / image.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(image, root / split / image.parent.name / image.name)
    return root


def as_metadata(folder: Path, root: Path) -> Path:
    """The same images in one folder, labelled by a metadata.csv column of class names."""
    root.mkdir()
    lines = ["file_name,species"]
    for image in sorted(folder.glob("*/*.png")):
        shutil.copy(image, root / f"{image.parent.name}_{image.name}")
        lines.append(f"{image.parent.name}_{image.name},{image.parent.name}")
    (root / "metadata.csv").write_text("\n".join(lines) + "\n")
    return root


def whole_set(folder: Path) -> Dataset:
    images = sorted(folder.glob("*/*.png"))
    features = Features(image=ImageFeature(), label=ClassLabel(names=list(CLASSES)))
    labels = [CLASSES.index(path.parent.name) for path in images]
    return Dataset.from_dict({"image": [str(path) for path in images], "label": labels}, features=features)


def as_saved(folder: Path, root: Path) -> Path:
    DatasetDict(train=whole_set(folder).cast_column("image", ImageFeature())).save_to_disk(str(root))
    return root


def as_parquet(folder: Path, root: Path) -> Path:
    """The same rows in two parquet shards of images stored as bytes, with integer-free text labels."""
    root.mkdir()
    images = sorted(folder.glob("*/*.png"))
    labels = [CLASSES.index(path.parent.name) for path in images]
    embedded = Dataset.from_dict(
        {"img": [{"bytes": path.read_bytes(), "path": None} for path in images], "target": labels},
        features=Features(img=ImageFeature(), target=ClassLabel(names=list(CLASSES))),
    )
    for index in range(2):
        embedded.shard(2, index).to_parquet(str(root / f"train-{index:05d}-of-00002.parquet"))
    return root


SOURCES = {
    "class folders": lambda folder, root: folder,
    "split folders": as_split_folders,
    "metadata": as_metadata,
    "save_to_disk": as_saved,
    "parquet": as_parquet,
}


@pytest.fixture(scope="module")
def sources(folder, tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("forms")
    return {kind: make(folder, base / kind.replace(" ", "_")) for kind, make in SOURCES.items()}


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("kind", list(SOURCES))
def test_every_source_kind_gives_the_same_rows_and_classes(sources, kind, streaming):
    named = {"label_column": "species"} if kind == "metadata" else {}
    data = read(sources[kind], streaming=streaming, shuffle_buffer_size=4, **named)
    assert data.labels == list(CLASSES)
    assert data.num_channels == 3 and data.streamed is streaming
    assert isinstance(data.train, IterableDataset if streaming else Dataset)
    for split in (data.validation, data.test):
        assert isinstance(split, Dataset) and list(split.features) == ["image", "label"]
        assert split.features["label"].names == list(CLASSES)
    expected = read(sources["class folders"])
    assert named_rows(data) == named_rows(expected)


def test_a_set_read_twice_or_moved_has_one_identity_and_a_changed_image_another(folder, tmp_path):
    first = read(folder).identity
    assert read(folder).identity == first
    moved = shutil.copytree(folder, tmp_path / "moved")
    assert read(moved).identity == first
    Image.new("RGB", (12, 10), "white").save(moved / "cat" / "0.png")
    assert read(moved).identity != first


@pytest.mark.parametrize("split_seed", [0, 1, 2])
def test_one_colour_image_among_gray_ones_makes_a_colour_model_wherever_the_split_puts_it(tmp_path, split_seed):
    for label in ("a", "b"):
        (tmp_path / label).mkdir()
        for index in range(6):
            Image.new("L", (8, 8), 40 * index).save(tmp_path / label / f"{index}.png")
    assert read(tmp_path, split_seed=split_seed).num_channels == 1
    Image.new("RGB", (8, 8), (200, 30, 30)).save(tmp_path / "a" / "0.png")
    assert read(tmp_path, split_seed=split_seed).num_channels == 3


def test_the_digits_are_gray_with_ten_classes_and_their_own_test_split():
    data = read("digits")
    assert data.num_channels == 1 and data.labels == [str(d) for d in range(10)]
    assert len(data.test) == 360 and len(data.train) + len(data.validation) == 1437


@given(st.lists(st.integers(0, 1000).map(str), min_size=1, max_size=12, unique=True))
def test_class_names_that_are_numbers_are_in_numerical_order(names):
    assert [int(name) for name in in_order(names)] == sorted(int(name) for name in names)


def saved(tmp_path: Path, splits: dict[str, dict], features=None) -> Path:
    """A save_to_disk set of 4x4 images of distinct shades, one split per entry {labels: [...]}."""
    root, made = tmp_path / "saved", {}
    for name, columns in splits.items():
        shades = [Image.new("RGB", (4, 4), (row * 7 % 256, row, 0)) for row in range(len(columns["label"]))]
        made[name] = Dataset.from_dict({"image": shades, **columns}, features=features)
    DatasetDict(made).save_to_disk(str(root))
    return root


@settings(max_examples=8)  # each example writes and reads a saved set
@given(st.lists(st.integers(0, 60), min_size=2, max_size=20, unique=True), st.booleans())
def test_integer_or_text_labels_become_classes_each_row_keeping_its_value(values, text):
    labels = [f"c{value}" for value in values] if text else values
    expected = sorted(map(str, labels)) if text else [str(value) for value in sorted(values)]
    with tempfile.TemporaryDirectory() as tmp:  # every class three times in train: the validation carve holds each
        data = read(
            saved(Path(tmp), {"train": {"label": labels * 3}, "test": {"label": labels}}), validation_fraction=0.34
        )
        assert data.labels == expected
        assert sorted(data.labels[label] for label in data.test["label"]) == sorted(map(str, labels))


def test_a_held_out_split_whose_classes_come_in_another_order_is_read_by_name(tmp_path):
    forward = Features(image=ImageFeature(), label=ClassLabel(names=["a", "b"]))
    root = saved(tmp_path, {"train": {"label": [0, 0, 0, 1, 1, 1]}}, forward)
    backward = Dataset.from_dict(
        {"image": [Image.new("RGB", (4, 4))] * 2, "label": [0, 1]},
        features=Features(image=ImageFeature(), label=ClassLabel(names=["b", "a"])),
    )
    DatasetDict(train=Dataset.load_from_disk(str(root / "train")), test=backward).save_to_disk(str(tmp_path / "both"))
    data = read(tmp_path / "both", validation_fraction=0.3)
    assert [data.labels[label] for label in data.test["label"]] == ["b", "a"]


def refused(dataset, **overrides) -> str:
    with pytest.raises(UserError) as caught:
        read(dataset, **overrides)
    return str(caught.value)


def test_one_class_is_refused(tmp_path):
    assert "class" in refused(saved(tmp_path, {"train": {"label": ["a"] * 6}}))


def test_rows_of_no_label_in_the_test_split_are_refused_naming_the_split(tmp_path):
    features = Features(image=ImageFeature(), label=ClassLabel(names=["a", "b"]))
    root = saved(tmp_path, {"train": {"label": [0, 1] * 4}, "test": {"label": [0, -1, 1]}}, features)
    assert "test" in refused(root)


def test_a_class_scored_but_never_trained_is_refused_naming_it(tmp_path):
    features = Features(image=ImageFeature(), label=ClassLabel(names=["a", "b", "zebra"]))
    root = saved(tmp_path, {"train": {"label": [0, 1] * 4}, "test": {"label": [0, 1, 2]}}, features)
    assert "zebra" in refused(root)


def test_a_class_of_a_held_out_split_the_train_split_lacks_by_name_is_refused(tmp_path):
    root = saved(tmp_path, {"train": {"label": ["a", "b"] * 4}, "test": {"label": ["a", "okapi"]}})
    assert "okapi" in refused(root)


@pytest.mark.parametrize("check_images", [None, False])
def test_an_image_that_cannot_be_read_is_refused_naming_its_file(folder, tmp_path, check_images):
    broken = shutil.copytree(folder, tmp_path / "broken")
    (broken / "dog" / "3.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    line = refused(broken, check_images=check_images)
    assert "3.png" in line and "replace it" in line


def test_a_truncated_image_is_refused_when_decoded_and_passes_a_header_check(folder, tmp_path):
    cut = shutil.copytree(folder, tmp_path / "cut")
    data = (cut / "fox" / "2.png").read_bytes()
    (cut / "fox" / "2.png").write_bytes(data[: len(data) - 30])
    line = refused(cut)
    assert "2.png" in line and "replace it" in line and "--check_images" in line
    assert read(cut, check_images=False).labels == list(CLASSES)


@pytest.mark.integration
@pytest.mark.slow  # a new process
def test_a_hub_data_set_the_hub_does_not_give_is_one_line_naming_the_hub_and_the_fix(tmp_path, local_hub):  # noqa: F811
    args = ["--model", tiny_model_file(tmp_path), "--dataset", "nobody/noset", "--output_dir", tmp_path / "out"]
    ran = local_hub.run(REPO / "scripts" / "train.py", *args, hf_home=tmp_path / "home")  # it serves no data sets
    line = ran.stderr.strip().splitlines()[-1]
    assert ran.returncode == 1 and line.startswith("error: "), ran.stderr
    assert local_hub.url in line and "nobody/noset" in line and "local folder" in line, line
    assert "connection" not in line.lower()


def test_two_splits_of_one_role_or_no_train_split_are_refused(tmp_path):
    assert "validation" in refused(
        saved(tmp_path, {"train": {"label": [0, 1] * 3}, "dev": {"label": [0, 1]}, "val": {"label": [0, 1]}})
    )
    assert "train" in refused(saved(tmp_path / "b", {"test": {"label": [0, 1] * 3}}))


def test_a_column_named_that_the_set_lacks_is_refused_naming_the_argument(folder):
    assert "--label_column" in refused(folder, label_column="species")


def test_a_dataset_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "set.csv").write_text("a,b\n")
    assert "file" in refused(tmp_path / "set.csv")


@settings(max_examples=3)  # each example reads the digits three times
@given(st.integers(0, 3), st.sampled_from([0.1, 0.2, 0.3]))
def test_carved_splits_are_stratified_and_fixed_by_the_split_seed(split_seed, fraction):
    def validation(seed: int) -> list[int]:
        args = DataArguments(dataset="digits", split_seed=seed, validation_fraction=fraction)
        return read_data(args, one_process()).validation["label"]

    labels = validation(split_seed)
    assert labels == validation(split_seed) and labels != validation(split_seed + 10)
    assert abs(len(labels) - 1437 * fraction) <= 1
    shares = np.bincount(labels, minlength=10) / len(labels)
    assert np.abs(shares - 0.1).max() < 0.02  # each digit is about a tenth of the set


def test_a_carve_out_too_small_for_every_class_is_refused_naming_the_fraction(tmp_path):
    root = saved(tmp_path, {"train": {"label": ["a", "b", "a"]}})  # a test image of each class leaves one to train
    assert "--test_fraction" in refused(root)


def test_a_fraction_below_one_image_a_class_carves_one_of_each(tmp_path):
    """A tenth of the labels of many classes: 2% of 24 images is one image, where every class needs one."""
    data = read(
        saved(tmp_path, {"train": {"label": ["a", "b", "c"] * 8}}), validation_fraction=0.02, test_fraction=0.02
    )
    assert sorted(data.validation["label"]) == sorted(data.test["label"]) == [0, 1, 2] and len(data.train) == 18


def test_max_train_samples_keeps_that_many_training_rows():
    assert len(read("digits", max_train_samples=50).train) == 50


def test_read_image_turns_a_photo_upright_and_opens_bytes_and_paths(tmp_path):
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90 degrees
    path = tmp_path / "turned.jpg"
    Image.new("RGB", (20, 10)).save(path, exif=exif)
    assert read_image({"path": str(path), "bytes": None}).size == (10, 20)
    buffer = io.BytesIO()
    Image.new("L", (3, 5)).save(buffer, format="PNG")
    assert read_image({"path": None, "bytes": buffer.getvalue()}).size == (3, 5)


@pytest.mark.parametrize("name", ["hf_" + "Q" * 34, "evil\x1b[2Jname", "right\u202eto-left"])
def test_a_class_name_in_a_refusal_shows_no_token_and_no_control_character(tmp_path, name):
    line = refused(saved(tmp_path, {"train": {"label": ["a", "b"] * 4}, "test": {"label": ["a", name]}}))
    assert name not in line and "hf_" + "Q" * 34 not in line and "\x1b" not in line and "\u202e" not in line


def test_a_class_named_like_a_token_is_refused_before_anything_is_written(folder, tmp_path):
    tokened = shutil.copytree(folder, tmp_path / "set")
    (tokened / "cat").rename(tokened / ("hf_" + "Z" * 34))
    line = refused(tokened)
    assert "hf_" + "Z" * 34 not in line


def test_a_folder_that_does_not_exist_is_named_as_a_folder(tmp_path):
    assert "no such folder" in refused(f"./{tmp_path.name}-missing")


def test_each_process_of_a_one_shard_stream_reads_rows_and_the_same_channels(folder):
    for rank in (0, 1):
        args = DataArguments(dataset=str(folder), streaming=True, validation_fraction=0.2, test_fraction=0.2)
        data = read_data(args, one_process(process_index=rank, world_size=2))
        assert data.num_channels == 3 and next(iter(data.train)) is not None
