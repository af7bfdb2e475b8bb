"""`--streaming true`: a folder of parquet shards read while training (training/streaming.py). Each process reads
its own shards, a resumed stream continues where the uninterrupted one goes on, a bad image is skipped and counted
up to --max_bad_images, and what a stream cannot do is one line before training."""

import io
import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import ClassLabel, Dataset, Features
from datasets import Image as ImageFeature
from helpers import run_script, tiny_model_file
from PIL import Image
from safetensors.torch import load_file
from transformers import TrainingArguments

from modeling_vit_scratch.training.arguments import DataArguments
from modeling_vit_scratch.training.command import main
from modeling_vit_scratch.training.streaming import STATE_FILE, open_stream, stream_left_out_line


def png(value: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((8, 8), value, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def write_shards(folder: Path, shards: int = 4, rows: int = 12, bad: int = 0) -> Path:
    """`shards` parquet training shards of `rows` 8x8 gray images (dark: class 0, light: class 1), the first `bad`
    of each shard undecodable bytes named 'shard<S>/bad<K>.png'; and a validation and a test shard."""
    folder.mkdir(parents=True, exist_ok=True)
    features = Features(image=ImageFeature(), label=ClassLabel(names=["dark", "light"]))
    rng = np.random.default_rng(0)

    def cells(prefix: str, count: int, broken: int = 0) -> Dataset:
        labels = rng.integers(0, 2, count).tolist()
        images = [
            {"bytes": b"not an image", "path": f"{prefix}/bad{index}.png"}
            if index < broken
            else {"bytes": png(int(rng.integers(0, 90)) + 160 * label), "path": f"{prefix}/{index}.png"}
            for index, label in enumerate(labels)
        ]
        return Dataset.from_dict({"image": images, "label": labels}, features=features)

    for shard in range(shards):
        cells(f"shard{shard}", rows, bad).to_parquet(folder / f"train-{shard:05d}-of-{shards:05d}.parquet")
    for split in ("validation", "test"):
        cells(split, 8).to_parquet(folder / f"{split}-00000-of-00001.parquet")
    return folder


def streaming_args(tmp_path: Path, output: str, dataset: Path, *extra: str) -> list[str]:
    return [
        "--model",
        tiny_model_file(tmp_path, num_channels=1),
        "--dataset",
        str(dataset),
        "--streaming",
        "true",
        "--per_device_train_batch_size",
        "4",
        "--shuffle_buffer_size",
        "5",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        "--seed",
        "3",
        "--output_dir",
        str(tmp_path / output),
        *extra,
    ]


def one_line_error(argv: list[str]) -> str:
    """The one line `main(argv)` exits with."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    message = str(exited.value.code)
    assert message.startswith("error: ") and "\n" not in message
    return message


def test_a_resumed_stream_yields_what_the_uninterrupted_one_yields_next(tmp_path):
    """Read 11 rows (past a window's end, into the next), save, reload into a new stream: the next 9 are the ones
    the uninterrupted stream gives, across the end of a pass (48 rows in all); no row is read twice."""
    dataset = write_shards(tmp_path / "set")
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=1, seed=3, report_to="none")
    data_args = DataArguments(dataset=str(dataset), streaming=True, shuffle_buffer_size=5)

    def stream():
        return open_stream(data_args, args).rows(lambda batch: {"pixel_values": batch["image"], "labels": [0]})

    def values(items, count):
        return [int(np.asarray(next(items)["pixel_values"])[0, 0]) for _ in range(count)]

    uninterrupted = iter(stream())
    expected = values(uninterrupted, 11 + 48)
    interrupted = stream()
    first = iter(interrupted)
    assert values(first, 11) == expected[:11]
    interrupted.save(tmp_path)
    resumed = stream()
    resumed.load(tmp_path)
    assert values(iter(resumed), 48) == expected[11:]
    assert sorted(expected[:48]) != expected[:48]  # shuffled
    assert expected[48:] != expected[:11] and set(expected[48:]) <= set(expected[:48])  # pass 2: reshuffled


@pytest.mark.integration
def test_two_processes_read_their_own_shards_and_a_resumed_run_ends_with_the_same_weights(tmp_path):
    """torchrun, 2 processes (gloo), 4 shards of 12 rows holding one bad image each: each process reads only its two
    shards, pass after pass (the bad images it skipped name them), and a run killed after checkpoint 4 and resumed
    from it ends with the weights of the uninterrupted run, bit for bit: the same rows in the same order, the same
    random states, the same gloo reductions."""
    dataset = write_shards(tmp_path / "set", bad=1)
    common = ["--max_steps", "10", "--save_steps", "4", "--max_bad_images", "20"]
    result = run_script(*streaming_args(tmp_path, "full", dataset, *common), nproc=2)
    assert result.returncode == 0, result.stderr[-3000:]
    full = tmp_path / "full"
    skipped = [set(json.loads((full / "checkpoint-10" / STATE_FILE.format(rank=r)).read_text())["bad"]) for r in (0, 1)]
    assert skipped == [{"shard0/bad0.png", "shard2/bad0.png"}, {"shard1/bad0.png", "shard3/bad0.png"}]
    results = json.loads((full / "all_results.json").read_text())
    assert results["world_size"] == 2 and results["streamed_train_images"] == 10 * 8
    assert results["skipped_images"] == 4  # each counted once, though met again in the second pass

    interrupted = tmp_path / "interrupted"
    interrupted.mkdir()
    shutil.copytree(full / "checkpoint-4", interrupted / "checkpoint-4")  # what a run killed after step 4 leaves
    result = run_script(
        *streaming_args(tmp_path, "interrupted", dataset, *common, "--resume_from_checkpoint", "true"), nproc=2
    )
    assert result.returncode == 0, result.stderr[-3000:]
    expected, resumed = (load_file(folder / "model.safetensors") for folder in (full, interrupted))
    assert all(torch.equal(resumed[name], tensor) for name, tensor in expected.items())


def test_more_bad_images_than_allowed_stop_the_run_with_one_line_naming_them(tmp_path):
    dataset = write_shards(tmp_path / "set", shards=2, bad=2)
    args = streaming_args(tmp_path, "out", dataset, "--max_steps", "20", "--max_bad_images", "3")
    last = one_line_error(args)  # in this process: the torchrun test above runs the same main through the script
    assert last.startswith("error: 4 training images could not be decoded, more than --max_bad_images 3: shard")
    assert last.endswith(": remove or replace them, or raise --max_bad_images.")
    assert sorted(last.split(": ")[2].split(", ")) == [f"shard{s}/bad{k}.png" for s in (0, 1) for k in (0, 1)]
    assert not (tmp_path / "out" / "model.safetensors").exists()


def test_a_missing_shard_is_one_line_before_training(tmp_path):
    dataset = write_shards(tmp_path / "set", shards=2)
    missing = dataset / "train-00002-of-00003.parquet"
    missing.symlink_to(tmp_path / "gone.parquet")  # listed, but not there
    message = one_line_error(streaming_args(tmp_path, "out", dataset, "--max_steps", "2"))
    assert message == (
        f"error: Shard '{missing}' is missing (a link to nothing, or removed while listed): restore it or remove it "
        "from the folder."
    )
    assert not (tmp_path / "out").exists()


def test_a_save_to_disk_folder_is_named_as_one_with_the_two_ways_to_train_on_it(tmp_path):
    saved = tmp_path / "saved"
    Dataset.from_dict({"label": [0, 1]}).save_to_disk(saved)
    before = sorted(saved.rglob("*"))
    message = one_line_error(streaming_args(tmp_path, "out", saved, "--max_steps", "2"))
    assert message.startswith(f"error: --dataset '{saved}' is a save_to_disk folder (arrow files), which cannot be ")
    assert "leave out --streaming" in message and "`dataset.to_parquet(...)`" in message
    assert sorted(saved.rglob("*")) == before and not (tmp_path / "out").exists()


def test_an_unreadable_shard_is_one_line_before_training(tmp_path):
    dataset = write_shards(tmp_path / "set", shards=2)
    broken = dataset / "train-00001-of-00002.parquet"
    broken.write_bytes(broken.read_bytes()[:100])  # cut short
    message = one_line_error(streaming_args(tmp_path, "out", dataset, "--max_steps", "2"))
    assert message.startswith(f"error: Shard '{broken}' cannot be read (")
    assert message.endswith("): replace it or remove it from the folder.")


def test_streaming_without_max_steps_is_one_line(tmp_path):
    dataset = write_shards(tmp_path / "set", shards=2)
    message = one_line_error(streaming_args(tmp_path, "out", dataset))
    assert message == (
        "error: --streaming true reads a set of unknown length, so epochs cannot set the steps: give --max_steps N "
        "(optimisation steps)."
    )


def test_epoch_strategies_are_one_line_naming_the_steps_to_give(tmp_path):
    """A stream has no epochs: the Trainer would evaluate and save once, at the end, and a kill would lose the run."""
    dataset = write_shards(tmp_path / "set", shards=2)
    args = streaming_args(tmp_path, "out", dataset, "--max_steps", "2", "--save_strategy", "epoch")
    assert one_line_error(args) == (
        "error: --save_strategy epoch with --streaming true: a stream has no epochs, so it would run once, at the "
        "end: give --save_strategy steps with --eval_steps / --save_steps / --logging_steps N."
    )


WEBDATASET_README = """---
dataset_info:
  features:
  - name: png
    dtype: image
  - name: cls
    dtype:
      class_label:
        names:
          '0': even
          '1': odd
---
"""


def test_a_webdataset_folder_streams_with_the_class_names_its_readme_declares(tmp_path):
    """WebDataset shards (`KEY.png` + `KEY.cls` in each .tar), the class names in the folder's README.md."""
    import tarfile

    folder = tmp_path / "tars"
    folder.mkdir()
    for shard in range(2):
        with tarfile.open(folder / f"train-{shard}.tar", "w") as tar:
            for index in range(10):
                for suffix, data in (("png", png(20 * index)), ("cls", str(index % 2).encode())):
                    member = tarfile.TarInfo(f"{shard}{index:03d}.{suffix}")
                    member.size = len(data)
                    tar.addfile(member, io.BytesIO(data))
    (folder / "README.md").write_text(WEBDATASET_README)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=1, seed=3, report_to="none")
    data_args = DataArguments(dataset=str(folder), streaming=True, validation_fraction=0.3, test_fraction=0.3)
    stream = open_stream(data_args, args)
    assert stream.held_out.labels == ["even", "odd"] and stream.train.n_shards == 2
    held_out = sum(len(split) for split in stream.held_out.splits.values())
    rows = stream.rows(lambda batch: {"pixel_values": [np.asarray(batch["image"][0])], "labels": batch["label"]})
    items = list(itertools.islice(iter(rows), 20 - held_out))  # one pass: every row not held out
    assert len(items) >= 5  # a pass's worth of rows, each image with its own class (index 2k: 'even')
    assert all((int(item["pixel_values"][0, 0]) // 20) % 2 == item["labels"] for item in items)


@pytest.mark.parametrize(
    ("make", "extra", "split", "expected"),
    [
        ("folder", {}, "test", "raise --test_fraction (now 0.1) or add images."),
        ("shards", {"max_eval_samples": 1}, "validation", "raise --max_eval_samples to at least 2."),
    ],
)
def test_a_held_out_split_of_a_stream_with_fewer_images_than_classes_is_one_line(
    tmp_path, monkeypatch, make, extra, split, expected
):
    """The in-memory path's rule: a held-out split scores every class, so it holds at least one image per class."""
    from helpers import write_imagefolder

    from modeling_vit_scratch.training import streaming

    if make == "folder":  # 3 classes x 10 images: each class's 0.png in validation, two 1.png in test
        dataset, classes = write_imagefolder(tmp_path / "images", per_class=10), 3
        # a row's side hangs on a hash: place the rows by name instead, to hold out the rows the test needs
        named = {"0.png": 0.05, "cat/1.png": 0.15, "dog/1.png": 0.15}
        monkeypatch.setattr(
            streaming,
            "held_out_share",
            lambda row, root=None: next((v for k, v in named.items() if str(row["image"]["path"]).endswith(k)), 0.5),
        )
    else:
        dataset, classes = write_shards(tmp_path / "set", shards=2), 2
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=1, seed=3, report_to="none")
    data_args = DataArguments(dataset=str(dataset), streaming=True, **extra)
    with pytest.raises(ValueError) as refused:
        open_stream(data_args, args)
    message = str(refused.value)
    assert message.startswith(f"The {split} split of the stream holds "), message
    assert f"fewer than the {classes} classes (a held-out split needs one image per class): {expected}" in message


def test_held_out_splits_of_a_stream_with_an_image_per_class_are_kept(tmp_path):
    from helpers import write_imagefolder

    dataset = write_imagefolder(tmp_path / "images", per_class=20)  # about 18 rows a side: never under 3 by chance
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=1, seed=3, report_to="none")
    data_args = DataArguments(dataset=str(dataset), streaming=True, validation_fraction=0.3, test_fraction=0.3)
    stream = open_stream(data_args, args)
    assert all(len(split) >= 3 for split in stream.held_out.splits.values())


def test_a_streamed_folder_holds_out_the_same_rows_wherever_it_lies(tmp_path):
    """A row's side hangs on what the set holds (its path inside the folder, its label), never on where the folder
    lies (before: on its absolute path, so a moved or copied set held out other rows)."""
    from helpers import write_imagefolder

    first = write_imagefolder(tmp_path / "here" / "images", per_class=20)
    second = tmp_path / "there" / "deeper" / "copy"
    shutil.copytree(first, second)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=1, seed=3, report_to="none")
    held = []
    for folder in (first, second):
        data_args = DataArguments(dataset=str(folder), streaming=True, validation_fraction=0.3, test_fraction=0.3)
        splits = open_stream(data_args, args).held_out.splits
        held.append(
            {
                name: sorted(
                    (Path(row["image"].filename).relative_to(folder).as_posix(), row["label"]) for row in split
                )
                for name, split in splits.items()
            }
        )
    assert held[0] == held[1] and all(held[0].values())


def test_a_rows_share_is_read_from_inside_its_set():
    from modeling_vit_scratch.training.streaming import held_out_share, path_in_set

    row = {"image": {"path": "/data/a/images/cat/1.png", "bytes": None}, "label": 0}
    moved = {"image": {"path": "/mnt/b/images/cat/1.png", "bytes": None}, "label": 0}
    assert held_out_share(row, "/data/a/images") == held_out_share(moved, "/mnt/b/images")
    assert held_out_share(row, "/data/a/images") != held_out_share({**row, "label": 1}, "/data/a/images")
    hub = "hf://datasets/someone/cats@{}/train/cat/1.png"
    assert path_in_set(hub.format("0123abc"), None) == path_in_set(hub.format("main"), None) == "train/cat/1.png"
    assert path_in_set("/elsewhere/x.png", "/data/a/images") == "/elsewhere/x.png"  # outside the set: as it is


def shade_shard(path: Path, order: list[str], names: list[str]) -> None:
    """A parquet shard of 8x8 images whose gray level says its class (dark 0.., mid 100.., light 200..: one image a
    level), its labels stored under a ClassLabel listing the classes in `order`."""
    shades = {"dark": 0, "mid": 100, "light": 200, "fox": 50}
    features = Features(image=ImageFeature(), label=ClassLabel(names=order))
    cells = [
        {"bytes": png(shades[name] + index), "path": f"{path.stem}/{index}.png"} for index, name in enumerate(names)
    ]
    Dataset.from_dict({"image": cells, "label": names}, features=features).to_parquet(path)


def test_each_shard_of_a_stream_is_read_by_its_class_names_not_its_numbers(tmp_path):
    """Two training shards list the classes in other orders: every row, trained on or held out, keeps its name under
    the set's numbers; a shard declaring a class the set lacks is one line naming it."""
    folder = tmp_path / "pq2"
    folder.mkdir()
    names = ["dark", "mid", "light"] * 8
    shade_shard(folder / "train-00000-of-00002.parquet", ["dark", "mid", "light"], names)
    shade_shard(folder / "train-00001-of-00002.parquet", ["light", "dark", "mid"], names)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=1, seed=3, report_to="none")
    data_args = DataArguments(dataset=str(folder), streaming=True, validation_fraction=0.2, test_fraction=0.2)
    stream = open_stream(data_args, args)
    labels = stream.held_out.labels
    rows = [
        *itertools.islice(stream.train, 100),
        *stream.held_out.splits["test"],
        *stream.held_out.splits["validation"],
    ]
    assert len(rows) > 20
    for row in rows:
        image = row["image"] if isinstance(row["image"], Image.Image) else Image.open(io.BytesIO(row["image"]["bytes"]))
        assert ["dark", "mid", "light"][image.getpixel((0, 0)) // 100] == labels[row["label"]]
    shade_shard(folder / "train-00001-of-00002.parquet", ["light", "dark", "fox"], ["fox"])
    with pytest.raises(ValueError, match=r"^Shard '.*train-00001-of-00002.parquet' declares the class 'fox'"):
        open_stream(data_args, args)


def test_the_left_out_line_of_a_streamed_folder_never_names_a_shard_it_reads(tmp_path):
    folder = write_shards(tmp_path / "pq", shards=2, rows=2)
    assert stream_left_out_line(str(folder)) is None
    (folder / "notes.txt").write_text("about the set\n")
    (folder / "README.md").write_text("# the set\n")  # datasets reads it for the features
    assert stream_left_out_line(str(folder)) == "Left out 1 file that is not a parquet shard (e.g. notes.txt)."


def test_a_streamed_image_of_several_frames_is_trained_from_frame_1_and_said_once(tmp_path, caplog):
    from PIL import Image

    from modeling_vit_scratch.training.streaming import StreamedImages

    frames = [Image.new("RGB", (8, 8), color) for color in ("red", "green", "blue")]
    frames[0].save(tmp_path / "a.gif", save_all=True, append_images=frames[1:], duration=100, loop=0)
    frames[0].save(tmp_path / "b.png", save_all=True, append_images=frames[1:], duration=100)
    seen = []

    def transform(batch):
        seen.append(batch["image"][0].convert("RGB").getpixel((0, 0)))
        return {"pixel_values": [0], "labels": batch["label"]}

    images = StreamedImages(None, transform)
    with caplog.at_level("WARNING", logger="modeling_vit_scratch.training.streaming"):
        for name in ("a.gif", "b.png", "a.gif"):
            assert images.processed({"image": {"path": str(tmp_path / name), "bytes": None}, "label": 0})
    said = [record.getMessage() for record in caplog.records if "frames" in record.getMessage()]
    line = (
        f"{tmp_path / 'a.gif'} has 3 frames (an animation or a multi-page file): frame 1 of it, and of every "
        "streamed image of several frames, is trained on; the others are not read."
    )
    assert said == [line]
    assert seen == [(255, 0, 0)] * 3  # frame 1 of each, the red one


def test_the_embedded_digits_are_not_streamed_and_a_folder_named_digits_is(tmp_path, monkeypatch):
    """`--dataset digits --streaming true` named the built-in default set as a missing folder or hub set: it is said
    to be held in memory, with the two fixes; a folder of that name in the working folder is streamed as any other."""
    from modeling_vit_scratch.training.streaming import stream_source

    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        ValueError, match=r"--dataset 'digits' \(the embedded digits, the default\) is a small set held"
    ):
        stream_source("digits")
    for label in ("a", "b"):
        (tmp_path / "digits" / label).mkdir(parents=True)
        Image.new("L", (8, 8)).save(tmp_path / "digits" / label / "1.png")
    assert stream_source("digits") is not None


def test_every_process_of_a_resume_with_another_count_names_the_count_to_resume_with(tmp_path):
    """A streamed run of one process resumed by two: the second process, which the run did not have, said "holds no
    stream position ... resume a run made with --streaming true" (wrong: it was streamed); it reads the run's count
    from the first process's file and says the same line as the first. A lost file of a process the run had is
    still named as missing."""
    from types import SimpleNamespace

    from modeling_vit_scratch.training.streaming import StreamedImages

    one = StreamedImages(SimpleNamespace(process_index=0, world_size=1), transform=None)
    one.save(tmp_path)
    for rank in (0, 1):
        resumed = StreamedImages(SimpleNamespace(process_index=rank, world_size=2), transform=None)
        with pytest.raises(ValueError, match=r"was trained by 1 processes, .*: resume with --nproc_per_node 1\.$"):
            resumed.load(tmp_path)
    two = tmp_path / "two"
    two.mkdir()
    for rank in (0, 1):
        StreamedImages(SimpleNamespace(process_index=rank, world_size=2), transform=None).save(two)
    (two / STATE_FILE.format(rank=1)).unlink()
    with pytest.raises(ValueError, match=r"holds no stream position for process 1 \(stream_state_1\.json\)"):
        StreamedImages(SimpleNamespace(process_index=1, world_size=2), transform=None).load(two)
    StreamedImages(SimpleNamespace(process_index=0, world_size=2), transform=None).load(two)  # its own: resumes
