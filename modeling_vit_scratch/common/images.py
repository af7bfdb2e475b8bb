"""Opening an image file a user gives (a training set's, explain's --image) with a bound on its size: a small file
can declare a huge image (a decompression bomb: a 20000x20000 PNG of one colour is a few kB) that would take
gigabytes to decode. The bound is PIL's `Image.MAX_IMAGE_PIXELS` (about 89 million pixels unless a program sets
another, or None for none), read from the header, before any pixel is decoded; above it the image is refused in one
line naming the file, its size and the limit, where PIL would warn up to twice the limit and raise above it.

An image of several frames (an animated GIF, APNG or WebP, a multi-page TIFF) is read from its first frame, as PIL
opens it; `frame_count` lets each reader say so (explain for its image, training once for the data set)."""

from modeling_vit_scratch.image_processing_vit_scratch import (  # in the shipped file: its pipeline opens files too
    ImageTooLarge,
    frame_count,
    open_bounded,
    openers,
    read_image_file,
    too_large,
    upright,
)

__all__ = ["ImageTooLarge", "frame_count", "open_bounded", "openers", "read_image_file", "too_large", "upright"]
