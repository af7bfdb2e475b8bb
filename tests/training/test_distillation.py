"""Tests that mirror distillation.py: the DeiT loss, the teacher's inputs, loading a teacher, and training against one
through scripts/train.py (a ResNet teacher trained by the same script, on one process and under torchrun in bf16)."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from entry_points import outcome
from helpers import made_once, run_script, tiny_model_file, training_args
from safetensors.torch import load_file, save_file
from transformers import AutoModelForImageClassification, ResNetConfig, ResNetForImageClassification

from modeling_vit_scratch import ViTScratchForImageClassificationWithTeacher, ViTScratchImageProcessor
from modeling_vit_scratch.training.arguments import DataArguments, ModelArguments, parse_arguments
from modeling_vit_scratch.training.distillation import Distillation, DistillationTrainer, TeacherInputs, load_teacher
from modeling_vit_scratch.training.trainer import train

LABELS = {index: str(index) for index in range(10)}


def test_hard_distillation_is_cross_entropy_with_the_teachers_top_class():
    student, teacher, labels = torch.randn(6, 10), torch.randn(6, 10), torch.randint(0, 10, (6,))
    cls_logits = torch.randn(6, 10)
    loss = Distillation("hard", alpha=0.3).loss(cls_logits, student, teacher, labels)
    cross_entropy = torch.nn.functional.cross_entropy
    expected = 0.7 * cross_entropy(cls_logits, labels) + 0.3 * cross_entropy(student, teacher.argmax(-1))
    torch.testing.assert_close(loss, expected)


def test_soft_distillation_is_t_squared_kl_and_zero_when_student_matches_teacher():
    student, teacher = torch.randn(6, 10), torch.randn(6, 10)
    distillation = Distillation("soft", alpha=1.0, temperature=4.0)
    p_teacher, log_p_student = (teacher / 4).softmax(-1), (student / 4).log_softmax(-1)
    expected = 16 * (p_teacher * (p_teacher.log() - log_p_student)).sum(-1).mean()
    torch.testing.assert_close(distillation.teacher_loss(student, teacher), expected)
    assert distillation.teacher_loss(teacher, teacher).abs().item() < 1e-6
    # alpha 1: the labels play no part; alpha 0: the teacher plays none
    labels = torch.randint(0, 10, (6,))
    torch.testing.assert_close(distillation.loss(torch.randn(6, 10), student, teacher, labels), expected)
    label_only = Distillation("soft", alpha=0.0).loss(student, torch.randn(6, 10), teacher, labels)
    torch.testing.assert_close(label_only, torch.nn.functional.cross_entropy(student, labels))


@pytest.mark.parametrize(
    ("argument", "value", "message"),
    [
        ("--distillation", "medium", "invalid choice: 'medium'"),
        ("--distillation_alpha", "1.5", "--distillation_alpha 1.5 is out of range: give a number in [0, 1]"),
        ("--distillation_temperature", "0", "--distillation_temperature 0 is out of range: give a number in (0, 100]"),
    ],
)
def test_bad_distillation_settings_are_one_line_naming_the_argument(tmp_path, argument, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_arguments(["--output_dir", str(tmp_path), "--teacher", "x", argument, value])


def test_teacher_inputs_are_what_the_teachers_processor_makes_of_the_same_image():
    """A grayscale 16x16 student batch (mean/std 0.5) becomes the RGB 32x32 ImageNet-normalised batch of a teacher."""
    student_processor = ViTScratchImageProcessor(size={"height": 16, "width": 16}, num_channels=1)
    teacher_processor = ViTScratchImageProcessor(
        size={"height": 32, "width": 32}, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]
    )
    image = torch.rand(1, 1, 16, 16)  # in [0, 1]
    converted = TeacherInputs(student_processor, teacher_processor, teacher_channels=3)((image - 0.5) / 0.5)
    assert converted.shape == (1, 3, 32, 32)
    upsampled = torch.nn.functional.interpolate(image, size=(32, 32), mode="bilinear", antialias=True)
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    torch.testing.assert_close(converted, (upsampled.expand(-1, 3, -1, -1) - mean[:, None, None]) / std[:, None, None])


def save_resnet_teacher(folder, num_labels=10, num_channels=1, image_size=16):
    config = ResNetConfig(
        num_channels=num_channels, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic"
    )
    config.num_labels, config.id2label = num_labels, {i: str(i) for i in range(num_labels)}
    config.label2id = {name: i for i, name in config.id2label.items()}
    ResNetForImageClassification(config).save_pretrained(folder)
    ViTScratchImageProcessor(
        size={"height": image_size, "width": image_size}, num_channels=num_channels
    ).save_pretrained(folder)
    return folder


def test_a_teacher_with_other_labels_is_refused_naming_both(tmp_path):
    folder = save_resnet_teacher(tmp_path / "teacher", num_labels=3)
    with pytest.raises(ValueError, match="predicts 3 classes .* but the data has 10"):
        load_teacher(str(folder), ViTScratchImageProcessor(num_channels=1), LABELS)


def test_a_teacher_folder_is_never_run_as_code(tmp_path):
    """A folder whose config names code of its own is refused: the teacher loads without trust_remote_code."""
    folder = save_resnet_teacher(tmp_path / "teacher")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="evil_net", auto_map={"AutoModelForImageClassification": "evil.EvilModel"})
    (folder / "config.json").write_text(json.dumps(config))
    marker = tmp_path / "ran"
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    with pytest.raises(ValueError, match="Cannot load the teacher"):
        load_teacher(str(folder), ViTScratchImageProcessor(num_channels=1), LABELS)
    assert not marker.exists()


def test_the_teacher_stays_frozen_in_eval_mode_and_the_loss_is_the_deit_objective(tmp_path, config):
    config.distillation_token, config.num_channels, config.image_size = True, 1, 16
    config.num_labels, config.id2label = 10, LABELS
    student = ViTScratchForImageClassificationWithTeacher(config)
    teacher_folder = save_resnet_teacher(tmp_path / "teacher")
    student_processor = ViTScratchImageProcessor(size={"height": 16, "width": 16}, num_channels=1)
    teacher, teacher_inputs = load_teacher(str(teacher_folder), student_processor, LABELS)
    batches = [{"pixel_values": torch.randn(4, 1, 16, 16), "labels": torch.randint(0, 10, (4,))} for _ in range(8)]
    distillation = Distillation("soft", alpha=0.5, temperature=2.0)
    trainer = DistillationTrainer(
        model=student,
        args=training_args(tmp_path / "out", eval_strategy="no", save_strategy="no", load_best_model_at_end=False),
        train_dataset=batches,
        data_collator=lambda items: items[0],
        teacher=teacher,
        teacher_inputs=teacher_inputs,
        distillation=distillation,
    )
    batch = batches[0]
    outputs = student(batch["pixel_values"])
    expected = distillation.loss(
        outputs.cls_logits, outputs.distillation_logits, teacher(batch["pixel_values"]).logits, batch["labels"]
    )
    torch.testing.assert_close(trainer.compute_loss(student, batch), expected)
    trainer.train()
    assert not teacher.training and all(parameter.grad is None for parameter in teacher.parameters())
    saved = load_file(teacher_folder / "model.safetensors")
    assert all(torch.equal(tensor, saved[name]) for name, tensor in teacher.state_dict().items() if name in saved)


def tiny_teacher_file(tmp_path) -> str:
    path = tmp_path / "teacher.json"
    path.write_text(
        json.dumps(
            dict(
                model_type="resnet",
                image_size=16,
                num_channels=1,
                embedding_size=8,
                hidden_sizes=[8, 16],
                depths=[1, 1],
                layer_type="basic",
            )
        )
    )
    return str(path)


@pytest.fixture(scope="module")
def trained_teacher(tmp_path_factory):
    """A small ResNet trained on 64 digits by `train`, from a config file with `model_type: resnet`, choosing its
    precision as `make teacher` does (the digits recipe sets --bf16_when_faster). Trained once per test run
    (`made_once`)."""

    def make(tmp_path: Path) -> None:
        train(
            ModelArguments(model=tiny_teacher_file(tmp_path), bf16_when_faster=True),
            DataArguments(dataset="digits", max_train_samples=64),
            training_args(tmp_path / "teacher", num_train_epochs=1),
        )

    return made_once(tmp_path_factory, "test_distillation-teacher", make) / "teacher"


def test_the_script_trains_a_transformers_cnn_from_a_config_file(trained_teacher):
    config = json.loads((trained_teacher / "config.json").read_text())
    assert config["model_type"] == "resnet" and config["architectures"] == ["ResNetForImageClassification"]
    model = AutoModelForImageClassification.from_pretrained(trained_teacher)
    assert type(model).__name__ == "ResNetForImageClassification"
    card = (trained_teacher / "README.md").read_text()
    assert "resnet image classifier" in card and "| test | accuracy |" in card
    assert "`ResNetForImageClassification` trained from scratch by vit-scratch" in card  # a config file: new weights
    record = json.loads((trained_teacher / "training_record.json").read_text())
    assert record["precision_choice"].startswith("chosen by --bf16_when_faster: ")
    assert f"{record['precision']} ({record['precision_choice']})" in card  # the precision and why, as for ours


def test_a_config_file_of_another_model_type_needs_an_image_size(tmp_path):
    path = tmp_path / "teacher.json"
    path.write_text(json.dumps(dict(model_type="resnet", num_channels=1)))
    with pytest.raises(ValueError, match='gives no image_size: add the side images are resized to, e.g. "image_size"'):
        train(
            ModelArguments(model=str(path)),
            DataArguments(dataset="digits", max_train_samples=64),
            training_args(tmp_path / "out"),
        )


def test_training_against_the_teacher_writes_a_two_headed_model_that_says_how_it_was_taught(tmp_path, trained_teacher):
    model_file = tiny_model_file(tmp_path, num_channels=1, image_size=16, patch_size=4)
    metrics = train(
        ModelArguments(model=model_file, teacher=str(trained_teacher), distillation="soft", distillation_alpha=0.7),
        DataArguments(dataset="digits", max_train_samples=64),
        training_args(tmp_path / "student", num_train_epochs=1),
    )
    folder = tmp_path / "student"
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and metrics["eval_loss"] > 0
    assert json.loads((folder / "config.json").read_text())["distillation_token"] is True
    model = AutoModelForImageClassification.from_pretrained(folder)
    assert type(model).__name__ == "ViTScratchForImageClassificationWithTeacher"
    record = json.loads((folder / "training_record.json").read_text())
    assert "soft distillation" in record["distillation"] and "weight 0.7" in record["distillation"]
    card = (folder / "README.md").read_text()
    assert "a distillation token" in card and f"from the teacher {trained_teacher}" in card


def test_a_checkpoint_without_a_distillation_token_is_refused_with_a_teacher(tmp_path, trained_teacher):
    student = str(trained_teacher)  # a ResNet: no distillation token
    refused = outcome(
        "train", ["--model", student, "--teacher", str(trained_teacher), "--output_dir", str(tmp_path / "out")]
    )
    assert refused.one_line, refused
    assert refused.error == (
        f"error: --teacher trains a distillation token, which the checkpoint {str(trained_teacher)!r} has not: train "
        "a new vit_scratch model with --teacher, or drop --teacher."
    )
    assert not (tmp_path / "out" / "config.json").exists()


@pytest.mark.integration
def test_distillation_trains_under_torchrun_in_bf16(tmp_path, trained_teacher):
    """Two CPU processes (gloo), bf16 autocast for the student, the teacher in float32 on each process."""
    result = run_script(
        *("--model", tiny_model_file(tmp_path, num_channels=1, image_size=16, patch_size=4)),
        *("--teacher", str(trained_teacher), "--dataset", "digits", "--max_train_samples", "64"),
        *("--num_train_epochs", "1", "--total_train_batch_size", "16", "--bf16", "true", "--report_to", "none"),
        *("--disable_tqdm", "true", "--output_dir", str(tmp_path / "out")),
        nproc=2,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "all_results.json").read_text())
    assert results["world_size"] == 2 and results["train_loss"] > 0
    record = json.loads((tmp_path / "out" / "training_record.json").read_text())
    assert record["precision"] == "bf16 mixed precision" and "hard distillation" in record["distillation"]
    # the per-class results count each test image once, from the predictions gathered from both processes
    matrix = results["test_confusion_matrix"]["matrix"]
    assert sum(map(sum, matrix)) == record["num_test"]
    assert sum(row[index] for index, row in enumerate(matrix)) / record["num_test"] == pytest.approx(
        results["test_accuracy"]
    )


def test_a_missing_teacher_folder_is_refused_before_any_data_is_read(tmp_path):
    from modeling_vit_scratch.training.model_source import model_config

    with pytest.raises(FileNotFoundError, match="Teacher folder .* does not exist: give a folder written by"):
        model_config(ModelArguments(model="vit-tiny-patch16-224", teacher=str(tmp_path / "missing")))


def test_a_teacher_with_the_same_classes_in_another_order_predicts_in_the_datas_order(tmp_path):
    """Its logits are permuted into the data's label order: soft and hard targets then mean the same classes."""
    folder = save_resnet_teacher(tmp_path / "teacher", num_labels=3)
    config = json.loads((folder / "config.json").read_text())
    config["id2label"] = {"0": "c", "1": "a", "2": "b"}
    config["label2id"] = {"c": 0, "a": 1, "b": 2}
    (folder / "config.json").write_text(json.dumps(config))
    processor = ViTScratchImageProcessor(size={"height": 16, "width": 16}, num_channels=1)
    teacher, _ = load_teacher(str(folder), processor, {0: "a", 1: "b", 2: "c"})
    original = AutoModelForImageClassification.from_pretrained(folder).eval()
    pixels = torch.randn(2, 1, 16, 16)
    torch.testing.assert_close(teacher(pixel_values=pixels).logits, original(pixel_values=pixels).logits[:, [1, 2, 0]])
    assert not teacher.training and not any(parameter.requires_grad for parameter in teacher.parameters())


def test_a_teacher_with_a_class_the_data_lacks_is_refused_with_shortened_lists(tmp_path):
    folder = save_resnet_teacher(tmp_path / "teacher", num_labels=10)
    labels = {index: str(index) for index in [*range(9), 11]}
    with pytest.raises(ValueError) as refused:
        load_teacher(str(folder), ViTScratchImageProcessor(num_channels=1), labels)
    assert str(refused.value) == (
        f"The teacher '{folder}' predicts 10 classes (0, 1, 2, 3, 4, ... 5 more) but the data has 10 (0, 1, 2, 3, 4, "
        "... 5 more): train the teacher on the same labels."
    )


def test_training_against_a_teacher_listing_the_classes_in_another_order_runs(tmp_path, trained_teacher):
    """The teacher's config names the digits 9..0 (its head rows reversed to match): the run trains, with the
    teacher's logits put back in the data's order."""
    teacher = tmp_path / "reversed"
    shutil.copytree(trained_teacher, teacher)
    config = json.loads((teacher / "config.json").read_text())
    config["id2label"] = {str(index): str(9 - index) for index in range(10)}
    config["label2id"] = {str(9 - index): index for index in range(10)}
    (teacher / "config.json").write_text(json.dumps(config))
    weights = load_file(teacher / "model.safetensors")
    head = [name for name in weights if name.startswith("classifier.")]
    save_file({**weights, **{name: weights[name].flip(0).contiguous() for name in head}}, teacher / "model.safetensors")
    original = AutoModelForImageClassification.from_pretrained(trained_teacher).eval()
    reordered, _ = load_teacher(str(teacher), ViTScratchImageProcessor(num_channels=1), LABELS)
    pixels = torch.randn(2, 1, 16, 16)
    torch.testing.assert_close(reordered(pixel_values=pixels).logits, original(pixel_values=pixels).logits)
    metrics = train(
        ModelArguments(
            model=tiny_model_file(tmp_path, num_channels=1, image_size=16, patch_size=4), teacher=str(teacher)
        ),
        DataArguments(dataset="digits", max_train_samples=64),
        training_args(tmp_path / "student", num_train_epochs=1),
    )
    assert 0.0 <= metrics["test_accuracy"] <= 1.0
