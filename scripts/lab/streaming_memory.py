"""Peak memory per process of `--streaming true` at two set sizes (docs/training.md, "Sets that do not fit").

python scripts/lab/streaming_memory.py write FOLDER IMAGES SHARDS  # FOLDER: SHARDS parquet training shards of
                                                      # IMAGES 32x32 colour PNGs in all, + 500 validation, 500 test
torchrun --nproc_per_node 2 scripts/lab/streaming_memory.py run scripts/train.py ARGS...
                                                             # each process prints its peak RSS as it exits
"""

import atexit
import io
import os
import resource
import runpy
import sys
from pathlib import Path

import numpy as np
from PIL import Image

SIDE, HELD_OUT = 32, 500


def write_set(folder: Path, images: int, shards: int) -> None:
    """Images of two classes (a dark or a light square on noise), as `datasets` writes parquet shards."""
    from datasets import ClassLabel, Dataset, Features
    from datasets import Image as ImageFeature

    features = Features(image=ImageFeature(), label=ClassLabel(names=["dark", "light"]))
    rng = np.random.default_rng(0)

    def shard(count: int) -> Dataset:
        labels = rng.integers(0, 2, count)
        cells = []
        for label in labels:
            pixels = rng.integers(0, 256, (SIDE, SIDE, 3), dtype=np.uint8)
            pixels[8:24, 8:24] = 40 + 170 * label
            buffer = io.BytesIO()
            Image.fromarray(pixels).save(buffer, format="PNG")
            cells.append({"bytes": buffer.getvalue(), "path": None})
        return Dataset.from_dict({"image": cells, "label": labels.tolist()}, features=features)

    folder.mkdir(parents=True, exist_ok=True)
    for index in range(shards):
        shard(images // shards).to_parquet(folder / f"train-{index:05d}-of-{shards:05d}.parquet")
    for split in ("validation", "test"):
        shard(HELD_OUT).to_parquet(folder / f"{split}-00000-of-00001.parquet")


def report_peak() -> None:
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(f"peak RSS of process {os.environ.get('RANK', '0')}: {peak_mb:.0f} MB", file=sys.stderr, flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write_set(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        atexit.register(report_peak)
        sys.argv = sys.argv[2:]
        runpy.run_path(sys.argv[0], run_name="__main__")
