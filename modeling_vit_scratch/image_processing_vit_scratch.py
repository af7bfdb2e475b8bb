"""Image processor: any image (any size, mode, bit depth) -> normalised `pixel_values` (batch, channels, height, width).

transformers' PIL backend does the resizing, rescaling and normalising; this file adds `to_model_mode`, the one
conversion of any image to the 8-bit "L" (1 channel) or "RGB" (3 channels) image the model was built for, used by the
processor, by the training data path and by `ViTScratchImageClassificationPipeline`, so a picture reaches the model
the same way whether it is stored as 8-bit, 16-bit, float, palette or with transparency.

Two processors, as transformers 5 ships for its own models: `ViTScratchImageProcessor` (PIL backend, needs no
torchvision) and `ViTScratchImageProcessorFast` (torchvision backend: `to_model_tensor`, then batched resizing and
normalising on torch; the same pixel_values within 1/255 of the [0, 1] pixel). `AutoImageProcessor` picks the fast one
when torchvision is installed, and either one with `backend="pil"` / `backend="torchvision"` (or `use_fast=`).

Scaling rules (the value that means "white"):
- 8-bit modes ("1", "L", "P", "RGB", "CMYK", ...) and uint8 arrays: 255 (bool arrays: True).
- 16-bit modes ("I;16", "I;16B", "I;16L") and uint16 arrays (also (H, W, 3) 16-bit RGB, which PIL cannot hold): 65535.
- 32-bit integer mode "I" and other integer arrays (int32, int64, ...): 65535, since PIL opens 16-bit files as "I"
  (store 8-bit data as uint8); values outside 0..65535 are refused with an error.
- Float mode "F" and float arrays (and tensors): values in [0, 1], taken as is (1 = white). The scale of a float image
  is never guessed from its values (a picture a hair over 1 would read as 8-bit levels, near black): an overshoot of
  at most `FLOAT_SLACK` (as resampling makes) is clipped to [0, 1] with a warning; values further out (8-bit levels
  0..255, a normalised [-1, 1]) are refused in one line naming the range found and the fix.
Transparency (modes "RGBA", "LA", "PA", "P" or "L"/"RGB" with a transparent colour, 2- and 4-channel arrays) is
composited onto white, as transformers' `convert_to_rgb` does. Colour becomes gray with PIL's ITU-R 601 luma
(L = 0.299 R + 0.587 G + 0.114 B); gray becomes colour by repeating it.
"""

import copy
import os
import re
import warnings

import numpy as np
import torch
from PIL import Image, ImageOps
from transformers import ImageClassificationPipeline
from transformers.image_processing_backends import PilBackend, TorchvisionBackend
from transformers.image_utils import ChannelDimension, PILImageResampling, SizeDict
from transformers.processing_utils import ImagesKwargs
from transformers.utils import is_torchvision_available

from .configuration_vit_scratch import ViTScratchConfig, auto_map_entry, to_pair

EIGHT_BIT_MODES = ("1", "L", "P", "RGB", "CMYK", "YCbCr", "LAB", "HSV")
WIDE_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")  # more than 8 bits per pixel: scaled by `unit_scale`
FLOAT_SLACK = 0.05  # how far outside [0, 1] a float image may go and be clipped (a resampling filter's overshoot)
# formats PIL never opens a user's file as, whatever its name says (a `x.png` may hold PostScript): EPS's decoder runs
# Ghostscript on the file, and PostScript is a program. Read here and by common/images.py (training data, explain)
REFUSED_FORMATS = ("EPS",)
ORIENTATION = 0x0112  # the EXIF tag saying how a photo is to be turned upright


def openers() -> list[str]:
    """The formats PIL may open a user's file as: every one it knows but `REFUSED_FORMATS` (EPS, whose decoder runs
    Ghostscript on the file), whatever the file's name says: a `x.png` may hold PostScript."""
    Image.init()  # every plugin registered, so the list names them all (empty before)
    return [name for name in Image.OPEN if name not in REFUSED_FORMATS]


def frame_count(image: Image.Image) -> int:
    """How many frames (pages) `image` holds: 1 for a still image; only frame 1 is ever read."""
    return getattr(image, "n_frames", 1)


class UnreadableImage(ValueError):
    """An image file that cannot be read: not an image, damaged, or too large; the message names it and the fix."""


class ImageTooLarge(UnreadableImage):
    """An image that declares more pixels than allowed; the message names it, its size, the limit and the fix."""


def too_large(name: str, size: str, pixels: int, limit: int) -> ImageTooLarge:
    side = int(limit**0.5)
    return ImageTooLarge(
        f"{name} is {size}{pixels:,} pixels, more than the {limit:,} allowed (PIL's Image.MAX_IMAGE_PIXELS, a guard "
        f"against decompression bombs): resize it, e.g. to at most {side}x{side}, or remove it."
    )


def open_bounded(source, name: str) -> Image.Image:
    """The one `Image.open` of the package: `Image.open(source)` (a path or file object), refused with a one-line
    `UnreadableImage` naming `name` when PIL cannot open it or the image declares more pixels than
    `Image.MAX_IMAGE_PIXELS`. Nothing is decoded yet: call `decode_image` for that."""
    limit = Image.MAX_IMAGE_PIXELS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # refused below, in one line
        try:
            image = Image.open(source, formats=openers())
        except Image.DecompressionBombError as error:  # above twice the limit PIL refuses before giving the size
            found = re.search(r"\((\d+) pixels\)", str(error))
            raise too_large(name, "", int(found.group(1)) if found else 2 * limit, limit) from None
        except Image.UnidentifiedImageError:  # PIL's message names the file object, not the file
            wrong = "is no image PIL opens (another kind of file, or damaged)"
            raise UnreadableImage(f"{name} {wrong}: remove or replace it") from None
    if limit and image.width * image.height > limit:
        image.close()
        raise too_large(name, f"{image.width}x{image.height}: ", image.width * image.height, limit)
    return image


def decode_image(image: Image.Image, name: str) -> None:
    """`image.load()`, refused with a one-line `UnreadableImage` naming `name` when the file is damaged (cut short,
    a broken chunk): PIL finds that only when it decodes the pixels."""
    try:
        image.load()
    except (OSError, SyntaxError, ValueError) as error:  # "image file is truncated", "broken PNG file", ...
        reason = " ".join(str(error).split())
        raise UnreadableImage(f"{name} cannot be decoded ({reason}): remove or replace it") from None


def upright(image: Image.Image) -> Image.Image:
    """`image` turned upright by its EXIF orientation (a phone's JPEG stores its pixels as the sensor saw them and
    says how to turn them), as `datasets` decodes a training image and transformers' pipeline reads a file: every
    reader of pixels calls this, so training, explain and the pipeline see one picture. An untagged image is itself."""
    if image.getexif().get(ORIENTATION) is not None:
        return ImageOps.exif_transpose(image)
    return image


def read_image_file(source, name: str) -> tuple[Image.Image, int]:
    """The one way a user's image file (a path or file object) is read for its pixels: opened with the size bound
    (`open_bounded`), decoded, turned `upright`; with its number of frames (only frame 1 is kept)."""
    image = open_bounded(source, name)
    frames = frame_count(image)
    decode_image(image, name)
    return upright(image), frames


def unit_scale(array: np.ndarray) -> np.ndarray:
    """Pixel values of any dtype -> float32 in [0, 1] (1 = white), by the rules in the module docstring."""
    kind = array.dtype.kind
    if kind == "b":
        return array.astype(np.float32)
    if kind == "u" and array.dtype.itemsize == 1:
        return array.astype(np.float32) / 255
    if kind in "iu":
        if array.dtype.itemsize > 2 or kind == "i":  # 32-bit mode "I" and other integers: 16-bit levels, checked
            low, high = (int(array.min()), int(array.max())) if array.size else (0, 0)
            if low < 0 or high > 65535:
                raise ValueError(
                    f"Integer image values span {low}..{high}, outside 0..65535: store 8-bit images as uint8, "
                    "16-bit as uint16, or floats in [0, 1]."
                )
        return array.astype(np.float32) / 65535
    if kind == "f":
        array = array.astype(np.float32)
        if not np.isfinite(array).all():
            raise ValueError("Float image has NaN or infinite values: give finite values in [0, 1].")
        low, high = (float(array.min()), float(array.max())) if array.size else (0.0, 0.0)
        if low < -FLOAT_SLACK or high > 1 + FLOAT_SLACK:
            raise ValueError(
                f"Float image values span {low:g}..{high:g}, and float images hold values in [0, 1] (1 = white): "
                "divide 8-bit levels by 255 and 16-bit levels by 65535 (or store them as uint8 / uint16), and undo "
                "any normalisation first."
            )
        if low < 0 or high > 1:
            warnings.warn(
                f"Float image values a little outside [0, 1] (by at most {FLOAT_SLACK}) were clipped to [0, 1].",
                stacklevel=2,
            )
            return array.clip(0, 1)
        return array
    raise ValueError(f"Images of dtype {array.dtype} are not supported: give uint8, uint16 or float pixel values.")


def composite_on_white(unit: np.ndarray) -> np.ndarray:
    """(H, W), (H, W, 1..4) values in [0, 1] -> (H, W) gray or (H, W, 3) colour, transparency blended onto white."""
    if unit.ndim == 3 and unit.shape[-1] == 1:
        unit = unit[..., 0]
    if unit.ndim == 2 or (unit.ndim == 3 and unit.shape[-1] == 3):
        return unit
    if unit.ndim != 3 or unit.shape[-1] not in (2, 4):
        raise ValueError(
            f"Image array of shape {unit.shape} is not an image: give (height, width), (height, width, channels) or "
            "(channels, height, width) with 1 to 4 channels."
        )
    color, alpha = unit[..., :-1], unit[..., -1:]
    blended = color * alpha + (1.0 - alpha)
    return blended[..., 0] if blended.shape[-1] == 1 else blended


def channels_last(array):
    """An array or tensor (H, W), (H, W, C), (C, H, W) or (1, ...) -> (H, W) or (H, W, C), same type."""
    if array.ndim == 4 and array.shape[0] == 1:
        array = array[0]
    if array.ndim == 3 and array.shape[0] in (1, 2, 3, 4) and array.shape[-1] not in (1, 2, 3, 4):
        array = array.permute(1, 2, 0) if isinstance(array, torch.Tensor) else np.moveaxis(array, 0, -1)
    return array


def to_model_mode(image, num_channels: int) -> Image.Image:
    """Any PIL image, array or tensor ((H, W), (H, W, C) or (C, H, W)) -> 8-bit PIL "L" (1 channel) or "RGB" (3).

    8-bit images without transparency go through PIL's own `convert`; everything else is scaled to [0, 1] by its
    bit depth, composited onto white and rounded to 8 bits, so a 16-bit or float picture lands within 1/255 of the
    same picture stored as 8 bits.
    """
    if num_channels not in (1, 3):
        raise ValueError(f"num_channels must be 1 (grayscale) or 3 (RGB), got {num_channels}.")
    target = "L" if num_channels == 1 else "RGB"
    if isinstance(image, Image.Image):
        transparent = image.info.get("transparency") is not None
        bands = "".join(image.getbands())
        if image.mode in EIGHT_BIT_MODES and not transparent:
            return image if image.mode == target else image.convert(target)
        if image.mode not in WIDE_MODES:  # 8-bit with alpha ("RGBA", "LA", "PA", "La", ...) or a transparent colour
            if not transparent and "A" not in bands.upper():
                return image.convert(target)
            rgba = image.convert("RGBA")
            return Image.alpha_composite(Image.new("RGBA", image.size, (255, 255, 255, 255)), rgba).convert(target)
        array = np.asarray(image)
        unit = unit_scale(array)
        if transparent and isinstance(image.info["transparency"], int):  # a 16-bit gray level marked transparent
            unit = np.stack([unit, (array != image.info["transparency"]).astype(np.float32)], axis=-1)
    else:
        if hasattr(image, "detach"):  # a torch tensor
            image = image.detach().cpu().numpy()
        unit = unit_scale(channels_last(np.asarray(image)))
    pixels = np.rint(composite_on_white(unit) * 255).astype(np.uint8)
    return Image.fromarray(pixels, mode="L" if pixels.ndim == 2 else "RGB").convert(target)


# PIL's integer ITU-R 601 luma (`Image.convert("L")` of "RGB"): (R * 19595 + G * 38470 + B * 7471 + 0x8000) >> 16
LUMA_WEIGHTS = (19595, 38470, 7471)


def to_model_tensor(image, num_channels: int) -> "torch.Tensor":
    """Any image `to_model_mode` takes -> (num_channels, H, W) uint8 tensor holding the same pixels as its result.

    PIL images go through `to_model_mode` itself; uint8 arrays and tensors with 1 or 3 channels stay on torch (and on
    their device); other arrays and tensors are scaled and composited by the same numpy rules, then rounded to 8 bits.
    """
    if num_channels not in (1, 3):
        raise ValueError(f"num_channels must be 1 (grayscale) or 3 (RGB), got {num_channels}.")
    if isinstance(image, Image.Image):
        pixels = torch.from_numpy(np.array(to_model_mode(image, num_channels)))
    else:
        pixels = channels_last(image if isinstance(image, torch.Tensor) else torch.from_numpy(np.asarray(image)))
        if pixels.ndim == 3 and pixels.shape[-1] == 1:
            pixels = pixels[..., 0]
        if pixels.dtype != torch.uint8 or (pixels.ndim == 3 and pixels.shape[-1] != 3) or pixels.ndim not in (2, 3):
            unit = composite_on_white(
                unit_scale(
                    channels_last(np.asarray(image.detach().cpu() if isinstance(image, torch.Tensor) else image))
                )
            )
            pixels = torch.from_numpy(np.rint(unit * 255).astype(np.uint8))
    if pixels.ndim == 2:
        pixels = pixels[None] if num_channels == 1 else pixels[None].expand(3, -1, -1)
    elif num_channels == 3:
        pixels = pixels.permute(2, 0, 1)
    else:
        weights = torch.tensor(LUMA_WEIGHTS, dtype=torch.int32, device=pixels.device)
        pixels = ((pixels.to(torch.int32) * weights).sum(-1, keepdim=True) + 0x8000).bitwise_right_shift(16)
        pixels = pixels.to(torch.uint8).permute(2, 0, 1)
    return pixels


class ViTScratchImageProcessorKwargs(ImagesKwargs, total=False):
    num_channels: int
    crop_pct: float | None


ViTScratchImageProcessorFastKwargs = ViTScratchImageProcessorKwargs  # the name transformers looks up for the fast class


class ViTScratchProcessing:
    """What the PIL and the torchvision processor share: settings, `for_config`, 2-D arrays as one gray image, and
    one saved form (the same `image_processor_type` and `auto_map`, so a folder does not depend on which saved it)."""

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
    crop_pct = None  # None: resize to the image size; a share in (0, 1]: resize, then crop the centre (`resize`)

    @classmethod
    def for_config(cls, config: ViTScratchConfig, **kwargs):
        """The processor that feeds a model of this config: its image size and channels, mean/std 0.5 per channel."""
        height, width = to_pair(config.image_size)
        defaults = dict(
            size={"height": height, "width": width},
            num_channels=config.num_channels,
            image_mean=[0.5] * config.num_channels,
            image_std=[0.5] * config.num_channels,
        )
        return cls(**{**defaults, **kwargs})

    def _prepare_images_structure(self, images, expected_ndims: int = 3):
        """As transformers does, but a 2-D (height, width) array is one grayscale image, not a batch of rows."""
        if getattr(images, "ndim", None) == 2:
            images = images[..., None]
        elif isinstance(images, (list, tuple)) and any(getattr(image, "ndim", None) == 2 for image in images):
            images = [image[..., None] if getattr(image, "ndim", None) == 2 else image for image in images]
        return super()._prepare_images_structure(images, expected_ndims)

    def _preprocess(self, images, *args, crop_pct: float | None = None, **kwargs):
        """transformers' steps; a `crop_pct` given with the call (`processor(images, crop_pct=0.9)`) applies to it."""
        if crop_pct is not None and crop_pct != self.crop_pct:
            call = copy.copy(self)
            call.crop_pct = crop_pct
            return call._preprocess(images, *args, **kwargs)
        return super()._preprocess(images, *args, **kwargs)

    def resize(self, image, size, resample=None, **kwargs):
        """To `size` (height, width). With `crop_pct` set, as timm and transformers' ConvNext evaluate: keeping the
        aspect ratio, resized so that the (height, width) centre crop takes `crop_pct` of the side that fits it
        first, then cropped (224 / 0.875 = 256 for a 224 model); without it, squashed to `size`."""
        if not self.crop_pct or not size.height:
            return super().resize(image, size=size, resample=resample, **kwargs)
        height, width = image.shape[-2:]  # channels first, on both backends
        scale = max(size.height / height, size.width / width) / self.crop_pct
        larger = SizeDict(height=max(size.height, round(height * scale)), width=max(size.width, round(width * scale)))
        image = super().resize(image, size=larger, resample=resample, **kwargs)
        return self.center_crop(image, SizeDict(height=size.height, width=size.width))

    def to_dict(self) -> dict:
        """The settings as saved: `AutoImageProcessor` picks the backend when loading (`backend=`, `use_fast=`), from
        the registered classes or, through `trust_remote_code`, from the `auto_map` pair [PIL class, torchvision class]
        (transformers' (slow, fast) form)."""
        output = super().to_dict()
        if output.get("crop_pct") is None:  # unset: saved as before it existed
            output.pop("crop_pct", None)
        output["image_processor_type"] = "ViTScratchImageProcessor"
        if "AutoImageProcessor" in (output.get("auto_map") or {}):
            pair = [auto_map_entry(ViTScratchImageProcessor), auto_map_entry(ViTScratchImageProcessorFast)]
            output["auto_map"] = {**output["auto_map"], "AutoImageProcessor": pair}
        return output


class ViTScratchImageProcessor(ViTScratchProcessing, PilBackend):
    """Convert to the model's channels (`to_model_mode`), resize to its image size, scale to [0, 1], normalise."""

    def process_image(
        self, image, num_channels: int | None = None, do_convert_rgb: bool | None = None, **kwargs
    ) -> np.ndarray:
        """One image -> channels-first array with `num_channels` channels; with `do_convert_rgb=False` (asked for
        explicitly) the image keeps its own channels, as transformers' processors do (mean/std must match them)."""
        if do_convert_rgb is not False:
            image = to_model_mode(image, num_channels or self.num_channels)
        return super().process_image(image, **{**kwargs, "do_convert_rgb": False})


class ViTScratchImageProcessorFast(ViTScratchProcessing, TorchvisionBackend):
    """`ViTScratchImageProcessor` on torch and torchvision: the same pixel_values within 1/255 (of the [0, 1] pixel),
    faster on batches (same-size images are resized and normalised as one tensor, on their device). Needs torchvision;
    `AutoImageProcessor` picks it when torchvision is installed, or with `backend="torchvision"` / `use_fast=True`."""

    def __init__(self, **kwargs):
        if not is_torchvision_available():
            raise ImportError(
                "ViTScratchImageProcessorFast needs torchvision, which is not installed: install the torchvision "
                'build matching your torch, or use ViTScratchImageProcessor (AutoImageProcessor with backend="pil").'
            )
        super().__init__(**kwargs)

    # transformers resizes CPU images one by one (faster for large images); up to this many pixels (digits, icons)
    # the per-image overhead dominates, and one stacked tensor per size is faster (docs/performance.md)
    small_image_pixels = 64 * 64

    def _preprocess(self, images: list, *args, **kwargs):
        """transformers' batched resize and normalise; small CPU images grouped by size unless `disable_grouping`
        is given."""
        if (
            kwargs.get("disable_grouping") is None
            and images
            and all(
                image.device.type == "cpu" and image.shape[-2] * image.shape[-1] <= self.small_image_pixels
                for image in images
            )
        ):
            kwargs["disable_grouping"] = False
        return super()._preprocess(images, *args, **kwargs)

    def process_image(
        self, image, num_channels: int | None = None, do_convert_rgb: bool | None = None, **kwargs
    ) -> "torch.Tensor":
        """One image -> (num_channels, H, W) uint8 tensor (`to_model_tensor`); with `do_convert_rgb=False` (asked
        for explicitly) the image keeps its own channels, as in `ViTScratchImageProcessor.process_image`."""
        if do_convert_rgb is not False:
            image = to_model_tensor(image, num_channels or self.num_channels)
            kwargs["input_data_format"] = ChannelDimension.FIRST
        return super().process_image(image, **{**kwargs, "do_convert_rgb": False})


class ViTScratchImageClassificationPipeline(ImageClassificationPipeline):
    """transformers' image-classification pipeline without its `convert("RGB")` of every image before the processor:
    `pipeline("image-classification", model=folder, pipeline_class=ViTScratchImageClassificationPipeline)`.

    That conversion clips 16-bit grayscale to 0 or 255 and drops transparency without compositing; here local files
    and PIL images reach `to_model_mode` as they are (turned upright by their EXIF orientation, as transformers does).
    URLs and base64 strings still go through transformers' loader (8-bit RGB).
    """

    def preprocess(self, image, timeout=None):
        if isinstance(image, str) and os.path.isfile(image):
            image, _ = read_image_file(image, f"Image {image!r}")
        if isinstance(image, Image.Image):
            image = upright(image)
            return self.image_processor(images=image, return_tensors="pt").to(self.dtype)
        return super().preprocess(image, timeout=timeout)


__all__ = [
    "ViTScratchImageClassificationPipeline",
    "ViTScratchImageProcessor",
    "ViTScratchImageProcessorFast",
    "to_model_mode",
    "to_model_tensor",
]
