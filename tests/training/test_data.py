"""Data: the embedded digits, user data sets (imagefolder, save_to_disk), column detection, splits, transforms."""

from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import ClassLabel, Dataset, DatasetDict, Features
from datasets import Image as ImageFeature
from helpers import write_imagefolder
from PIL import Image
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from modeling_vit_scratch import ViTScratchImageProcessor
from modeling_vit_scratch.training.augmentation import RandomShiftRotate
from modeling_vit_scratch.training.data import (
    ImageTransform,
    ProcessedImages,
    collate_images,
    digits_dataset,
    load_image_dataset,
    prepare_splits,
    processed_rows,
)


def test_digits_match_scikit_learn_split_and_scaling():
    digits = load_digits()
    _, test_idx = train_test_split(np.arange(len(digits.target)), test_size=0.2, stratify=digits.target, random_state=0)
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


def test_transform_and_collator_feed_the_model_shape():
    processor = ViTScratchImageProcessor(
        size={"height": 8, "width": 8}, num_channels=3, image_mean=[0.5] * 3, image_std=[0.5] * 3
    )
    split = digits_dataset()["test"].select(range(4))
    rows = split.with_transform(ImageTransform(processor))
    batch = collate_images([rows[i] for i in range(4)])
    assert batch["pixel_values"].shape == (4, 3, 8, 8)  # grayscale digits converted for a 3-channel model
    assert batch["labels"].dtype == torch.long and batch["labels"].tolist() == split["label"]
    assert torch.equal(batch["pixel_values"][:, 0], batch["pixel_values"][:, 2])  # grey: the channels agree
    assert torch.equal(collate_images(rows.__getitems__([0, 1, 2, 3]))["pixel_values"], batch["pixel_values"])


# Every image mode through the training path, and the pre-flight: one line naming the file, class or folder and the fix.


@pytest.mark.parametrize("stored", ["I;16", "I;16B", "F"])
def test_wide_image_matches_its_8_bit_twin_through_a_dataset_and_augmentation(stored):
    processor = ViTScratchImageProcessor(
        size={"height": 12, "width": 10}, num_channels=1, image_mean=[0.5], image_std=[0.5]
    )
    pixels = np.random.default_rng(4).integers(0, 256, (12, 10), dtype=np.uint8)
    wide = {
        "I;16": Image.fromarray(pixels.astype(np.uint16) * 257),
        "I;16B": Image.frombytes("I;16B", (10, 12), (pixels.astype(np.uint16) * 257).astype(">u2").tobytes()),
        "F": Image.fromarray(pixels.astype(np.float32) / 255),
    }[stored]
    dataset = Dataset.from_dict({"image": [Image.fromarray(pixels), wide], "label": [0, 0]})
    assert dataset[1]["image"].mode == stored  # datasets keeps the depth; the transform must too
    rows = dataset.with_transform(ImageTransform(processor))
    augmentation = RandomShiftRotate.for_processor(processor, max_shift=0.1, max_degrees=15)
    outputs = [  # the same shift and rotation for both
        augmentation(rows[index]["pixel_values"][None], generator=torch.Generator().manual_seed(3))[0]
        for index in (0, 1)
    ]
    assert not torch.equal(outputs[0], rows[0]["pixel_values"])
    torch.testing.assert_close(outputs[1], outputs[0], atol=2 / 255 + 1e-6, rtol=0)  # std 0.5: one step is 2/255
    assert len(torch.unique(outputs[1])) > 20  # not clipped to black and white


def rows(images, labels, names=("cat", "dog")) -> DatasetDict:
    features = Features(image=ImageFeature(), label=ClassLabel(names=list(names)))
    return DatasetDict(train=Dataset.from_dict({"image": images, "label": labels}, features=features))


def test_a_single_class_is_named():
    expected = r"only one class \('cat'\): a classifier needs at least two classes: add images of another class\.$"
    with pytest.raises(ValueError, match=expected):
        prepare_splits(rows([Image.new("L", (4, 4))] * 6, [0] * 6))


def test_a_single_class_imagefolder_is_named_not_a_missing_label_column(tmp_path):
    root = write_imagefolder(tmp_path / "pets", classes=("cat",), per_class=3)
    (root / "dog").mkdir()
    with pytest.raises(ValueError, match=r"has only one class \('cat'\) \(no files in 'dog'\).*add a sub-folder"):
        load_image_dataset(str(root))


def test_images_outside_class_folders_and_empty_folders_are_named(tmp_path):
    (tmp_path / "flat").mkdir()
    for k in range(3):
        Image.new("L", (4, 4), k).save(tmp_path / "flat" / f"{k}.png")
    with pytest.raises(ValueError, match=r"images in '.*flat' are not in class sub-folders: put each class"):
        load_image_dataset(str(tmp_path / "flat"))
    (tmp_path / "empty" / "cat").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=r"'.*empty' holds no image files: put the images in one sub-folder"):
        load_image_dataset(str(tmp_path / "empty"))


def test_a_class_too_small_for_the_stratified_splits_is_named_with_its_count_and_minimum(tmp_path):
    root = write_imagefolder(tmp_path / "pets", classes=("cat", "dog"), per_class=10)
    write_imagefolder(root, classes=("fox",), per_class=2)
    raw = load_image_dataset(str(root))
    with pytest.raises(ValueError) as error:
        prepare_splits(raw)
    assert str(error.value) == (
        "Class 'fox' has 2 images, fewer than the 3 each class needs for the stratified test and validation splits "
        "(a stratified split needs two per class in what it cuts): add images until each class has at least 3 (then "
        "--test_fraction 0.1 --validation_fraction 0.11 works), or give the data set its own test and validation splits."
    )
    with_test = rows([Image.new("L", (4, 4))] * 11, [0] * 5 + [1] * 5 + [2], names=("cat", "dog", "fox"))
    with_test["test"] = with_test["train"]  # only the validation split is carved: two per class suffice
    with pytest.raises(
        ValueError,
        match=r"^Class 'fox' has 1 image, fewer than the 2 each class needs for the "
        r"stratified validation split \(a stratified split needs two per class in what it cuts\): add images until "
        r"each class has at least 2",
    ):
        prepare_splits(with_test, validation_fraction=0.3)


def test_a_split_smaller_than_the_number_of_classes_names_the_fraction_to_raise(tmp_path):
    raw = load_image_dataset(str(write_imagefolder(tmp_path / "pets", per_class=4)))  # 3 classes, 12 images
    expected = (
        r"^--test_fraction 0.1 of 12 training images makes a test split of 2, fewer than the 3 classes .*: "
        r"give --test_fraction 0.17 --validation_fraction 0.4\.$"
    )
    with pytest.raises(ValueError, match=expected):
        prepare_splits(raw, test_fraction=0.1, validation_fraction=0.4)
    data = prepare_splits(raw, test_fraction=0.17, validation_fraction=0.4)  # the suggested fraction works
    assert len(data.splits["test"]) == 3


def test_check_images_decodes_every_split_and_names_a_corrupt_file(tmp_path):
    from modeling_vit_scratch.training.preflight import check_images

    root = write_imagefolder(tmp_path / "pets", per_class=4)
    data = prepare_splits(load_image_dataset(str(root)), test_fraction=0.25, validation_fraction=0.34)
    result = check_images(data.splits, progress=False)
    assert (result.num_images, result.decoded) == (12, True)
    dog = (root / "dog" / "2.png").read_bytes()
    (root / "dog" / "2.png").write_bytes(b"this is not a png")
    with pytest.raises(
        ValueError,
        match=r"^Image \d+ of split '(train|validation|test)' \(.*dog/2\.png\) cannot be "
        r"decoded \(cannot identify image file\): remove or replace the file\.$",
    ):
        check_images(data.splits, progress=False)
    (root / "dog" / "2.png").write_bytes(dog)
    (root / "cat" / "1.png").unlink()
    with pytest.raises(
        ValueError,
        match=r"^Image \d+ of split '\w+' \(.*cat/1\.png\) does not exist: restore the "
        r"file or remove the row\.$",
    ):
        check_images(data.splits, progress=False)


def test_a_truncated_file_passes_the_header_check_and_fails_the_decode(tmp_path):
    from modeling_vit_scratch.training.preflight import check_images

    root = write_imagefolder(tmp_path / "pets", classes=("cat", "dog"), per_class=3, size=(64, 64))
    whole = (root / "dog" / "1.png").read_bytes()
    (root / "dog" / "1.png").write_bytes(whole[: len(whole) // 2])
    splits = load_image_dataset(str(root))
    assert check_images(splits, decode=False, progress=False).decoded is False
    with pytest.raises(
        ValueError,
        match=r"^Image 4 of split 'train' \(.*dog/1\.png\) cannot be decoded \(image file "
        r"is truncated.*\): remove or replace the file\.$",
    ):
        check_images(splits, progress=False)


def test_a_damaged_image_of_a_carved_split_is_named_by_its_row_in_the_set(tmp_path):
    """Validation and test carved from the set's train split reorder its rows: the line names the row as the set
    numbers it, in the set's split (before: the row in the carved, shuffled split)."""
    from modeling_vit_scratch.training.preflight import check_images

    root = write_imagefolder(tmp_path / "pets", classes=("cat", "dog"), per_class=10)
    (root / "dog" / "3.png").write_bytes(b"not a png")
    raw = load_image_dataset(str(root))
    row = [
        Path(cell["path"]).relative_to(root).as_posix()
        for cell in raw["train"].cast_column("image", ImageFeature(decode=False))["image"]
    ].index("dog/3.png")
    data = prepare_splits(raw, validation_fraction=0.3, test_fraction=0.3)
    with pytest.raises(ValueError, match=rf"^Image {row} of split 'train' \(.*dog/3\.png\) cannot be decoded"):
        check_images(data.splits, progress=False, carved_from=data.carved_from)


def test_check_images_refuses_values_the_model_cannot_scale(tmp_path):
    from modeling_vit_scratch.training.preflight import check_images

    good = Image.fromarray(np.full((4, 4), 0.5, dtype=np.float32))
    bad = Image.fromarray(np.full((4, 4), -2.0, dtype=np.float32))
    check_images(rows([good, good], [0, 1]), progress=False)
    with pytest.raises(ValueError, match=r"^Image 1 of split 'train' .*cannot be used \(Float image values span -2"):
        check_images(rows([good, bad], [0, 1]), progress=False)


def test_processed_images_in_memory_are_the_rows_the_transform_gives():
    processor = ViTScratchImageProcessor(
        size={"height": 12, "width": 12}, num_channels=1, image_mean=[0.5], image_std=[0.5]
    )
    split = digits_dataset()["test"].select(range(300))  # more than one chunk of 256
    transform = ImageTransform(processor)
    rows = split.with_transform(transform)
    kept = processed_rows(split, transform, memory_limit_mb=1)  # 300 x 12 x 12 x 4 bytes = 0.16 MB
    assert isinstance(kept, ProcessedImages) and len(kept) == 300
    for index in (0, 255, 256, 299):
        assert torch.equal(kept[index]["pixel_values"], rows[index]["pixel_values"])
        assert kept[index]["labels"] == rows[index]["labels"]
    batch = collate_images(kept.__getitems__([5, 280]))
    assert batch["pixel_values"].shape == (2, 1, 12, 12) and batch["labels"].tolist() == split.select([5, 280])["label"]
    assert not isinstance(processed_rows(split, transform, memory_limit_mb=0.1), ProcessedImages)  # over the limit
    assert not isinstance(processed_rows(split, transform, memory_limit_mb=0), ProcessedImages)


def pet_split(order: list[str], pets: list[str]) -> Dataset:
    """Rows of `pets` (names) stored under a ClassLabel listing the names in `order`; each pet a gray level."""
    shade = {"cat": 0, "dog": 120, "fish": 240}
    return Dataset.from_dict(
        {"image": [Image.new("L", (8, 8), color=shade[pet]) for pet in pets], "label": pets},
        features=Features(image=ImageFeature(), label=ClassLabel(names=order)),
    )


def test_every_split_is_read_by_its_class_names_not_its_numbers(tmp_path):
    """The test split lists its classes in another order (its labels stored consistently with it): each image keeps
    its name, under the train split's numbers; so does a string label column encoded on its own."""
    pets = ["cat", "dog", "fish"] * 4
    raw = DatasetDict(train=pet_split(["cat", "dog", "fish"], pets), test=pet_split(["fish", "dog", "cat"], pets))
    shades = {"dog": 120, "fish": 240}  # a string column encoded alone: dog 0, fish 1
    raw["validation"] = Dataset.from_dict(
        {
            "image": [Image.new("L", (8, 8), color=shades[pet]) for pet in pets if pet != "cat"],
            "label": [pet for pet in pets if pet != "cat"],
        }
    )
    raw.save_to_disk(tmp_path / "saved")
    data = prepare_splits(load_image_dataset(str(tmp_path / "saved")))
    assert data.labels == ["cat", "dog", "fish"]
    for name, split in data.splits.items():
        names = [data.labels[label] for label in split["label"]]
        shades = [image.getpixel((0, 0)) for image in split["image"]]
        assert [{0: "cat", 120: "dog", 240: "fish"}[shade] for shade in shades] == names, name


def test_a_class_the_train_split_lacks_is_one_line_naming_the_split_and_the_class():
    raw = DatasetDict(train=pet_split(["cat", "dog"], ["cat", "dog"] * 4), test=pet_split(["cat", "fish"], ["fish"]))
    with pytest.raises(ValueError, match=r"^The test split holds the class 'fish', which the train split lacks"):
        prepare_splits(raw, validation_fraction=0.25)


def test_a_folder_of_parquet_shards_without_streaming_names_the_two_ways_to_read_it(tmp_path):
    folder = tmp_path / "pq"
    folder.mkdir()
    pet_split(["cat", "dog", "fish"], ["cat", "dog"]).to_parquet(folder / "train-00000-of-00001.parquet")
    with pytest.raises(FileNotFoundError) as refused:
        load_image_dataset(str(folder))
    assert str(refused.value) == (
        f"Data set folder '{folder}' holds parquet shards, not image files, and shards are read as a stream: give "
        "--streaming true --max_steps N, or load them with datasets and save_to_disk the result, then give that "
        "folder."
    )


def test_shards_named_as_splits_beside_the_images_they_name_are_the_shards_line(tmp_path):
    """Parquet shards named as splits whose image column names images in a folder beside them: the folder's split
    is the shards, not the images (before: "folders named as splits (), ... 6 images elsewhere would be left out");
    a split-named file that is no shard is named as it is."""
    folder = tmp_path / "pq"
    write_imagefolder(folder, classes=("imgs",), per_class=6)
    paths = [f"imgs/{index}.png" for index in range(6)]
    Dataset.from_dict({"image": paths, "label": ["cat", "dog"] * 3}).to_parquet(folder / "train-00000-of-00001.parquet")
    with pytest.raises(FileNotFoundError) as refused:
        load_image_dataset(str(folder))
    assert str(refused.value).startswith(
        f"Data set folder '{folder}' holds parquet shards, named as splits (train-00000-of-00001.parquet), and shards "
        "are read as a stream: give --streaming true --max_steps N, "
    )
    (folder / "train-00000-of-00001.parquet").rename(folder / "train.txt")
    with pytest.raises(ValueError) as refused:
        load_image_dataset(str(folder))
    assert str(refused.value).startswith(
        f"The data set folder '{folder}' has files or folders named as splits ('train.txt'), so datasets reads only "
        "those, and 6 images elsewhere would be left out (e.g. imgs/0.png, imgs/1.png, imgs/2.png, ... 3 more): "
    )
