"""Every entry of an image folder is accounted for, and every line that names one is safe to print.

- Every entry of an image folder that is not read is named in the left-out line with why, and none is opened: a
  named pipe, a device or a socket (or a link to one), a link to nothing, a link loop. An image that is a link to a
  file outside the folder is read, and named in one line (a shared store is common; a link should not be a
  surprise). In training, streaming and the pre-flight alike (`training/data.py` `folder_files`, `entry_kind`).
- Class names that are one name in two Unicode forms (NFC "caf\\xe9", NFD "cafe\\u0301": folders made on
  different systems) are one line naming both, escaped, wherever the names come from.
- The splits' fingerprint (a resume reads the data its checkpoint was trained on) names an image file by its path
  inside the data set folder and its size: a set moved between an interrupt and its resume is the same set; a
  checkpoint of the earlier rule (real paths) still resumes on the unmoved set.
- Identical files under two class names, and identical files in the training and a held-out split (leakage), are
  one warning line each with the count and an example pair, found by the pre-flight as it decodes (no extra pass).
- A label column holds a class for every row: datasets' -1 ("no label") or a number past the class names, in a
  saved set or a parquet shard, is one line naming the split (or shard), the count and the fix; a metadata.csv
  without a label column is one line naming each column with what it holds and what a run takes; its text labels
  are class names (any string width).
- A file that can no longer be read during training or evaluation (deleted, truncated, no image now, after the
  pre-flight read it) is one line naming it and what changed, the checkpoint kept and the command that resumes, never
  a traceback; every read of a split's images goes through `data.py` `read_image` (the model folder's reload check
  too).
- A name quoted in a line (the left-out line, the pre-flight's, a stream's) shows its control and invisible
  characters escaped (`common/names.py`'s `shown_name`): an escape sequence in a file name never reaches a terminal
  raw.
"""

import os
import shutil
from pathlib import Path

import pytest
from entry_points import Scenario, outcome
from helpers import write_imagefolder

import modeling_vit_scratch.training.data as data_module
from modeling_vit_scratch.common.names import shown_name
from modeling_vit_scratch.training.preflight import check_images
from modeling_vit_scratch.training.streaming import stream_left_out_line, stream_source

ESCAPING = ["a\x1b]0;PWNED\x07\x1b[2J", "a\nsecond line", "a\u202egnp", "a\u200b"]


@pytest.mark.parametrize("name", ESCAPING)
def test_a_name_with_control_characters_is_shown_escaped_in_every_line_naming_it(tmp_path, name):
    root = write_imagefolder(tmp_path / "images", per_class=2)
    (root / "fox" / f"{name}.png.bak").write_bytes(b"old")
    (root / "fox" / f"{name}.png").write_bytes(b"not an image")
    escaped = repr(name)[1:-1]
    assert shown_name(name) == escaped
    line = data_module.left_out_line(str(root))
    assert line == f"Left out 1 file that is not an image by its extension (e.g. fox/{escaped}.png.bak)."
    with pytest.raises(ValueError) as refused:
        check_images(data_module.load_image_dataset(str(root)), progress=False)
    assert f"fox/{escaped}.png) cannot be decoded" in str(refused.value)
    assert name not in str(refused.value)


def with_entries_not_read(root, store):
    """`root` plus a pipe and a link to a device named as images, a pipe without extension, a link loop, a link to
    nothing, and an image that is a link to a file in `store`, outside `root`."""
    os.mkfifo(root / "cat" / "pipe.png")
    os.symlink("/dev/zero", root / "dog" / "zero.png")
    os.mkfifo(root / "fox" / "pipe")
    os.symlink("loop.png", root / "dog" / "loop.png")
    os.symlink(store / "gone.png", root / "dog" / "gone.png")
    store.mkdir()
    shutil.copy(root / "cat" / "0.png", store / "shared.png")
    os.symlink(store / "shared.png", root / "cat" / "shared.png")
    return root


NOT_READ_LINE = (
    "Left out 3 files that are not regular files (a device, pipe or socket, never opened: cat/pipe.png, dog/zero.png, "
    "fox/pipe) and 2 links that lead to no file (dog/gone.png: a link to nothing ({store}/gone.png); dog/loop.png: a "
    "link loop). 1 image is a link to a file outside {root} (e.g. cat/shared.png): read as an image."
)


@pytest.mark.parametrize("streaming", [False, True])
def test_entries_that_are_no_readable_file_are_named_and_never_opened_and_outside_links_are_read(tmp_path, streaming):
    root = with_entries_not_read(write_imagefolder(tmp_path / "images", per_class=4), tmp_path / "store")
    listing = data_module.folder_files(root)
    assert len(listing.images) == 13 and listing.outside_links == [Path("cat/shared.png")]
    if streaming:
        assert sorted(stream_source(str(root)).files) == sorted(root / file for file in listing.images)
        line = stream_left_out_line(str(root))
    else:
        loaded = data_module.load_image_dataset(str(root))
        assert len(loaded["train"]) == 13
        line = data_module.left_out_line(str(root))
    assert line == NOT_READ_LINE.format(root=root, store=tmp_path / "store")


def test_a_pipe_among_parquet_shards_is_named_and_never_opened(tmp_path):
    import pyarrow
    import pyarrow.parquet

    folder = tmp_path / "pq"
    folder.mkdir()
    pyarrow.parquet.write_table(pyarrow.table({"label": [0, 1]}), folder / "train-0.parquet")
    os.mkfifo(folder / "train-late.parquet")
    assert all(file.name != "train-late.parquet" for file in stream_source(str(folder)).files)
    assert stream_left_out_line(str(folder)) == (
        "Left out 1 file that is not a regular file (a device, pipe or socket, never opened: train-late.parquet)."
    )


@pytest.mark.parametrize("target", ["itself", "nothing"])
def test_a_dataset_that_is_a_broken_link_is_named_as_one(tmp_path, target):
    link = tmp_path / "data"
    os.symlink(link if target == "itself" else tmp_path / "moved", link)
    done = outcome("train", Scenario(tmp_path).argv("train")[:0] + ["--dataset", str(link), "--output_dir", "o"])
    what = "a link loop" if target == "itself" else f"a link to nothing ({tmp_path / 'moved'})"
    assert done.one_line, done
    assert done.error.startswith(f"error: --dataset '{link}' is {what}, not a data set: point the link at the data")


@pytest.mark.integration
def test_a_run_on_a_folder_with_a_pipe_links_and_a_copy_trains_on_what_it_can_read_and_names_the_rest(tmp_path, capsys):
    scenario = Scenario(tmp_path)
    with_entries_not_read(scenario.images(), tmp_path / "store")
    shutil.copy(scenario.images() / "cat" / "0.png", scenario.images() / "dog" / "copy.png")
    result = outcome("train", scenario.argv("train"))
    assert result.code == 0, result
    printed = capsys.readouterr().out.splitlines()
    assert any(line.startswith("Pre-flight: 32 images decoded in ") for line in printed), printed
    copies = [line for line in printed if line.startswith("Warning: 1 image is stored under two class names")]
    assert copies and f"{scenario.images()}/dog/copy.png (" in copies[0], printed
    assert NOT_READ_LINE.format(root=scenario.images(), store=tmp_path / "store") in printed


@pytest.mark.parametrize("source", ["folder", "class_names", "saved_strings"])
def test_class_names_that_differ_only_in_unicode_form_are_one_line_naming_both(tmp_path, source):
    from datasets import ClassLabel, Dataset, DatasetDict, Features
    from datasets import Image as ImageFeature

    composed, decomposed = "caf\u00e9", "cafe\u0301"
    root = write_imagefolder(tmp_path / "classes", classes=(composed, "fox"), per_class=10)
    if source == "folder":
        (root / "fox").rename(root / decomposed)
        dataset = root
    else:
        loaded = data_module.load_image_dataset(str(root))["train"]
        names = sorted([composed, decomposed])
        if source == "class_names":
            features = Features(image=ImageFeature(), label=ClassLabel(names=names))
            rows = Dataset.from_dict({"image": loaded["image"], "label": loaded["label"]}, features=features)
        else:
            rows = Dataset.from_dict({"image": loaded["image"], "label": [names[n] for n in loaded["label"]]})
        dataset = tmp_path / "saved"
        DatasetDict(train=rows).save_to_disk(dataset)
    done = outcome("train", train_on(tmp_path, dataset))
    assert done.one_line, done
    assert done.error.startswith(
        f"error: The class names 'cafe\\u0301' and 'caf\\xe9' of the data set {dataset} are one name written in two "
        "Unicode forms"
    )
    assert not (tmp_path / "out-train").exists()


def train_on(tmp_path, dataset) -> list[str]:
    argv = Scenario(tmp_path).argv("train")
    argv[argv.index("--dataset") + 1] = str(dataset)
    return argv


def test_the_splits_fingerprint_does_not_depend_on_where_the_set_lies(tmp_path):
    import json

    from modeling_vit_scratch.training.resumed_data import DATA_FILE, check_resumed_data, splits_fingerprint

    def fingerprinted(root):
        splits = data_module.prepare_splits(
            data_module.load_image_dataset(str(root)), validation_fraction=0.2, test_fraction=0.2
        ).splits
        return splits, splits_fingerprint(splits, str(root))

    root = write_imagefolder(tmp_path / "a" / "images", per_class=6)
    splits, here = fingerprinted(root)
    assert fingerprinted(shutil.copytree(root, tmp_path / "b" / "images"))[1] == here
    (tmp_path / "b" / "images" / "cat" / "0.png").write_bytes((root / "cat" / "1.png").read_bytes())  # another size
    assert fingerprinted(tmp_path / "b" / "images")[1] != here
    checkpoint = tmp_path / "checkpoint-1"  # written by an earlier version: the real paths, no rule named
    checkpoint.mkdir()
    (checkpoint / DATA_FILE).write_text(
        json.dumps({"dataset": str(root), "splits_fingerprint": splits_fingerprint(splits)})
    )
    check_resumed_data(str(checkpoint), str(root), here, splits)
    with pytest.raises(ValueError, match="whose splits differ"):
        check_resumed_data(str(checkpoint), str(root), here)


@pytest.mark.parametrize("change", ["removed", "added", "unnamed"])
def test_a_set_changed_between_interrupt_and_resume_names_the_change_and_the_fixes(tmp_path, change):
    """The same --dataset with an image deleted (or added) since the checkpoint: how many and which, never "resume
    with the same --dataset"; a set too large to keep its names (`KEPT_IMAGES`) is told by the number alone."""
    import json

    from modeling_vit_scratch.training import resumed_data
    from modeling_vit_scratch.training.resumed_data import DATA_FILE, check_resumed_data, image_names

    def read(root):
        splits = data_module.prepare_splits(
            data_module.load_image_dataset(str(root)), validation_fraction=0.2, test_fraction=0.2
        ).splits
        return resumed_data.splits_fingerprint(splits, str(root)), image_names(splits, str(root))

    root = write_imagefolder(tmp_path / "images", per_class=6)
    fingerprint, kept = read(root)
    checkpoint = tmp_path / "checkpoint-1"
    checkpoint.mkdir()
    (checkpoint / DATA_FILE).write_text(json.dumps({"dataset": str(root), "splits_fingerprint": fingerprint, **kept}))
    check_resumed_data(str(checkpoint), str(root), *read(root)[:1], None, read(root)[1])  # the same set: resumes
    if change == "added":
        shutil.copy(root / "cat" / "1.png", root / "cat" / "9.png")
    else:
        (root / "cat" / "1.png").unlink()
    if change == "unnamed":
        (checkpoint / DATA_FILE).write_text(
            json.dumps({"dataset": str(root), "splits_fingerprint": fingerprint, "split_rows": kept["split_rows"]})
        )
    said = {"removed": "1 image fewer (cat/1.png)", "added": "1 image more (cat/9.png)", "unnamed": "1 image fewer"}
    with pytest.raises(ValueError) as refused:
        check_resumed_data(str(checkpoint), str(root), *read(root)[:1], None, read(root)[1])
    assert str(refused.value) == (
        f"--resume_from_checkpoint: --dataset {str(root)!r} changed since {checkpoint} was written: {said[change]}; a "
        "resumed run could test on images it trained on: put the set back as it was, or start a new run in another "
        "--output_dir."
    )


def test_identical_files_under_two_classes_or_across_train_and_held_out_splits_are_one_warning_each(tmp_path):
    from datasets import DatasetDict

    root = write_imagefolder(tmp_path / "images", per_class=3)
    shutil.copy(root / "cat" / "0.png", root / "dog" / "copy.png")
    shutil.copy(root / "fox" / "1.png", root / "fox" / "copy.png")
    shutil.copy(root / "fox" / "2.png", root / "fox" / "copy2.png")
    train = data_module.load_image_dataset(str(root))["train"]
    names = [cell["path"] for cell in train.cast_column("image", data_module.ImageFeature(decode=False))["image"]]
    held = [names.index(str(root / "fox" / name)) for name in ("copy.png", "copy2.png")]
    splits = DatasetDict(
        train=train.select([row for row in range(len(train)) if row not in held]),
        test=train.select(held),
    )
    check = check_images(splits, decode=True, progress=False)
    assert check.copies_lines(["cat", "dog", "fox"]) == [
        (
            f"Warning: 1 image is stored under two class names as identical files (e.g. {root}/cat/0.png (train, class "
            f"'cat') and {root}/dog/copy.png (train, class 'dog')): the model is taught two labels for it; remove the "
            "copy from the wrong class."
        ),
        (
            f"Warning: 2 images of the validation or test split are identical to training images (e.g. "
            f"{root}/fox/copy.png (test, class 'fox') and {root}/fox/1.png (train, class 'fox')): their score measures "
            "memory, not generalisation; remove the copies from one side."
        ),
    ]
    halves = [check_images(splits, decode=True, progress=False, part=(index, 2)) for index in range(2)]
    combined = type(check).combined(halves)
    assert combined.copies_lines(["cat", "dog", "fox"]) == check.copies_lines(["cat", "dog", "fox"])
    assert check_images(splits, decode=False, progress=False).copies_lines(["cat", "dog", "fox"]) == []


@pytest.mark.parametrize("where", ["train", "test"])
@pytest.mark.parametrize("named", [True, False])
def test_a_label_of_minus_one_is_one_line_naming_the_split_and_the_rows(tmp_path, where, named):
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

    loaded = data_module.load_image_dataset(str(write_imagefolder(tmp_path / "images", per_class=10)))["train"]
    labels = list(loaded["label"])
    labels[:2] = [-1, -1]
    feature = ClassLabel(names=["cat", "dog", "fox"]) if named else Value("int64")
    rows = Dataset.from_dict(
        {"image": loaded["image"], "label": labels}, features=Features(image=loaded.features["image"], label=feature)
    )
    raw = DatasetDict(train=rows) if where == "train" else DatasetDict(train=loaded, test=rows)
    with pytest.raises(ValueError) as refused:
        data_module.prepare_splits(raw)
    wants = "a class in 0..2" if named else "a class number of 0 or more"
    assert str(refused.value).startswith(
        f"Label column 'label' of the {where} split holds 2 rows of -1 (datasets' 'no label'), and training needs "
        f"{wants} in every row: remove those rows"
    )
    assert ("an unlabelled test split can be left out" in str(refused.value)) == (where == "test")


def test_a_metadata_file_without_a_label_column_names_what_each_column_holds_and_its_text_labels_are_names(tmp_path):
    root = tmp_path / "flat"
    root.mkdir()
    source = write_imagefolder(tmp_path / "images", per_class=10)
    rows = ["file_name,species"]
    for image in sorted(source.rglob("*.png")):
        shutil.copy(image, root / f"{image.parent.name}{image.name}")
        rows.append(f"{image.parent.name}{image.name},{image.parent.name}")
    (root / "metadata.csv").write_text("\n".join(rows) + "\n")
    raw = data_module.load_image_dataset(str(root))
    with pytest.raises(ValueError) as refused:
        data_module.prepare_splits(raw)
    assert str(refused.value).startswith(
        "No label column found in the data set (columns: 'image' (images), 'species' (text)), and a run needs a "
        "column of class labels (a ClassLabel, integers 0..N-1, or class names as text"
    )
    assert str(refused.value).endswith("name it with --label_column.")
    assert data_module.prepare_splits(raw, label_column="species").labels == ["cat", "dog", "fox"]


def test_a_parquet_shard_with_rows_of_no_label_is_one_line_naming_it(tmp_path):
    import pyarrow
    import pyarrow.parquet

    from modeling_vit_scratch.training.streaming import check_shard_labels

    shard = tmp_path / "train-0.parquet"
    pyarrow.parquet.write_table(pyarrow.table({"label": [0, -1, 1]}), shard)
    with pytest.raises(ValueError, match=r"holds the label -1 \(datasets' 'no label'\) in column 'label', and "):
        check_shard_labels(shard, "label", 2)
    pyarrow.parquet.write_table(pyarrow.table({"label": [0, 1, 1]}), shard)
    check_shard_labels(shard, "label", 2)


@pytest.mark.parametrize(
    "change, said",
    [
        (lambda path: path.unlink(), "was deleted"),
        (lambda path: path.write_bytes(path.read_bytes()[:60]), "was truncated"),
        (lambda path: path.write_bytes(b"hello"), "is no longer an image"),
    ],
)
def test_an_image_changed_after_the_preflight_is_one_line_naming_it_and_what_changed(tmp_path, change, said):
    from modeling_vit_scratch import ViTScratchImageProcessor

    root = write_imagefolder(tmp_path / "images", per_class=2, size=(64, 64))
    split = data_module.load_image_dataset(str(root))["train"]
    rows = data_module.transformed(split, data_module.ImageTransform(ViTScratchImageProcessor(size=8)))
    assert rows[0]["pixel_values"].shape == (3, 8, 8)
    change(root / "cat" / "0.png")
    with pytest.raises(data_module.ImageChanged) as changed:
        rows[0]
    assert str(changed.value) == f"The image '{root}/cat/0.png' {said} after the pre-flight read it"


@pytest.mark.integration
def test_an_image_deleted_before_the_final_evaluation_is_one_line_with_the_command_that_resumes(tmp_path, monkeypatch):
    from transformers import Trainer

    scenario = Scenario(tmp_path)
    original = Trainer.train

    def train_then_delete(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        for image in scenario.images().rglob("*.png"):
            image.unlink()
        return result

    monkeypatch.setattr(Trainer, "train", train_then_delete)
    done = outcome("train", scenario.argv("train"))
    output = tmp_path / "out-train"
    assert done.one_line, done
    assert done.error.startswith(f"error: The image '{scenario.images()}/")
    assert (
        " was deleted after the pre-flight read it, and the run stopped (restore it first: a resumed run reads "
        in done.error
    )
    assert f"; the last checkpoint is {output / 'checkpoint-3'}; resume with: " in done.error
    assert "--resume_from_checkpoint true" in done.error and (output / "checkpoint-3").is_dir()


def test_integer_labels_of_a_held_out_split_past_the_train_split_s_classes_are_one_line(tmp_path):
    from datasets import Dataset, DatasetDict, Value

    train = data_module.load_image_dataset(str(write_imagefolder(tmp_path / "images", per_class=10)))["train"]
    test = Dataset.from_dict({"image": train["image"], "label": [5, *list(train["label"])[1:]]})
    with pytest.raises(ValueError, match=r"^Label column 'label' of the test split holds 1 row of numbers past its 3 "):
        data_module.prepare_splits(DatasetDict(train=train, test=test.cast_column("label", Value("int64"))))
