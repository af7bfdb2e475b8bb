"""Data: the embedded digits, user data sets (imagefolder, save_to_disk), column detection, splits, transforms."""

import numpy as np
import pytest
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Image as ImageFeature
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from modeling_vit_scratch import ViTScratchImageProcessor
from modeling_vit_scratch.data import (
    ImageTransform,
    collate_images,
    digits_dataset,
    load_image_dataset,
    prepare_splits,
    random_shift_rotate,
)


def write_imagefolder(root, classes=("cat", "dog", "fox"), per_class=6, size=(12, 10), mode="RGB"):
    """An imagefolder with one sub-folder per class; each class has its own brightness so it can be learned."""
    rng = np.random.default_rng(0)
    for index, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for k in range(per_class):
            base = 40 + 80 * index
            pixels = np.clip(base + rng.integers(-20, 20, (size[1], size[0], 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).convert(mode).save(root / name / f"{k}.png")
    return root


def test_digits_match_scikit_learn_split_and_scaling():
    digits = load_digits()
    _, test_idx = train_test_split(
        np.arange(len(digits.target)), test_size=0.2, stratify=digits.target, random_state=0
    )
    splits = digits_dataset()
    assert len(splits["train"]) + len(splits["test"]) == 1797 and len(splits["test"]) == 360
    assert splits["train"].features["label"].names == [str(d) for d in range(10)]
    first = splits["test"][0]
    assert first["image"].mode == "L" and first["image"].size == (8, 8)
    expected = np.rint(digits.images[test_idx[0]] * 255 / 16).astype(np.uint8)
    np.testing.assert_array_equal(np.asarray(first["image"]), expected)
    assert first["label"] == digits.target[test_idx[0]]


def test_validation_is_taken_from_train_only_and_is_stratified():
    data = prepare_splits(digits_dataset(), validation_fraction=0.1, split_seed=0)
    assert len(data.splits["test"]) == 360
    assert len(data.splits["train"]) + len(data.splits["validation"]) == 1797 - 360
    counts = np.bincount(data.splits["validation"]["label"], minlength=10)
    assert counts.min() >= 13 and counts.max() <= 16  # 144 images, about 14 per class
    again = prepare_splits(digits_dataset(), validation_fraction=0.1, split_seed=0)
    assert again.splits["validation"]["label"] == data.splits["validation"]["label"]


def test_imagefolder_gets_labels_and_all_three_splits(tmp_path):
    raw = load_image_dataset(str(write_imagefolder(tmp_path / "pets", per_class=10)))
    data = prepare_splits(raw, validation_fraction=0.2, test_fraction=0.2)
    assert data.labels == ["cat", "dog", "fox"]
    assert sorted(data.splits) == ["test", "train", "validation"]
    assert sum(len(split) for split in data.splits.values()) == 30


def test_save_to_disk_folder_with_other_column_names_and_string_labels(tmp_path):
    images = [Image.new("L", (8, 8), color=c) for c in (0, 50, 100, 150, 200, 250)] * 2
    dataset = Dataset.from_dict(
        {"picture": images, "kind": ["dark", "dark", "mid", "mid", "light", "light"] * 2, "extra": list(range(12))}
    ).cast_column("picture", ImageFeature())
    DatasetDict(train=dataset, valid=dataset.select(range(3))).save_to_disk(tmp_path / "saved")
    data = prepare_splits(load_image_dataset(str(tmp_path / "saved")), label_column="kind", test_fraction=0.5)
    assert isinstance(data.splits["train"].features["label"], ClassLabel)
    assert sorted(data.labels) == ["dark", "light", "mid"]
    assert data.splits["train"].column_names == ["image", "label"]
    assert len(data.splits["validation"]) == 3  # "valid" is recognised as the validation split


def test_missing_image_or_label_column_is_a_clear_error():
    no_image = DatasetDict(train=Dataset.from_dict({"x": [1, 2], "label": [0, 1]}))
    with pytest.raises(ValueError, match="No image column.*--image_column"):
        prepare_splits(no_image)
    no_label = DatasetDict(
        train=Dataset.from_dict({"image": [Image.new("L", (4, 4))] * 2}).cast_column("image", ImageFeature())
    )
    with pytest.raises(ValueError, match="No label column.*--label_column"):
        prepare_splits(no_label)
    with pytest.raises(ValueError, match="'pic' is not in the data set"):
        prepare_splits(no_label, image_column="pic")


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_image_dataset(str(tmp_path / "nowhere"))


def test_shift_rotate_keeps_size_and_moves_pixels():
    image = Image.new("L", (8, 8))
    image.putpixel((4, 4), 255)
    moved = random_shift_rotate(image, max_shift=0.25, max_degrees=0.0, rng=__import__("random").Random(1))
    assert moved.size == (8, 8) and moved.mode == "L"
    assert np.asarray(moved).argmax() != np.asarray(image).argmax()


def test_transform_and_collator_feed_the_model_shape():
    processor = ViTScratchImageProcessor(size={"height": 8, "width": 8}, num_channels=3, image_mean=[0.5] * 3,
                                         image_std=[0.5] * 3)  # fmt: skip
    split = digits_dataset()["test"].select(range(4))
    rows = split.with_transform(ImageTransform(processor, augment=True))
    batch = collate_images([rows[i] for i in range(4)])
    assert batch["pixel_values"].shape == (4, 3, 8, 8)  # grayscale digits converted for a 3-channel model
    assert batch["labels"].dtype == torch.long and batch["labels"].tolist() == split["label"]
    plain = collate_images([split.with_transform(ImageTransform(processor))[i] for i in range(4)])
    assert not torch.equal(plain["pixel_values"], batch["pixel_values"])
