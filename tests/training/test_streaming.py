"""A streamed set: each process reads its own shards, held-out rows do not depend on the sharding, a resumed stream
yields exactly the rows an uninterrupted one would, and bad images are skipped up to a bound, then named."""

import hashlib
import io
import json
import tempfile
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest
from datasets import ClassLabel, Dataset, Features
from datasets import Image as ImageFeature
from helpers import run_script, tiny_config, tiny_model_file
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from PIL import Image

from modeling_vit_scratch import ViTScratchImageProcessor
from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.training.arguments import DataArguments
from modeling_vit_scratch.training.augmentation import ImageTransform
from modeling_vit_scratch.training.data import read_data
from modeling_vit_scratch.training.streaming import STATE_FILE, StreamedImages, StreamPosition, held_out_share

ROWS = 40


def png(shade: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (6, 6), (shade, 255 - shade, shade // 2)).save(buffer, format="PNG")
    return buffer.getvalue()


def not_an_image(row: int) -> bytes:
    return b"no image %d" % row


def write_shards(root: Path, shards: int, broken: tuple[int, ...] = ()) -> Path:
    """`ROWS` rows of distinct images in `shards` parquet files; the rows in `broken` hold bytes that are no image."""
    root.mkdir(parents=True)
    images = [{"bytes": not_an_image(row) if row in broken else png(row * 6), "path": None} for row in range(ROWS)]
    whole = Dataset.from_dict(
        {"image": images, "label": [row % 2 for row in range(ROWS)]},
        features=Features(image=ImageFeature(), label=ClassLabel(names=["even", "odd"])),
    )
    for index in range(shards):
        whole.shard(shards, index).to_parquet(str(root / f"train-{index:05d}-of-{shards:05d}.parquet"))
    return root


def process(rank: int = 0, world_size: int = 1):
    return SimpleNamespace(seed=5, process_index=rank, world_size=world_size)


def streamed(root: Path, rank: int = 0, world_size: int = 1, **overrides):
    args = DataArguments(dataset=str(root), streaming=True, shuffle_buffer_size=6, **overrides)
    return read_data(args, process(rank, world_size)), args


PROCESSOR = ViTScratchImageProcessor.for_config(tiny_config(image_size=8))


def rows_of(root: Path, rank: int = 0, world_size: int = 1, read=None, **overrides) -> StreamedImages:
    """A stream's training rows; `read` (a `streamed` answer) shares one reading between several of them."""
    data, args = read or streamed(root, rank, world_size, **overrides)
    return StreamedImages(data.train, ImageTransform(PROCESSOR), args, process(rank, world_size), len(data.labels))


def taken(rows: StreamedImages, count: int) -> list[str]:
    """The next `count` items of a fresh iterator of `rows`, each as a digest of its pixels and label."""
    out = []
    for _, item in zip(range(count), iter(rows), strict=False):  # range first: no item read past them
        out.append(hashlib.sha256(item["pixel_values"].numpy().tobytes() + bytes([item["labels"]])).hexdigest())
    return out


def digests(split) -> set[str]:
    return {
        hashlib.sha256(row["image"]["bytes"]).hexdigest()
        for row in split.cast_column("image", ImageFeature(decode=False))
    }


@pytest.fixture(autouse=True, scope="module")
def _short_shutdown_pause():
    """datasets pauses 5 s each time a parquet stream's reading threads stop, for pyarrow to close them: at each pass
    and each resumed window here. A short pause does in tests (the runs themselves are seconds long)."""
    saved, datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN = datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN, 0.05
    yield
    datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN = saved


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    return write_shards(tmp_path_factory.mktemp("stream") / "set", 4)


@settings(max_examples=3, phases=[Phase.explicit, Phase.generate])  # each example reads the stream thrice
@given(st.integers(0, 40))
def test_a_resumed_stream_yields_exactly_the_rows_an_uninterrupted_one_would(shards, stop):
    total = 40  # past the end of a pass (about 24 training rows): windows, passes and their reshuffles are crossed
    read = streamed(shards)  # one reading: each StreamedImages keeps its own position in it
    whole = taken(rows_of(shards, read=read), total)
    first = rows_of(shards, read=read)
    before = taken(first, stop)
    with tempfile.TemporaryDirectory() as checkpoint:
        first.save(checkpoint)
        second = rows_of(shards, read=read)
        second.load(checkpoint)
        assert before + taken(second, total - stop) == whole


def test_every_process_reads_its_own_shards_and_together_they_read_every_training_row(shards):
    alone = digests(streamed(shards)[0].train)
    parts = [digests(streamed(shards, rank, 2)[0].train) for rank in range(2)]
    assert parts[0] and parts[1] and not parts[0] & parts[1]
    assert parts[0] | parts[1] == alone


def test_the_held_out_rows_do_not_depend_on_the_number_of_shards(tmp_path, shards):
    other = write_shards(tmp_path / "three", 3)
    first, second = streamed(shards)[0], streamed(other)[0]
    assert digests(first.validation) == digests(second.validation)
    assert digests(first.test) == digests(second.test)
    assert not digests(first.validation) & digests(first.train)


def test_bad_images_are_skipped_up_to_the_bound_and_past_it_stop_the_run(tmp_path):
    trained = [
        row
        for row in range(ROWS)
        if held_out_share({"image": {"bytes": not_an_image(row)}, "label": row % 2}, None) >= 0.2
    ]
    root = write_shards(tmp_path / "set", 2, broken=tuple(trained[:3]))
    with pytest.raises(UserError) as caught:
        taken(rows_of(root, max_bad_images=0), 60)
    assert "--max_bad_images" in str(caught.value)
    patient = rows_of(root, max_bad_images=3)
    assert len(taken(patient, 60)) == 60
    assert 1 <= len(patient.state["bad"]) <= 3


def test_a_checkpoint_without_a_position_or_of_another_process_count_is_refused(shards, tmp_path):
    with pytest.raises(UserError, match=STATE_FILE.format(rank=0)):
        rows_of(shards).load(tmp_path)
    two = rows_of(shards, 0, 2)
    two.save(tmp_path)
    with pytest.raises(UserError, match="2 processes"):
        rows_of(shards).load(tmp_path)


def test_every_checkpoint_holds_the_position(shards, tmp_path):
    rows = rows_of(shards)
    taken(rows, 7)
    (tmp_path / "checkpoint-3").mkdir()
    StreamPosition(rows).on_save(SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace(global_step=3), None)
    again = rows_of(shards)
    again.load(tmp_path / "checkpoint-3")
    assert again.state == rows.state


@pytest.mark.slow
@pytest.mark.integration
def test_two_processes_each_keep_their_position_and_a_resume_needs_as_many(tmp_path, shards):
    model = tiny_model_file(tmp_path)
    args = [
        "--model", model, "--dataset", str(shards), "--streaming", "true", "--shuffle_buffer_size", "4",
        "--output_dir", str(tmp_path / "run"), "--per_device_train_batch_size", "2", "--save_steps", "2",
        "--report_to", "none", "--disable_tqdm", "true", "--validation_fraction", "0.2", "--test_fraction", "0.2",
    ]  # fmt: skip
    first = run_script(*args, "--max_steps", "2", nproc=2)
    assert first.returncode == 0, first.stderr[-3000:]
    states = [
        json.loads((tmp_path / "run" / "checkpoint-2" / STATE_FILE.format(rank=rank)).read_text()) for rank in (0, 1)
    ]
    assert [state["world_size"] for state in states] == [2, 2]
    alone = run_script(*args, "--max_steps", "4", "--resume_from_checkpoint", "true")
    assert alone.returncode != 0 and "2 processes" in alone.stderr
    again = run_script(*args, "--max_steps", "4", "--resume_from_checkpoint", "true", nproc=2)
    assert again.returncode == 0, again.stderr[-3000:]
