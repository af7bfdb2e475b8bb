"""Opening an image file a user gives (a training set's, explain's --image) with a bound on its size: a small file
can declare a huge image (a decompression bomb: a 20000x20000 PNG of one colour is a few kB) that would take
gigabytes to decode. The bound is PIL's `Image.MAX_IMAGE_PIXELS` (about 89 million pixels unless a program sets
another, or None for none), read from the header, before any pixel is decoded; above it the image is refused in one
line naming the file, its size and the limit, where PIL would warn up to twice the limit and raise above it.

An image of several frames (an animated GIF, APNG or WebP, a multi-page TIFF) is read from its first frame, as PIL
opens it; `frame_count` lets each reader say so (explain for its image, training once for the data set)."""

import re
import warnings

from PIL import Image

from modeling_vit_scratch.image_processing_vit_scratch import REFUSED_FORMATS


def openers() -> list[str]:
    """The formats PIL may open a user's file as: every one it knows but `REFUSED_FORMATS` (EPS, whose decoder runs
    Ghostscript on the file), whatever the file's name says: a `x.png` may hold PostScript."""
    Image.init()  # every plugin registered, so the list names them all (empty before)
    return [name for name in Image.OPEN if name not in REFUSED_FORMATS]


def frame_count(image: Image.Image) -> int:
    """How many frames (pages) `image` holds: 1 for a still image; only frame 1 is ever read."""
    return getattr(image, "n_frames", 1)


class ImageTooLarge(ValueError):
    """An image that declares more pixels than allowed; the message names it, its size, the limit and the fix."""


def too_large(name: str, size: str, pixels: int, limit: int) -> ImageTooLarge:
    side = int(limit**0.5)
    return ImageTooLarge(
        f"{name} is {size}{pixels:,} pixels, more than the {limit:,} allowed (PIL's Image.MAX_IMAGE_PIXELS, a guard "
        f"against decompression bombs): resize it, e.g. to at most {side}x{side}, or remove it."
    )


def open_bounded(source, name: str) -> Image.Image:
    """`Image.open(source)` (a path or file object), refused with a one-line ValueError naming `name` when the image
    declares more pixels than `Image.MAX_IMAGE_PIXELS`. Nothing is decoded yet: call `load()` for that."""
    limit = Image.MAX_IMAGE_PIXELS
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # refused below, in one line
        try:
            image = Image.open(source, formats=openers())
        except Image.DecompressionBombError as error:  # above twice the limit PIL refuses before giving the size
            found = re.search(r"\((\d+) pixels\)", str(error))
            raise too_large(name, "", int(found.group(1)) if found else 2 * limit, limit) from None
    if limit and image.width * image.height > limit:
        image.close()
        raise too_large(name, f"{image.width}x{image.height}: ", image.width * image.height, limit)
    return image
