"""What a data set's labels mean is read as the user meant it, or said in one line before training.

- Integer labels are numbers: labels 0..N-1 are the model's classes 0..N-1 (before: sorted as text, so output 2
  meant label 10); other integers (3, 7, 42) are ordered numerically and one line gives the mapping.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from datasets import ClassLabel, Dataset, DatasetDict, Features, Value
from datasets import Image as ImageFeature
from entry_points import Scenario, outcome, with_argument
from PIL import Image

from modeling_vit_scratch.training.data import (
    check_label_forms,
    check_metadata_files,
    outside_paths_lines,
    prepare_splits,
)


def tiny_images(count: int) -> list[Image.Image]:
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (8, 8, 3), dtype=np.uint8)) for _ in range(count)]


def integer_set(labels: list[int], **splits: list[int]) -> DatasetDict:
    features = Features(image=ImageFeature(), label=Value("int64"))
    made = {"train": labels, **splits}
    return DatasetDict(
        {
            name: Dataset.from_dict({"image": tiny_images(len(v)), "label": v}, features=features)
            for name, v in made.items()
        }
    )


@pytest.mark.parametrize("classes", [12, 3])
def test_integer_labels_0_to_n_minus_1_are_the_models_classes_in_their_own_order(classes):
    labels = [index % classes for index in range(classes * 6)]
    data = prepare_splits(integer_set(labels, test=list(range(classes))), validation_fraction=0.2)
    assert data.labels == [str(index) for index in range(classes)] and data.notes == []
    assert data.splits["test"]["label"] == list(range(classes))  # label i is the model's class i


@pytest.mark.parametrize("values", [[3, 7, 42], [1, 2, 10], [5, 100, 20, 9]])
def test_other_integer_labels_are_ordered_numerically_and_the_mapping_is_one_line(values):
    labels = [values[index % len(values)] for index in range(len(values) * 8)]
    data = prepare_splits(integer_set(labels, test=values), validation_fraction=0.2)
    ordered = sorted(values)
    assert data.labels == [str(value) for value in ordered]
    assert [data.labels[number] for number in data.splits["test"]["label"]] == [str(value) for value in values]
    (line,) = data.notes
    pairs = ", ".join(f"{index} -> {value}" for index, value in enumerate(ordered))
    assert f"model index -> data set label: {pairs} (config.json" in line and "\n" not in line


@pytest.mark.integration
def test_a_run_on_integer_labels_says_the_mapping_and_writes_it_to_config_and_record(tmp_path, capsys):
    integer_set([[3, 7, 42][index % 3] for index in range(30)])["train"].save_to_disk(tmp_path / "numbers")
    argv = with_argument(Scenario(tmp_path).argv("train"), "--dataset", tmp_path / "numbers")
    assert outcome("train", argv).code == 0
    assert "model index -> data set label: 0 -> 3, 1 -> 7, 2 -> 42" in capsys.readouterr().out
    config = json.loads((tmp_path / "out-train" / "config.json").read_text())
    assert config["id2label"] == {"0": "3", "1": "7", "2": "42"}
    record = json.loads((tmp_path / "out-train" / "training_record.json").read_text())
    assert "0 -> 3, 1 -> 7, 2 -> 42" in record["label_notes"][0]


@pytest.mark.parametrize("names", [["a", "b", "c", "unused"], ["unused", "a", "gone", "b", "c"]])
def test_a_class_the_training_split_has_no_image_of_is_named_in_one_warning_line(names):
    used = [index for index, name in enumerate(names) if name not in ("unused", "gone")]
    labels = [used[index % len(used)] for index in range(len(used) * 8)]
    features = Features(image=ImageFeature(), label=ClassLabel(names=names))
    raw = DatasetDict(train=Dataset.from_dict({"image": tiny_images(len(labels)), "label": labels}, features=features))
    data = prepare_splits(raw, validation_fraction=0.2, test_fraction=0.2)
    assert data.labels == names  # the model keeps an output per name: said, not changed
    (line,) = data.notes
    unused = [name for name in names if name in ("unused", "gone")]
    assert line.startswith(f"Warning: the training split holds no image of {len(unused)} class")
    assert f"({', '.join(unused)}): the model has" in line and "\n" not in line


def with_metadata(root, rows: list[str], header: str = "file_name,label"):
    (root / "metadata.csv").write_text("\n".join([header, *rows]) + "\n")
    return root


def class_rows(root, relabelled: dict[str, str] = {}) -> list[str]:  # noqa: B006 (read only)
    files = sorted(file.relative_to(root).as_posix() for file in root.rglob("*.png"))
    return [f"{file},{relabelled.get(file, file.split('/')[0])}" for file in files]


def refused_training(scenario: Scenario, dataset, streaming: bool) -> str:
    argv = with_argument(scenario.argv("train"), "--dataset", dataset)
    if streaming:
        argv += ["--streaming", "true", "--max_steps", "1"]
    done = outcome("train", argv)
    assert done.one_line, done
    assert not (scenario.root / "out-train").exists()
    return done.error


@pytest.mark.parametrize("streaming", [False, True])
def test_metadata_labels_that_disagree_with_the_class_folders_are_one_line(tmp_path, streaming):
    scenario = Scenario(tmp_path)
    images = scenario.images()
    with_metadata(images, class_rows(images, {"cat/0.png": "dog", "fox/3.png": "cat"}))
    assert refused_training(scenario, images, streaming) == (
        "error: metadata.csv says dog for cat/0.png (and 1 more), whose class folder is cat: which is right? Remove "
        "metadata.csv's label column, or move the files into the folders of their labels."
    )


def test_metadata_labels_that_agree_with_the_folders_or_images_in_one_folder_are_read(tmp_path):
    images = Scenario(tmp_path).images()
    check_metadata_files(with_metadata(images, class_rows(images)))  # the same labels twice: no question
    flat = tmp_path / "flat" / "all"
    flat.mkdir(parents=True)
    for image in images.rglob("*.png"):
        (flat / f"{image.parent.name}{image.name}").write_bytes(image.read_bytes())
    rows = [f"all/{file.name},{file.name[:3]}" for file in sorted(flat.glob("*.png"))]
    check_metadata_files(with_metadata(flat.parent, rows))  # one folder: not a class, the metadata labels


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("name, why", [("../../outside/0.png", "outside"), ("cat/nine.png", "missing")])
def test_a_metadata_file_name_outside_the_set_or_missing_is_one_line_naming_the_row(tmp_path, streaming, name, why):
    scenario = Scenario(tmp_path)
    images = scenario.images()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "0.png").write_bytes((images / "cat" / "0.png").read_bytes())
    rows = class_rows(images)
    with_metadata(images, [*rows, f"{name},cat"])
    said = "lies outside the data set folder: put the image inside" if why == "outside" else "is not there: restore"
    error = refused_training(scenario, images, streaming)
    assert error.startswith(
        f"error: Row {len(rows) + 1} of metadata.csv in the data set folder '{images}' names the "
        f"image '{name}', which {said}"
    )


@pytest.mark.parametrize("streaming", [False, True])
def test_an_image_named_by_two_metadata_rows_is_one_line_naming_the_rows(tmp_path, streaming):
    """A flat folder whose metadata.csv names `c0.png` twice (cat and dog) trained on 25 items from 24 files, the
    warning blaming "identical files": one file, one row."""
    scenario = Scenario(tmp_path)
    flat = tmp_path / "flat"
    flat.mkdir()
    for index, image in enumerate(sorted(scenario.images().rglob("*.png"))):
        (flat / f"c{index}.png").write_bytes(image.read_bytes())
    files = sorted(file.name for file in flat.glob("*.png"))
    rows = [f"{name},{('cat', 'dog')[index % 2]}" for index, name in enumerate(files)]
    with_metadata(flat, [*rows, f"{files[0]},dog"])
    error = refused_training(scenario, flat, streaming)
    assert error == (
        f"error: Row {len(rows) + 1} of metadata.csv in the data set folder '{flat}' names the image '{files[0]}', "
        "which row 1 of metadata.csv names too, and datasets would read the one file as two items: keep one row per "
        "image (remove one of the two rows)."
    )


def parquet_shard(path, labels, feature, rows: int = 12) -> None:
    columns = {"image": tiny_images(rows)} | ({} if labels is None else {"label": labels})
    features = Features(image=ImageFeature(), **({} if feature is None else {"label": feature}))
    Dataset.from_dict(columns, features=features).to_parquet(path)


@pytest.mark.parametrize(
    "labels, feature, said",
    [
        (["a", "b", "c"] * 4, Value("string"), "holds text in its label column 'label', where the set holds class"),
        ([0.5, 1.5] * 6, Value("float32"), "holds values of type float32 in its label column 'label', where the set"),
        (None, None, "has no column 'label' (its columns: image), which holds the set's class labels (a, b, c)"),
    ],
)
def test_a_streamed_shard_whose_label_column_is_missing_or_of_another_kind_is_one_line(tmp_path, labels, feature, said):
    scenario, shards = Scenario(tmp_path), tmp_path / "shards"
    shards.mkdir()
    parquet_shard(shards / "train-0.parquet", [0, 1, 2] * 4, ClassLabel(names=["a", "b", "c"]))
    parquet_shard(shards / "train-1.parquet", labels and [labels[i % len(labels)] for i in range(12)], feature)
    error = refused_training(scenario, shards, streaming=True)
    assert error.startswith(f"error: Shard '{shards / 'train-1.parquet'}' {said}")
    assert error.endswith("or leave the shard out.")


def path_cells(paths: list[str]):
    """An image column whose cells name their files by path alone (no bytes), as a parquet shard may hold them."""
    cells = [{"bytes": None, "path": path} for path in paths]
    features = Features(image=ImageFeature())
    return Dataset.from_dict({"image": cells}, features=features).data.column("image")


def test_image_cells_naming_files_outside_the_set_by_path_are_named_as_links_out_are(tmp_path):
    inside, outside = tmp_path / "set" / "a.png", tmp_path / "elsewhere" / "x.png"
    lines = outside_paths_lines([path_cells([str(inside), str(outside), str(outside)])], str(tmp_path / "set"))
    assert lines == [f"1 image refers by path to a file outside {tmp_path / 'set'} (e.g. {outside}): read as an image."]
    assert outside_paths_lines([path_cells([str(inside)])], str(tmp_path / "set")) == []
    assert outside_paths_lines([path_cells([str(outside)])], None) == []  # a hub set: its files are the cache's


def test_a_set_named_through_a_link_is_not_outside_itself(tmp_path):
    images = Scenario(tmp_path).images()
    (tmp_path / "link").symlink_to(images, target_is_directory=True)
    resolved = [str(file.resolve()) for file in images.rglob("*.png")]  # how datasets names an image folder's files
    assert outside_paths_lines([path_cells(resolved)], str(tmp_path / "link")) == []


@pytest.mark.integration
def test_a_streamed_shard_of_images_named_by_paths_outside_the_set_trains_and_names_them(tmp_path, capsys):
    scenario, shards = Scenario(tmp_path), tmp_path / "shards"
    shards.mkdir()
    files = sorted(str(file) for file in scenario.images().rglob("*.png"))
    labels = [["cat", "dog", "fox"].index(Path(file).parent.name) for file in files]
    cells = [{"bytes": None, "path": file} for file in files]
    features = Features(image=ImageFeature(), label=ClassLabel(names=["cat", "dog", "fox"]))
    Dataset.from_dict({"image": cells, "label": labels}, features=features).to_parquet(shards / "train-0.parquet")
    argv = with_argument(scenario.argv("train"), "--dataset", shards) + ["--streaming", "true", "--max_steps", "1"]
    assert outcome("train", argv).code == 0
    said = f"30 images refer by path to files outside {shards} (e.g. {', '.join(files[:3])}, ... 27 more): read as"
    assert said in capsys.readouterr().out


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("split", ["validation", "test"])
def test_a_fraction_for_a_split_the_set_has_is_one_line(tmp_path, streaming, split):
    scenario, folder = Scenario(tmp_path), tmp_path / "splits"
    classes = ClassLabel(names=["a", "b", "c"])
    sizes = {"train": 24, split: 6}
    if streaming:
        folder.mkdir()
        for name, rows in sizes.items():
            parquet_shard(folder / f"{name}-0.parquet", [index % 3 for index in range(rows)], classes, rows)
    else:
        features = Features(image=ImageFeature(), label=classes)
        made = {
            name: {"image": tiny_images(rows), "label": [i % 3 for i in range(rows)]} for name, rows in sizes.items()
        }
        DatasetDict({name: Dataset.from_dict(rows, features=features) for name, rows in made.items()}).save_to_disk(
            folder
        )
    error = refused_training(scenario, folder, streaming)  # the scenario gives both fractions
    rows = "" if streaming else " (6 rows)"
    assert (
        error
        == f"error: The data set has its own {split} split{rows}: --{split}_fraction is for sets without one; drop it."
    )


@pytest.mark.parametrize(
    "labels, pair, how",
    [
        (["Cat", "cat", "dog"], ("Cat", "cat"), "that differs only in case"),
        (["STRASSE", "stra\u00dfe", "x"], ("STRASSE", "stra\\xdfe"), "that differs only in case"),
        (["cat", "cat ", "dog"], ("cat", "cat "), "that differs only in spaces around it"),
        ([" Cat", "cat"], (" Cat", "cat"), "that differs only in case"),
        (["caf\u00e9", "cafe\u0301"], ("caf\\xe9", "cafe\\u0301"), "written in two Unicode forms"),
    ],
)
def test_class_names_alike_but_for_form_spaces_or_case_are_one_line_naming_both(labels, pair, how):
    with pytest.raises(ValueError) as error:
        check_label_forms(labels, "W/imgs")
    assert str(error.value).startswith(
        f"The class names '{pair[0]}' and '{pair[1]}' of the data set W/imgs are one name {how}"
    )
    check_label_forms(["cat", "dog", "cats", "Cat-2"], "W/imgs")  # plainly different names pass


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("source", ["folder-space", "folder-case", "metadata-space"])
def test_a_run_on_classes_cat_and_cat_space_or_Cat_is_refused_before_datasets_reads_them(
    tmp_path, monkeypatch, streaming, source
):
    import modeling_vit_scratch.training.data as data_module

    monkeypatch.setattr(data_module, "load_dataset", lambda *a, **k: pytest.fail("datasets read the folder"))
    scenario = Scenario(tmp_path)
    images = scenario.images()
    if source == "metadata-space":
        rows = ["file_name,label"] + [
            f"{folder.name}/{file.name},{'cat ' if folder.name == 'fox' else folder.name}"
            for folder in sorted(images.iterdir())
            for file in sorted(folder.iterdir())
        ]
        (images / "metadata.csv").write_text("\n".join(rows) + "\n")
        for folder in [folder for folder in images.iterdir() if folder.is_dir()]:  # flat: labels from the rows
            for file in folder.iterdir():
                file.rename(images / f"{folder.name}-{file.name}")
            folder.rmdir()
        (images / "metadata.csv").write_text((images / "metadata.csv").read_text().replace("/", "-"))
    else:
        (images / "fox").rename(images / ("cat " if source == "folder-space" else "Cat"))
    argv = with_argument(scenario.argv("train"), "--dataset", images)
    argv += ["--streaming", "true", "--max_steps", "1"] if streaming else []
    result = outcome("train", argv)
    assert result.one_line, result
    pair = "'Cat' and 'cat'" if source == "folder-case" else "'cat' and 'cat '"
    assert result.error.startswith(f"error: The class names {pair} of the data set {images} are one name that ")
    assert not (tmp_path / "out-train").exists()


def test_a_recipes_fraction_for_a_split_the_set_has_is_said_to_be_unused():
    labels = [index % 3 for index in range(24)]
    raw = integer_set(labels, validation=[0, 1, 2] * 2)
    data = prepare_splits(raw, validation_fraction=0.02, fractions_given={"validation": "recipe", "test": "recipe"})
    assert data.notes == [
        "The data set has its own validation split (6 rows): the recipe's validation_fraction is not used."
    ]
    with pytest.raises(ValueError, match="--validation_fraction is for sets without one; drop it"):
        prepare_splits(raw, fractions_given={"validation": "command line"})


@pytest.mark.parametrize("source", ["folders", "text"])
def test_class_names_that_are_numbers_are_in_numerical_order(tmp_path, source):
    from helpers import write_imagefolder

    from modeling_vit_scratch.training.data import load_image_dataset

    names = [str(number) for number in range(12)]
    if source == "folders":
        raw = load_image_dataset(str(write_imagefolder(tmp_path / "numbers", classes=names, per_class=5, size=(8, 8))))
    else:
        labels = [names[index % 12] for index in range(60)]
        features = Features(image=ImageFeature(), label=Value("string"))
        raw = DatasetDict(train=Dataset.from_dict({"image": tiny_images(60), "label": labels}, features=features))
    data = prepare_splits(raw, validation_fraction=0.3, test_fraction=0.2)
    assert data.labels == names
    rows = data.splits["train"].cast_column("image", ImageFeature(decode=False))
    if source == "folders":  # each image keeps its folder's class
        assert all(Path(cell["path"]).parent.name == names[label] for cell, label in zip(rows["image"], rows["label"]))


def test_a_metadata_jsonl_inside_a_class_folder_is_checked_against_its_folder(tmp_path):
    images = Scenario(tmp_path).images()
    rows = [json.dumps({"file_name": f"{k}.png", "label": "dog" if k == 2 else "cat"}) for k in range(10)]
    (images / "cat" / "metadata.jsonl").write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError) as refused:
        check_metadata_files(images)
    assert str(refused.value).startswith("cat/metadata.jsonl says dog for cat/2.png, whose class folder is cat:")
