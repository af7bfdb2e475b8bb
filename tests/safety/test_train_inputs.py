"""Every input of a training run is classified before any long work, and a wrong kind is one line saying what the
argument takes; the inputs are checked before the output folder is compared with them, so the line names the input.

- `--model` and `--teacher` (`MODEL_INPUTS`): a preset, an architecture JSON file, a folder or a hub id; a preset
  given to `--teacher` (an architecture, no weights), a JSON file given to `--teacher`, or a file that is none of
  these is refused naming the argument and what it takes.
- An architecture JSON file is read as this package's config, or as one of transformers' image classifiers (a
  teacher such as "resnet"); any other `model_type` is one line naming the file, never transformers' list of every
  model type.
- `--dataset` that is `/`, the home folder or a file is named as the wrong data set, not as an output inside an input.
- `--metric_for_best_model` must name a metric the run computes, checked before training, listing the valid names.
"""

import json
from pathlib import Path

import pytest
from entry_points import Scenario, outcome, with_argument
from hypothesis import given, settings
from hypothesis import strategies as st

from modeling_vit_scratch.configuration_vit_scratch import PRESETS
from modeling_vit_scratch.training.model_source import MODEL_TAKES
from modeling_vit_scratch.training.trainer import computed_metrics

MODEL_INPUTS = sorted(MODEL_TAKES)  # the arguments of train that name a model


@pytest.fixture
def never_trains(monkeypatch):
    """A refusal comes before any data is read: reading it fails the test."""
    import modeling_vit_scratch.training.trainer as trainer_module

    def refuse(*args, **kwargs):
        raise AssertionError("the data set was read")

    monkeypatch.setattr(trainer_module, "load_image_dataset", refuse)


@pytest.mark.parametrize("argument", MODEL_INPUTS)
def test_a_file_that_is_no_model_is_one_line_saying_what_the_argument_takes(tmp_path, argument, never_trains):
    scenario = Scenario(tmp_path)
    result = outcome("train", with_argument(scenario.argv("train"), argument, scenario.picture()))
    assert result.code == 1 and result.one_line, result
    assert f"{argument} '{scenario.picture()}' is a file, not a model; {argument} takes " in result.error
    assert MODEL_TAKES[argument] in result.error
    assert not (tmp_path / "out-train").exists()


@pytest.mark.parametrize("argument", MODEL_INPUTS)
def test_a_file_inside_a_model_folder_names_the_folder_to_give(tmp_path, argument, never_trains):
    scenario = Scenario(tmp_path)
    readme = scenario.model() / "README.md"
    readme.write_text("# a model card, not a model\n")
    result = outcome("train", with_argument(scenario.argv("train"), argument, readme))
    assert result.code == 1 and result.one_line, result
    assert f"is a file, not a model; {argument} takes {MODEL_TAKES[argument]}" in result.error
    assert result.error.endswith(f" (or the model folder that holds it, '{scenario.model()}').")
    assert "rename" not in result.error


def test_a_preset_as_teacher_is_an_architecture_without_weights(tmp_path, never_trains):
    preset = min(PRESETS)
    result = outcome("train", with_argument(Scenario(tmp_path).argv("train"), "--teacher", preset))
    assert result.code == 1 and result.one_line, result
    assert f"--teacher '{preset}' is a preset name: an architecture with no trained weights" in result.error
    assert MODEL_TAKES["--teacher"] in result.error


def test_an_architecture_file_as_teacher_says_to_train_it_first(tmp_path, never_trains):
    scenario = Scenario(tmp_path)
    result = outcome("train", with_argument(scenario.argv("train"), "--teacher", scenario.model_file()))
    assert result.code == 1 and result.one_line, result
    assert f"--teacher '{scenario.model_file()}' is an architecture file, with no trained weights" in result.error
    assert f"train it first (--model {scenario.model_file()})" in result.error


@settings(max_examples=15, deadline=None)
@given(model_type=st.sampled_from(["evil", "bert", "gpt2", "vit_scratch2", ""]) | st.text(min_size=1, max_size=12))
def test_an_architecture_file_of_a_foreign_model_type_is_one_line_naming_the_file(tmp_path_factory, model_type):
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES

    if model_type in MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES or model_type == "vit_scratch":
        return
    root = tmp_path_factory.mktemp("foreign")
    scenario = Scenario(root)
    path = root / "arch.json"
    path.write_text(json.dumps({**json.loads(scenario.model_file().read_text()), "model_type": model_type}))
    result = outcome("train", with_argument(scenario.argv("train"), "--model", path))
    assert result.code == 1 and result.one_line, result
    assert result.error.startswith(f"error: {path} gives model_type {model_type!r}, which is neither 'vit_scratch'")
    assert 'leave model_type out (or write "model_type": "vit_scratch")' in result.error
    assert len(result.error) < 600  # never transformers' list of every model type
    assert not (root / "out-train").exists()


@pytest.mark.parametrize("where", ["root", "home"])
def test_a_dataset_that_is_the_root_or_home_folder_is_named_as_the_wrong_input(tmp_path, where, never_trains):
    folder = "/" if where == "root" else str(Path.home())
    result = outcome("train", with_argument(Scenario(tmp_path).argv("train"), "--dataset", folder))
    assert result.code == 1 and result.one_line, result
    place = "the root folder" if where == "root" else "your home folder"
    assert result.error.startswith(f"error: --dataset {folder!r} is {place}, not a data set: give a folder with")
    assert not (tmp_path / "out-train").exists()


def test_a_wrong_dataset_is_named_before_the_output_is_compared_with_it(tmp_path, never_trains):
    """An image file as --dataset whose folder holds the output: the line names the data set, not the output."""
    scenario = Scenario(tmp_path)
    argv = with_argument(scenario.argv("train"), "--dataset", scenario.picture())
    result = outcome("train", with_argument(argv, "--output_dir", tmp_path / "out"))
    assert result.code == 1 and result.one_line, result
    assert result.error.startswith(f"error: --dataset '{scenario.picture()}' is a file, not a data set")


@settings(max_examples=10, deadline=None)
@given(name=st.sampled_from(["f1score", "f1", "eval_f1", "acc", "top5_accuracy"]) | st.text(min_size=1, max_size=10))
def test_a_metric_the_run_does_not_compute_is_refused_before_training_listing_the_valid_ones(tmp_path_factory, name):
    valid = computed_metrics(3)  # the scenario's data has 3 classes: no top-5 accuracy
    if name.removeprefix("eval_") in valid or name.startswith("-") or "\x00" in name:
        return
    root = tmp_path_factory.mktemp("metric")
    argv = with_argument(Scenario(root).argv("train"), "--metric_for_best_model", name)
    result = outcome("train", [*argv, "--eval_strategy", "epoch"])
    assert result.code == 1 and result.one_line, result
    assert f"--metric_for_best_model {name!r} is not a metric this run computes" in result.error
    assert result.error.endswith(f"give one of {', '.join(valid)}.")
    assert not list((root / "out-train").glob("checkpoint-*"))


@pytest.mark.parametrize("dataset", ["images", "digits"])
def test_a_dataset_config_beside_a_data_set_without_configurations_is_one_line(tmp_path, dataset, never_trains):
    scenario = Scenario(tmp_path)
    source = str(scenario.images()) if dataset == "images" else "digits"
    argv = with_argument(with_argument(scenario.argv("train"), "--dataset", source), "--dataset_config", "nope")
    result = outcome("train", argv)
    assert result.code == 1 and result.one_line, result
    assert f"--dataset_config 'nope' names a configuration of a hub data set, but --dataset {source!r}" in result.error
    assert result.error.endswith("leave out --dataset_config.")
    assert not (tmp_path / "out-train").exists()


@pytest.mark.parametrize("argument", MODEL_INPUTS)
def test_json_text_where_a_model_belongs_says_what_the_argument_takes(tmp_path, argument, never_trains):
    text = json.dumps({"image_size": 8, "patch_size": 4, "hidden_size": 16})
    result = outcome("train", with_argument(Scenario(tmp_path).argv("train"), argument, text))
    assert result.code == 1 and result.one_line, result
    assert result.error == f"error: {argument} was given JSON text, not a name or path: {argument} takes " + (
        f"{MODEL_TAKES[argument]}."
    )


@pytest.mark.parametrize("tensorboard", [True, False])
def test_a_report_to_integration_not_installed_is_one_line_naming_the_package(
    tmp_path, monkeypatch, tensorboard, never_trains
):
    from transformers.integrations import integration_utils

    monkeypatch.setattr(integration_utils, "is_wandb_available", lambda: False)
    monkeypatch.setattr(integration_utils, "is_tensorboard_available", lambda: tensorboard)
    result = outcome("train", with_argument(Scenario(tmp_path).argv("train"), "--report_to", "wandb"))
    assert result.code == 1 and result.one_line, result
    others = "tensorboard or --report_to none" if tensorboard else "none"
    assert result.error == (
        f"error: --report_to wandb: the package 'wandb' is not installed: `pip install wandb`, or give --report_to "
        f"{others}."
    )
    assert not (tmp_path / "out-train").exists()


def test_a_report_to_name_transformers_does_not_know_is_one_line_listing_them(tmp_path, never_trains):
    result = outcome("train", with_argument(Scenario(tmp_path).argv("train"), "--report_to", "wandbb"))
    assert result.code == 1 and result.one_line, result
    assert "--report_to 'wandbb' is not an integration transformers reports to (did you mean 'wandb'?)" in result.error
    assert "tensorboard" in result.error
