"""Mixup and CutMix on training batches, and the loss they need: soft targets.

Mixup (Zhang et al., 2018) blends each image with another of its batch, CutMix (Yun et al., 2019) pastes a rectangle
of another; the target of each image becomes the blend of the two one-hot labels, weighted by how much of each
image it holds. `--mixup` and `--cutmix` are the shares of batches mixed each way (0.5 and 0.5: every batch mixed,
half by each, as DeiT trains); each image draws its own weight, uniform in [0, 1] (kornia's `RandomMixUpV2` and
`RandomCutMixV2`, on the batch's device).

Once mixing is on, every training batch carries soft targets, (batch, num_labels) floats, and `soft_target_loss`
(cross-entropy against them, with `--label_smoothing_factor` applied to the targets) trains on them; the DeiT loss
(`distillation.py`) takes them as they are. Evaluation batches are never mixed: their labels stay class indices.
"""

import kornia.augmentation as K
import torch
from torch import nn


def soft_targets(mixed: torch.Tensor, num_labels: int) -> torch.Tensor:
    """kornia's class output (batch, 3): (label, label of the image mixed in, its weight) -> (batch, num_labels)
    targets, (1 - weight) on the image's own label and weight on the other."""
    own = nn.functional.one_hot(mixed[:, 0].long(), num_labels).float()
    other = nn.functional.one_hot(mixed[:, 1].long(), num_labels).float()
    weight = mixed[:, 2:3].float()
    return own * (1 - weight) + other * weight


class BatchMixing(nn.Module):
    """(pixel_values (batch, C, H, W), labels (batch,)) -> (mixed pixel_values, soft targets (batch, num_labels)).

    One draw per batch from torch's generator picks Mixup (below `mixup`), CutMix (up to `mixup + cutmix`) or no
    mixing (one-hot targets), so every batch's targets have the same form.
    """

    def __init__(self, mixup: float, cutmix: float, num_labels: int):
        super().__init__()
        self.mixup, self.cutmix, self.num_labels = mixup, cutmix, num_labels
        self.mixup_images = K.RandomMixUpV2(data_keys=["input", "class"])
        # use_correct_lambda: the CutMix paper's weight, the share of the image left as it was (kornia's older
        # default is the pasted share, and warns that its default will change)
        self.cutmix_images = K.RandomCutMixV2(data_keys=["input", "class"], use_correct_lambda=True)

    def extra_repr(self) -> str:
        return f"mixup={self.mixup}, cutmix={self.cutmix}, num_labels={self.num_labels}"

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        draw = float(torch.rand(()))
        if draw < self.mixup:
            pixel_values, mixed = self.mixup_images(pixel_values, labels)
        elif draw < self.mixup + self.cutmix:
            pixel_values, mixed = self.cutmix_images(pixel_values, labels)
            mixed = mixed[0].clone()  # (num_mix = 1, batch, 3)
            mixed[:, 2] = 1 - mixed[:, 2]  # the weight of the image pasted in, as Mixup's output gives it
        else:
            return pixel_values, nn.functional.one_hot(labels.long(), self.num_labels).float()
        return pixel_values, soft_targets(mixed, self.num_labels)


def soft_target_loss(logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0) -> torch.Tensor:
    """Cross-entropy of (batch, num_labels) logits against soft targets of the same shape (or class indices),
    in float32; `label_smoothing` blends the targets with the uniform distribution first."""
    return nn.functional.cross_entropy(logits.float(), targets, label_smoothing=label_smoothing)
