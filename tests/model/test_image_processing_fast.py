"""The torchvision processor against the PIL one: the same pixel_values within 1/255 for every image mode, picked by
transformers' switches (`backend=`, `use_fast=`), one saved form. Tests that need torchvision are marked `timm` (they
run in .venv-timm, `make test-timm`); the ones without torchvision run everywhere by hiding it from a subprocess."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from helpers import PROCESS_TIMEOUT, tiny_config
from PIL import Image

from modeling_vit_scratch import ViTScratchImageProcessor

ONE_LEVEL = 1 / 255 + 1e-6  # one 8-bit level of the [0, 1] pixel (float rounding on top)


def pixels(shape: tuple, seed: int = 0) -> np.ndarray:
    """8-bit pixels using the whole 0..255 range."""
    values = np.random.default_rng(seed).integers(0, 256, shape)
    values.flat[:2] = (0, 255)
    return values.astype(np.uint8)


def with_transparency(mode: str) -> Image.Image:
    image = Image.fromarray(pixels((31, 45, 3))).convert(mode)
    image.info["transparency"] = int(np.asarray(image)[0, 0]) if mode in ("P", "L") else tuple(pixels((3,), 1))
    return image


def rgba(height: int = 31, width: int = 45) -> np.ndarray:
    values = np.concatenate([pixels((height, width, 3)), pixels((height, width, 1), 3)], -1)
    values[0, :, 3] = 0  # the first row fully transparent
    return values


GRAY, COLOUR = pixels((31, 45), 4), pixels((31, 45, 3), 5)
IMAGES = {  # every input `to_model_mode` takes, at an odd size (31 x 45)
    "PIL 1": lambda: Image.fromarray(COLOUR).convert("1"),
    "PIL L": lambda: Image.fromarray(GRAY),
    "PIL LA": lambda: Image.fromarray(rgba()).convert("LA"),
    "PIL P": lambda: Image.fromarray(COLOUR).convert("P"),
    "PIL P with transparency": lambda: with_transparency("P"),
    "PIL L with transparency": lambda: with_transparency("L"),
    "PIL RGB": lambda: Image.fromarray(COLOUR),
    "PIL RGB with transparency": lambda: with_transparency("RGB"),
    "PIL RGBA": lambda: Image.fromarray(rgba()),
    "PIL CMYK": lambda: Image.fromarray(COLOUR).convert("CMYK"),
    "PIL I;16": lambda: Image.fromarray(GRAY.astype(np.uint16) * 257),
    "PIL I;16B": lambda: Image.frombytes("I;16B", (45, 31), (GRAY.astype(">u2") * 257).tobytes()),
    "PIL I (16-bit levels)": lambda: Image.fromarray(GRAY.astype(np.int32) * 257),
    "PIL F in [0, 1]": lambda: Image.fromarray(GRAY.astype(np.float32) / 255),
    "uint8 gray array": lambda: GRAY,
    "uint8 (H, W, 1) array": lambda: GRAY[..., None],
    "uint8 RGB array": lambda: COLOUR,
    "uint8 RGB array channels first": lambda: np.moveaxis(COLOUR, -1, 0).copy(),
    "uint8 RGBA array": lambda: rgba(),
    "uint8 gray+alpha array": lambda: rgba()[..., 2:],
    "bool array": lambda: GRAY > 127,
    "uint16 gray array": lambda: GRAY.astype(np.uint16) * 257,
    "uint16 RGB array": lambda: COLOUR.astype(np.uint16) * 257,
    "int32 array (16-bit levels)": lambda: GRAY.astype(np.int32) * 257,
    "float32 array in [0, 1]": lambda: GRAY.astype(np.float32) / 255,
    "float64 RGB array in [0, 1]": lambda: COLOUR.astype(np.float64) / 255,
    "uint8 tensor channels first": lambda: torch.from_numpy(COLOUR).permute(2, 0, 1),
    "uint8 tensor (1, C, H, W)": lambda: torch.from_numpy(COLOUR).permute(2, 0, 1)[None],
    "uint8 gray tensor": lambda: torch.from_numpy(GRAY),
    "float tensor channels first": lambda: torch.from_numpy(COLOUR).permute(2, 0, 1).float() / 255,
    "float tensor RGBA channels last": lambda: torch.from_numpy(rgba()).float() / 255,
}
SIZES = {"downscaled": (17, 23), "upscaled": (40, 52), "same size": (31, 45)}


def unit_processors(channels: int, size: tuple[int, int], **kwargs) -> tuple:
    """The PIL and the fast processor with output = pixel in [0, 1] (mean 0, std 1), to compare in 1/255 steps."""
    from modeling_vit_scratch import ViTScratchImageProcessorFast

    settings = dict(
        num_channels=channels,
        size={"height": size[0], "width": size[1]},
        image_mean=[0.0] * channels,
        image_std=[1.0] * channels,
        **kwargs,
    )
    return ViTScratchImageProcessor(**settings), ViTScratchImageProcessorFast(**settings)


@pytest.mark.timm
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("name", list(IMAGES))
@pytest.mark.parametrize("channels", [1, 3])
def test_fast_gives_the_pil_processors_pixels_within_one_level(name, channels, size):
    pil, fast = unit_processors(channels, SIZES[size])
    expected = pil(IMAGES[name](), return_tensors="pt").pixel_values
    got = fast(IMAGES[name](), return_tensors="pt").pixel_values
    assert got.shape == expected.shape == (1, channels, *SIZES[size]) and got.dtype == torch.float32
    torch.testing.assert_close(got, expected, atol=ONE_LEVEL, rtol=0)
    if size == "same size":  # no resampling: the mode conversion itself is exact
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


@pytest.mark.timm
@pytest.mark.parametrize("channels", [1, 3])
def test_fast_batches_of_mixed_inputs_and_sizes_match_in_order(channels):
    from modeling_vit_scratch import ViTScratchImageProcessorFast

    config = tiny_config(num_channels=channels, image_size=(20, 28))
    pil, fast = ViTScratchImageProcessor.for_config(config), ViTScratchImageProcessorFast.for_config(config)
    batch = [IMAGES[name]() for name in ("PIL RGBA", "uint8 RGB array", "PIL I;16", "uint8 tensor channels first")]
    batch.append(Image.fromarray(pixels((64, 50, 3), 6)))
    expected, got = pil(batch, return_tensors="pt").pixel_values, fast(batch, return_tensors="pt").pixel_values
    assert got.shape == expected.shape == (5, channels, 20, 28)
    torch.testing.assert_close(got, expected, atol=ONE_LEVEL / 0.5, rtol=0)  # std 0.5: one level is 2/255 here
    one_by_one = fast(batch, return_tensors="pt", disable_grouping=True).pixel_values  # small: grouped by default
    torch.testing.assert_close(one_by_one, got, atol=1e-6, rtol=0)
    stacked = torch.from_numpy(np.stack([pixels((3, 31, 45), seed) for seed in range(4)]))  # (N, C, H, W)
    torch.testing.assert_close(
        fast(stacked, return_tensors="pt").pixel_values,
        pil(stacked, return_tensors="pt").pixel_values,
        atol=ONE_LEVEL / 0.5,
        rtol=0,
    )


@pytest.mark.timm
@pytest.mark.parametrize(
    "array, message",
    [
        (np.full((4, 4), -3, dtype=np.int32), r"span -3\.\.-3, outside 0\.\.65535: store 8-bit images as uint8"),
        (torch.full((4, 4), 70000, dtype=torch.int64), r"outside 0\.\.65535"),
        (torch.linspace(-1, 1, 16).reshape(4, 4), r"float images hold values in \[0, 1\].*undo any normalisation"),
        (np.full((4, 4), np.nan, dtype=np.float32), r"NaN or infinite"),
        (torch.zeros((5, 6, 7), dtype=torch.uint8), r"shape \(5, 6, 7\) is not an image"),
    ],
)
def test_fast_refuses_what_the_pil_processor_refuses_in_the_same_line(array, message):
    from modeling_vit_scratch import ViTScratchImageProcessorFast

    for processor_class in (ViTScratchImageProcessor, ViTScratchImageProcessorFast):
        with pytest.raises(ValueError, match=message) as error:
            processor_class.for_config(tiny_config())(array)
        assert "\n" not in str(error.value)


@pytest.mark.timm
def test_a_folder_is_the_same_whichever_processor_saved_it(tmp_path):
    from modeling_vit_scratch import ViTScratchImageProcessorFast

    config = tiny_config(num_channels=1, image_size=(8, 12))
    ViTScratchImageProcessor.for_config(config, image_mean=[0.2]).save_pretrained(tmp_path / "pil")
    ViTScratchImageProcessorFast.for_config(config, image_mean=[0.2]).save_pretrained(tmp_path / "fast")
    files = sorted(os.listdir(tmp_path / "pil"))
    assert "image_processing_vit_scratch.py" in files and sorted(os.listdir(tmp_path / "fast")) == files
    for file in files:  # byte for byte: the code and the settings
        assert (tmp_path / "fast" / file).read_bytes() == (tmp_path / "pil" / file).read_bytes(), file
    saved = json.loads((tmp_path / "fast/preprocessor_config.json").read_text())
    assert saved["image_processor_type"] == "ViTScratchImageProcessor"
    assert saved["auto_map"]["AutoImageProcessor"] == [
        "image_processing_vit_scratch.ViTScratchImageProcessor",
        "image_processing_vit_scratch.ViTScratchImageProcessorFast",
    ]
    loaded = ViTScratchImageProcessorFast.from_pretrained(tmp_path / "pil")
    assert loaded.num_channels == 1 and tuple(loaded.image_mean) == (0.2,) and loaded.size["width"] == 12


PICK = textwrap.dedent(
    """
    import json, sys
    if sys.argv[2] == "no torchvision":
        sys.modules["torchvision"] = None  # as on a machine without it: transformers finds no torchvision
    if sys.argv[3] == "no package":
        sys.modules["modeling_vit_scratch"] = None  # only the folder's own code, by trust_remote_code
    else:
        import modeling_vit_scratch  # registers the classes
    from transformers import AutoImageProcessor
    picked = {}
    switches_by_name = {
        "default": {},
        "backend=pil": {"backend": "pil"},
        "use_fast=False": {"use_fast": False},
        "backend=torchvision": {"backend": "torchvision"},
        "use_fast=True": {"use_fast": True},
    }
    for name, switches in switches_by_name.items():
        try:
            processor = AutoImageProcessor.from_pretrained(sys.argv[1], trust_remote_code=True, **switches)
            picked[name] = type(processor).__name__
        except ImportError as error:
            picked[name] = "ImportError: " + str(error)
    print(json.dumps(picked))
    """
)


def picked_classes(folder, tmp_path, torchvision: bool, package: bool) -> dict:
    """The class `AutoImageProcessor.from_pretrained(folder, **switches)` gives in a new process, per switch."""
    script = tmp_path / "pick.py"
    script.write_text(PICK)
    result = subprocess.run(
        [
            sys.executable,
            str(script),
            str(folder),
            "torchvision" if torchvision else "no torchvision",
            "package" if package else "no package",
        ],
        cwd=tmp_path,
        env={**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


PIL_ONLY = dict.fromkeys(["default", "backend=pil", "use_fast=False"], "ViTScratchImageProcessor")
FAST = dict.fromkeys(["default", "backend=torchvision", "use_fast=True"], "ViTScratchImageProcessorFast")


@pytest.mark.parametrize(
    "package", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["installed package", "folder's code"]
)
@pytest.mark.integration
def test_without_torchvision_the_pil_processor_is_picked(package, tmp_path):
    ViTScratchImageProcessor.for_config(tiny_config()).save_pretrained(tmp_path / "folder")
    picked = picked_classes(tmp_path / "folder", tmp_path, torchvision=False, package=package)
    assert {name: picked[name] for name in PIL_ONLY} == PIL_ONLY
    if package:  # transformers falls back to the registered PIL class, as for its own models
        assert picked["backend=torchvision"] == picked["use_fast=True"] == "ViTScratchImageProcessor"
    else:  # the folder names both classes; asking for the torchvision one says what is missing, in one line
        assert picked["backend=torchvision"].startswith("ImportError: ViTScratchImageProcessorFast needs torchvision")
        assert "\n" not in picked["backend=torchvision"]


@pytest.mark.timm
@pytest.mark.parametrize(
    "package", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["installed package", "folder's code"]
)
def test_with_torchvision_the_switches_pick_the_backend(package, tmp_path):
    ViTScratchImageProcessor.for_config(tiny_config()).save_pretrained(tmp_path / "folder")
    picked = picked_classes(tmp_path / "folder", tmp_path, torchvision=True, package=package)
    assert picked == {**FAST, "backend=pil": "ViTScratchImageProcessor", "use_fast=False": "ViTScratchImageProcessor"}


@pytest.mark.timm
def test_the_packages_pipeline_with_the_fast_processor_scores_like_the_pil_one(tmp_path):
    from transformers import AutoImageProcessor, pipeline

    from modeling_vit_scratch import ViTScratchForImageClassification, ViTScratchImageClassificationPipeline

    config = tiny_config(num_channels=1, image_size=(11, 13), patch_size=(11, 13))
    ViTScratchForImageClassification(config).eval().save_pretrained(tmp_path)
    ViTScratchImageProcessor.for_config(config).save_pretrained(tmp_path)
    image = IMAGES["PIL I;16"]()
    scores = {}
    for backend in ("pil", "torchvision"):
        processor = AutoImageProcessor.from_pretrained(tmp_path, trust_remote_code=True, backend=backend)
        classify = pipeline(
            "image-classification",
            model=str(tmp_path),
            image_processor=processor,
            pipeline_class=ViTScratchImageClassificationPipeline,
        )
        assert type(classify) is ViTScratchImageClassificationPipeline
        assert classify.image_processor.backend == backend
        scores[backend] = {p["label"]: p["score"] for p in classify(image, top_k=None)}
    assert scores["torchvision"] == pytest.approx(scores["pil"], abs=1e-3)
