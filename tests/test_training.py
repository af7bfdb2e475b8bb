"""Training: the real Trainer path on real image data sets, the output folder, resuming, several processes, errors."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image
from safetensors.torch import load_file
from transformers import AutoModelForImageClassification, TrainingArguments, pipeline

from modeling_vit_scratch.training import (
    DataArguments,
    ModelArguments,
    build_model,
    parse_overrides,
    recipe_to_argv,
    set_global_batch_size,
    train,
)
from test_data import write_imagefolder

REPO = Path(__file__).resolve().parent.parent
TINY_MODEL = dict(image_size=8, patch_size=4, hidden_size=24, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=37)  # fmt: skip


def tiny_model_file(tmp_path: Path, **overrides) -> str:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({**TINY_MODEL, **overrides}))
    return str(path)


def training_args(output_dir: Path, **overrides) -> TrainingArguments:
    fields = dict(
        output_dir=str(output_dir), num_train_epochs=4, per_device_train_batch_size=8, per_device_eval_batch_size=32,
        learning_rate=3e-3, eval_strategy="epoch", save_strategy="epoch", logging_strategy="epoch",
        load_best_model_at_end=True, metric_for_best_model="accuracy", report_to="none", disable_tqdm=True, seed=3,
    )  # fmt: skip
    return TrainingArguments(**{**fields, **overrides})


@pytest.fixture(scope="module")
def trained_imagefolder(tmp_path_factory):
    """A 3-channel model trained on a grayscale imagefolder (converted, not rejected) through the Trainer."""
    tmp_path = tmp_path_factory.mktemp("run")
    folder = write_imagefolder(tmp_path / "pets", per_class=12, mode="L")
    metrics = train(
        ModelArguments(model=tiny_model_file(tmp_path, num_channels=3)),
        DataArguments(dataset=str(folder), validation_fraction=0.25, test_fraction=0.25),
        training_args(tmp_path / "out", num_train_epochs=6),
    )
    return tmp_path / "out", metrics


def test_loss_falls_and_the_folder_holds_everything(trained_imagefolder):
    output_dir, metrics = trained_imagefolder
    last = max(output_dir.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    history = [entry["loss"] for entry in json.loads((last / "trainer_state.json").read_text())["log_history"]
               if "loss" in entry]  # fmt: skip
    assert len(history) >= 5 and history[-1] < history[0]
    for name in ("model.safetensors", "config.json", "modeling_vit_scratch.py", "configuration_vit_scratch.py",
                 "preprocessor_config.json", "README.md", "training_curves.png", "all_results.json"):  # fmt: skip
        assert (output_dir / name).is_file(), name
    config = json.loads((output_dir / "config.json").read_text())
    assert config["id2label"] == {"0": "cat", "1": "dog", "2": "fox"}
    assert "AutoModelForImageClassification" in config["auto_map"]
    assert json.loads((output_dir / "all_results.json").read_text())["test_accuracy"] == metrics["test_accuracy"]
    with Image.open(output_dir / "training_curves.png") as picture:
        assert picture.format == "PNG" and picture.size == (1000, 400)


def test_saved_folder_reloads_and_classifies(trained_imagefolder):
    output_dir, _ = trained_imagefolder
    model = AutoModelForImageClassification.from_pretrained(output_dir)
    assert model.config.num_channels == 3 and model.config.num_labels == 3
    classifier = pipeline("image-classification", model=str(output_dir))
    bright = Image.fromarray(np.full((30, 20), 200, dtype=np.uint8))
    predictions = classifier(bright)
    assert {p["label"] for p in predictions} == {"cat", "dog", "fox"}


def test_model_card_is_rendered_with_the_measured_results(trained_imagefolder):
    output_dir, metrics = trained_imagefolder
    card = (output_dir / "README.md").read_text()
    assert "{{" not in card and "{%" not in card
    front_matter = yaml.safe_load(card.split("---")[1])
    assert front_matter["library_name"] == "transformers" and "custom_code" in front_matter["tags"]
    reported = front_matter["model-index"][0]["results"][0]["metrics"][0]
    assert reported["type"] == "accuracy" and reported["value"] == round(metrics["test_accuracy"], 4)
    assert f"{metrics['test_accuracy']:.4f}" in card


def test_resumed_run_ends_like_an_uninterrupted_one(tmp_path):
    """A run stopped after epoch 2 (all a killed run leaves is its last checkpoint) resumes to the same end."""
    model_args = ModelArguments(model=tiny_model_file(tmp_path, num_channels=1, hidden_dropout_prob=0.1))
    data_args = DataArguments(max_train_samples=96)  # digits, augmented: resuming must restore every RNG
    full = train(model_args, data_args, training_args(tmp_path / "full"))
    steps_per_epoch = 96 // 8
    interrupted = tmp_path / "interrupted"
    interrupted.mkdir()
    checkpoint = interrupted / f"checkpoint-{2 * steps_per_epoch}"
    shutil.copytree(tmp_path / "full" / checkpoint.name, checkpoint)
    resumed = train(model_args, data_args, training_args(interrupted, resume_from_checkpoint=str(checkpoint)))
    for key in ("eval_loss", "eval_accuracy", "test_loss", "test_accuracy"):
        assert resumed[key] == pytest.approx(full[key], abs=1e-6), key
    full_weights, resumed_weights = (load_file(d / "model.safetensors") for d in (tmp_path / "full", interrupted))
    for name, tensor in full_weights.items():
        torch.testing.assert_close(resumed_weights[name], tensor, atol=1e-6, rtol=0)


def run_script(*args: str, nproc: int = 1, timeout: int = 300) -> subprocess.CompletedProcess:
    launcher = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"] if nproc > 1 else [
        sys.executable]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([*launcher, str(REPO / "scripts" / "train.py"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def test_two_processes_train_like_one_with_the_same_global_batch(tmp_path):
    """torchrun with 2 ranks (gloo) and 1 process, global batch 16: same samples per step, same weights.

    Each rank averages the loss over its 8 images and DDP averages the gradients, which is the mean over the 16
    images the single process sees; only float summation order differs, hence a tolerance instead of equality.
    """
    common = ["--model", tiny_model_file(tmp_path, num_channels=1), "--dataset", "digits", "--augment", "false",
              "--max_train_samples", "64", "--total_train_batch_size", "16", "--num_train_epochs", "2",
              "--eval_strategy", "epoch", "--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true",
              "--learning_rate", "0.003", "--seed", "5"]  # fmt: skip
    outputs = {}
    for nproc in (1, 2):
        outputs[nproc] = tmp_path / f"nproc{nproc}"
        result = run_script(*common, "--output_dir", str(outputs[nproc]), nproc=nproc)
        assert result.returncode == 0, result.stderr[-3000:]
        assert json.loads((outputs[nproc] / "all_results.json").read_text())["world_size"] == nproc
    one, two = (load_file(outputs[n] / "model.safetensors") for n in (1, 2))
    for name, tensor in one.items():
        torch.testing.assert_close(two[name], tensor, atol=1e-5, rtol=1e-4)


def test_unknown_preset_is_one_clear_line():
    result = run_script("--model", "vit-gigantic-patch16-224", "--output_dir", "/tmp/never-written")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: Unknown preset 'vit-gigantic-patch16-224'") and "vit-base-patch16-224" in lines[-1]
    assert "Traceback" not in result.stderr


def test_bad_arguments_name_the_problem(tmp_path):
    data = __import__("modeling_vit_scratch.data", fromlist=["x"])
    prepared = data.prepare_splits(data.digits_dataset())
    with pytest.raises(FileNotFoundError, match="Checkpoint folder './no/such/folder' does not exist"):
        build_model(ModelArguments(model="./no/such/folder"), prepared)
    with pytest.raises(FileNotFoundError, match="Config file"):
        build_model(ModelArguments(model=str(tmp_path / "missing.json")), prepared)
    with pytest.raises(ValueError, match="not key=value"):
        parse_overrides("hidden_size")
    with pytest.raises(FileNotFoundError, match="Recipe"):
        recipe_to_argv([str(tmp_path / "recipe.json")])
    args = TrainingArguments(output_dir=str(tmp_path), gradient_accumulation_steps=3, report_to="none")
    with pytest.raises(ValueError, match="multiple of 3"):
        set_global_batch_size(args, 64)


def test_recipe_and_command_line_merge_with_the_command_line_winning(tmp_path):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"model": "vit-tiny-patch16-224", "augment": False, "report_to": ["tensorboard"],
                                  "num_train_epochs": 3}))  # fmt: skip
    argv = recipe_to_argv([str(recipe), "--num_train_epochs", "7"])
    assert argv[:4] == ["--model", "vit-tiny-patch16-224", "--augment", "false"]
    assert argv[-2:] == ["--num_train_epochs", "7"]
    assert parse_overrides("hidden_size=64,pooling=mean,qkv_bias=false,drop_path_rate=0.1") == {
        "hidden_size": 64, "pooling": "mean", "qkv_bias": False, "drop_path_rate": 0.1}  # fmt: skip


def test_fine_tuning_with_new_labels_reinitialises_the_head(tmp_path, trained_imagefolder):
    output_dir, _ = trained_imagefolder
    data = __import__("modeling_vit_scratch.data", fromlist=["x"])
    prepared = data.prepare_splits(data.digits_dataset())
    model, processor = build_model(ModelArguments(model=str(output_dir)), prepared)
    assert model.config.num_labels == 10 and model.config.id2label[3] == "3"
    assert model.classifier.out_features == 10
    original = AutoModelForImageClassification.from_pretrained(output_dir)
    torch.testing.assert_close(model.vit.embeddings.cls_token, original.vit.embeddings.cls_token)
    assert processor.num_channels == 3


def test_accuracy_metrics_and_the_tie_breaking_selection_score():
    from transformers import EvalPrediction

    from modeling_vit_scratch.training import accuracy_metrics

    labels = np.array([0, 1, 2, 3, 4, 5])
    confident = np.eye(6, dtype=np.float32) * 8  # all right, low loss
    hesitant = np.eye(6, dtype=np.float32) * 0.5  # all right, high loss
    wrong_once = confident.copy()
    wrong_once[0] = np.roll(wrong_once[0], 1)
    scores = {name: accuracy_metrics(EvalPrediction(predictions=logits, label_ids=labels))
              for name, logits in (("confident", confident), ("hesitant", hesitant), ("wrong_once", wrong_once))}
    assert scores["confident"]["accuracy"] == scores["hesitant"]["accuracy"] == 1.0
    assert scores["confident"]["selection_score"] > scores["hesitant"]["selection_score"] > scores["wrong_once"]["selection_score"]
    assert scores["wrong_once"]["accuracy"] == pytest.approx(5 / 6)
    assert scores["confident"]["top5_accuracy"] == 1.0


def folder_test_accuracy(folder: Path) -> float:
    """Accuracy on the digits test split of a saved folder, loaded through the Auto classes with its own code."""
    from transformers import AutoImageProcessor

    from modeling_vit_scratch.data import collate_images, digits_dataset, ImageTransform

    model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True).eval()
    processor = AutoImageProcessor.from_pretrained(folder, trust_remote_code=True)
    test = digits_dataset()["test"].with_transform(ImageTransform(processor))
    batch = collate_images([test[i] for i in range(len(test))])
    with torch.no_grad():
        predictions = model(pixel_values=batch["pixel_values"]).logits.argmax(-1)
    return (predictions == batch["labels"]).float().mean().item()


@pytest.mark.slow
def test_default_recipe_reaches_98_percent_on_the_digits_test_split(tmp_path):
    """`make train`'s recipe, end to end (about 4 CPU-minutes): the reloaded folder classifies >= 98% of the test split."""
    result = run_script("configs/train_digits.json", "--output_dir", str(tmp_path / "out"), "--disable_tqdm", "true",
                        timeout=1800)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    accuracy = folder_test_accuracy(tmp_path / "out")
    assert accuracy >= 0.98
    reported = json.loads((tmp_path / "out" / "all_results.json").read_text())["test_accuracy"]
    assert accuracy == pytest.approx(reported, abs=1 / 360 + 1e-9)  # at most one image apart (float rounding)
