"""Pre-flight class-size rule against the `datasets` splits it predicts: it never lets through a split that fails."""

import random
import re

import datasets
import pytest
from datasets import ClassLabel, Dataset, Features

from modeling_vit_scratch.training.preflight import check_class_sizes, minimum_class_size


def test_the_class_size_check_never_passes_a_split_datasets_refuses():
    datasets.disable_progress_bars()
    rng = random.Random(0)
    passed = 0
    for _ in range(120):
        counts = [rng.randint(1, 12) for _ in range(rng.randint(2, 5))]
        carve_outs = [("test", rng.choice([0.05, 0.1, 0.2, 0.3, 0.5])), ("validation", rng.choice([0.1, 0.2, 0.5]))]
        names = [f"class{i}" for i in range(len(counts))]
        labels = [index for index, count in enumerate(counts) for _ in range(count)]
        try:
            check_class_sizes(labels, names, carve_outs)
        except ValueError as error:
            assert "\n" not in str(error) and ("--" in str(error) or "add images" in str(error))
            continue
        passed += 1
        full = Dataset.from_dict({"label": labels}, features=Features(label=ClassLabel(names=names)))
        for seed in range(3):
            train = full
            for _, fraction in carve_outs:  # as prepare_splits does: test first, then validation from what is left
                train = train.train_test_split(test_size=fraction, seed=seed, stratify_by_column="label")["train"]
    assert passed >= 15  # the check is not simply refusing everything (20 of these 120 pass)


@pytest.mark.parametrize("fractions, minimum", [([0.1], 2), ([0.1, 0.1], 3), ([0.5, 0.1], 4), ([0.3, 0.3], 3)])
def test_minimum_class_size_keeps_two_images_for_the_last_carve_out(fractions, minimum):
    assert minimum_class_size(1000, fractions) == minimum


@pytest.mark.parametrize(
    "counts, carve_outs",
    [
        ([1, 1], [("test", 0.1), ("validation", 0.1)]),  # one image per class
        ([1, 1, 1], [("test", 0.1), ("validation", 0.1)]),
        ([2, 2], [("test", 0.1), ("validation", 0.1)]),
        ([10, 10, 10], [("test", 0.1), ("validation", 0.01)]),  # a validation split smaller than the classes
        ([10, 10, 10], [("test", 0.01), ("validation", 0.01)]),  # lowering made both too small
        ([4, 4, 4], [("test", 0.1), ("validation", 0.4)]),
        ([500, 2], [("test", 0.1), ("validation", 0.1)]),
        ([1, 1], [("validation", 0.3)]),
    ],
)
def test_following_each_printed_fix_reaches_splits_datasets_makes(counts, carve_outs):
    """Each line's fix, followed as printed (the fractions it gives, the images it asks for), leads to splits that
    `datasets` makes, without coming back to a line already seen."""
    datasets.disable_progress_bars()
    names = [f"class{i}" for i in range(len(counts))]
    seen = []
    while True:
        labels = [index for index, count in enumerate(counts) for _ in range(count)]
        try:
            check_class_sizes(labels, names, carve_outs)
            break
        except ValueError as error:
            line = str(error)
        assert line not in seen and len(seen) < 3, seen + [line]
        seen.append(line)
        given = dict(re.findall(r"--(\w+)_fraction (\d+(?:\.\d+)?)", line.split(": ", 1)[1]))
        if least := re.search(r"each class has at least (\d+)", line):
            counts = [max(count, int(least.group(1))) for count in counts]
        assert given, line
        carve_outs = [(split, float(given[split])) for split, _ in carve_outs]
    full = Dataset.from_dict({"label": labels}, features=Features(label=ClassLabel(names=names)))
    for split, fraction in carve_outs:  # as prepare_splits does: test first, then validation from what is left
        full = full.train_test_split(test_size=fraction, seed=0, stratify_by_column="label")["train"]


def frames_file(path, form: str):
    """A 3-frame 8x8 image at `path`: an animated GIF or APNG, made by Pillow."""
    from PIL import Image

    frames = [Image.new("RGB", (8, 8), color) for color in ("red", "green", "blue")]
    frames[0].save(path, format=form, save_all=True, append_images=frames[1:], duration=100, loop=0)
    return str(path)


@pytest.mark.parametrize("decode", [True, False])
def test_files_of_several_frames_are_counted_once_and_said_frame_1_is_trained_on(tmp_path, decode):
    from datasets import Image as ImageFeature

    from modeling_vit_scratch.training.preflight import check_images

    still = tmp_path / "still.png"
    __import__("PIL.Image").Image.new("RGB", (8, 8)).save(still)
    paths = [frames_file(tmp_path / "a.gif", "GIF"), frames_file(tmp_path / "b.png", "PNG"), str(still)]
    split = Dataset.from_dict({"image": paths, "label": [0, 1, 0]}).cast_column("image", ImageFeature())
    check = check_images(datasets.DatasetDict(train=split), decode=decode, progress=False)
    assert check.several_frames == 2
    assert check.summary().endswith(
        " 2 files hold several frames (an animation or a multi-page file): frame 1 of each is trained on, the others "
        "are not read."
    )
    still_only = check_images(datasets.DatasetDict(train=split.select([2])), decode=decode, progress=False)
    assert still_only.several_frames == 0 and still_only.summary().endswith(" s.")
