"""The few-label split: a stratified labelled share of train/, the whole test/, every training image unlabelled."""

import hashlib

import numpy as np
import pytest
from lab.few_labels import split_few_labels
from PIL import Image

TRAIN_COUNTS = {"ant": 30, "bee": 11, "cat": 3}  # 10% of each: 3, 1 (1.1), 1 (0.3 -> at least one)
TEST_COUNT = 2


def digest(path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def write_set(root) -> None:
    """Tiny 5x7 gray PNGs, every one different (its class and index are in its pixels)."""
    for split, counts in (("train", TRAIN_COUNTS), ("test", dict.fromkeys(TRAIN_COUNTS, TEST_COUNT))):
        for label, (name, count) in enumerate(counts.items()):
            (root / split / name).mkdir(parents=True)
            for index in range(count):
                pixels = np.full((7, 5), index, np.uint8)
                pixels[0, 0], pixels[0, 1] = label, 0 if split == "train" else 255
                Image.fromarray(pixels, mode="L").save(root / split / name / f"{index}.png")


def chosen(out) -> dict[str, set[str]]:
    train = out / "labelled" / "train"
    return {folder.name: {path.name for path in folder.iterdir()} for folder in train.iterdir()}


@pytest.fixture
def image_set(tmp_path):
    write_set(tmp_path / "set")
    return tmp_path / "set"


def test_the_split_is_stratified_and_every_training_image_is_unlabelled_once(image_set, tmp_path):
    out = tmp_path / "out"
    counts = split_few_labels(image_set, out, fraction=0.1, seed=0)
    assert counts == {
        "labelled_train": {"ant": 3, "bee": 1, "cat": 1},
        "test": dict.fromkeys(TRAIN_COUNTS, 2),
        "unlabelled": 44,
    }
    assert {name: len(files) for name, files in chosen(out).items()} == counts["labelled_train"]
    train_digests = {digest(path): path.parent.name for path in (image_set / "train").rglob("*.png")}
    test_digests = {digest(path) for path in (image_set / "test").rglob("*.png")}
    for path in (out / "labelled" / "train").rglob("*.png"):
        assert train_digests[digest(path)] == path.parent.name  # a training image, under its own class
    labelled_test = {digest(path) for path in (out / "labelled" / "test").rglob("*.png")}
    assert labelled_test == test_digests and labelled_test.isdisjoint(train_digests)
    unlabelled = list((out / "unlabelled").iterdir())
    assert all(path.is_file() for path in unlabelled)  # flat: no class folder
    assert sorted(digest(path) for path in unlabelled) == sorted(train_digests)  # every training image, once
    assert not any(name in path.name for path in unlabelled for name in TRAIN_COUNTS)
    assert sorted(path.name for path in out.iterdir()) == ["labelled", "unlabelled"]
    assert all(path.stat().st_nlink >= 2 for path in (image_set / "train").rglob("*.png"))  # linked, not copied
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []  # no staging left


def test_the_same_seed_draws_the_same_split_and_another_seed_another(image_set, tmp_path):
    first, again, other = (tmp_path / name for name in ("first", "again", "other"))
    split_few_labels(image_set, first, fraction=0.1, seed=0)
    split_few_labels(image_set, again, fraction=0.1, seed=0)
    split_few_labels(image_set, other, fraction=0.1, seed=1)
    assert chosen(first) == chosen(again)
    assert chosen(first)["ant"] != chosen(other)["ant"]
    names = {digest(path): path.name for path in (first / "unlabelled").iterdir()}
    assert names == {digest(path): path.name for path in (again / "unlabelled").iterdir()}


def test_a_folder_that_is_not_empty_is_refused_and_left_alone(image_set, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not an empty folder"):
        split_few_labels(image_set, out)
    assert [path.name for path in out.iterdir()] == ["notes.txt"]
    (out / "notes.txt").unlink()
    split_few_labels(image_set, out, fraction=1.0)  # an empty folder is filled
    assert {name: len(files) for name, files in chosen(out).items()} == TRAIN_COUNTS
