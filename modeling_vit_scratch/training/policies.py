"""Augmentation policies: the named sets of training transforms (`--augmentation digits|photos|none`), each knob of
which the command line or a recipe may change, and the photo transforms they build.

- `digits`: small shifts and rotations (`augmentation.RandomShiftRotate`, `--max_shift`, `--max_degrees`), no flips.
- `photos`: what timm and DeiT train photos with: a random-resized crop (`--crop_scale`, `--crop_ratio`), a horizontal
  flip (`--hflip`), RandAugment (`--rand_augment rand-m9-n2`, or `trivial`), random erasing (`--random_erasing`), and
  batches mixed by Mixup or CutMix (`--mixup`, `--cutmix`: `mixing.py`).
- `none`: nothing (as `--augment false`).

The photo transforms are kornia's: every image of a batch draws its own parameters from torch's generator (which the
Trainer seeds, saves in checkpoints and restores on resume). Training glue, never imported by the model files.
"""

import re
from dataclasses import dataclass, fields

import kornia.augmentation as K
import torch
from kornia.augmentation.auto import RandAugment, TrivialAugment
from torch import nn

from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.training.augmentation import RandomShiftRotate, per_channel

# What each named policy sets; a knob given on the command line or in a recipe replaces the policy's value
POLICIES = {
    "digits": dict(shift_rotate=True),
    "photos": dict(
        crop_scale=0.08,
        crop_ratio=0.75,
        hflip=0.5,
        rand_augment="rand-m9-n2",
        random_erasing=0.25,
        mixup=0.5,
        cutmix=0.5,
    ),
    "none": {},
}
RAND_AUGMENT = re.compile(r"rand-m(\d+(?:\.\d+)?)-n(\d+)")
KORNIA_MAGNITUDE_PER_TIMM = 3  # timm writes RandAugment's magnitude out of 10, kornia out of 30


@dataclass(frozen=True)
class AugmentationPolicy:
    """The training transforms of a run. Defaults are "nothing": 1.0 crop scale and ratio crop nothing away."""

    shift_rotate: bool = False
    crop_scale: float = 1.0  # smallest share of the image's area a random-resized crop keeps
    crop_ratio: float = 1.0  # aspect ratios (width / height) from crop_ratio to 1 / crop_ratio
    hflip: float = 0.0  # chance that an image is flipped left to right
    rand_augment: str = "none"
    random_erasing: float = 0.0  # chance that a rectangle of an image is set to the mean colour
    mixup: float = 0.0  # share of batches mixed by Mixup
    cutmix: float = 0.0  # share of batches mixed by CutMix

    def __post_init__(self):
        rand_augment_operations(self.rand_augment)
        if self.mixup + self.cutmix > 1:
            raise UserError(
                f"--mixup {self.mixup:g} and --cutmix {self.cutmix:g} are shares of the batches: give values whose "
                "sum is at most 1"
            )

    @property
    def mixes(self) -> bool:
        return self.mixup > 0 or self.cutmix > 0

    @property
    def transforms_photos(self) -> bool:
        cropped = self.crop_scale < 1 or self.crop_ratio < 1
        return cropped or self.hflip > 0 or self.rand_augment != "none" or self.random_erasing > 0


KNOBS = tuple(item.name for item in fields(AugmentationPolicy) if item.name != "shift_rotate")


def augmentation_policy(data_args, training_args=None) -> AugmentationPolicy:
    """The policy `--augmentation` names, with the knobs given (not None) replacing its values; `--augment false`
    turns every transform off. Mixing needs two images per device batch."""
    if not data_args.augment:
        return AugmentationPolicy()
    given = {name: getattr(data_args, name) for name in KNOBS if getattr(data_args, name) is not None}
    policy = AugmentationPolicy(**{**POLICIES[data_args.augmentation], **given})
    if policy.mixes and training_args is not None and training_args.per_device_train_batch_size < 2:
        raise UserError(
            "--mixup / --cutmix mix each image with another of its batch: give a per-device batch of at least 2, "
            "or --mixup 0 --cutmix 0"
        )
    return policy


def describe_policy(policy: AugmentationPolicy, data_args) -> str | None:
    """The policy in words, for the model card and the record (None when nothing is augmented)."""
    words = []
    if policy.shift_rotate:
        words.append(
            f"random shifts of up to {data_args.max_shift:.0%} of the image side and rotations of up to "
            f"{data_args.max_degrees:g} degrees" + ("" if policy.hflip else ", no flips")
        )
    if policy.crop_scale < 1 or policy.crop_ratio < 1:
        words.append(
            f"random-resized crops keeping {policy.crop_scale:.0%} to 100% of the area at aspect ratios "
            f"{policy.crop_ratio:g} to {1 / policy.crop_ratio:.3g}"
        )
    if policy.hflip:
        words.append(f"horizontal flips ({policy.hflip:.0%} of images)")
    if policy.rand_augment != "none":
        words.append("TrivialAugment" if policy.rand_augment == "trivial" else f"RandAugment {policy.rand_augment}")
    if policy.random_erasing:
        words.append(f"random erasing ({policy.random_erasing:.0%} of images)")
    mixings = [
        f"{name} on {share:.0%}" for name, share in (("Mixup", policy.mixup), ("CutMix", policy.cutmix)) if share
    ]
    if mixings:
        words.append(f"{' and '.join(mixings)} of batches (soft targets)")
    if not words:
        return None
    named = f"the '{data_args.augmentation}' policy: " if data_args.augmentation != "digits" else ""
    return named + "; ".join(words)


def rand_augment_operations(spec: str) -> nn.Module | None:
    """`rand-mM-nN` -> kornia's RandAugment (N operations at magnitude M of 10, timm's spelling), `trivial` ->
    TrivialAugment, `none` -> None."""
    if spec == "none":
        return None
    if spec == "trivial":
        return TrivialAugment()
    found = RAND_AUGMENT.fullmatch(spec)
    if found is None or not 0 < float(found.group(1)) < 10 or not 1 <= int(found.group(2)) <= 10:
        raise UserError(
            f"--rand_augment {spec!r} is not a policy: give 'rand-mM-nN' (N of 1..10 operations at magnitude M "
            "between 0 and 10, e.g. rand-m9-n2), 'trivial' or 'none'"
        )
    return RandAugment(n=int(found.group(2)), m=float(found.group(1)) * KORNIA_MAGNITUDE_PER_TIMM)


class PhotoAugmentation(nn.Module):
    """pixel_values (batch, C, H, W), normalised by `mean` and `std` -> the same shape: a random-resized crop back to
    (H, W), a horizontal flip, RandAugment or TrivialAugment on the [0, 1] pixels, and random erasing to the mean
    colour (0 in normalised units), in timm's order. Grayscale batches go through RandAugment as three equal channels
    and come back as their mean."""

    def __init__(self, policy: AugmentationPolicy, image_size: tuple[int, int], mean, std):
        super().__init__()
        geometric = []
        if policy.crop_scale < 1 or policy.crop_ratio < 1:
            ratio = (policy.crop_ratio, 1 / policy.crop_ratio)
            geometric.append(K.RandomResizedCrop(image_size, scale=(policy.crop_scale, 1.0), ratio=ratio))
        if policy.hflip > 0:
            geometric.append(K.RandomHorizontalFlip(p=policy.hflip))
        self.geometric = nn.Sequential(*geometric)
        self.operations = rand_augment_operations(policy.rand_augment)
        self.erasing = K.RandomErasing(p=policy.random_erasing, value=0.0) if policy.random_erasing > 0 else None
        channels = len(mean)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).reshape(1, channels, 1, 1), False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).reshape(1, channels, 1, 1), False)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        pixels = self.geometric(pixel_values.float())
        if self.operations is not None:
            unit = (pixels * self.std + self.mean).clamp(0, 1)  # RandAugment works on [0, 1] pixels
            if unit.shape[1] == 1:
                unit = self.operations(unit.expand(-1, 3, -1, -1)).mean(1, keepdim=True)
            else:
                unit = self.operations(unit)
            pixels = (unit - self.mean) / self.std
        if self.erasing is not None:
            pixels = self.erasing(pixels)
        return pixels.to(pixel_values.dtype)


def training_augmentation(policy: AugmentationPolicy, processor, shift_rotate: RandomShiftRotate) -> nn.Module | None:
    """The pixel transforms of each training batch: shifts and rotations, then every photo transform the policy or a
    knob given with it asks for (`--augmentation digits --hflip 0.5` shifts, rotates and flips), or None."""
    steps = [shift_rotate] if policy.shift_rotate else []
    if policy.transforms_photos:
        size = (processor.size["height"], processor.size["width"])
        mean = per_channel(processor.image_mean, processor.num_channels).tolist()
        std = per_channel(processor.image_std, processor.num_channels).tolist()
        steps.append(PhotoAugmentation(policy, size, mean, std))
    if not steps:
        return None
    return steps[0] if len(steps) == 1 else nn.Sequential(*steps)
