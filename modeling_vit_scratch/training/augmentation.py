"""Training augmentation on batches of tensors: small random rotations and shifts (no flips: a flipped digit is
another digit), resampled bilinearly with sub-pixel offsets, on whatever device the batch is on; the photo policies
(crops, flips, RandAugment, erasing, Mixup / CutMix) are in `policies.py` and `mixing.py`.

`AugmentingTrainer` applies the training transforms to each training batch once the batch is on the training
device, so the data loader only decodes and normalises images, and on a GPU the augmentation runs there, one call per
batch. Validation views
(`AugmentedViews`) are the same augmentation with seeded generators: the same copies every epoch and every run.
This module is training glue: the model code never imports it.
"""

import math
from collections.abc import Sequence
from contextlib import contextmanager

import torch
from torch import nn

from modeling_vit_scratch.training.loss_watch import LossWatchingTrainer
from modeling_vit_scratch.training.mixing import soft_target_loss


def per_channel(values, channels: int) -> torch.Tensor:
    """A processor's `image_mean` or `image_std` as (channels,) float32: RGB statistics of a grayscale model become
    their mean, as the processor does."""
    values = torch.tensor(values, dtype=torch.float32).flatten()
    return values.mean().expand(channels).clone() if values.numel() != channels else values


class RandomShiftRotate(nn.Module):
    """pixel_values (batch, C, H, W) -> the same shape, each image rotated about its centre by up to `max_degrees`
    and shifted by up to `max_shift` of its side, resampled bilinearly, `black` outside.

    `black` is the value of a black pixel per channel in the batch's units: 0 for pixels in [0, 1], -mean / std for
    normalised pixel_values (`for_processor`). Random numbers come from `generator`, else from torch's generator for
    the batch's device, which the Trainer seeds, saves in checkpoints and restores on resume.
    """

    def __init__(self, max_shift: float, max_degrees: float, black: Sequence[float] = (0.0,)):
        super().__init__()
        self.max_shift = max_shift
        self.max_degrees = max_degrees
        black = torch.tensor(list(black), dtype=torch.float32).reshape(1, -1, 1, 1)
        self.register_buffer("black", black, persistent=False)

    @classmethod
    def for_processor(cls, processor, max_shift: float, max_degrees: float) -> "RandomShiftRotate":
        """For the pixel_values `processor` makes: black is (0 - mean) / std in each of its channels."""
        mean = per_channel(processor.image_mean, processor.num_channels)
        std = per_channel(processor.image_std, processor.num_channels)
        return cls(max_shift, max_degrees, (-mean / std).tolist())

    def extra_repr(self) -> str:
        return f"max_shift={self.max_shift}, max_degrees={self.max_degrees}"

    def forward(self, pixel_values: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        batch, _, height, width = pixel_values.shape
        device = pixel_values.device
        angle = (torch.rand(batch, device=device, generator=generator) * 2 - 1) * math.radians(self.max_degrees)
        # affine_grid's coordinates run from -1 to 1 across each side: a shift of s sides is 2 s
        shift = (torch.rand(batch, 2, device=device, generator=generator) * 2 - 1) * self.max_shift * 2
        cos, sin = angle.cos(), angle.sin()
        aspect = height / width  # a rotation in pixels, written in coordinates that span 2 per side
        theta = torch.stack(
            [torch.stack([cos, -sin * aspect, shift[:, 0]], 1), torch.stack([sin / aspect, cos, shift[:, 1]], 1)], 1
        )
        pixels = pixel_values.float() - self.black  # black becomes 0, the value grid_sample pads with
        grid = nn.functional.affine_grid(theta, list(pixels.shape), align_corners=False)
        moved = nn.functional.grid_sample(pixels, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
        return (moved + self.black).to(pixel_values.dtype)


class AugmentedViews(torch.utils.data.Dataset):
    """`rows` (items {"pixel_values": (C, H, W), "labels"}) followed by `views - 1` augmented copies of each, seeded
    per item: each image is then scored on its views' averaged probabilities (`views.py`), which rewards what
    generalises to the shifts seen in training."""

    def __init__(self, rows, views: int, augmentation: RandomShiftRotate, seed: int = 0):
        self.rows, self.views, self.augmentation, self.seed = rows, views, augmentation, seed

    def __len__(self) -> int:
        return len(self.rows) * self.views

    def __getitem__(self, index: int) -> dict:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[int]) -> list[dict]:
        """A batch of items from one batched read of `rows` (the DataLoader's fast path)."""
        positions = [divmod(index, len(self.rows)) for index in indices]
        row_indices = [row_index for _, row_index in positions]
        many = getattr(self.rows, "__getitems__", None)
        rows = many(row_indices) if many else [self.rows[row_index] for row_index in row_indices]
        return [self.view(row, view, index) for row, (view, _), index in zip(rows, positions, indices, strict=True)]

    def view(self, row: dict, view: int, index: int) -> dict:
        if view == 0:
            return row
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        pixel_values = self.augmentation(row["pixel_values"][None], generator=generator)[0]
        return {**row, "pixel_values": pixel_values}


@contextmanager
def every_row(training_args):
    """`training_args` with `dataloader_drop_last` off while a loader is made: the evaluation loaders' own setting."""
    kept = training_args.dataloader_drop_last
    training_args.dataloader_drop_last = False
    try:
        yield
    finally:
        training_args.dataloader_drop_last = kept


class AugmentingTrainer(LossWatchingTrainer):
    """The `Trainer` (stopped at the first non-finite loss: `loss_watch.py`), augmenting each training batch on the
    training device just before the step: `augmentation` (a `RandomShiftRotate`, a `policies.PhotoAugmentation`,
    or None for none), then `mixing` (a `mixing.BatchMixing`, whose soft targets `soft_target_loss` trains on, or
    None). Evaluation batches are never augmented; with `eval_flip` each is scored as the mean of its logits and
    those of its mirror image (and the mean of the two losses). Evaluation reads every row of its split whatever
    `--dataloader_drop_last` says, which is for training: a dropped last batch would leave images of the split the
    card counts unscored, or a split smaller than one batch with no score at all."""

    def __init__(self, *args, augmentation: nn.Module | None = None, mixing=None, eval_flip: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.augmentation = None if augmentation is None else augmentation.to(self.args.device)
        self.mixing = None if mixing is None else mixing.to(self.args.device)
        self.eval_flip = eval_flip

    def get_eval_dataloader(self, eval_dataset=None):
        with every_row(self.args):
            return super().get_eval_dataloader(eval_dataset)

    def get_test_dataloader(self, test_dataset):
        with every_row(self.args):
            return super().get_test_dataloader(test_dataset)

    def training_step(self, model, inputs, num_items_in_batch=None):
        if self.augmentation is not None or self.mixing is not None:
            inputs = self._prepare_inputs(inputs)  # on the device; the Trainer's own call then moves nothing
            with torch.no_grad():
                pixel_values, labels = inputs["pixel_values"], inputs["labels"]
                if self.augmentation is not None:
                    pixel_values = self.augmentation(pixel_values)
                if self.mixing is not None:
                    pixel_values, labels = self.mixing(pixel_values, labels)
            inputs = {**inputs, "pixel_values": pixel_values, "labels": labels}
        return super().training_step(model, inputs, num_items_in_batch)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        """Soft targets (floats, from `mixing`): cross-entropy against them; class indices: the Trainer's loss."""
        labels = inputs.get("labels")
        if labels is None or not labels.is_floating_point():
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        outputs = model(pixel_values=inputs["pixel_values"])
        loss = soft_target_loss(outputs.logits, labels, self.args.label_smoothing_factor)
        return (loss, outputs) if return_outputs else loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        loss, logits, labels = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        if not self.eval_flip:
            return loss, logits, labels
        flipped = {**inputs, "pixel_values": inputs["pixel_values"].flip(-1)}
        flipped_loss, flipped_logits, _ = super().prediction_step(model, flipped, prediction_loss_only, ignore_keys)
        if loss is not None:
            loss = (loss + flipped_loss) / 2
        if isinstance(logits, tuple):  # a model with a distillation head: each head's logits averaged
            logits = tuple((own + mirrored) / 2 for own, mirrored in zip(logits, flipped_logits, strict=True))
        elif logits is not None:
            logits = (logits + flipped_logits) / 2
        return loss, logits, labels
