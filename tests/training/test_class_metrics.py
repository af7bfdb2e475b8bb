"""Per-class results of the test split (`training/class_metrics.py`) on known predictions, and their picture
(`training/curves.py`): each class's accuracy, a class without test images, the confusion matrix's layout."""

import json
import math

import numpy as np
import pytest
from entry_points import Scenario, outcome
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from modeling_vit_scratch.training.class_metrics import class_metrics
from modeling_vit_scratch.training.curves import plot_confusion_matrix
from modeling_vit_scratch.training.output import draw_confusion_matrix

ID2LABEL = {0: "cat", 1: "dog", 2: "fox"}


def one_hot(predictions: list[int], classes: int = 3) -> np.ndarray:
    """Logits whose top class is each of `predictions`."""
    return np.eye(classes, dtype=np.float32)[predictions]


def test_each_class_s_accuracy_is_the_share_of_its_images_predicted_as_it():
    labels = np.array([0, 0, 0, 0, 1, 1, 2, 2, 2])
    logits = one_hot([0, 0, 0, 1, 1, 2, 2, 2, 0])
    metrics = class_metrics(logits, labels, ID2LABEL)
    assert metrics["test_per_class_accuracy"] == {"cat": 0.75, "dog": 0.5, "fox": pytest.approx(2 / 3)}
    assert metrics["test_confusion_matrix"] == {
        "labels": ["cat", "dog", "fox"],
        "matrix": [[3, 1, 0], [0, 1, 1], [1, 0, 2]],  # row: the true class, column: the predicted one
    }


def test_a_class_without_test_images_has_no_accuracy_and_no_division_by_zero():
    labels = np.array([0, 0, 1, 1])
    metrics = class_metrics(one_hot([0, 2, 1, 1]), labels, ID2LABEL)  # fox is predicted once, never the truth
    assert metrics["test_per_class_accuracy"] == {"cat": 0.5, "dog": 1.0, "fox": None}
    assert metrics["test_confusion_matrix"]["matrix"] == [[1, 0, 1], [0, 2, 0], [0, 0, 0]]


def test_the_first_of_a_tuple_of_logits_is_scored_and_string_keys_and_a_prefix_work():
    """A model with a distillation head returns (logits, cls_logits, distillation_logits); a config read from JSON
    has string keys."""
    logits = (one_hot([1, 1]), one_hot([0, 0]), one_hot([0, 0]))
    metrics = class_metrics(logits, np.array([1, 0]), {"0": "cat", "1": "dog"}, prefix="eval")
    assert metrics["eval_per_class_accuracy"] == {"cat": 0.0, "dog": 1.0}


@given(
    labels=st.lists(st.integers(0, 4), min_size=1, max_size=40),
    shift=st.integers(0, 4),
)
def test_the_matrix_counts_every_image_once_and_its_diagonal_is_the_accuracy(labels, shift):
    predictions = [(label + shift * (index % 2)) % 5 for index, label in enumerate(labels)]
    id2label = {index: f"class {index}" for index in range(5)}
    metrics = class_metrics(one_hot(predictions, 5), np.array(labels), id2label)
    matrix = np.array(metrics["test_confusion_matrix"]["matrix"])
    assert matrix.sum() == len(labels)
    for index, accuracy in enumerate(metrics["test_per_class_accuracy"].values()):
        images = labels.count(index)
        assert (accuracy is None) == (images == 0)
        if images:
            assert math.isclose(accuracy, matrix[index, index] / images)


@pytest.mark.parametrize("classes", [3, 120])
def test_the_picture_is_drawn_for_few_and_many_classes_and_labels_are_not_parsed(tmp_path, classes):
    """A `$` in a class name would start matplotlib's mathtext (a bad formula fails the drawing): shown as it is."""
    names = ["$\\frac{$", "a|b", "x" * 200, *(f"class {index}" for index in range(3, classes))][:classes]
    matrix = np.eye(classes, dtype=int).tolist()
    matrix[-1] = [0] * classes  # a class without test images
    path = plot_confusion_matrix({"labels": names, "matrix": matrix}, tmp_path / "confusion_matrix.png")
    with Image.open(path) as picture:
        assert picture.format == "PNG" and picture.size[0] >= 500


@pytest.mark.integration
def test_a_confusion_matrix_that_cannot_be_drawn_keeps_the_weights_and_numbers_and_says_how_to_draw_it(
    tmp_path, monkeypatch
):
    def broken_drawing(*args, **kwargs):
        raise RuntimeError("no font")

    monkeypatch.setattr("modeling_vit_scratch.training.curves.plot_confusion_matrix", broken_drawing)
    done = outcome("train", Scenario(tmp_path).argv("train", output=tmp_path / "out"))
    out = tmp_path / "out"
    assert done.one_line, done
    assert done.error.startswith(
        f"error: The model is saved in {out} (weights, config, image processor) and loads, but confusion_matrix.png "
        "(RuntimeError: no font) could not be written: once the cause is fixed, draw it with python -c "
        f"\"from modeling_vit_scratch.training.output import draw_confusion_matrix; draw_confusion_matrix('{out}')\"."
    )
    assert {"model.safetensors", "config.json", "all_results.json", "README.md", "training_curves.png"} <= {
        path.name for path in out.iterdir()
    }
    assert not (out / "confusion_matrix.png").exists()
    assert "test_confusion_matrix" in json.loads((out / "all_results.json").read_text())
    monkeypatch.undo()
    draw_confusion_matrix(out)  # what the line says to run
    with Image.open(out / "confusion_matrix.png") as picture:
        assert picture.format == "PNG"
    assert sorted(path.name for path in out.iterdir() if path.name.startswith(".confusion")) == []


@settings(max_examples=25)
@given(names=st.lists(st.text(alphabet="$\\{}^_ab\n|", max_size=12), min_size=2, max_size=4, unique=True))
def test_any_class_names_are_drawn_as_text(tmp_path_factory, names):
    """Class names are user text: whatever mathtext would make of `$`, `\\`, `{`, `^`, `_`, the picture is drawn."""
    matrix = [[1] * len(names) for _ in names]
    path = plot_confusion_matrix({"labels": names, "matrix": matrix}, tmp_path_factory.mktemp("names") / "m.png")
    assert path.stat().st_size > 0
