"""Data work done once per machine: under torchrun (two gloo processes) the first process loads and splits, the
processes share the pre-flight and the in-memory processing, and hold one read-only copy of the processed split; a
failure on one process stops all of them with its line. Run as a script under torchrun, this file is the worker.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from helpers import PROCESS_TIMEOUT, REPO, SUPPORT, torchrun

from modeling_vit_scratch import ViTScratchImageProcessor
from modeling_vit_scratch.training.data import ImageTransform, ProcessedImages, digits_dataset
from modeling_vit_scratch.training.preflight import ImageCheck, check_images

PROCESSOR = dict(size={"height": 12, "width": 12}, num_channels=1, image_mean=[0.5], image_std=[0.5])
ROWS = 300  # more than one chunk of 256


class CountingTransform(ImageTransform):
    """`ImageTransform` that counts the images it processed."""

    processed = 0

    def __call__(self, batch: dict) -> dict:
        CountingTransform.processed += len(batch["image"])
        return super().__call__(batch)


def mapped_file(address: int) -> str | None:
    """The name of the file mapped at `address` in this process (/proc/self/maps), or None."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)  # start-end, permissions, offset, device, inode, path
        start, end = (int(bound, 16) for bound in fields[0].split("-"))
        if start <= address < end:
            return fields[5].rsplit("/", 1)[-1] if len(fields) == 6 else None
    return None


def data_worker(output: str) -> None:
    """One rank: the facts of each shared step, saved by rank 0 with rank 1's gathered."""
    import torch.distributed as dist

    from modeling_vit_scratch.training.distributed import NodeProcesses, once_per_node, together

    dist.init_process_group("gloo")
    node = NodeProcesses.current()
    loaded_by = once_per_node(lambda: node.rank)  # run by rank 0 only, its result handed to rank 1
    split = digits_dataset()["test"].select(range(ROWS))
    kept = ProcessedImages(split, CountingTransform(ViTScratchImageProcessor(**PROCESSOR)))
    dist.barrier()  # the first process removes the shared file's name on its way out: look once every one is out
    leftovers = [p.name for p in Path(tempfile.gettempdir()).glob("vit-scratch-data-*")]
    try:
        together(lambda: (_ for _ in ()).throw(ValueError("a bad image on rank 1")) if node.rank == 1 else None)
        refusal = None
    except ValueError as error:
        refusal = str(error)
    facts = dict(
        node=[node.rank, node.world_size, node.local_rank, node.local_world_size],
        loaded_by=loaded_by,
        processed=CountingTransform.processed - 1,  # less the one image that gave the shape
        mapped=mapped_file(kept.pixel_values.data_ptr()),
        refusal=refusal,
        leftovers=leftovers,
    )
    gathered = [None, None]
    dist.all_gather_object(gathered, facts)
    if node.rank == 0:
        torch.save(dict(facts=gathered, pixel_values=kept.pixel_values.clone(), labels=kept.labels), output)
    dist.destroy_process_group()


@pytest.mark.integration
def test_two_processes_process_each_image_once_into_one_shared_copy(tmp_path):
    output = tmp_path / "kept.pt"
    launcher = [*torchrun(), __file__, str(output)]
    tmp = tmp_path / "tmp"  # the workers' TMPDIR, to see that the shared file is gone
    tmp.mkdir()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TMPDIR": str(tmp),
        "PYTHONPATH": f"{REPO}{os.pathsep}{SUPPORT}",
    }
    result = subprocess.run(launcher, cwd=REPO, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    saved = torch.load(output)
    one, two = saved["facts"]
    assert one["node"] == [0, 2, 0, 2] and two["node"] == [1, 2, 1, 2]
    assert one["loaded_by"] == two["loaded_by"] == 0  # rank 1 read rank 0's result
    assert one["processed"] + two["processed"] == ROWS and one["processed"] == ROWS // 2  # each image once
    assert one["mapped"] == two["mapped"] == "pixels.npy (deleted)"  # both read one file, removed once mapped
    assert one["refusal"] == two["refusal"] == "a bad image on rank 1"  # both stop with the line
    assert one["leftovers"] == two["leftovers"] == [] == list(tmp.glob("vit-scratch-data-*"))  # removed once mapped

    split = digits_dataset()["test"].select(range(ROWS))  # what one process makes alone
    alone = ProcessedImages(split, ImageTransform(ViTScratchImageProcessor(**PROCESSOR)))
    assert torch.equal(saved["pixel_values"], alone.pixel_values) and saved["labels"] == alone.labels


def test_parts_of_the_pre_flight_check_each_image_once_and_add_up(tmp_path):
    from datasets import Dataset, DatasetDict, Features
    from datasets import Image as ImageFeature
    from PIL import Image

    files = []
    for index in range(2500):  # three blocks of 1,000 rows
        files.append(tmp_path / f"{index}.png")
        Image.new("L", (2, 2)).save(files[-1])
    files[1700].write_bytes(b"not a png")  # in the second block
    features = Features(image=ImageFeature())
    splits = DatasetDict(train=Dataset.from_dict({"image": [str(f) for f in files]}, features=features))
    first = check_images(splits, decode=False, progress=False, part=(0, 2))  # blocks 0 and 2
    assert first.num_images == 1500
    with pytest.raises(ValueError, match=r"^Image 1700 of split 'train' \(.*1700\.png\) cannot be decoded"):
        check_images(splits, decode=False, progress=False, part=(1, 2))
    files[1700].unlink()
    Image.new("L", (2, 2)).save(files[1700])
    second = check_images(splits, decode=False, progress=False, part=(1, 2))
    assert ImageCheck.combined([first, second]).num_images == 2500 == check_images(splits, progress=False).num_images


if __name__ == "__main__":
    data_worker(sys.argv[1])


@pytest.mark.integration
def test_a_bad_image_in_the_second_process_share_stops_both_with_its_line(tmp_path):
    """Rows 1,000-1,999 of a split are the second process's share of the pre-flight: the first never opens row
    1,500, yet both stop with its line before anything is trained or written."""
    import io

    from datasets import ClassLabel, Dataset, DatasetDict, Features
    from datasets import Image as ImageFeature
    from helpers import run_script, tiny_model_file
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("L", (8, 8), 128).save(buffer, "PNG")
    features = Features(image=ImageFeature(), label=ClassLabel(names=["a", "b"]))

    def split(rows: int, bad: int | None = None) -> Dataset:
        cells = [{"bytes": b"not a png" if row == bad else buffer.getvalue(), "path": None} for row in range(rows)]
        return Dataset.from_dict({"image": cells, "label": [row % 2 for row in range(rows)]}, features=features)

    DatasetDict(train=split(1600, bad=1500), validation=split(20), test=split(20)).save_to_disk(tmp_path / "data")
    output_dir = tmp_path / "out"
    result = run_script(
        *("--model", tiny_model_file(tmp_path, num_channels=1), "--dataset", str(tmp_path / "data")),
        *("--output_dir", str(output_dir), "--report_to", "none", "--total_train_batch_size", "16"),
        nproc=2,
    )
    assert result.returncode != 0
    line = "error: Image 1500 of split 'train' cannot be decoded (cannot identify image file"  # then PIL's source
    assert result.stderr.count(line) == 2, result.stderr[-3000:]  # each process says it once
    assert not (output_dir / "model.safetensors").exists()
