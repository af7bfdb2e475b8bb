"""Small random rotations and shifts of training batches (the `digits` policy: no flips, a flipped digit is another
digit), resampled bilinearly with sub-pixel offsets, on whatever device the batch is on. Training glue, never
imported by the model files.
"""

import math
from collections.abc import Sequence

import torch
from torch import nn


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
