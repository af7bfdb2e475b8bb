"""What fine-tuning replaces, and how images meet the model's channels, said in one plain line each.

Fine-tuning a saved model on other classes gives it a new classifier head (initialised afresh) and keeps every
other weight: one line says so, instead of transformers' "num_labels incompatible" warning and its LOAD REPORT
table. A data set whose images have other channels than the model takes (grayscale digits into an RGB model, or
colour into a grayscale one) is converted image by image: one line says how. A weight missing from a vit_scratch
checkpoint is refused, never re-initialised.
"""

import pytest
from entry_points import Scenario, outcome
from helpers import write_imagefolder
from safetensors.torch import load_file, save_file

from modeling_vit_scratch.training.arguments import ModelArguments
from modeling_vit_scratch.training.data import load_image_dataset, prepare_splits
from modeling_vit_scratch.training.model_source import (
    build_model,
    channels_line,
    fine_tuning_line,
    model_config,
)

REPLACED = (
    "Fine-tuning {source}, trained on 3 classes (LABEL_0, LABEL_1, LABEL_2), on 4 classes (ant, bee, cow, elk): its classifier head is "
    "replaced by a new one, initialised afresh; every other weight starts as saved."
)
GRAY_INTO_RGB = (
    "The data set's images are grayscale and the model takes RGB (num_channels 3): each image is given to it as RGB, "
    "its gray level in all three channels."
)


@pytest.fixture
def gray_four(tmp_path):
    """Prepared splits of a grayscale image folder of four classes."""
    folder = write_imagefolder(tmp_path / "gray", classes=("ant", "bee", "cow", "elk"), per_class=10, mode="L")
    return folder, prepare_splits(load_image_dataset(str(folder)), validation_fraction=0.2, test_fraction=0.2)


def test_a_new_head_is_said_in_one_line_and_transformers_reports_nothing(tmp_path, gray_four, capfd):
    source = str(Scenario(tmp_path).model())
    _, prepared = gray_four
    capfd.readouterr()
    model, processor = build_model(ModelArguments(model=source), prepared)
    err = capfd.readouterr().err
    assert "LOAD REPORT" not in err and "incompatible" not in err and "MISMATCH" not in err, err
    assert model.classifier.out_features == 4 and processor.num_channels == 3
    saved, new = model_config(ModelArguments(model=source))
    assert not new and fine_tuning_line(source, saved, prepared.labels) == REPLACED.format(source=source)
    assert (
        fine_tuning_line(source, saved, ["LABEL_0", "LABEL_1", "LABEL_2"]) is None
    )  # the same classes: the head is kept
    assert channels_line(prepared.splits["train"], 3) == GRAY_INTO_RGB
    assert channels_line(prepared.splits["train"], 1) is None


def test_colour_images_into_a_grayscale_model_are_said_to_be_converted_to_gray(tmp_path):
    prepared = prepare_splits(load_image_dataset(str(write_imagefolder(tmp_path / "rgb", per_class=10))))
    assert channels_line(prepared.splits["train"], 1).startswith(
        "The data set's images are in colour and the model takes grayscale (num_channels 1): each image is converted"
    )
    assert channels_line(prepared.splits["train"], 3) is None


def test_a_weight_missing_from_the_checkpoint_is_refused_not_reinitialised(tmp_path, gray_four):
    source = Scenario(tmp_path).model()
    weights = load_file(source / "model.safetensors")
    missing = next(name for name in weights if "attention" in name)
    save_file({name: tensor for name, tensor in weights.items() if name != missing}, source / "model.safetensors")
    with pytest.raises(ValueError, match=f"has no tensor {missing!r} that config.json asks for"):
        build_model(ModelArguments(model=str(source)), gray_four[1])


@pytest.mark.integration
def test_fine_tuning_gray_images_of_other_classes_prints_the_two_lines(tmp_path, gray_four, capfd):
    scenario = Scenario(tmp_path)
    source = str(scenario.model())
    argv = scenario.argv("train")
    argv[argv.index("--dataset") + 1] = str(gray_four[0])
    argv[argv.index("--model") + 1] = source
    done = outcome("train", [*argv, "--max_steps", "1"])
    assert done.code == 0, done
    captured = capfd.readouterr()
    printed = captured.out.splitlines()
    assert REPLACED.format(source=source) in printed and GRAY_INTO_RGB in printed
    assert "LOAD REPORT" not in captured.err and "incompatible" not in captured.err
