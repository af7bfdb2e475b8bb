"""Training against a teacher, as DeiT does (Touvron et al., 2021): the student's class head learns the labels, its
distillation head (on the distillation token) learns what a trained teacher predicts.

    loss = (1 - alpha) * CE(class head, labels) + alpha * D(distillation head, teacher)
    soft:  D = T^2 * KL(softmax(teacher / T) || softmax(student / T))     (Hinton et al.'s soft targets)
    hard:  D = CE(student, argmax teacher)                                (DeiT's hard-label distillation)

The teacher is any image classifier with the same labels (in any order: its logits are put in the data's), read
through `sources.load_model` (safetensors, no foreign code), frozen in eval mode. It sees the student's batch turned
into its own inputs: size, channels and normalisation (`TeacherInputs`).
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers import AutoImageProcessor

from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.secrets import shown
from modeling_vit_scratch.sources import load_model, resolve


@dataclass(frozen=True)
class Distillation:
    """The distillation loss: `mode` "soft" or "hard", the teacher's share `alpha`, the temperature (soft)."""

    mode: str = "hard"
    alpha: float = 0.5
    temperature: float = 1.0

    def teacher_loss(self, student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
        """D(student, teacher) on (batch, classes) logits, a mean over the batch."""
        if self.mode == "hard":
            return nn.functional.cross_entropy(student_logits, teacher_logits.argmax(dim=-1))
        student = nn.functional.log_softmax(student_logits / self.temperature, dim=-1)
        teacher = nn.functional.log_softmax(teacher_logits / self.temperature, dim=-1)
        # T^2 keeps the gradient's size independent of T (Hinton et al., 2015)
        return nn.functional.kl_div(student, teacher, reduction="batchmean", log_target=True) * self.temperature**2

    def loss(self, cls_logits, distillation_logits, teacher_logits, labels, label_smoothing: float = 0.0):
        """The DeiT objective from the student's two heads, the teacher's logits and the labels (class ids, or a
        (batch, classes) distribution from Mixup / CutMix)."""
        label_loss = nn.functional.cross_entropy(cls_logits.float(), labels, label_smoothing=label_smoothing)
        teacher_loss = self.teacher_loss(distillation_logits.float(), teacher_logits.float())
        return (1 - self.alpha) * label_loss + self.alpha * teacher_loss


def per_channel(values, channels: int) -> torch.Tensor:
    """A processor's mean or std (one number, or one per channel) as (1, channels, 1, 1)."""
    values = torch.as_tensor(values, dtype=torch.float32).flatten()
    return (values if values.numel() == channels else values.mean().expand(channels)).reshape(1, channels, 1, 1)


class TeacherInputs(nn.Module):
    """The student's pixel_values (batch, C, H, W) as the teacher's processor would have made them: the student's
    normalisation undone, the channels matched (grey <-> RGB), resized bilinearly, normalised the teacher's way."""

    def __init__(self, student_processor, teacher_processor, teacher_channels: int):
        super().__init__()
        student_channels = student_processor.num_channels
        self.register_buffer("student_mean", per_channel(student_processor.image_mean, student_channels), False)
        self.register_buffer("student_std", per_channel(student_processor.image_std, student_channels), False)
        self.register_buffer("teacher_mean", per_channel(teacher_processor.image_mean, teacher_channels), False)
        self.register_buffer("teacher_std", per_channel(teacher_processor.image_std, teacher_channels), False)
        self.teacher_channels = teacher_channels
        size = teacher_processor.size
        self.size = (size["height"], size["width"]) if "height" in size else None  # None: keep the student's size

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        pixels = pixel_values.float() * self.student_std + self.student_mean  # in [0, 1]
        if pixels.shape[1] != self.teacher_channels:
            pixels = pixels.mean(dim=1, keepdim=True).expand(-1, self.teacher_channels, -1, -1)
        if self.size is not None and tuple(pixels.shape[-2:]) != self.size:
            pixels = nn.functional.interpolate(pixels, size=self.size, mode="bilinear", antialias=True)
        return (pixels - self.teacher_mean) / self.teacher_std


class Teacher(nn.Module):
    """A frozen teacher, its inputs made from the student's batch and its logits in the data's label order."""

    def __init__(self, model: nn.Module, inputs: TeacherInputs, order: list[int], distillation: Distillation):
        super().__init__()
        self.model, self.inputs, self.distillation = model.eval().requires_grad_(False), inputs, distillation
        self.register_buffer("order", torch.tensor(order), persistent=False)

    @torch.no_grad()
    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        with torch.autocast(pixel_values.device.type, enabled=False):  # float32, outside the student's autocast
            return self.model(pixel_values=self.inputs(pixel_values)).logits.float()[..., self.order]

    def compute_loss(self, model, inputs: dict, return_outputs: bool = False, label_smoothing: float = 0.0):
        """The Trainer's `compute_loss` for a student with a distillation head."""
        outputs = model(pixel_values=inputs["pixel_values"])
        loss = self.distillation.loss(
            outputs.cls_logits, outputs.distillation_logits, self(inputs["pixel_values"]), inputs["labels"],
            label_smoothing,
        )  # fmt: skip
        return (loss, outputs) if return_outputs else loss


def load_teacher(model_args, student_processor, labels: list[str]) -> Teacher:
    """The teacher `--teacher` names, predicting exactly the data's `labels` (in any order), or one line."""
    source, revision = model_args.teacher, model_args.teacher_revision
    teacher = load_model(source, revision=revision, argument="--teacher", trust_option=None)
    folder = resolve(source, revision=revision, argument="--teacher")
    teacher_processor = AutoImageProcessor.from_pretrained(folder, trust_remote_code=False)
    names = [str(teacher.config.id2label[index]) for index in sorted(teacher.config.id2label)]
    if sorted(names) != sorted(labels) or len(set(names)) != len(names):
        raise UserError(
            f"the teacher {shown(source)} predicts {len(names)} classes ({shown(', '.join(names[:5]))}...) and the data "
            f"has {len(labels)} ({shown(', '.join(labels[:5]))}...): train the teacher on the same labels"
        )
    inputs = TeacherInputs(student_processor, teacher_processor, teacher.config.num_channels)
    loss = Distillation(model_args.distillation, model_args.distillation_alpha, model_args.distillation_temperature)
    return Teacher(teacher, inputs, [names.index(label) for label in labels], loss)


def distillation_text(model_args) -> str | None:
    """How the model learned from its teacher, in words for the record and the card (None without a teacher)."""
    if not model_args.teacher:
        return None
    soft = f"soft targets at temperature {model_args.distillation_temperature:g}"
    how = soft if model_args.distillation == "soft" else "the teacher's top class (hard distillation)"
    return (
        f"distilled from the teacher {shown(model_args.teacher)} (DeiT): the distillation head learned {how}, "
        f"weighted {model_args.distillation_alpha:g} against the labels"
    )
