"""Training against a teacher, as DeiT does (Touvron et al., 2021): the student's class head learns the labels, its
distillation head (on the distillation token) learns what a trained teacher predicts.

    loss = (1 - alpha) * CE(class head, labels) + alpha * D(distillation head, teacher)
    soft:  D = T^2 * KL(softmax(teacher / T) || softmax(student / T))     (Hinton et al.'s soft targets)
    hard:  D = CE(student, argmax teacher)                                (DeiT's hard-label distillation)

`scripts/train.py --teacher FOLDER_OR_REPO` turns it on: any `AutoModelForImageClassification` with the same labels
(in any order: its logits are put in the data's, `ReorderedTeacher`), loaded without running code from its folder, in
eval mode and without gradients. The teacher sees the student's batch, resampled to its own input size, channels and
normalisation (`TeacherInputs`).
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoImageProcessor, AutoModelForImageClassification

from modeling_vit_scratch.common.sources import hub_misanswered
from modeling_vit_scratch.common.weights import check_finite
from modeling_vit_scratch.training.augmentation import AugmentingTrainer, per_channel
from modeling_vit_scratch.training.data import shown_labels

DISTILLATION_MODES = ("soft", "hard")


@dataclass(frozen=True)
class Distillation:
    """The distillation loss: `mode` soft or hard, the teacher's share `alpha` in [0, 1], the temperature (soft)."""

    mode: str = "hard"
    alpha: float = 0.5
    temperature: float = 1.0

    def __post_init__(self):
        if self.mode not in DISTILLATION_MODES:
            raise ValueError(f"--distillation must be 'soft' or 'hard', got {self.mode!r}.")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"--distillation_alpha must be in [0, 1] (the teacher's share), got {self.alpha}.")
        if self.temperature <= 0:
            raise ValueError(f"--distillation_temperature must be > 0, got {self.temperature}.")

    def teacher_loss(self, student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
        """D(student, teacher) on (batch, classes) logits, a mean over the batch."""
        if self.mode == "hard":
            return nn.functional.cross_entropy(student_logits, teacher_logits.argmax(dim=-1))
        temperature = self.temperature
        student = nn.functional.log_softmax(student_logits / temperature, dim=-1)
        teacher = nn.functional.log_softmax(teacher_logits / temperature, dim=-1)
        # T^2 keeps the gradient's size independent of T (Hinton et al., 2015)
        return nn.functional.kl_div(student, teacher, reduction="batchmean", log_target=True) * temperature**2

    def loss(self, cls_logits, distillation_logits, teacher_logits, labels, label_smoothing: float = 0.0):
        """The DeiT objective from the student's two heads (batch, classes), the teacher's logits and the labels."""
        label_loss = nn.functional.cross_entropy(cls_logits.float(), labels, label_smoothing=label_smoothing)
        teacher_loss = self.teacher_loss(distillation_logits.float(), teacher_logits.float())
        return (1 - self.alpha) * label_loss + self.alpha * teacher_loss


class TeacherInputs(nn.Module):
    """The student's pixel_values (batch, C, H, W) as the teacher's processor would have made them: undo the
    student's normalisation, match the channels (grey <-> RGB), resize bilinearly, normalise the teacher's way."""

    def __init__(self, student_processor, teacher_processor, teacher_channels: int):
        super().__init__()
        student_channels = student_processor.num_channels
        statistics = dict(
            student_mean=(student_processor.image_mean, student_channels),
            student_std=(student_processor.image_std, student_channels),
            teacher_mean=(teacher_processor.image_mean, teacher_channels),
            teacher_std=(teacher_processor.image_std, teacher_channels),
        )
        for name, (values, channels) in statistics.items():
            self.register_buffer(name, per_channel(values, channels).reshape(1, channels, 1, 1), persistent=False)
        self.teacher_channels = teacher_channels
        size = teacher_processor.size
        self.size = (size["height"], size["width"]) if "height" in size else None  # None: keep the student's size

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        pixels = pixel_values.float() * self.student_std + self.student_mean  # (batch, C, H, W) in [0, 1]
        if pixels.shape[1] != self.teacher_channels:
            pixels = pixels.mean(dim=1, keepdim=True).expand(-1, self.teacher_channels, -1, -1)
        if self.size is not None and tuple(pixels.shape[-2:]) != self.size:
            pixels = nn.functional.interpolate(pixels, size=self.size, mode="bilinear", antialias=True)
        return (pixels - self.teacher_mean) / self.teacher_std


def load_teacher(
    source: str, student_processor, id2label: dict[int, str], revision: str | None = None
) -> tuple[nn.Module, TeacherInputs]:
    """The teacher model (eval mode, frozen) and the conversion of the student's inputs for it. It must predict the
    same classes; in another order, its logits are put in the data's order. Code from its folder is never run. A hub
    repo is read at `revision` (the commit `pin_hub_sources` resolved)."""
    try:
        teacher = AutoModelForImageClassification.from_pretrained(
            source, trust_remote_code=False, use_safetensors=True, revision=revision
        )
        teacher_processor = AutoImageProcessor.from_pretrained(source, trust_remote_code=False, revision=revision)
    except (OSError, ValueError) as error:
        misanswered = hub_misanswered(f"Cannot load the teacher {source!r}", error)  # an answer no Hub gives
        if misanswered:
            raise ValueError(misanswered) from None
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(
            f"Cannot load the teacher {source!r} ({first_line}): give a folder or hub repo of an image "
            "classifier with its image processor, such as one scripts/train.py wrote."
        ) from None
    check_finite(teacher.state_dict(), source)  # a hub repo's, read only now (a folder's before the data)
    teacher_labels = [str(teacher.config.id2label[index]) for index in sorted(teacher.config.id2label)]
    student_labels = [str(id2label[index]) for index in sorted(id2label)]
    channels = teacher.config.num_channels
    if teacher_labels != student_labels:
        teacher = ReorderedTeacher(teacher, label_order(source, teacher_labels, student_labels))
    teacher.eval().requires_grad_(False)
    return teacher, TeacherInputs(student_processor, teacher_processor, channels)


def label_order(source: str, teacher_labels: list[str], student_labels: list[str]) -> list[int]:
    """For each of the data's classes, the index of the teacher's logit for it; a ValueError unless the teacher
    predicts exactly the data's classes (each once)."""
    if sorted(teacher_labels) != sorted(student_labels) or len(set(teacher_labels)) != len(teacher_labels):
        raise ValueError(
            f"The teacher {source!r} predicts {len(teacher_labels)} classes ({shown_labels(teacher_labels)}) but "
            f"the data has {len(student_labels)} ({shown_labels(student_labels)}): train the teacher on the same "
            "labels."
        )
    return [teacher_labels.index(label) for label in student_labels]


class ReorderedTeacher(nn.Module):
    """A teacher that predicts the data's classes in another order: its logits (batch, classes) are put in the
    data's order (`order[i]`: the teacher's index of the data's class i), which changes neither soft nor hard
    targets' meaning."""

    def __init__(self, teacher: nn.Module, order: list[int]):
        super().__init__()
        self.teacher = teacher
        self.register_buffer("order", torch.tensor(order), persistent=False)

    def forward(self, *args, **kwargs):
        outputs = self.teacher(*args, **kwargs)
        outputs.logits = outputs.logits[..., self.order]
        return outputs


class DistillationTrainer(AugmentingTrainer):
    """The `Trainer`, with the DeiT loss: the teacher runs on the same (augmented) batch, in eval mode, without
    gradients, on the student's device in float32, outside the student's autocast."""

    def __init__(self, *args, teacher: nn.Module, teacher_inputs: TeacherInputs, distillation: Distillation, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher = teacher.to(self.args.device)
        self.teacher_inputs = teacher_inputs.to(self.args.device)
        self.distillation = distillation

    def teacher_logits(self, pixel_values: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), torch.autocast(pixel_values.device.type, enabled=False):
            return self.teacher(pixel_values=self.teacher_inputs(pixel_values)).logits.float()

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(pixel_values=inputs["pixel_values"])
        loss = self.distillation.loss(
            outputs.cls_logits,
            outputs.distillation_logits,
            self.teacher_logits(inputs["pixel_values"]),
            inputs["labels"],
            self.args.label_smoothing_factor,
        )
        return (loss, outputs) if return_outputs else loss
