"""What `--dataset` reads is checked before it is loaded, and a resumed run trains the classes it was trained on.

- A `--dataset` that is a file is one line saying so and what `--dataset` takes.
- An image folder whose images lie at different depths (`cat/0.png` and `cat/deep/0.png`: `datasets` then infers no
  labels) is one line naming an example of each depth and the fix.
- A file or folder name holding a token is refused before `datasets` reads the folder (it would keep the name in its
  cache), without echoing the token.
- A resumed run whose data has other classes than its checkpoint's config.json (renamed, or another count) is one
  line naming both, before the image pre-flight decodes anything.
- Every split yields a batch: evaluation reads every row of the validation and test splits whatever
  `--dataloader_drop_last` says (before: with the option, a split smaller than the evaluation batch was scored on
  nothing and the run failed after training, and a larger one lost its last images); a training split that
  `--dataloader_drop_last true` would leave without a batch is one line before the pre-flight (before: a `max_steps`
  error from the Trainer after the pre-flight).
"""

import json
import shutil
from pathlib import Path

import pytest
from entry_points import Scenario, outcome, with_argument, with_arguments
from helpers import write_imagefolder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_secrets import SECRET, logged_in  # noqa: F401 (a fixture: HF_TOKEN holds SECRET, no saved login)

import modeling_vit_scratch.training.data as data_module
import modeling_vit_scratch.training.trainer as trainer_module


def train_on(scenario: Scenario, dataset, *extra: str) -> list[str]:
    """The scenario's working training line, on `dataset`."""
    argv = scenario.argv("train")
    argv[argv.index("--dataset") + 1] = str(dataset)
    return with_arguments(argv, list(extra))


def refused_training(scenario: Scenario, dataset, streaming: bool) -> str:
    """The one line training on `dataset` (streamed or not) is refused with, having saved no model."""
    done = outcome("train", train_on(scenario, dataset, *(["--streaming", "true", "--max_steps", "2"] * streaming)))
    return done.refused(scenario.root / "out-train" / "config.json")


@pytest.fixture
def never_loaded(monkeypatch):
    """`datasets` is never asked to read the folder: a refusal comes before its cache is written."""

    def refuse(*args, **kwargs):
        raise AssertionError("load_dataset was called")

    monkeypatch.setattr(data_module, "load_dataset", refuse)


def test_a_dataset_that_is_a_file_is_named_as_a_file(tmp_path, never_loaded):
    image = write_imagefolder(tmp_path / "imgs", classes=("a",), per_class=1) / "a" / "0.png"
    done = outcome("train", train_on(Scenario(tmp_path), image))
    assert done.one_line, done
    assert done.error.startswith(f"error: --dataset '{image}' is a file, not a data set: give a folder with one")
    assert "a save_to_disk folder, a hub data set name or 'digits'." in done.error
    assert not (tmp_path / "out-train" / "config.json").exists()


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("folder", ["saved model", "run with a record"])
def test_a_dataset_that_is_a_model_folder_is_named_as_one_with_the_model_argument(
    tmp_path, never_loaded, folder, streaming
):
    """A trained model's folder given as --dataset (its training_curves.png and checkpoint files look like splits)
    is named as a model folder, with --model as the likely intent, before datasets reads anything."""
    scenario = Scenario(tmp_path)
    given = tmp_path / "o2"
    shutil.copytree(scenario.model(), given)
    if folder == "run with a record":  # a run's folder: config.json and its record, weights elsewhere
        (given / "model.safetensors").unlink()
        (given / "training_record.json").write_text("{}")
    (given / "training_curves.png").write_bytes(b"")
    error = refused_training(scenario, given, streaming)
    assert error.startswith(f"error: --dataset '{given}' is a saved model's folder (config.json, "), error
    assert "not a data set: to train from that model give it to --model, and give --dataset a folder" in error


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("stray", ["dataset_dict.json", "dataset_info.json"])
def test_an_image_folder_with_a_stray_save_to_disk_file_is_one_line_naming_that_file(
    tmp_path, never_loaded, stray, streaming
):
    """An image folder holding a save_to_disk description file (but none of the splits it promises) is read as a
    save_to_disk set: one line names the file and both fixes, never datasets' "Expected to load a `Dataset`"."""
    scenario = Scenario(tmp_path)
    images = scenario.images()
    (images / stray).write_text(json.dumps({"splits": ["train", "test"]}) if stray == "dataset_dict.json" else "{}")
    error = refused_training(scenario, images, streaming)
    assert error.startswith(f"error: --dataset '{images}' has a {stray}, so it is read as a save_to_disk"), error
    assert f"remove {stray} to read the class folders as an image folder, or give --dataset the folder" in error


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(extra_levels=st.lists(st.sampled_from(["deep", "er", "x y"]), min_size=1, max_size=3, unique=True))
def test_images_at_mixed_depths_are_named_with_an_example_of_each(tmp_path_factory, never_loaded, extra_levels):
    tmp_path = tmp_path_factory.mktemp("mixed")
    dataset = write_imagefolder(tmp_path / "imgs", classes=("a", "b"), per_class=2)
    deep = dataset.joinpath("a", *extra_levels)
    deep.mkdir(parents=True)
    shutil.copy(dataset / "a" / "0.png", deep / "0.png")
    done = outcome("train", train_on(Scenario(tmp_path), dataset))
    assert done.one_line, done
    deep_name = "/".join(["a", *extra_levels, "0.png"])
    assert done.error == (
        f"error: The images in '{dataset}' lie at different depths ('a/0.png' (2 levels down), '{deep_name}' "
        f"({2 + len(extra_levels)} levels down)): put every image in one level of class sub-folders "
        f"('{dataset / 'cat'}/1.png', '{dataset / 'dog'}/1.png', ...)."
    )


@pytest.mark.parametrize(
    "where",
    [
        "a/img-{}.png",  # an image's file name
        "a/{}/0.png",  # a folder below a class
        "a/notes-{}.txt",  # a file datasets would not read as an image
        "{}/0.png",  # a class folder: named as a class
    ],
)
@pytest.mark.usefixtures("logged_in", "never_loaded")
def test_a_file_or_folder_name_holding_a_token_is_refused_before_loading(tmp_path, where):
    dataset = write_imagefolder(tmp_path / "imgs", classes=("a", "b"), per_class=3)
    named = dataset / where.format(SECRET)
    named.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(dataset / "a" / "0.png", named)
    done = outcome("train", train_on(Scenario(tmp_path), dataset))
    assert done.one_line, done
    assert SECRET not in done.error
    if where.startswith("{}"):
        assert done.error.startswith(f"error: A class name of the data set {dataset} holds or looks like a Hub token")
        assert done.error.endswith("rename that class (its folder, or its label in the data set) before training.")
    else:
        assert done.error == (
            f"error: A file or folder name in the data set folder '{dataset}' holds or looks like a Hub token, which "
            "would be sent to the Hub or written to files: rename the file "
            f"({where.format('***').removesuffix('/0.png')}) before training."  # the first name found, masked
        )
    assert named.exists()


@pytest.mark.integration
@pytest.mark.parametrize(
    "classes, shown",
    [
        (("zebra", "yak", "xerus"), "3 (xerus, yak, zebra)"),  # renamed: the same count would train, relabelled
        (("a", "b", "c", "d"), "4 (a, b, c, d)"),  # another count: was a traceback from the checkpoint's load
    ],
)
def test_resuming_with_other_classes_than_the_checkpoints_is_refused_before_the_preflight(
    tmp_path, monkeypatch, classes, shown
):
    first = write_imagefolder(tmp_path / "first", classes=("a", "b", "c"), per_class=10)
    scenario = Scenario(tmp_path)
    argv = train_on(scenario, first, "--save_strategy", "epoch", "--eval_strategy", "epoch")
    assert outcome("train", argv).code == 0
    checkpoint = next((tmp_path / "out-train").glob("checkpoint-*"))
    other = write_imagefolder(tmp_path / "other", classes=classes, per_class=10)
    decoded = []
    monkeypatch.setattr(trainer_module, "check_images", lambda *args, **kwargs: decoded.append(args))
    for resume in ("true", str(checkpoint)):
        argv = train_on(scenario, other, "--save_strategy", "epoch", "--eval_strategy", "epoch")
        done = outcome("train", argv + ["--resume_from_checkpoint", resume])
        assert done.one_line, done
        assert done.error.startswith(
            f"error: The checkpoint '{checkpoint}' was trained on 3 classes (a, b, c) but the data set {other} has "
            f"{shown}: resume with the data set it was trained on, or start a new run that fine-tunes it"
        )
        assert f"--model {checkpoint} without --resume_from_checkpoint" in done.error
    assert not decoded


def test_a_long_label_list_is_shortened():
    assert data_module.shown_labels([str(k) for k in range(12)]) == "0, 1, 2, 3, 4, ... 7 more"
    assert data_module.shown_labels(["a", "b"]) == "a, b"


@pytest.mark.parametrize("streaming", [False, True])
def test_a_linked_class_folder_is_one_line_naming_it_before_the_data_is_read(tmp_path, monkeypatch, streaming):
    monkeypatch.setattr(trainer_module, "load_image_dataset", lambda *a, **k: pytest.fail("read the data"))
    images = write_imagefolder(tmp_path / "imgs", classes=("a", "b"), per_class=4)
    elsewhere = write_imagefolder(tmp_path / "elsewhere", classes=("c",), per_class=4) / "c"
    (images / "c").symlink_to(elsewhere, target_is_directory=True)
    (images / ".hidden").symlink_to(elsewhere, target_is_directory=True)  # never read by datasets: no matter
    done = outcome("train", train_on(Scenario(tmp_path), images, "--streaming", str(streaming).lower()))
    assert done.refused(tmp_path / "out-train") == (
        f"error: The data set folder '{images}' holds a linked folder, 'c' (a symbolic link to '{elsewhere}'), which "
        "datasets does not read: its images would be left out. Put the folder itself there (copy or move it in "
        "place of the link)."
    )


def with_files_that_are_not_images(root, backup: str):
    """The scenario's image folder plus a backup copy of an image (`fox/<backup>`), a note and a hidden file."""
    shutil.copy(root / "fox" / "0.png", root / "fox" / backup)
    (root / "notes.txt").write_text("where these came from")
    (root / "cat" / ".DS_Store").write_bytes(b"\0\1")
    return root


@pytest.mark.parametrize("backup", ["0.PNG.bak", "1.jpg.orig", "2.png.tmp"])
@pytest.mark.parametrize("streaming", [False, True])
def test_files_that_are_not_images_by_their_extension_are_left_out_and_named(tmp_path, backup, streaming):
    """datasets' imagefolder reads a file whose second-to-last extension is an image's (`0.PNG.bak`) as an image of
    its folder's class: a copy could land in train and its original in test. Training reads what the pre-flight
    counts, images by their last extension, and names what it leaves out."""
    from modeling_vit_scratch.training.streaming import stream_source

    root = with_files_that_are_not_images(write_imagefolder(tmp_path / "images", per_class=4), backup)
    (root / "zebra").mkdir()  # a folder holding only a backup copy: datasets' generation failed on it
    shutil.copy(root / "fox" / "0.png", root / "zebra" / backup)
    read = data_module.folder_files(root)
    assert len(read.images) == 12
    assert read.not_images == [Path("notes.txt"), Path("fox") / backup, Path("zebra") / backup]
    if streaming:
        assert sorted(stream_source(str(root)).files) == sorted(root / file for file in read.images)
    else:
        loaded = data_module.load_image_dataset(str(root))
        assert len(loaded["train"]) == 12
        assert loaded["train"].features["label"].names == ["cat", "dog", "fox"]
        paths = loaded["train"].cast_column("image", data_module.ImageFeature(decode=False))["image"]
        assert not [cell["path"] for cell in paths if not cell["path"].endswith(".png")]
    assert data_module.left_out_line(str(root)) == (
        f"Left out 3 files that are not images by their extension (e.g. notes.txt, fox/{backup}, zebra/{backup}) and "
        "1 hidden file (cat/.DS_Store)."
    )
    assert data_module.left_out_line("digits") is None


def test_a_hidden_folder_holding_images_is_named_as_a_folder_with_its_count_and_how_to_train_on_it(tmp_path):
    """A class folder `__fox` is a whole class left out, not "a hidden file"; a hidden folder without images
    (`.git`) is still counted with the hidden files, and one inside a class names its images."""
    root = write_imagefolder(tmp_path / "images", per_class=4)
    (root / "fox").rename(root / "__fox")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main")
    shutil.copytree(root / "cat", root / "cat" / ".thumbs")
    assert data_module.left_out_line(str(root)) == (
        "Left out 1 hidden file (.git). "
        "Left out the hidden folder __fox (4 images): rename it without the leading '__' to train on it as a class. "
        "Left out the hidden folder cat/.thumbs (4 images): rename it without the leading '.' to train on its images."
    )
    assert data_module.load_image_dataset(str(root))["train"].features["label"].names == ["cat", "dog"]


@pytest.mark.integration
def test_a_run_on_a_folder_with_a_backup_copy_trains_on_the_images_only_and_says_what_it_left_out(tmp_path, capsys):
    scenario = Scenario(tmp_path)
    with_files_that_are_not_images(scenario.images(), "0.PNG.bak")
    result = outcome("train", scenario.argv("train"))
    assert result.code == 0, result
    printed = capsys.readouterr().out.splitlines()
    assert any(line.startswith("Pre-flight: 30 images decoded in ") for line in printed), printed
    assert (
        "Left out 2 files that are not images by their extension (e.g. notes.txt, fox/0.PNG.bak) and 1 hidden "
        "file (cat/.DS_Store)." in printed
    )


ESCAPING_NAMES = ["dog\x1b]0;PWNED\x07\x1b[2J", "dog\nsecond line", "dog\u202egnp.exe", "dog\u200b"]


@pytest.mark.parametrize("name", ESCAPING_NAMES)
@pytest.mark.parametrize("source", ["folder", "class_names", "saved_strings"])
def test_a_class_name_with_control_or_invisible_characters_is_refused_showing_it_escaped(tmp_path, name, source):
    """Wherever the names come from (class folders, a ClassLabel's names, string labels of a saved set), a class
    name that would write raw control characters into the card and terminals is one line before any training."""
    from datasets import ClassLabel, Dataset, DatasetDict, Features
    from datasets import Image as ImageFeature

    root = write_imagefolder(tmp_path / "classes", classes=("cat", "fox"), per_class=10)
    if source == "folder":
        (root / "fox").rename(root / name)
        dataset = root
    else:
        loaded = data_module.load_image_dataset(str(root))["train"]
        labels = ["cat" if label == 0 else name for label in loaded["label"]]
        if source == "class_names":
            features = Features(image=ImageFeature(), label=ClassLabel(names=["cat", name]))
            rows = Dataset.from_dict({"image": loaded["image"], "label": loaded["label"]}, features=features)
        else:
            rows = Dataset.from_dict({"image": loaded["image"], "label": labels})
        dataset = tmp_path / "saved"
        DatasetDict(train=rows).save_to_disk(dataset)
    argv = Scenario(tmp_path).argv("train")
    argv[argv.index("--dataset") + 1] = str(dataset)
    done = outcome("train", argv)
    assert done.one_line, done
    assert done.error.startswith(f"error: A class name of the data set {dataset} holds control or invisible ")
    assert f"({name!r})" in done.error and "\x1b" not in done.error and "\n" not in done.error
    assert done.error.endswith("with printable characters only.")
    assert not (tmp_path / "out-train" / "config.json").exists()


@pytest.mark.integration
def test_drop_last_never_drops_an_evaluated_image(tmp_path):
    """6 validation and 6 test images, read in batches of 4 with --dataloader_drop_last true: every one is scored."""
    import json

    scenario = Scenario(tmp_path)
    output = tmp_path / "out"
    argv = [*scenario.argv("train", output), "--dataloader_drop_last", "true", "--per_device_eval_batch_size", "4"]
    argv = with_argument(argv, "--per_device_train_batch_size", 4)
    result = outcome("train", argv)
    assert result.code == 0, result
    metrics = json.loads((output / "all_results.json").read_text())
    record = json.loads((output / "training_record.json").read_text())
    scored = sum(map(sum, metrics["test_confusion_matrix"]["matrix"]))
    assert scored == record["num_test"] and record["num_test"] % 4 != 0, (scored, record)


@pytest.mark.parametrize("images, processes, refused", [(7, 1, True), (8, 1, False), (15, 2, True), (16, 2, False)])
def test_a_training_split_left_without_a_batch_by_drop_last_is_one_line(monkeypatch, images, processes, refused):
    from transformers import TrainingArguments

    from modeling_vit_scratch.training.trainer import check_training_steps

    args = TrainingArguments("out", report_to="none", use_cpu=True, per_device_train_batch_size=8)
    monkeypatch.setattr(TrainingArguments, "world_size", property(lambda self: processes))
    check_training_steps(args, images)  # without the option, a batch that is not full is read
    args.dataloader_drop_last = True
    if not refused:
        check_training_steps(args, images)
        return
    with pytest.raises(ValueError) as error:
        check_training_steps(args, images)
    each = " x 2 processes" if processes > 1 else ""
    assert str(error.value) == (
        f"--dataloader_drop_last true drops every batch of the training split: it holds {images} images, fewer than "
        f"one batch (--per_device_train_batch_size 8{each}): lower --per_device_train_batch_size, or leave out "
        "--dataloader_drop_last."
    )


@pytest.mark.integration
def test_drop_last_with_a_training_split_under_one_batch_is_refused_before_the_preflight(tmp_path, monkeypatch):
    scenario = Scenario(tmp_path)
    monkeypatch.setattr(trainer_module, "check_images_together", lambda *a, **k: pytest.fail("ran the pre-flight"))
    argv = with_argument(
        [*scenario.argv("train"), "--dataloader_drop_last", "true"], "--per_device_train_batch_size", 64
    )
    result = outcome("train", argv)
    assert result.code == 1 and result.one_line, result
    assert result.error.startswith("error: --dataloader_drop_last true drops every batch of the training split: ")
