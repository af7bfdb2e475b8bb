"""The training parts on their own: the distillation loss and a teacher's label order, the weight average, layer
decay's groups, the metrics over evaluation views, the model source's overrides and memory estimate, the precision's
words and its kept choice."""

import json
import time
import unicodedata
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import tiny_config
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import EvalPrediction

from modeling_vit_scratch import ViTScratchForImageClassification
from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.training.checkpoints import interrupted_line, last_checkpoint, resume_command
from modeling_vit_scratch.training.class_metrics import class_metrics
from modeling_vit_scratch.training.curves import plain_text, plot_confusion_matrix
from modeling_vit_scratch.training.distillation import Distillation, Teacher, TeacherInputs
from modeling_vit_scratch.training.ema import AVERAGE_FILE, WeightAverage
from modeling_vit_scratch.training.layer_decay import layer_decay_groups
from modeling_vit_scratch.training.model_source import ModelPlan, build_model, check_memory, parse_overrides
from modeling_vit_scratch.training.precision import PRECISION_CHOICE_FILE, choose_bf16, precision_words
from modeling_vit_scratch.training.trainer import accuracy_metrics, by_image

LOGITS = st.lists(st.floats(-20, 20, allow_nan=False), min_size=4, max_size=4)


@settings(max_examples=30)
@given(student=LOGITS, teacher=LOGITS)
def test_hard_distillation_is_cross_entropy_on_the_teacher_s_top_class(student, teacher):
    student, teacher = torch.tensor([student]), torch.tensor([teacher])
    expected = torch.nn.functional.cross_entropy(student, teacher.argmax(-1))
    assert torch.allclose(Distillation("hard").teacher_loss(student, teacher), expected)


@settings(max_examples=30)
@given(logits=LOGITS, temperature=st.floats(0.5, 8))
def test_soft_distillation_is_zero_only_where_student_and_teacher_agree(logits, temperature):
    same = torch.tensor([logits])
    loss = Distillation("soft", temperature=temperature).teacher_loss(same, same.clone())
    assert abs(float(loss)) < 1e-5


def test_alpha_weighs_labels_against_the_teacher_and_soft_labels_are_taken():
    cls, dist, teacher = torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4)
    labels = torch.tensor([0, 1, 2])
    only_labels = Distillation("hard", alpha=0.0).loss(cls, dist, teacher, labels)
    assert torch.allclose(only_labels, torch.nn.functional.cross_entropy(cls, labels))
    mixed = torch.softmax(torch.randn(3, 4), -1)  # Mixup / CutMix targets
    assert torch.isfinite(Distillation("soft", alpha=0.3).loss(cls, dist, teacher, mixed))


def test_a_teacher_of_the_same_labels_in_another_order_speaks_in_the_data_s_order(config):
    model = ViTScratchForImageClassification(tiny_config(num_labels=3)).eval()
    processor = SimpleNamespace(
        num_channels=3, image_mean=[0.5] * 3, image_std=[0.5] * 3, size={"height": 20, "width": 20}
    )
    teacher = Teacher(model, TeacherInputs(processor, processor, 3), [2, 0, 1], Distillation())
    pixels = torch.randn(2, 3, 20, 20)
    with torch.no_grad():
        assert torch.allclose(teacher(pixels), model(pixel_values=pixels).logits[:, [2, 0, 1]], atol=1e-6)


def test_the_weight_average_follows_the_formula_and_survives_a_checkpoint(tmp_path):
    model = torch.nn.Linear(2, 2)
    average = WeightAverage(model, decay=0.5)
    steps = []
    for _ in range(3):
        with torch.no_grad():
            model.weight.add_(1.0)
        steps.append(model.weight.detach().clone())
        average.on_step_end(None, None, None, model=model)
    expected = 0.5 * (0.5 * steps[0] + 0.5 * steps[1]) + 0.5 * steps[2]
    assert torch.allclose(average.average.module.weight, expected)
    (tmp_path / "checkpoint-3").mkdir()
    args = SimpleNamespace(output_dir=str(tmp_path), should_save=True)
    average.on_save(args, SimpleNamespace(global_step=3), None)
    restored = WeightAverage(torch.nn.Linear(2, 2), decay=0.5)
    assert restored.load(tmp_path / "checkpoint-3") and (tmp_path / "checkpoint-3" / AVERAGE_FILE).is_file()
    assert torch.allclose(restored.average.module.weight, expected)
    trained = model.weight.detach().clone()
    with average.applied(model):
        assert torch.allclose(model.weight, expected)
    assert torch.equal(model.weight, trained)


@pytest.mark.parametrize("decay", [0.5, 0.75, 1.0])
def test_layer_decay_gives_the_head_the_full_rate_and_the_embeddings_the_least(decay):
    model = ViTScratchForImageClassification(tiny_config(num_hidden_layers=3, num_register_tokens=2))
    groups = layer_decay_groups(model, 1e-3, 0.05, decay)
    tokens = model.vit.embeddings.register_tokens
    assert any(group["weight_decay"] == 0 and any(p is tokens for p in group["params"]) for group in groups)
    assert groups[0]["lr"] == pytest.approx(1e-3)
    assert min(group["lr"] for group in groups) == pytest.approx(1e-3 * decay**4)
    assert sum(len(group["params"]) for group in groups) == len(list(model.parameters()))
    for group in groups:
        if group["weight_decay"]:
            assert all(parameter.ndim > 1 for parameter in group["params"])


@settings(max_examples=20)
@given(views=st.integers(1, 4), images=st.integers(1, 6), seed=st.integers(0, 100))
def test_metrics_score_each_image_once_over_its_views(views, images, seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(views * images, 7)).astype(np.float32)
    labels = np.tile(rng.integers(0, 7, images), views)  # the images, then each further view in the same order
    probabilities, per_image = by_image(logits, labels, views)
    assert probabilities.shape == (images, 7) and np.array_equal(per_image, labels[:images])
    found = accuracy_metrics(views)(EvalPrediction(predictions=logits, label_ids=labels))
    assert found["accuracy"] == pytest.approx(float((probabilities.argmax(-1) == per_image).mean()))
    assert found["selection_score"] <= found["accuracy"] and "top5_accuracy" in found


def test_class_metrics_name_a_class_without_test_images_as_none():
    found = class_metrics(np.eye(3)[[0, 1, 1]], np.array([0, 1, 1]), {0: "a", 1: "b", 2: "c"})
    assert found["test_per_class_accuracy"] == {"a": 1.0, "b": 1.0, "c": None}


@given(st.text())
def test_a_class_name_is_drawn_printable_and_never_as_a_formula(name):
    drawn = plain_text(name)
    assert all(unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp") for c in drawn)
    assert "$" not in drawn.replace(r"\$", "")


def test_a_confusion_matrix_of_names_holding_control_characters_draws_every_glyph(tmp_path):
    names = ["cat\x1b[31m", "dog\x07", "fox\u200b\u202e", "ant\x00"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plot_confusion_matrix({"labels": names, "matrix": np.eye(len(names)).tolist()}, tmp_path / "matrix.png")
    assert not [str(w.message) for w in caught if "missing from font" in str(w.message)]


def test_overrides_read_numbers_booleans_text_and_json():
    assert parse_overrides("image_size=8, qkv_bias=false,pooling=mean") == {
        "image_size": 8, "qkv_bias": False, "pooling": "mean"
    }  # fmt: skip
    assert parse_overrides('{"stem_channels": [8, 16]}') == {"stem_channels": [8, 16]}
    with pytest.raises(UserError, match="key=value"):
        parse_overrides("image_size")


def test_a_model_too_large_for_memory_is_refused_before_any_data():
    with pytest.raises(UserError, match="per_device_train_batch_size"):
        check_memory(tiny_config(hidden_size=4096, num_attention_heads=32, intermediate_size=16384), 10**6)
    check_memory(tiny_config(), 8)


def test_a_new_model_takes_the_data_s_labels_and_channels(config):
    model, processor = build_model(ModelPlan(tiny_config()), ["x", "y"], num_channels=1)
    assert model.config.num_labels == 2 and model.config.num_channels == 1 and processor.num_channels == 1


def test_a_resumed_bf16_choice_is_kept_and_said(tmp_path):
    (tmp_path / PRECISION_CHOICE_FILE).write_text(json.dumps({"bf16": False, "why": "measured once"}))
    args = SimpleNamespace(bf16=False, fp16=False, mixed_precision="no", per_device_train_batch_size=2)
    said = choose_bf16(None, (3, 8, 8), args, str(tmp_path))
    assert "measured once" in said and args.bf16 is False
    assert precision_words("float32", said).startswith("float32 (")


def test_the_resume_command_drops_what_starts_afresh(monkeypatch):
    argv = ["scripts/train.py", "r.json", "--overwrite_output_dir", "true", "--resume_from_checkpoint=x", "--seed", "3"]
    monkeypatch.setattr("sys.argv", argv)
    command = resume_command()
    assert "--overwrite_output_dir" not in command and "--resume_from_checkpoint=x" not in command
    assert command.endswith("r.json --seed 3 --resume_from_checkpoint true")


def test_the_interrupt_line_names_the_last_complete_checkpoint_of_this_run(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["scripts/train.py", "--output_dir", str(tmp_path)])
    for step in (1, 2, 10):
        (tmp_path / f"checkpoint-{step}").mkdir()
    for step in (1, 2):  # checkpoint-10 was cut off mid-save
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    line = interrupted_line(tmp_path)
    assert "checkpoint-2" in line and line.endswith("--resume_from_checkpoint true")
    assert last_checkpoint(tmp_path, since=time.time() + 60) is None  # an earlier run's, which this one replaces
    assert "first checkpoint" in interrupted_line(tmp_path, since=time.time() + 60)
