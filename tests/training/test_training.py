"""Training: the real Trainer path on real image data sets, the output folder, resuming, several processes, errors."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from entry_points import outcome, with_arguments
from helpers import MODEL_FOLDER_FILES, made_once, run_script, tiny_model_file, training_args, write_imagefolder
from hub_server import TOKEN, LocalHub
from PIL import Image
from safetensors.torch import load_file
from transformers import AutoModelForImageClassification, TrainingArguments, pipeline

from modeling_vit_scratch.common.folders import LOCK_FILE, claim_output_folder
from modeling_vit_scratch.common.model_folder import content_sha256
from modeling_vit_scratch.common.overrides import parse_overrides
from modeling_vit_scratch.common.secrets import weights_sha256
from modeling_vit_scratch.sharing.push import check_own_code
from modeling_vit_scratch.training import precision
from modeling_vit_scratch.training.arguments import (
    DataArguments,
    ModelArguments,
    OutputArguments,
    mask_token_values,
    parse_arguments,
    recipe_to_argv,
)
from modeling_vit_scratch.training.data import PreparedData, digits_dataset, prepare_splits
from modeling_vit_scratch.training.distributed import set_global_batch_size
from modeling_vit_scratch.training.model_source import build_model
from modeling_vit_scratch.training.precision import PRECISION_CHOICE_FILE
from modeling_vit_scratch.training.trainer import train

# new processes, scripts or whole suites: `make test` runs them, `make test-fast` leaves them out
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def trained_imagefolder(tmp_path_factory):
    """A 3-channel model trained on a grayscale imagefolder (converted, not rejected) through the Trainer, and the
    metrics `train` returned. Trained once per test run (`made_once`)."""

    def make(tmp_path: Path) -> None:
        folder = write_imagefolder(tmp_path / "pets", per_class=12, mode="L")
        metrics = train(
            ModelArguments(model=tiny_model_file(tmp_path, num_channels=3)),
            DataArguments(dataset=str(folder), validation_fraction=0.25, test_fraction=0.25),
            training_args(tmp_path / "out", num_train_epochs=6),
        )
        (tmp_path / "returned_metrics.json").write_text(json.dumps(metrics))

    tmp_path = made_once(tmp_path_factory, "test_training-run", make)
    return tmp_path / "out", json.loads((tmp_path / "returned_metrics.json").read_text())


def test_loss_falls_and_the_folder_holds_everything(trained_imagefolder):
    output_dir, metrics = trained_imagefolder
    last = max(output_dir.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    history = [
        entry["loss"]
        for entry in json.loads((last / "trainer_state.json").read_text())["log_history"]
        if "loss" in entry
    ]
    assert len(history) >= 5 and history[-1] < history[0]
    for name in MODEL_FOLDER_FILES:
        assert (output_dir / name).is_file(), name
    config = json.loads((output_dir / "config.json").read_text())
    assert config["id2label"] == {"0": "cat", "1": "dog", "2": "fox"}
    assert "AutoModelForImageClassification" in config["auto_map"]
    assert json.loads((output_dir / "all_results.json").read_text())["test_accuracy"] == metrics["test_accuracy"]
    record = json.loads((output_dir / "training_record.json").read_text())
    assert record["weights_sha256"] == weights_sha256(output_dir)  # the weights the metrics were measured on
    assert record["results_sha256"] == content_sha256(json.loads((output_dir / "all_results.json").read_text()))
    assert not [path.name for path in output_dir.iterdir() if path.name.startswith(".saving-")]
    with Image.open(output_dir / "training_curves.png") as picture:
        assert picture.format == "PNG" and picture.size == (1000, 400)


def test_the_test_split_s_per_class_results_are_saved_drawn_and_in_the_card(trained_imagefolder):
    output_dir, metrics = trained_imagefolder
    results = json.loads((output_dir / "all_results.json").read_text())
    confusion, accuracy = results["test_confusion_matrix"], results["test_per_class_accuracy"]
    assert confusion == metrics["test_confusion_matrix"] and confusion["labels"] == ["cat", "dog", "fox"]
    matrix = np.array(confusion["matrix"])
    assert matrix.sum() == json.loads((output_dir / "training_record.json").read_text())["num_test"]
    assert np.trace(matrix) / matrix.sum() == pytest.approx(metrics["test_accuracy"])  # the same predictions
    for index, label in enumerate(confusion["labels"]):
        assert accuracy[label] == pytest.approx(matrix[index, index] / matrix[index].sum())
    with Image.open(output_dir / "confusion_matrix.png") as picture:
        assert picture.format == "PNG"
    card = (output_dir / "README.md").read_text()
    assert "### Per class (test split)" in card
    assert f"| cat | {matrix[0].sum()} | {accuracy['cat']:.4f} |" in card


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
    # the precision is named whatever it was (bf16: tests/training/test_precision.py)
    assert json.loads((output_dir / "training_record.json").read_text())["precision"] == "float32"
    assert "1 process, float32." in card
    # a new model: the record says it started from random weights, and only so the card says 'from scratch'
    assert json.loads((output_dir / "training_record.json").read_text())["initial_weights"] is None
    assert "a small model trained from scratch on a small data set" in " ".join(card.split())


def test_a_fine_tuned_model_s_card_names_the_weights_it_started_from(tmp_path, trained_imagefolder):
    output_dir, _ = trained_imagefolder
    folder = write_imagefolder(tmp_path / "pets", per_class=6, mode="L")
    train(
        ModelArguments(model=str(output_dir)),
        DataArguments(dataset=str(folder), validation_fraction=0.25, test_fraction=0.25),
        training_args(tmp_path / "tuned", num_train_epochs=1),
    )
    assert json.loads((tmp_path / "tuned" / "training_record.json").read_text())["initial_weights"] == str(output_dir)
    card = " ".join((tmp_path / "tuned" / "README.md").read_text().split())
    assert f"trained with vit-scratch, starting from the weights of `{Path(output_dir).name}`" in card  # no local path
    assert "trained from scratch" not in card


def test_resumed_run_ends_like_an_uninterrupted_one(tmp_path):
    """A run killed while saving epoch 3's checkpoint resumes with `true` from epoch 2's, the last complete one,
    and ends where the uninterrupted run ended."""
    model_args = ModelArguments(model=tiny_model_file(tmp_path, num_channels=1, hidden_dropout_prob=0.1))
    data_args = DataArguments(max_train_samples=96)  # digits, augmented: resuming must restore every RNG
    full = train(model_args, data_args, training_args(tmp_path / "full"))
    steps_per_epoch = 96 // 8
    interrupted = tmp_path / "interrupted"
    interrupted.mkdir()
    for epoch in (2, 3):
        name = f"checkpoint-{epoch * steps_per_epoch}"
        shutil.copytree(tmp_path / "full" / name, interrupted / name)
    (interrupted / f"checkpoint-{3 * steps_per_epoch}" / "trainer_state.json").unlink()  # killed while saving it
    resumed = train(model_args, data_args, training_args(interrupted, resume_from_checkpoint="true"))
    for key in ("eval_loss", "eval_accuracy", "test_loss", "test_accuracy"):
        assert resumed[key] == pytest.approx(full[key], abs=1e-6), key
    full_weights, resumed_weights = (load_file(d / "model.safetensors") for d in (tmp_path / "full", interrupted))
    for name, tensor in full_weights.items():
        torch.testing.assert_close(resumed_weights[name], tensor, atol=1e-6, rtol=0)


def test_bf16_when_faster_trains_in_the_precision_it_chose_and_a_resumed_run_keeps_it(tmp_path, monkeypatch):
    """This machine's CPU emulates bf16, so timings are given here as a machine with bf16 units would measure them:
    where bf16 wins the run trains under bf16 autocast (its weights differ from the float32 run's), says so, and
    keeps the choice in each checkpoint; resumed where float32 would win, it trains on in bf16 and ends where the
    uninterrupted run ended."""
    monkeypatch.setattr(precision, "bf16_emulated", lambda device: False)
    model_args = ModelArguments(model=tiny_model_file(tmp_path, num_channels=1), bf16_when_faster=True)
    data_args = DataArguments(max_train_samples=48)
    runs = {}
    for name, timings in (("bf16", (0.2, 0.1)), ("float32", (0.1, 0.2))):
        monkeypatch.setattr(precision, "bf16_training_step_seconds", lambda *args, timings=timings: timings)
        runs[name] = train(model_args, data_args, training_args(tmp_path / name, num_train_epochs=2))
        record = json.loads((tmp_path / name / "training_record.json").read_text())
        assert record["precision"] == {"bf16": "bf16 mixed precision", "float32": "float32"}[name]
        assert record["precision_choice"] == runs[name]["precision_choice"]
        assert f"{record['precision']} ({record['precision_choice']})." in (tmp_path / name / "README.md").read_text()
    assert "bf16 is 2.00x as fast, at least the 1.25x it needs" in runs["bf16"]["precision_choice"]
    assert "bf16 is 0.50x as fast, under the 1.25x it needs" in runs["float32"]["precision_choice"]
    weights = {name: load_file(tmp_path / name / "model.safetensors") for name in runs}
    assert any(not torch.equal(weights["bf16"][key], weights["float32"][key]) for key in weights["bf16"])

    first = tmp_path / "bf16" / "checkpoint-6"  # 48 images in batches of 8: epoch 1 ends at step 6
    assert json.loads((first / PRECISION_CHOICE_FILE).read_text())["bf16"] is True
    interrupted = tmp_path / "interrupted"
    interrupted.mkdir()
    shutil.copytree(first, interrupted / first.name)
    monkeypatch.setattr(precision, "bf16_training_step_seconds", lambda *args: (0.1, 0.2))  # float32 would win now
    resumed = train(
        model_args, data_args, training_args(interrupted, num_train_epochs=2, resume_from_checkpoint="true")
    )
    assert resumed["precision_choice"].endswith("kept on resuming from checkpoint-6")
    # resumed again from the resumed run's checkpoint: the measured reason, said once
    kept = json.loads((interrupted / "checkpoint-12" / PRECISION_CHOICE_FILE).read_text())
    assert kept == json.loads((first / PRECISION_CHOICE_FILE).read_text())
    assert kept == dict(
        bf16=True, reason="measured", device=kept["device"], float32_seconds=0.2, bf16_seconds=0.1, min_speedup=1.25
    )  # the grounds, never the words: no 'kept on resuming from ...' to pile up
    assert resumed["test_loss"] == pytest.approx(runs["bf16"]["test_loss"], abs=1e-6)
    for key, tensor in load_file(interrupted / "model.safetensors").items():
        torch.testing.assert_close(tensor, weights["bf16"][key], atol=1e-6, rtol=0)


def test_images_kept_in_memory_train_like_images_read_each_step(tmp_path):
    """The in-memory path (`--images_in_memory_mb`, on by default for small sets) changes speed, not results."""
    model_args = ModelArguments(model=tiny_model_file(tmp_path, num_channels=1))
    results = {}
    for limit in (2048, 0):
        data_args = DataArguments(max_train_samples=48, validation_views=2, images_in_memory_mb=limit)
        results[limit] = train(model_args, data_args, training_args(tmp_path / str(limit), num_train_epochs=2))
    for key in ("eval_loss", "test_loss", "train_loss"):
        assert results[0][key] == pytest.approx(results[2048][key], abs=1e-6), key
    # the one-off processing happens before the Trainer's clock; the benchmark's end-to-end mode adds it back
    saved = json.loads((tmp_path / "2048" / "all_results.json").read_text())
    assert 0 < saved["data_preparation_seconds"] < saved["wall_time_seconds"]
    weights = [load_file(tmp_path / str(limit) / "model.safetensors") for limit in (2048, 0)]
    for name, tensor in weights[0].items():
        torch.testing.assert_close(weights[1][name], tensor, atol=1e-6, rtol=0)


def test_unknown_preset_is_one_clear_line(tmp_path):
    refused = outcome("train", ["--model", "vit-gigantic-patch16-224", "--output_dir", str(tmp_path / "out")])
    assert refused.one_line, refused
    assert refused.error.startswith("error: Unknown preset 'vit-gigantic-patch16-224'")
    assert "vit-base-patch16-224" in refused.error


def test_bad_arguments_name_the_problem(tmp_path):
    prepared = prepare_splits(digits_dataset())
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
    recipe.write_text(
        json.dumps(
            {"model": "vit-tiny-patch16-224", "augment": False, "report_to": ["tensorboard"], "num_train_epochs": 3}
        )
    )
    argv = recipe_to_argv([str(recipe), "--num_train_epochs", "7"])
    assert argv[:4] == ["--model", "vit-tiny-patch16-224", "--augment", "false"]
    assert argv[-2:] == ["--num_train_epochs", "7"]
    assert parse_overrides("hidden_size=64,pooling=mean,qkv_bias=false,drop_path_rate=0.1") == {
        "hidden_size": 64,
        "pooling": "mean",
        "qkv_bias": False,
        "drop_path_rate": 0.1,
    }


def test_fine_tuning_with_new_labels_reinitialises_the_head(tmp_path, trained_imagefolder):
    output_dir, _ = trained_imagefolder
    prepared = prepare_splits(digits_dataset())
    model, processor = build_model(ModelArguments(model=str(output_dir)), prepared)
    assert model.config.num_labels == 10 and model.config.id2label[3] == "3"
    assert model.classifier.out_features == 10
    original = AutoModelForImageClassification.from_pretrained(output_dir)
    for name, tensor in original.vit.state_dict().items():  # the whole body as trained; only the head is new
        torch.testing.assert_close(model.vit.state_dict()[name], tensor, rtol=0, atol=0, msg=name)
    assert processor.num_channels == 3


def test_fine_tuning_on_other_labels_of_the_same_count_gets_a_new_head(trained_imagefolder):
    output_dir, _ = trained_imagefolder
    prepared = prepare_splits(digits_dataset())
    prepared.labels = ["ant", "bee", "cow"]  # three labels, like the checkpoint's cat, dog, fox
    model, _ = build_model(ModelArguments(model=str(output_dir)), prepared)
    original = AutoModelForImageClassification.from_pretrained(output_dir)
    assert model.config.id2label == {0: "ant", 1: "bee", 2: "cow"}
    assert not torch.equal(model.classifier.weight, original.classifier.weight)
    assert model.classifier.bias.abs().max() == 0 and model.classifier.weight.std() < 0.05  # the model's own init
    same, _ = build_model(ModelArguments(model=str(output_dir)), PreparedData(prepared.splits, ["cat", "dog", "fox"]))
    torch.testing.assert_close(same.classifier.weight, original.classifier.weight, rtol=0, atol=0)


def test_a_checkpoint_whose_body_does_not_fit_its_config_is_refused(tmp_path, trained_imagefolder):
    output_dir, _ = trained_imagefolder
    broken = tmp_path / "broken"
    shutil.copytree(output_dir, broken)
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "intermediate_size": 38}))
    with pytest.raises(
        ValueError, match=r"holds 'vit.layers.0.mlp.fc1.bias' of shape \(37,\) where config.json asks for \(38,\)"
    ):
        build_model(ModelArguments(model=str(broken)), prepare_splits(digits_dataset()))


def test_fine_tuning_does_not_carry_a_foreign_custom_pipelines_into_the_new_model(tmp_path, trained_imagefolder):
    output_dir, _ = trained_imagefolder
    foreign = tmp_path / "foreign"
    shutil.copytree(output_dir, foreign)
    config = json.loads((foreign / "config.json").read_text())
    pipelines = {"image-classification": {"impl": "evil.Evil", "pt": ["AutoModelForImageClassification"]}}
    (foreign / "config.json").write_text(json.dumps({**config, "custom_pipelines": pipelines}))
    model, processor = build_model(ModelArguments(model=str(foreign)), prepare_splits(digits_dataset()))
    model.save_pretrained(tmp_path / "saved")
    processor.save_pretrained(tmp_path / "saved")
    assert "evil" not in (tmp_path / "saved" / "config.json").read_text()
    check_own_code(tmp_path / "saved")  # what push_to_hub applies: the fine-tuned folder names only the package's code


def test_accuracy_metrics_and_the_tie_breaking_selection_score():
    from transformers import EvalPrediction

    from modeling_vit_scratch.training.trainer import accuracy_metrics

    labels = np.array([0, 1, 2, 3, 4, 5])
    confident = np.eye(6, dtype=np.float32) * 8  # all right, low loss
    hesitant = np.eye(6, dtype=np.float32) * 0.5  # all right, high loss
    wrong_once = confident.copy()
    wrong_once[0] = np.roll(wrong_once[0], 1)
    scores = {
        name: accuracy_metrics(EvalPrediction(predictions=logits, label_ids=labels))
        for name, logits in (("confident", confident), ("hesitant", hesitant), ("wrong_once", wrong_once))
    }
    assert scores["confident"]["accuracy"] == scores["hesitant"]["accuracy"] == 1.0
    assert (
        scores["confident"]["selection_score"]
        > scores["hesitant"]["selection_score"]
        > scores["wrong_once"]["selection_score"]
    )
    assert scores["wrong_once"]["accuracy"] == pytest.approx(5 / 6)
    assert scores["confident"]["top5_accuracy"] == 1.0


def folder_test_accuracy(folder: Path) -> float:
    """Accuracy on the digits test split of a saved folder, loaded through the Auto classes with its own code."""
    from transformers import AutoImageProcessor

    from modeling_vit_scratch.training.data import ImageTransform, collate_images, digits_dataset

    model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True).eval()
    processor = AutoImageProcessor.from_pretrained(folder, trust_remote_code=True)
    test = digits_dataset()["test"].with_transform(ImageTransform(processor))
    batch = collate_images([test[i] for i in range(len(test))])
    with torch.no_grad():
        predictions = model(pixel_values=batch["pixel_values"]).logits.argmax(-1)
    return (predictions == batch["labels"]).float().mean().item()


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_default_recipe_reaches_99_percent_on_the_digits_test_split(tmp_path, seed):
    """`make train SEED=seed`'s recipe, end to end (times: docs/testing.md): the folder, reloaded through the Auto
    classes, classifies >= 99% of the test split (the recipe's bar, for each of seeds 0, 1, 2)."""
    result = run_script(
        "configs/train_digits.json",
        "--output_dir",
        str(tmp_path / "out"),
        "--seed",
        str(seed),
        "--disable_tqdm",
        "true",
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    accuracy = folder_test_accuracy(tmp_path / "out")
    assert accuracy >= 0.99
    assert json.loads((tmp_path / "out" / "training_record.json").read_text())["seed"] == seed
    reported = json.loads((tmp_path / "out" / "all_results.json").read_text())["test_accuracy"]
    assert accuracy == pytest.approx(reported, abs=1 / 360 + 1e-9)  # at most one image apart (float rounding)


FAKE_TOKENS = {
    "command line": "hf_cmdLINEtoken0123456789",
    "recipe": "hf_recipeTOKEN0123456789",
    "environment": "hf_envTOKEN0123456789abc",
    "saved login": "hf_savedLOGINtoken012345",
}


def test_no_token_value_reaches_any_file_or_printed_line(tmp_path):
    """A token in HF_TOKEN and one saved by `hf auth login`: neither appears in the output folder (checkpoints'
    pickled training_args.bin, TensorBoard logs, record, card) or in anything printed. (A token on the command line
    or in a recipe is for --push_to_hub only: without it, refused; with it, the push test checks the same folders.)"""
    hf_home = tmp_path / "hf_home"
    hf_home.mkdir()
    (hf_home / "token").write_text(FAKE_TOKENS["saved login"])
    recipe = tmp_path / "recipe.json"
    recipe.write_text(
        json.dumps(
            {
                "model": tiny_model_file(tmp_path, num_channels=1),
                "dataset": "digits",
                "max_train_samples": 32,
            }
        )
    )
    output_dir = tmp_path / "out"
    result = run_script(
        str(recipe),
        "--output_dir",
        str(output_dir),
        "--num_train_epochs",
        "2",
        "--save_strategy",
        "epoch",
        "--eval_strategy",
        "epoch",
        "--report_to",
        "tensorboard",
        "--logging_strategy",
        "epoch",
        "--disable_tqdm",
        "true",
        env={"HF_HOME": str(hf_home), "HF_TOKEN": FAKE_TOKENS["environment"]},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    written = [path for path in output_dir.rglob("*") if path.is_file()]
    assert {"training_args.bin", "training_record.json", "README.md"} <= {path.name for path in written}
    assert any(path.name.startswith("events.out.tfevents") for path in written)
    for where, token in FAKE_TOKENS.items():
        assert token not in result.stdout + result.stderr, where
        for path in written:
            assert token.encode() not in path.read_bytes(), (where, path)
    command = json.loads((output_dir / "training_record.json").read_text())["command"]
    assert str(recipe) in command


def test_a_token_in_the_output_folder_name_is_refused_before_any_work(tmp_path, capsys):
    """The folder's name would be written into every checkpoint's training arguments and the logs: refused, in one
    line that does not echo the token, before the folder or any data is touched."""
    token = FAKE_TOKENS["command line"]
    argv = ["--model", tiny_model_file(tmp_path, num_channels=1), "--hub_token", token]
    refused = outcome("train", [*argv, "--output_dir", str(tmp_path / f"dir_{token}"), "--report_to", "none"])
    assert refused.one_line, refused
    assert refused.error.startswith("error: The value of --output_dir holds or looks like a Hub token")
    printed = capsys.readouterr()
    assert token not in refused.error + printed.out + printed.err
    assert not (tmp_path / f"dir_{token}").exists()


@pytest.mark.parametrize(
    "spelling",
    [
        ["--hub_token", "SECRET"],
        ["--hub-token", "SECRET"],
        ["--hub_token=SECRET"],
        ["--hub-token=SECRET"],
        ["--HUB_TOKEN", "SECRET"],
        ["--other_token", "SECRET"],
    ],
)
def test_token_values_are_masked_in_every_spelling(spelling):
    argv = ["configs/train_digits.json", *spelling, "--seed", "3"]
    masked = mask_token_values(argv)
    assert "SECRET" not in " ".join(masked) and "***" in " ".join(masked)
    assert masked[0] == argv[0] and masked[-2:] == ["--seed", "3"] and len(masked) == len(argv)


def test_an_abbreviated_argument_is_refused_without_echoing_its_value(tmp_path, capsys):
    refused = outcome("train", ["--hub_tok", "hf_abbreviatedTOKEN12345", "--output_dir", str(tmp_path / "out")])
    assert refused.one_line, refused
    assert refused.error == (
        "error: Unknown argument --hub_tok (did you mean '--hub_token'?): arguments are matched exactly, not "
        "abbreviated."
    )
    printed = capsys.readouterr()
    assert "hf_abbreviatedTOKEN12345" not in printed.out + printed.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "spelling", [["-hub_token", "hf_oneDashTOKEN1234567890"], ["-hub_token=hf_oneDashTOKEN1234567890"]]
)
def test_a_long_argument_with_one_dash_is_named_with_two_without_its_value(tmp_path, capsys, spelling):
    refused = outcome("train", [*spelling, "--output_dir", str(tmp_path / "out")])
    assert refused.one_line, refused
    assert refused.error == "error: Argument -hub_token has one dash: long arguments take two, write --hub_token."
    printed = capsys.readouterr()
    assert "hf_oneDashTOKEN1234567890" not in printed.out + printed.err
    assert not (tmp_path / "out").exists()


def test_recipe_keys_are_matched_exactly(tmp_path):
    recipe = tmp_path / "recipe.json"
    for key, suggestion in (("learning_rat", "learning_rate"), ("see", "seed"), ("hiden_size", None)):
        recipe.write_text(json.dumps({key: 1}))
        with pytest.raises(ValueError) as refused:
            recipe_to_argv([str(recipe)])
        assert f"Unknown key {key!r} in the recipe {recipe}" in str(refused.value)
        assert (f"did you mean {suggestion!r}" in str(refused.value)) == (suggestion is not None)


def test_a_second_run_into_a_model_folder_is_refused_and_leaves_it_whole(tmp_path, trained_imagefolder):
    output_dir, _ = trained_imagefolder
    before = {
        path.name: path.read_bytes() for path in output_dir.iterdir() if path.is_file() and path.name != LOCK_FILE
    }
    refused = outcome("train", ["--model", tiny_model_file(tmp_path), "--output_dir", str(output_dir)])
    assert refused.one_line, refused
    line = refused.error
    assert line.startswith(f"error: The output folder '{output_dir}' already holds a model")
    assert "--overwrite_output_dir true" in line and "--resume_from_checkpoint true" in line
    after = {path.name: path.read_bytes() for path in output_dir.iterdir() if path.is_file() and path.name != LOCK_FILE}
    assert after == before


def test_a_run_into_a_folder_in_use_is_refused(tmp_path):
    """The lock is an flock on the folder's lock file: a second open of it conflicts even in this process."""
    with claim_output_folder(tmp_path / "busy", overwrite=False, resume=False):
        refused = outcome("train", ["--model", tiny_model_file(tmp_path), "--output_dir", str(tmp_path / "busy")])
    assert refused.one_line and "is in use by another training run" in refused.error, refused


def test_overwrite_replaces_the_model_when_asked(tmp_path):
    model_args = ModelArguments(model=tiny_model_file(tmp_path, num_channels=1))
    data_args = DataArguments(max_train_samples=32, augment=False)
    args = dict(num_train_epochs=1, save_strategy="no", eval_strategy="no", load_best_model_at_end=False)
    train(model_args, data_args, training_args(tmp_path / "out", **args))
    first = weights_sha256(tmp_path / "out")
    with pytest.raises(ValueError, match="already holds a model"):
        train(model_args, data_args, training_args(tmp_path / "out", **{**args, "seed": 4}))
    assert weights_sha256(tmp_path / "out") == first
    train(model_args, data_args, training_args(tmp_path / "out", **{**args, "seed": 4}), OutputArguments(True))
    assert weights_sha256(tmp_path / "out") != first
    record = json.loads((tmp_path / "out" / "training_record.json").read_text())
    assert record["seed"] == 4 and record["weights_sha256"] == weights_sha256(tmp_path / "out")


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--num_train_epochs", "0"],
            "--num_train_epochs 0 trains nothing: give --num_train_epochs > 0 or --max_steps >= 1.",
        ),
        (["--max_train_samples", "0"], "--max_train_samples 0 is out of range: give an integer >= 1."),
        (["--config_overrides", "hiden_size=8"], "Unknown config field 'hiden_size': did you mean 'hidden_size'?"),
        (["--config_overrides", "hidden_size=16.5"], "hidden_size 16.5, but hidden_size takes an integer"),
        (["--resume_from_checkpoint", "true"], "does not exist, so there is no run to resume"),
        (["--learning_rate", "fast"], "invalid float value: 'fast'"),
        (
            ["--dataset", "no-such-data-set-here"],
            "no Hub data set 'no-such-data-set-here' in the Hugging Face cache (HF_HUB_OFFLINE is set",
        ),
        (
            ["--model", "someone/no-such-model"],
            "--model 'someone/no-such-model': there is no folder 'someone/no-such-model' here, and no Hub repo",
        ),
        (
            ["--validation_fraction", "1.5"],
            "--validation_fraction 1.5 is out of range: give a number in [0, 1), e.g. 0.1.",
        ),
    ],
)
def test_bad_training_input_is_refused_before_training(tmp_path, extra, message):
    argv = [
        "--model",
        tiny_model_file(tmp_path, num_channels=1),
        "--output_dir",
        str(tmp_path / "out"),
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
    ]
    argv = with_arguments(argv, extra)  # an argument of `extra` replaces the one above: a command line names it once
    with pytest.raises((ValueError, FileNotFoundError)) as refused:  # what scripts/train.py prints as one line
        model_args, data_args, output_args, args = parse_arguments(argv)
        train(model_args, data_args, args, output_args)
    assert message in " ".join(str(refused.value).split())
    assert not any(path.name.startswith("checkpoint-") for path in (tmp_path / "out").glob("*"))


def test_an_empty_output_dir_is_refused_and_the_working_directory_is_not_claimed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # Path("") is the working directory
    argv = [
        "--model",
        tiny_model_file(tmp_path, num_channels=1),
        "--output_dir",
        "",
        "--report_to",
        "none",
        "--max_train_samples",
        "32",
        "--num_train_epochs",
        "1",
        "--disable_tqdm",
        "true",
    ]
    with pytest.raises(ValueError, match="--output_dir is empty: give the folder to write the model to"):
        model_args, data_args, output_args, args = parse_arguments(argv)  # refused here, as the command refuses it
        train(model_args, data_args, args, output_args)
    assert not (tmp_path / LOCK_FILE).exists()


def test_push_to_hub_goes_through_the_gate_and_a_failed_push_keeps_the_trained_model(tmp_path):
    """`--push_to_hub` with the token on the command line, against the local Hub through HF_ENDPOINT: the pushed repo
    holds the model and no token value; when the Hub fails the commit, the model stays saved and the one error line
    says how to push it without training again. Without --hub_model_id the repo is the output folder's name in the
    token owner's namespace, resolved before training: the push and the retry line name it in full."""
    common = [
        "--model",
        tiny_model_file(tmp_path, num_channels=1),
        "--max_train_samples",
        "32",
        "--num_train_epochs",
        "1",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        "--push_to_hub",
        "true",
        "--hub_token",
        TOKEN,
        "--save_strategy",
        "epoch",
    ]
    with LocalHub(tmp_path / "hub") as hub:
        env = hub.env(tmp_path / "hf_home")
        pushed = run_script(*common, "--output_dir", str(tmp_path / "a"), "--hub_model_id", "local-user/a", env=env)
        assert pushed.returncode == 0, pushed.stderr[-3000:]
        assert "Pushed to" in pushed.stdout
        hub.fail_commits.add(hub.commit_requests + 1)  # the next model commit gets an HTTP 500
        failed = run_script(*common, "--output_dir", str(tmp_path / "b"), env=env)  # the repo: local-user/b
    stored = [path for path in (tmp_path / "hub").rglob("*") if path.is_file()]
    assert any(b"ViTScratchForImageClassification" in path.read_bytes() for path in stored)  # the pushed config
    assert not [path for path in stored if TOKEN.encode() in path.read_bytes()]
    written = [path for name in "ab" for path in (tmp_path / name).rglob("*") if path.is_file()]
    assert "training_args.bin" in {path.name for path in written}  # pickled arguments: the token taken out first
    assert not [path for path in written if TOKEN.encode() in path.read_bytes()]
    assert TOKEN not in pushed.stdout + pushed.stderr + failed.stdout + failed.stderr
    assert failed.returncode != 0 and "Traceback" not in failed.stderr
    line = failed.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: The trained model is saved in {tmp_path / 'b'}, but pushing it failed: ")
    again = f"{tmp_path / 'b'} local-user/b"
    # the interpreter as printed_python names it: `python` where that is the one that ran, else its path
    assert f"(to push it again without training: vit-scratch push {again} (or " in line
    assert line.endswith(" scripts/push_to_hub.py with the same arguments, from a clone))")
    assert json.loads((tmp_path / "b" / "training_record.json").read_text())["weights_sha256"] == weights_sha256(
        tmp_path / "b"
    )


@pytest.mark.parametrize(
    "where", [["--hub_model_id", "{token}"], ["--output_dir={token}"], ["--run_name", "x-{token}"]]
)
def test_a_token_given_to_another_argument_is_refused_without_echoing_it(tmp_path, where):
    token = "hf_" + "Ab3" * 12
    argv = [
        "--model",
        "vit-tiny-patch16-224",
        *([] if where[0].startswith("--output_dir") else ["--output_dir", str(tmp_path / "out")]),
        *(arg.format(token=token) for arg in where),
    ]
    with pytest.raises(ValueError) as refused:
        parse_arguments(argv)
    assert "holds or looks like a Hub token" in str(refused.value) and token not in str(refused.value)
    assert where[0].split("=")[0] in str(refused.value)
    pushing = ["--push_to_hub", "true", "--hub_token", token]  # where a token belongs: accepted
    parse_arguments(["--model", "vit-tiny-patch16-224", "--output_dir", str(tmp_path / "out"), *pushing])


def test_disable_tqdm_silences_the_libraries_bars_too(tmp_path, capsys):
    """`--disable_tqdm true` left transformers' "Writing model shards" bar at every checkpoint: the run turns off
    transformers', datasets' and huggingface_hub's bars as well (restored here: they are process-wide switches)."""
    import datasets
    import huggingface_hub
    import transformers

    from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification
    from modeling_vit_scratch.training.trainer import quiet_progress_bars

    config = ViTScratchConfig(image_size=8, patch_size=4, hidden_size=8, num_hidden_layers=1, num_attention_heads=2)
    try:
        quiet_progress_bars()
        assert not transformers.utils.logging.is_progress_bar_enabled()
        assert not datasets.is_progress_bar_enabled()
        assert huggingface_hub.utils.are_progress_bars_disabled()
        ViTScratchForImageClassification(config).save_pretrained(tmp_path / "quiet")
        assert "Writing model shards" not in capsys.readouterr().err
    finally:
        transformers.utils.logging.enable_progress_bar()
        datasets.enable_progress_bars()
        huggingface_hub.utils.enable_progress_bars()
    ViTScratchForImageClassification(config).save_pretrained(tmp_path / "loud")  # the bar the switch turns off
    assert "Writing model shards" in capsys.readouterr().err
