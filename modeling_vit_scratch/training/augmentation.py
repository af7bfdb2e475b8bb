"""From rows to batches: each image read upright and put through the model's processor (`ImageTransform`), kept in
memory as tensors when it fits (`ProcessedImages`), and training batches augmented and mixed as a whole on their
device (`AugmentBatch`, applied by the Trainer in each training step); and the `digits` policy's small random rotations and shifts (`RandomShiftRotate`: no flips, a
flipped digit is another digit), resampled bilinearly with sub-pixel offsets. Training glue, never imported by the
model files.
"""

import io
import math
from collections.abc import Sequence

import torch
from datasets import Dataset
from datasets import Image as ImageFeature
from PIL import Image, ImageOps
from torch import nn

from modeling_vit_scratch.errors import available_memory
from modeling_vit_scratch.image_processing_vit_scratch import decode_image, open_bounded, to_model_mode
from modeling_vit_scratch.secrets import shown


def per_channel(values, channels: int) -> torch.Tensor:
    """A processor's `image_mean` or `image_std` as (channels,) float32: RGB statistics of a grayscale model become
    their mean, as the processor does."""
    values = torch.tensor(values, dtype=torch.float32).flatten()
    return values.mean().expand(channels).clone() if values.numel() != channels else values


class RandomShiftRotate(nn.Module):
    """pixel_values (batch, C, H, W) -> the same shape, each image rotated about its centre by up to `max_degrees`
    and shifted by up to `max_shift` of its side, `black` outside.

    `black` is a black pixel per channel in the batch's units: 0 for pixels in [0, 1], -mean / std for normalised
    pixel_values (`for_processor`). Random numbers come from `generator`, else from torch's generator for the batch's
    device, which the Trainer seeds, saves in checkpoints and restores on resume.
    """

    def __init__(self, max_shift: float, max_degrees: float, black: Sequence[float] = (0.0,)):
        super().__init__()
        self.max_shift, self.max_degrees = max_shift, max_degrees
        self.register_buffer("black", torch.tensor(list(black), dtype=torch.float32).reshape(1, -1, 1, 1), False)

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


def read_image(image) -> Image.Image:
    """A PIL image (as it is), or an undecoded `{"bytes", "path"}` cell opened and decoded upright (EXIF), as
    `datasets` decodes one."""
    if isinstance(image, Image.Image):
        return image
    source = image["path"] if not image.get("bytes") else io.BytesIO(image["bytes"])
    name = f"image {shown(image.get('path') or 'of the data set')}"
    with open_bounded(source, name) as opened:
        decode_image(opened, name)
        return ImageOps.exif_transpose(opened)


class ImageTransform:
    """Rows -> {"pixel_values", "labels"} through the model's processor, each image first in the model's mode."""

    def __init__(self, processor):
        self.processor = processor

    def __call__(self, batch: dict) -> dict:
        images = [to_model_mode(read_image(image), self.processor.num_channels) for image in batch["image"]]
        pixel_values = self.processor(images, return_tensors="pt")["pixel_values"]
        return {"pixel_values": list(pixel_values), "labels": list(batch["label"])}


class ProcessedImages(torch.utils.data.Dataset):
    """A split's rows through `transform`: processed once and held as tensors when they take at most `limit_mb`
    (float32) and half the free memory, else processed each time a batch is read."""

    def __init__(self, split: Dataset, transform: ImageTransform, limit_mb: float):
        self.rows = split.cast_column("image", ImageFeature(decode=False)).with_transform(transform)
        self.pixel_values = None
        size = transform.processor.size
        each = transform.processor.num_channels * size["height"] * size["width"] * 4
        needed = len(split) * each
        if len(split) and needed <= limit_mb * 2**20 and needed < available_memory() / 2:  # else read anew each time
            self.pixel_values = torch.empty(
                (len(split), transform.processor.num_channels, size["height"], size["width"])
            )
            for start in range(0, len(split), 256):
                chunk = torch.stack(self.rows[start : start + 256]["pixel_values"])
                self.pixel_values[start : start + len(chunk)] = chunk
        self.labels = list(split["label"])

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict:
        pixels = self.pixel_values[index] if self.pixel_values is not None else self.rows[index]["pixel_values"]
        return {"pixel_values": pixels, "labels": self.labels[index]}


class AugmentBatch(nn.Module):
    """A training batch {"pixel_values", "labels"} on its device -> augmented, then mixed (soft targets).

    It runs in the training step, after the batch is read: its random numbers come from the device's generator in
    step order, which each checkpoint saves and a resumed run restores, so a resumed run draws what an uninterrupted
    one draws (the data loader reads a batch ahead, so randomness drawn while reading would not be).
    """

    def __init__(self, augmentation: nn.Module | None, mixing: nn.Module | None):
        super().__init__()
        self.augmentation, self.mixing = augmentation, mixing

    @torch.no_grad()
    def forward(self, batch: dict) -> dict:
        pixel_values, labels = batch["pixel_values"], batch.get("labels")  # none for a pretraining model
        if self.augmentation is not None:
            pixel_values = self.augmentation(pixel_values)
        if self.mixing is not None:
            pixel_values, labels = self.mixing(pixel_values, labels)
        return {**batch, "pixel_values": pixel_values} | ({} if labels is None else {"labels": labels})
