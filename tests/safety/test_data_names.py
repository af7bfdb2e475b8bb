"""What an image folder's names and a saved set's columns mean is checked before training, in one line each.

- Class folders named as splits (`train/`, `test/`, `validation/`, or a name holding such a word: `test-2`), which
  datasets reads as splits, not classes: one line naming them and the fix (before: a 38-line TypeError from the
  pre-flight, or "only one class" while the other class folders were left out). Images that datasets' split folders
  would leave out are named too. A split folder holding a metadata file (`train/metadata.jsonl` with labels,
  datasets' documented layout) is a split.
- A file or folder name, or the --dataset path, that is not UTF-8 (`caf\\xe9`): one line showing its bytes escaped
  (before: a 77-line DatasetGenerationError).
- A column given, or found, must hold its kind: --label_column naming the image column (before: a 33-line KeyError)
  and --image_column naming the label column are one rule.
"""

import os
import shutil
from pathlib import Path

import pytest
from entry_points import Scenario, outcome, with_arguments
from helpers import write_imagefolder

import modeling_vit_scratch.training.data as data_module


def train_on(tmp_path, dataset, *extra: str) -> list[str]:
    argv = Scenario(tmp_path).argv("train")
    argv[argv.index("--dataset") + 1] = str(dataset)
    return with_arguments(argv, list(extra))


def refused(tmp_path, dataset, *extra: str) -> str:
    """The one line a training run on `dataset` is refused with; nothing was trained."""
    done = outcome("train", train_on(tmp_path, dataset, *extra))
    assert done.code == 1 and done.one_line, done
    assert not (tmp_path / "out-train" / "config.json").exists() and not list(tmp_path.glob("out-train/checkpoint-*"))
    return done.error


@pytest.mark.parametrize(
    "classes, named",
    [
        (("train", "test", "validation"), "The class folders 'test', 'train', 'validation' of the data set folder"),
        (("train", "cat", "dog"), "The class folder 'train' of the data set folder"),
        (("cat", "dog", "test-2"), "The class folder 'test-2' of the data set folder"),
    ],
    ids=["all", "one", "word-in-name"],
)
def test_class_folders_named_as_splits_are_one_line_naming_them(tmp_path, classes, named):
    root = write_imagefolder(tmp_path / "imgs", classes=classes, per_class=10)
    error = refused(tmp_path, root)
    assert error.startswith(f"error: {named} '{root}'"), error
    assert "not as a class" in error and error.endswith("put class folders inside (FOLDER/train/cat/1.png).")


def test_images_outside_the_split_folders_are_named_and_split_folders_of_classes_train(tmp_path):
    """train/ and test/ holding class folders are splits, as datasets means them; an `extra/` beside them would be
    left out without a word."""
    root = tmp_path / "splits"
    for split in ("train", "test"):
        write_imagefolder(root / split, per_class=10)
    assert sorted(data_module.load_image_dataset(str(root))) == ["test", "train"]
    shutil.copytree(root / "test", root / "extra")
    error = refused(tmp_path, root)
    assert error.startswith(f"error: The data set folder '{root}' has folders named as splits ('test', 'train'), ")
    assert "and 30 images elsewhere would be left out (e.g. extra/cat/0.png, " in error


def test_split_folders_labelled_by_their_metadata_files_are_splits(tmp_path):
    """datasets' documented layout: `train/` and `test/` holding images and a metadata.jsonl with their labels are
    read as splits; an image no row names is refused (datasets would drop it); a split folder beside them holding
    images and no way to label them is still refused."""
    root = tmp_path / "md"
    for split in ("train", "test"):
        images = write_imagefolder(tmp_path / split, classes=("x",), per_class=6) / "x"
        shutil.copytree(images, root / split)
        rows = [f'{{"file_name": "{i}.png", "label": {i % 2}}}' for i in range(6)]
        (root / split / "metadata.jsonl").write_text("\n".join(rows) + "\n")
    loaded = data_module.load_image_dataset(str(root))
    assert {name: sorted(split["label"]) for name, split in loaded.items()} == {"train": [0, 0, 0, 1, 1, 1]} | {
        "test": [0, 0, 0, 1, 1, 1]
    }
    shutil.copy(root / "train" / "0.png", root / "train" / "6.png")  # no row names it: datasets would drop it
    with pytest.raises(ValueError) as refused:
        data_module.load_image_dataset(str(root))
    assert str(refused.value) == (
        f"1 image in the data set folder '{root}' is named by no row of the metadata file beside or above it, and "
        "datasets would leave it out (e.g. train/6.png): add a row for it, or move it out of the data set folder."
    )
    (root / "train" / "6.png").unlink()
    (root / "test" / "metadata.jsonl").unlink()
    with pytest.raises(ValueError, match=r"^The class folder 'test' of the data set folder .* is named as a split"):
        data_module.load_image_dataset(str(root))


@pytest.mark.parametrize("where", ["class", "file", "dataset"])
def test_a_name_that_is_not_utf8_is_one_line_showing_its_bytes(tmp_path, where):
    root = write_imagefolder(tmp_path / "imgs", per_class=10)
    if where == "class":
        (root / "fox").rename(root / "caf\udce9")
    elif where == "file":
        (root / "fox" / "0.png").rename(root / "fox" / "caf\udce9.png")
    else:
        root = root.rename(tmp_path / "imgs\udce9")
    error = refused(tmp_path, root)
    assert "\udce9" not in error and "not valid UTF-8" in error, error
    if where == "dataset":
        assert error == (
            f"error: --dataset '{tmp_path}/imgs\\xe9' is not valid UTF-8, which datasets needs for every path it "
            "reads: rename the folder in UTF-8."
        )
    else:
        what = "A class folder's name" if where == "class" else "A file or folder name"
        shown = "caf\\xe9" if where == "class" else "fox/caf\\xe9.png"
        assert error.startswith(f"error: {what} in the data set folder '{root}' is not valid UTF-8 ('{shown}')")


@pytest.mark.parametrize(
    "where, name",
    [
        ("class", "${HOME}"),
        ("class", "$PATH"),
        ("file", "$HOME.png"),
        ("dataset", "imgs-${HOME}"),
        ("link", "p$HOME"),
        ("above", "work$HOME"),
    ],
)
def test_a_name_datasets_would_expand_as_a_variable_is_one_line(tmp_path, monkeypatch, where, name):
    """datasets reads `$NAME` / `${NAME}` in a local path as an environment variable (a folder `${HOME}` becomes the
    home folder): such a name is one line naming it, before any image is read, never a missing-file error."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = write_imagefolder(tmp_path / "imgs", per_class=10)
    if where == "class":
        (root / "fox").rename(root / name)
        shown = f"A class folder's name in the data set folder '{root}' ('{name}')"
    elif where == "file":
        (root / "fox" / "0.png").rename(root / "fox" / name)
        shown = f"A file or folder name in the data set folder '{root}' ('fox/{name}')"
    elif where == "dataset":
        root = root.rename(tmp_path / name)
        shown = f"--dataset ('{root}')"
    elif where == "link":  # a link named plainly, to a folder whose path datasets would expand
        (tmp_path / name).mkdir()
        real = root.rename(tmp_path / name / "imgs")
        root = tmp_path / "lnk"
        root.symlink_to(real)
        shown = f"The folder --dataset '{root}' names ('{real}')"
    else:  # `./imgs` from a working folder whose own path holds '$'
        (tmp_path / name).mkdir()
        real = root.rename(tmp_path / name / "imgs")
        monkeypatch.chdir(tmp_path / name)
        root = "./imgs"
        shown = f"The folder --dataset './imgs' names ('{real}')"
    assert refused(tmp_path, root) == (
        f"error: {shown} holds '$' before a name, which datasets reads as an environment variable ($HOME, ${{HOME}}) "
        "in every path it opens, so its images would be looked for elsewhere: rename it without '$'."
    )


@pytest.fixture
def saved(tmp_path):
    """A save_to_disk set: an image column, a ClassLabel column and a float column."""
    loaded = data_module.load_image_dataset(str(write_imagefolder(tmp_path / "imgs", per_class=10)))
    loaded = loaded.map(lambda row: {"score": 0.5})
    loaded.save_to_disk(tmp_path / "saved")
    return tmp_path / "saved"


@pytest.mark.parametrize(
    "columns, said",
    [
        (["--label_column", "image"], "Column 'image' holds images, not class labels (class names or integers): "),
        (["--label_column", "score"], "Column 'score' holds values of type float64, not class labels "),
        (["--image_column", "label"], "Column 'label' holds class labels, not images: pick the image column with "),
        (["--image_column", "label", "--label_column", "image"], "Column 'image' holds images, not class labels"),
    ],
)
def test_a_column_that_holds_another_kind_is_one_line_naming_it(tmp_path, saved, columns, said):
    error = refused(tmp_path, saved, *columns)
    argument = "--label_column" if "not class labels" in said else "--image_column"
    assert error.startswith(f"error: {said}") and f"with {argument} (columns: ['image', 'label', 'score'])" in error


def test_a_dataset_path_not_in_utf8_is_checked_from_its_name_alone():
    with pytest.raises(ValueError, match="is not valid UTF-8"):
        data_module.check_dataset_source(os.fsdecode(b"no-such-\xff"))


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("folders", [("test",), ("validation_all",), ("test", "validation")])
def test_split_folders_without_a_train_split_name_the_folder_to_give(tmp_path, streaming, folders):
    """Class folders one level too deep, in a folder datasets reads as a split (`imgs/test/cat/1.png`): no train
    split (before: a KeyError traceback, streamed: "no 'train' split"). The line names the split folders and, where
    there is one, the folder to give; following it trains."""
    root = tmp_path / "imgs"
    for folder in folders:
        write_imagefolder(root / folder, classes=("cat", "dog"), per_class=10)
    error = refused(tmp_path, root, *(["--streaming", "true", "--max_steps", "1"] if streaming else []))
    roles = " and ".join(sorted({"validation_all": "validation"}.get(folder, folder) for folder in folders))
    give = f"give --dataset '{root / folders[0]}' if it holds your class folders, or " if len(folders) == 1 else ""
    assert error == (
        f"error: The data set folder '{root}' has folders read as the {roles} split{'s' * (len(folders) > 1)} "
        f"({', '.join(map(repr, folders))}) and no train split: {give}add a 'train' folder of class folders beside them."
    )
    if len(folders) == 1 and not streaming:  # the printed fix works
        assert sorted(data_module.load_image_dataset(str(root / folders[0]))["train"].features["label"].names) == [
            "cat",
            "dog",
        ]


@pytest.mark.parametrize(
    "layout, name, streaming",
    [
        ({"x/cat": 10, "y/cat": 10}, "cat", True),  # one class name under two folders
        ({"cat/batch1": 5, "cat/batch2": 5, "dog/batch1": 5, "dog/batch2": 5}, "batch1", False),  # classes too deep
        ({"cat/batch1": 5, "cat/batch2": 5, "dog/batch1": 5, "dog/batch2": 5}, "batch1", True),
        ({"zoo/cat": 5, "zoo/dog": 5, "wild/cat": 5, "wild/fox": 5}, "cat", False),  # two `cat` folders merged
    ],
    ids=["one-name-streamed", "batches", "batches-streamed", "two-cats"],
)
def test_a_class_name_held_by_two_folders_is_refused(tmp_path, layout, name, streaming):
    """One class name, one folder: datasets labels an image by the folder holding it, so `cat/batch1` and
    `dog/batch1` trained as the classes batch1 and batch2, and `zoo/cat` and `wild/cat` as one class, without a
    word. A single wrapper folder (`all/cat`, `all/dog`) and split folders (`train/cat`, `test/cat`) train."""
    root = tmp_path / "imgs"
    for folder, number in layout.items():
        write_imagefolder(root / Path(folder).parent, classes=(Path(folder).name,), per_class=number)
    error = refused(tmp_path, root, *(["--streaming", "true", "--max_steps", "1"] if streaming else []))
    first, second = sorted(Path(folder) for folder in layout if Path(folder).name == name)[:2]
    assert error == (
        f"error: The images of the class {name!r} in '{root}' lie in 2 folders of that name ('{root / first}', "
        f"'{root / second}'), and a class is one folder: the class folders must hold their images directly: move the "
        "sub-folders' images up into their class folder, or give --dataset the folder whose sub-folders are the "
        "classes."
    )
    deep = write_imagefolder(tmp_path / "deep" / "all", classes=("cat", "dog"), per_class=5).parent
    assert data_module.load_image_dataset(str(deep))["train"].features["label"].names == ["cat", "dog"]
    splits = tmp_path / "splits"
    write_imagefolder(splits / "train", classes=("cat", "dog"), per_class=5)
    write_imagefolder(splits / "test", classes=("cat", "dog"), per_class=2)
    assert data_module.load_image_dataset(str(splits))["test"].features["label"].names == ["cat", "dog"]


@pytest.mark.parametrize("streaming", [False, True])
def test_glob_characters_in_folder_and_file_names_are_read_as_names(tmp_path, streaming):
    """datasets reads each path as a glob pattern: `dog [old]`, `photo [0].png` and a data set folder `data [v2]`
    matched nothing (a class and images left out without a word, or "holds no image files")."""
    assert_classes_read(tmp_path / "data [v2]", ("cat", "dog [old]", "fish*?"), streaming, "photo [{}].png")


def assert_classes_read(root: Path, classes: tuple[str, ...], streaming: bool, file_name: str = "{}.png") -> None:
    """Three images in a class folder of each name under `root`, read (or streamed): each image labelled with its
    folder's very name."""
    from PIL import Image

    for label in classes:
        (root / label).mkdir(parents=True)
        for index in range(3):
            Image.new("RGB", (8, 8), (index * 60, 0, 0)).save(root / label / file_name.format(index))
    if streaming:
        from modeling_vit_scratch.training import streaming as streaming_module

        labels = streaming_module.stream_train_class_names(streaming_module.stream_source(str(root)), "label")
        assert sorted(labels) == sorted([*classes] * 3), labels
        return
    split = data_module.load_image_dataset(str(root))["train"]
    names = split.features["label"].names
    assert sorted(names) == sorted(classes)
    assert sorted(names[label] for label in split["label"]) == sorted([*classes] * 3)


ODD_CHARACTERS = "\\ !\"#%&'()*+,-;<=>?@[]^`{|}~é€\u00a0"  # every printable ASCII sign but / and $, and a few others


@pytest.mark.parametrize("streaming", [False, True])
def test_odd_characters_in_class_folder_names_are_read_as_names(tmp_path_factory, streaming):
    """A class folder `c\\` beside `cat` and `dog` (before: `No label column found`, as datasets counts a backslash as
    a path separator and so read no folder as a class), and any name of signs, is a class of that very name."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.text(ODD_CHARACTERS, min_size=1, max_size=4).map(lambda odd: "c" + odd))
    def check(odd):
        assert_classes_read(tmp_path_factory.mktemp("odd") / "imgs", ("cat", "dog", odd), streaming)

    check()
    check.hypothesis.inner_test("c\\")  # the reviewer's name, every run
