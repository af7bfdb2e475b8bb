import json

import numpy as np
import pytest
import torch
from helpers import tiny_config
from PIL import Image

from modeling_vit_scratch import ViTScratchImageProcessor


def rgb_image(height: int = 31, width: int = 45) -> Image.Image:
    return Image.fromarray(np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8))


@pytest.mark.parametrize("mode", ["RGB", "L", "RGBA", "P", "I;16", "1", "CMYK"])
@pytest.mark.parametrize("channels", [1, 3])
def test_any_mode_and_size_becomes_the_models_input(mode, channels):
    processor = ViTScratchImageProcessor.for_config(tiny_config(num_channels=channels, image_size=(20, 28)))
    pixel_values = processor(rgb_image().convert(mode), return_tensors="pt").pixel_values
    assert pixel_values.shape == (1, channels, 20, 28)
    assert pixel_values.dtype == torch.float32 and -1.0 <= pixel_values.min() and pixel_values.max() <= 1.0


def test_grayscale_uses_luminance_and_rgb_repeats_gray():
    image = rgb_image()
    gray = ViTScratchImageProcessor.for_config(tiny_config(num_channels=1), do_resize=False)
    expected = np.asarray(image.convert("L"), dtype=np.float32) / 255 * 2 - 1
    np.testing.assert_allclose(gray(image, return_tensors="np").pixel_values[0, 0], expected, atol=1e-6)
    rgb = ViTScratchImageProcessor.for_config(tiny_config(), do_resize=False)
    out = rgb(image.convert("L"), return_tensors="np").pixel_values[0]
    np.testing.assert_allclose(out[0], out[2])


def test_arrays_and_tensors_are_accepted_channels_first_or_last():
    processor = ViTScratchImageProcessor.for_config(tiny_config())
    hwc = np.random.default_rng(1).integers(0, 256, (16, 16, 3), dtype=np.uint8)
    from_array = processor(hwc, return_tensors="pt").pixel_values
    from_tensor = processor(torch.from_numpy(hwc).permute(2, 0, 1).float() / 255, return_tensors="pt").pixel_values
    torch.testing.assert_close(from_tensor, from_array)


def test_processor_round_trips_with_its_settings(tmp_path):
    processor = ViTScratchImageProcessor.for_config(tiny_config(num_channels=1, image_size=(8, 12)), image_mean=[0.2])
    processor.save_pretrained(tmp_path)
    loaded = ViTScratchImageProcessor.from_pretrained(tmp_path)
    assert loaded.num_channels == 1 and tuple(loaded.image_mean) == (0.2,)
    assert (loaded.size["height"], loaded.size["width"]) == (8, 12)


# Every mode against its 8-bit twin: the same picture stored another way must reach the model within 1/255.


def picture(channels: int, height: int = 11, width: int = 13) -> np.ndarray:
    """An 8-bit test picture (H, W) or (H, W, 3) using the whole 0..255 range."""
    pixels = np.random.default_rng(2).integers(0, 256, (height, width, 3) if channels == 3 else (height, width))
    pixels.flat[:2] = (0, 255)
    return pixels.astype(np.uint8)


def unit_processor(channels: int) -> ViTScratchImageProcessor:
    """A processor whose output is the pixel in [0, 1] (no resize, mean 0, std 1), to compare in 1/255 steps."""
    return ViTScratchImageProcessor(
        num_channels=channels, do_resize=False, image_mean=[0.0] * channels, image_std=[1.0] * channels
    )


def gray16(pixels8: np.ndarray) -> np.ndarray:
    return pixels8.astype(np.uint16) * 257  # 255 -> 65535: the same picture in 16 bits


WIDE_TWINS = {  # name -> (8-bit twin channels, the picture stored in another mode or dtype)
    "I;16": (1, lambda g: Image.fromarray(gray16(g))),
    "I;16B": (1, lambda g: Image.frombytes("I;16B", g.shape[::-1], gray16(g).astype(">u2").tobytes())),
    "I;16L": (1, lambda g: Image.frombytes("I;16L", g.shape[::-1], gray16(g).astype("<u2").tobytes())),
    "I (32-bit, 16-bit levels)": (1, lambda g: Image.fromarray(gray16(g).astype(np.int32))),
    "F in [0, 1]": (1, lambda g: Image.fromarray(g.astype(np.float32) / 255)),
    "uint16 array": (1, gray16),
    "int32 array": (1, lambda g: gray16(g).astype(np.int32)),
    "float64 array": (1, lambda g: g / 255.0),
    "uint16 RGB array": (3, lambda c: c.astype(np.uint16) * 257),
    "float32 RGB array channels first": (3, lambda c: np.moveaxis(c.astype(np.float32) / 255, -1, 0)),
    "float tensor RGB channels first": (3, lambda c: torch.from_numpy(c).permute(2, 0, 1).float() / 255),
}


@pytest.mark.parametrize("name", list(WIDE_TWINS))
@pytest.mark.parametrize("channels", [1, 3])
def test_wide_images_are_scaled_not_clipped(name, channels):
    twin_channels, store = WIDE_TWINS[name]
    pixels = picture(twin_channels)
    processor = unit_processor(channels)
    expected = processor(Image.fromarray(pixels), return_tensors="np").pixel_values
    got = processor(store(pixels), return_tensors="np").pixel_values
    assert got.shape == expected.shape == (1, channels, 11, 13)
    np.testing.assert_allclose(got, expected, atol=1 / 255 + 1e-6)
    assert len(np.unique(got)) > 50  # the picture survived: clipping would leave only 0 and 1


@pytest.mark.parametrize("mode", ["1", "L", "P", "RGB", "CMYK"])
@pytest.mark.parametrize("channels", [1, 3])
def test_eight_bit_modes_match_pil_conversion(mode, channels):
    image = Image.fromarray(picture(3)).convert(mode)
    expected = np.asarray(image.convert("L" if channels == 1 else "RGB"), dtype=np.float32) / 255
    got = unit_processor(channels)(image, return_tensors="np").pixel_values[0]
    np.testing.assert_allclose(np.moveaxis(got, 0, -1).reshape(expected.shape), expected, atol=1e-6)


@pytest.mark.parametrize("mode", ["RGBA", "LA", "P with transparency"])
def test_transparency_is_composited_on_white_like_transformers(mode):
    from transformers.image_transforms import convert_to_rgb

    rgba = np.concatenate([picture(3), np.random.default_rng(3).integers(0, 256, (11, 13, 1))], -1).astype(np.uint8)
    rgba[0, :, 3] = 0  # the first row fully transparent
    if mode == "P with transparency":
        image = Image.fromarray(picture(3)).convert("P")
        image.info["transparency"] = int(np.asarray(image)[0, 0])
    else:
        image = Image.fromarray(rgba).convert(mode)
    expected = convert_to_rgb(image, return_numpy=True).astype(np.float32) / 255
    got = np.moveaxis(unit_processor(3)(image, return_tensors="np").pixel_values[0], 0, -1)
    np.testing.assert_allclose(got, expected, atol=1 / 255 + 1e-6)
    if mode != "P with transparency":
        assert (got[0] == 1).all()  # transparent -> white
    gray = unit_processor(1)(image, return_tensors="np").pixel_values[0, 0]
    np.testing.assert_allclose(
        gray,
        np.asarray(Image.fromarray(np.rint(expected * 255).astype(np.uint8)).convert("L")) / 255,
        atol=1 / 255 + 1e-6,
    )


def test_two_and_four_channel_arrays_are_composited_on_white():
    processor = unit_processor(1)
    gray_alpha = np.stack([np.full((4, 5), 0.2), np.r_[[1.0] * 2, [0.0] * 2][:, None].repeat(5, 1)], -1)
    np.testing.assert_allclose(
        processor(gray_alpha, return_tensors="np").pixel_values[0, 0],
        np.r_[[51 / 255] * 2, [1.0] * 2][:, None].repeat(5, 1),
        atol=1e-6,
    )


@pytest.mark.parametrize(
    "array, message",
    [
        (np.full((4, 4), -3, dtype=np.int32), r"span -3\.\.-3, outside 0\.\.65535: store 8-bit images as uint8"),
        (np.full((4, 4), 70000, dtype=np.int64), r"outside 0\.\.65535"),
        (np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4), r"hold values in \[0, 1\].*undo any normalisation"),
        (np.full((4, 4), np.nan, dtype=np.float32), r"NaN or infinite"),
        (np.zeros((5, 6, 7), dtype=np.uint8), r"shape \(5, 6, 7\) is not an image"),
    ],
)
def test_values_that_cannot_be_scaled_are_refused_in_one_line(array, message):
    with pytest.raises(ValueError, match=message) as error:
        ViTScratchImageProcessor.for_config(tiny_config())(array)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("fast", [False, True], ids=["pil", "fast"])
@pytest.mark.parametrize("value", [1.0, 1.01, 1.05, 0.0, -0.03, 1.06, 1.5, 255.0, 256.0, -0.2])
def test_a_float_image_s_scale_is_never_guessed_from_its_values(value, fast):
    """Float images hold [0, 1] on every path (the processors, and so the pipeline and explain): a small overshoot is
    clipped with a warning (1.01 is white like 1.0, never 8-bit levels read as black); values further out are one
    line naming the range, never rescaled by 1/255 or 1/65535."""
    import warnings

    from modeling_vit_scratch import ViTScratchImageProcessorFast
    from modeling_vit_scratch.image_processing_vit_scratch import FLOAT_SLACK

    if fast:
        pytest.importorskip("torchvision")
    settings = dict(num_channels=1, do_resize=False, image_mean=[0.0], image_std=[1.0])
    processor = (ViTScratchImageProcessorFast if fast else ViTScratchImageProcessor)(**settings)
    image = Image.fromarray(np.full((4, 4), value, dtype=np.float32))  # mode "F", as a float TIFF opens
    if -FLOAT_SLACK <= value <= 1 + FLOAT_SLACK:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = processor(image, return_tensors="np").pixel_values
        np.testing.assert_array_equal(got, np.full((1, 1, 4, 4), min(max(value, 0.0), 1.0), dtype=np.float32))
        assert any("clipped to [0, 1]" in str(w.message) for w in caught) == (not 0 <= value <= 1)
    else:
        with pytest.raises(
            ValueError, match=rf"^Float image values span {value:g}\.\.{value:g}, and float images"
        ) as error:
            processor(image)
        assert "divide 8-bit levels by 255" in str(error.value)


def rgba_on_white(rgba: np.ndarray) -> np.ndarray:
    alpha = rgba[..., 3:] / 255
    return np.rint(rgba[..., :3] * alpha + 255 * (1 - alpha)).astype(np.uint8)


PIPELINE_FILES = {  # name -> (model channels, (picture, twin) -> file stored that way, its 8-bit twin as an array)
    "16-bit grayscale PNG": (1, lambda g: (Image.fromarray(gray16(g)), "png", g)),
    "float TIFF": (1, lambda g: (Image.fromarray(g.astype(np.float32) / 255), "tiff", g)),
    "RGBA PNG": (
        3,
        lambda g: (
            Image.fromarray(np.dstack([picture(3), g]), mode="RGBA"),
            "png",
            rgba_on_white(np.dstack([picture(3), g])),
        ),
    ),
}


@pytest.mark.parametrize("name", list(PIPELINE_FILES))
def test_pipeline_reads_a_file_like_its_8_bit_twin(name, tmp_path):
    from transformers import ImageClassificationPipeline, pipeline

    from modeling_vit_scratch import ViTScratchForImageClassification, ViTScratchImageClassificationPipeline

    channels, store = PIPELINE_FILES[name]
    config = tiny_config(num_channels=channels, image_size=(11, 13), patch_size=(11, 13))
    ViTScratchForImageClassification(config).eval().save_pretrained(tmp_path / "model")
    ViTScratchImageProcessor.for_config(config).save_pretrained(tmp_path / "model")
    image, suffix, twin = store(picture(1))
    image.save(tmp_path / f"stored.{suffix}")
    Image.fromarray(twin).save(tmp_path / "twin.png")
    assert Image.open(tmp_path / f"stored.{suffix}").mode == image.mode
    classify = pipeline(
        "image-classification", model=str(tmp_path / "model"), pipeline_class=ViTScratchImageClassificationPipeline
    )
    assert type(classify) is ViTScratchImageClassificationPipeline
    scores = {
        file: {p["label"]: p["score"] for p in classify(str(tmp_path / file), top_k=None)}
        for file in (f"stored.{suffix}", "twin.png")
    }
    assert scores[f"stored.{suffix}"] == pytest.approx(scores["twin.png"], abs=1e-5)
    # transformers' own pipeline converts the file to RGB first (the bug this guards against): the check above can fail
    plain = ImageClassificationPipeline(model=classify.model, image_processor=classify.image_processor)
    ruined = {p["label"]: p["score"] for p in plain(str(tmp_path / f"stored.{suffix}"), top_k=None)}
    assert ruined != pytest.approx(scores["twin.png"], abs=1e-5)


def test_a_saved_folder_runs_in_the_plain_pipeline_and_in_the_packages_own_without_consent(tmp_path):
    """No saved folder names a pipeline of its own (`custom_pipelines`): transformers' pipeline serves it without a
    remote-code prompt, and the package's pipeline class is asked for by `pipeline_class`."""
    from transformers import ImageClassificationPipeline, pipeline

    from modeling_vit_scratch import ViTScratchForImageClassification, ViTScratchImageClassificationPipeline

    config = tiny_config(num_channels=1)
    ViTScratchForImageClassification(config).save_pretrained(tmp_path)
    ViTScratchImageProcessor.for_config(config).save_pretrained(tmp_path)
    assert "custom_pipelines" not in json.loads((tmp_path / "config.json").read_text())
    assert type(pipeline("image-classification", model=str(tmp_path))) is ImageClassificationPipeline
    installed = pipeline(
        "image-classification", model=str(tmp_path), pipeline_class=ViTScratchImageClassificationPipeline
    )
    assert type(installed) is ViTScratchImageClassificationPipeline
    image = Image.fromarray(picture(1).astype(np.uint16) * 257)
    assert installed(image, top_k=1)[0]["label"] == installed(Image.fromarray(picture(1)), top_k=1)[0]["label"]
