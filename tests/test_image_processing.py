import numpy as np
import pytest
import torch
from PIL import Image

from modeling_vit_scratch import ViTScratchImageProcessor
from tests.conftest import tiny_config


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
