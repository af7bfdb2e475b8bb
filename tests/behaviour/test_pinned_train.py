"""Training, end to end through scripts/train.py: the data a user has (an image folder, a save_to_disk set, parquet
shards streamed), a recipe, resuming an interrupted run; and the output folder's rule: a new or empty folder or one
training wrote, never a model replaced without --overwrite_output_dir, never a folder of someone else's files."""

import shutil

import numpy as np
import pytest
import torch
from datasets import ClassLabel, Dataset, Features
from datasets import Image as ImageFeature
from helpers import MODEL_FOLDER_FILES, tiny_model_file
from PIL import Image
from pinned import SECRET, assert_no_secret, contents, missing, run, train_args
from safetensors.torch import load_file
from transformers import AutoModelForImageClassification

pytestmark = pytest.mark.integration  # all but the wiring of the script are pins for `make test-slow`


def images(count: int, seed: int) -> tuple[list, list[int]]:
    """`count` 12x10 RGB images of 3 classes (each its own brightness) and their labels."""
    rng = np.random.default_rng(seed)
    labels = [index % 3 for index in range(count)]
    pixels = [np.clip(40 + 80 * label + rng.integers(-20, 20, (10, 12, 3)), 0, 255) for label in labels]
    return [Image.fromarray(array.astype(np.uint8)) for array in pixels], labels


FEATURES = Features(image=ImageFeature(), label=ClassLabel(names=["cat", "dog", "fox"]))
# parquet shards as the Hub names them: shard name -> (images, seed)
SHARDS = {
    "train-00000-of-00002": (24, 2),
    "train-00001-of-00002": (24, 3),
    "validation-00000-of-00001": (9, 4),
    "test-00000-of-00001": (9, 5),
}


@pytest.mark.slow
def test_an_image_folder_trains_into_a_complete_model_folder(trained):
    assert trained.ran.code == 0, trained.ran
    assert not missing(trained.model, MODEL_FOLDER_FILES)
    assert_no_secret(trained.ran, folders=[trained.model])
    model = AutoModelForImageClassification.from_pretrained(trained.model)  # the package registered on import
    assert sorted(model.config.id2label.values()) == ["cat", "dog", "fox"]  # the class sub-folders


@pytest.mark.slow
def test_a_save_to_disk_set_trains(tmp_path):
    pictures, labels = images(30, seed=1)
    Dataset.from_dict({"image": pictures, "label": labels}, features=FEATURES).save_to_disk(tmp_path / "saved")
    tiny_model_file(tmp_path)
    ran = run("train", *train_args(tmp_path, tmp_path / "out", dataset=tmp_path / "saved"), home=tmp_path / "home")
    assert ran.code == 0, ran
    assert not missing(tmp_path / "out", MODEL_FOLDER_FILES)


@pytest.mark.slow
def test_parquet_shards_train_streamed(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    for name, (count, seed) in SHARDS.items():
        pictures, labels = images(count, seed)
        table = Dataset.from_dict({"image": pictures, "label": labels}, features=FEATURES)
        table.to_parquet(shards / f"{name}.parquet")
    tiny_model_file(tmp_path)
    argv = train_args(tmp_path, tmp_path / "out", "--streaming", "true", "--shuffle_buffer_size", "8", dataset=shards)
    ran = run("train", *argv, home=tmp_path / "home")
    assert ran.code == 0, ran
    assert not missing(tmp_path / "out", MODEL_FOLDER_FILES)


@pytest.mark.slow
def test_an_interrupted_run_resumes_to_a_complete_model_folder(trained, tmp_path):
    """A run killed after its first checkpoint (its folder: the package's marker and that checkpoint) goes on from it,
    to the model the run not interrupted ends with."""
    assert trained.ran.code == 0, trained.ran
    interrupted = tmp_path / "interrupted"
    interrupted.mkdir()
    shutil.copy(trained.model / ".vit-scratch-output", interrupted)
    shutil.copytree(trained.model / "checkpoint-1", interrupted / "checkpoint-1")
    argv = train_args(trained.root, interrupted, "--resume_from_checkpoint", "true")
    ran = run("train", *argv, home=tmp_path / "home")
    assert ran.code == 0, ran
    assert not missing(interrupted, MODEL_FOLDER_FILES)
    assert (interrupted / "checkpoint-2").is_dir()  # it trained on to the last step
    resumed, whole = load_file(interrupted / "model.safetensors"), load_file(trained.model / "model.safetensors")
    assert resumed.keys() == whole.keys()
    for name in whole:
        torch.testing.assert_close(resumed[name], whole[name])


def copy_of_model(trained, folder):
    assert trained.ran.code == 0, trained.ran
    shutil.copytree(trained.model, folder, symlinks=True)
    return folder


@pytest.mark.slow
def test_a_folder_holding_a_model_is_refused_untouched_without_overwrite_output_dir(cli, trained, tmp_path):
    folder = copy_of_model(trained, tmp_path / "model")
    before = contents(folder)
    ran = cli("train", *train_args(trained.root, folder, "--seed", "1"))
    assert ran.code != 0, ran
    assert "--overwrite_output_dir" in ran.stderr  # the way to replace it
    assert contents(folder) == before


@pytest.mark.slow
@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "with overwrite_output_dir"])
def test_a_folder_of_someone_else_s_files_is_refused_untouched(cli, trained, tmp_path, overwrite):
    folder = tmp_path / "mine"
    (folder / "notes").mkdir(parents=True)
    (folder / "notes" / "todo.txt").write_text("my notes")
    (folder / "thesis.tex").write_text("\\documentclass{article}")
    before = contents(folder)
    extra = ["--overwrite_output_dir", "true"] if overwrite else []
    ran = cli("train", *train_args(trained.root, folder, *extra))
    assert ran.code != 0, ran
    assert contents(folder) == before


@pytest.mark.slow
def test_a_recipe_with_arguments_after_it_trains_anew_over_a_model_with_overwrite_output_dir(trained, tmp_path):
    """`make train TRAIN_ARGS="--overwrite_output_dir true"`: the digits recipe, with the command line's model, steps
    and seed, into a folder holding a model."""
    folder = copy_of_model(trained, tmp_path / "model")
    weights = (folder / "model.safetensors").read_bytes()
    argv = ["configs/train_digits.json", "--model", trained.root / "tiny.json", "--output_dir", folder]
    argv += ["--max_steps", "2", "--seed", "3", "--overwrite_output_dir", "true"]
    ran = run("train", *argv, home=tmp_path / "home")
    assert ran.code == 0, ran
    assert not missing(folder, MODEL_FOLDER_FILES)
    assert (folder / "model.safetensors").read_bytes() != weights  # the new model's


def test_an_unknown_argument_is_one_error_line_that_shows_no_token_and_writes_nothing(tmp_path):
    """The token given with --hub_token and as the unknown argument's value (a typo's neighbour): never shown."""
    output = tmp_path / "out"
    argv = ["--output_dir", output, "--hub_token", SECRET, "--no_such_argument", SECRET]
    ran = run("train", *argv, home=tmp_path / "home", module=True)  # as `vit-scratch train`
    assert ran.code != 0, ran
    assert "Traceback" not in ran.stderr, ran
    assert ran.stderr.strip().splitlines()[-1].startswith("error:"), ran
    assert "--no_such_argument" in ran.stderr  # names the argument
    assert_no_secret(ran)
    assert not output.exists()
