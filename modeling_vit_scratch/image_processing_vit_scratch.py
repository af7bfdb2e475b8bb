"""Image processor: any PIL image (any size, any mode) -> normalised `pixel_values` (batch, channels, height, width).

transformers' PIL backend does the resizing, rescaling and normalising; this class only adds the conversion to the
number of channels the model was built for (mode "L" for 1 channel, "RGB" for 3), so grayscale, RGBA, palette and
16-bit images all reach the model in the form it expects.
"""

import numpy as np
from PIL import Image
from transformers.image_processing_backends import PilBackend
from transformers.image_utils import PILImageResampling
from transformers.processing_utils import ImagesKwargs

from .configuration_vit_scratch import ViTScratchConfig, to_pair


class ViTScratchImageProcessorKwargs(ImagesKwargs, total=False):
    num_channels: int


class ViTScratchImageProcessor(PilBackend):
    """Resize to the model's image size, convert to its channels, scale to [0, 1], normalise with mean/std."""

    valid_kwargs = ViTScratchImageProcessorKwargs
    model_input_names = ["pixel_values"]
    resample = PILImageResampling.BILINEAR
    size = {"height": 224, "width": 224}
    num_channels = 3
    image_mean = [0.5, 0.5, 0.5]
    image_std = [0.5, 0.5, 0.5]
    do_resize = True
    do_rescale = True
    do_normalize = True

    @classmethod
    def for_config(cls, config: ViTScratchConfig, **kwargs) -> "ViTScratchImageProcessor":
        """The processor that feeds a model of this config: its image size and channels, mean/std 0.5 per channel."""
        height, width = to_pair(config.image_size)
        defaults = dict(
            size={"height": height, "width": width},
            num_channels=config.num_channels,
            image_mean=[0.5] * config.num_channels,
            image_std=[0.5] * config.num_channels,
        )
        return cls(**{**defaults, **kwargs})

    def process_image(self, image, num_channels: int | None = None, **kwargs) -> np.ndarray:
        """One image -> channels-first array with `num_channels` channels."""
        num_channels = num_channels or self.num_channels
        if num_channels not in (1, 3):
            raise ValueError(f"num_channels must be 1 (grayscale) or 3 (RGB), got {num_channels}.")
        if not isinstance(image, Image.Image):
            image = np.asarray(image)
            if image.ndim == 3 and image.shape[0] in (1, 3, 4) and image.shape[-1] not in (1, 3, 4):
                image = np.moveaxis(image, 0, -1)  # (C, H, W) -> (H, W, C)
            if image.dtype != np.uint8:  # floats in [0, 1] from tensors, the usual convention
                image = np.clip(np.rint(image * 255 if image.max() <= 1 else image), 0, 255).astype(np.uint8)
            image = Image.fromarray(image.squeeze(-1) if image.ndim == 3 and image.shape[-1] == 1 else image)
        image = image.convert("L" if num_channels == 1 else "RGB")
        return super().process_image(image, **{**kwargs, "do_convert_rgb": False})


__all__ = ["ViTScratchImageProcessor"]
