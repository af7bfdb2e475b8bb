"""Image files: at every entry point that decodes images (train's pre-flight, explain's --image), an image that
declares more pixels than PIL's `Image.MAX_IMAGE_PIXELS` (a decompression bomb: a few kB that decode to gigabytes)
or that cannot be read is one line naming the file, before the model is built or loaded; file names made from a
label (explain's gradient_rollout_class_LABEL.png) stay short and inside the output folder, whatever the label."""

import os
import shutil

import numpy as np
import pytest
from entry_points import Scenario, outcome
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

# entry point -> what it does once its images are accepted: reaching it means the image was not refused first
AFTER_IMAGES = {
    "train": "modeling_vit_scratch.training.trainer.build_model",
    "explain": "modeling_vit_scratch.explanation.prediction.load_model",
}


def fail_if_reached(*args, **kwargs):
    raise AssertionError("the command went on past an image it should refuse")


def argv_with_image(scenario: Scenario, name: str, image) -> list[str]:
    """A working command line of `name` that reads `image` (train: as one more image of a class folder)."""
    if name == "explain":
        return ["--model", str(scenario.model()), "--image", str(image), "--out", str(scenario.root / "out")]
    shutil.copy(image, scenario.images() / "cat" / image.name)
    return scenario.argv("train", scenario.root / "out")


def refusal(monkeypatch, name: str, argv: list[str]) -> str:
    monkeypatch.setattr(AFTER_IMAGES[name], fail_if_reached)
    result = outcome(name, argv)
    assert result.one_line, result
    return result.error


@pytest.mark.parametrize("name", sorted(AFTER_IMAGES))
@pytest.mark.parametrize(("mode", "side"), [("1", 20000), ("P", 10000)])  # above twice PIL's limit, and just above
def test_a_decompression_bomb_is_one_line_naming_file_size_and_limit(tmp_path, monkeypatch, name, mode, side):
    bomb = tmp_path / "bomb.png"
    Image.new(mode, (side, side)).save(bomb, optimize=True)
    assert bomb.stat().st_size < 100_000  # a small file that declares a huge image
    error = refusal(monkeypatch, name, argv_with_image(Scenario(tmp_path), name, bomb))
    assert "bomb.png" in error and f"{side * side:,} pixels" in error, error
    assert f"{Image.MAX_IMAGE_PIXELS:,} allowed" in error and "resize it" in error


@settings(max_examples=25)
@given(
    name=st.sampled_from(sorted(AFTER_IMAGES)),
    width=st.integers(1, 400),
    height=st.integers(1, 400),
    limit=st.integers(1_500, 40_000),  # above the 12x10 images of the scenario's class folders
)
def test_any_image_above_the_limit_is_refused_and_none_below(tmp_path_factory, name, width, height, limit):
    root = tmp_path_factory.mktemp("images")
    image = root / "picture.png"
    Image.new("RGB", (width, height)).save(image)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Image, "MAX_IMAGE_PIXELS", limit)
        patch.setattr(AFTER_IMAGES[name], fail_if_reached)
        result = outcome(name, argv_with_image(Scenario(root), name, image))
    if width * height > limit:
        assert result.one_line and "picture.png" in result.error and f"{limit:,} allowed" in result.error, result
    else:  # accepted: the command went on to the model
        assert result.traceback is not None and "went on past an image" in str(result.traceback), result


@pytest.mark.parametrize("name", sorted(AFTER_IMAGES))
@pytest.mark.parametrize("content", [b"", b"not an image at all", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40])
def test_an_unreadable_image_is_one_line_naming_the_file(tmp_path, monkeypatch, name, content):
    broken = tmp_path / "broken.png"
    broken.write_bytes(content)
    error = refusal(monkeypatch, name, argv_with_image(Scenario(tmp_path), name, broken))
    assert "broken.png" in error and ("replace" in error or "give a PNG" in error), error


# a TIFF whose values no image holds -> what the line says about them
UNUSABLE_VALUES = {
    "float -5": (np.float32, -5, "Float image values span -5..-5, and float images hold values in [0, 1]"),
    "float 8-bit levels": (np.float32, 255, "Float image values span 255..255, and float images hold values in [0, 1]"),
    "int32 70000": (np.int32, 70000, "Integer image values span 70000..70000, outside 0..65535"),
}


@pytest.mark.parametrize("name", sorted(AFTER_IMAGES))
@pytest.mark.parametrize("values", sorted(UNUSABLE_VALUES))
def test_an_image_whose_values_cannot_be_used_is_one_line_before_the_model(tmp_path, monkeypatch, name, values):
    """The image is read and its values checked (the processor's rules) before any model is built or loaded."""
    dtype, value, said = UNUSABLE_VALUES[values]
    image = tmp_path / "values.tif"
    Image.fromarray(np.full((10, 12), value, dtype=dtype)).save(image)
    error = refusal(monkeypatch, name, argv_with_image(Scenario(tmp_path), name, image))
    assert "values.tif" in error and said in error, error


@pytest.mark.parametrize("label", ["a" * 240, "é" * 200, "../" * 80, "/etc/passwd", "."])
def test_a_label_in_a_file_name_is_short_and_stays_in_the_output_folder(tmp_path, label):
    scenario = Scenario(tmp_path)
    model = scenario.model()
    config = model / "config.json"
    text = config.read_text()
    for index in range(3):  # every class has the label (and its index), so the top class surely does
        text = text.replace(f'"LABEL_{index}"', f'"{label.replace(chr(92), "")}{index}"')
    config.write_text(text)
    out = tmp_path / "out"
    result = outcome("explain", ["--model", str(model), "--image", str(scenario.picture()), "--out", str(out)])
    assert result.code == 0, result
    written = [path for path in tmp_path.rglob("*.png") if path.parent != tmp_path]
    assert {path.parent for path in written} == {out}
    rollout = [path.name for path in written if path.name.startswith("gradient_rollout_class_")]
    assert len(rollout) == 1 and len(rollout[0].encode()) <= 100, rollout


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null", "fifo"])
def test_an_image_that_is_no_regular_file_is_one_line_saying_so(tmp_path, monkeypatch, device):
    if device == "fifo":  # a named pipe: opening it to read would wait for a writer
        device = tmp_path / "pipe.png"
        os.mkfifo(device)
    error = refusal(monkeypatch, "explain", argv_with_image(Scenario(tmp_path), "explain", device))
    assert error == (
        f"error: Image '{device}' is not a regular file (a device, pipe or socket): --image takes one image file "
        "(PNG, JPEG, ...) or an http(s) URL."
    )


@pytest.mark.parametrize("name", sorted(AFTER_IMAGES))
def test_postscript_named_as_an_image_never_reaches_ghostscript(tmp_path, monkeypatch, name):
    """PIL picks a decoder from a file's content, and its EPS decoder runs Ghostscript on the file (PostScript is a
    program): a `x.png` holding PostScript, in a data set or as explain's --image, is one line, never given to gs."""
    ran = tmp_path / "gs-ran"
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    (bin_folder / "gs").write_text(f'#!/bin/sh\necho "$*" >> {ran}\n[ "$1" = "--version" ] && echo 9.55.0\nexit 0\n')
    (bin_folder / "gs").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_folder}{os.pathsep}{os.environ['PATH']}")
    postscript = tmp_path / "x.png"
    postscript.write_bytes(
        b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nnewpath 0 0 moveto 8 8 lineto stroke\nshowpage\n"
    )
    error = refusal(monkeypatch, name, argv_with_image(Scenario(tmp_path), name, postscript))
    assert "x.png" in error and "Ghostscript" not in error, error
    assert not ran.exists(), ran.read_text()
