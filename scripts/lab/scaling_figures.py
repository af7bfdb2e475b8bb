"""The CPU figures of docs/scaling.md, on one core: JPEG decodes per CPU second (alone, with the package's processing
to 224x224, and with PIL's draft decode + resize), and a ViT-B/16's weights and AdamW state: size and save time.

    OMP_NUM_THREADS=1 python scripts/lab/scaling_figures.py [FOLDER_TO_SAVE_IN]

Decode rates are counted in this process's CPU seconds (`time.process_time`), which other jobs on the machine do not
change; save times are wall-clock, disk included. Needs scikit-image (its sample photos).
"""

import io
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from PIL import Image
from skimage import data as sample_photos

from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification, ViTScratchImageProcessor
from modeling_vit_scratch.image_processing_vit_scratch import to_model_mode

PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry")


def imagenet_like_jpegs() -> list[bytes]:
    """The sample photos at ImageNet's typical size (500x375), JPEG quality 90."""
    jpegs = []
    for name in PHOTOS:
        buffer = io.BytesIO()
        Image.fromarray(getattr(sample_photos, name)()).convert("RGB").resize((500, 375)).save(
            buffer, "JPEG", quality=90
        )
        jpegs.append(buffer.getvalue())
    return jpegs


def per_cpu_second(work: Callable[[list[bytes]], None], jpegs: list[bytes], rounds: int) -> int:
    """Images through `work` per CPU second of this process."""
    started = time.process_time()
    for _ in range(rounds):
        work(jpegs)
    return round(rounds * len(jpegs) / (time.process_time() - started))


def decode(jpegs: list[bytes]) -> None:
    for jpeg in jpegs:
        Image.open(io.BytesIO(jpeg)).convert("RGB").load()


def draft_decode_and_resize(jpegs: list[bytes]) -> None:
    for jpeg in jpegs:
        image = Image.open(io.BytesIO(jpeg))
        image.draft("RGB", (256, 256))  # JPEG's own downscaling while decoding
        image.convert("RGB").resize((224, 224), Image.BILINEAR)


def main(folder: str | None) -> None:
    torch.set_num_threads(1)
    jpegs = imagenet_like_jpegs()
    processor = ViTScratchImageProcessor(size={"height": 224, "width": 224}, num_channels=3)

    def decode_and_process(batch: list[bytes]) -> None:
        processor([to_model_mode(Image.open(io.BytesIO(jpeg)), 3) for jpeg in batch], return_tensors="pt")

    rates = dict(
        decode=per_cpu_second(decode, jpegs, 200),
        decode_and_process_224=per_cpu_second(decode_and_process, jpegs, 50),
        draft_decode_and_resize_224=per_cpu_second(draft_decode_and_resize, jpegs, 200),
    )
    print("JPEGs per CPU second " + json.dumps(rates))

    config = ViTScratchConfig(**json.loads(Path("configs/models/vit-base-patch16-224.json").read_text()))
    model = ViTScratchForImageClassification(config)
    optimizer = torch.optim.AdamW(model.parameters())
    model(pixel_values=torch.randn(1, 3, 224, 224), labels=torch.tensor([0])).loss.backward()
    optimizer.step()  # the moments exist from the first step on
    target = tempfile.mkdtemp(dir=folder)
    try:
        started = time.perf_counter()
        model.save_pretrained(target)
        weights_seconds = time.perf_counter() - started
        started = time.perf_counter()
        torch.save(optimizer.state_dict(), os.path.join(target, "optimizer.pt"))
        optimizer_seconds = time.perf_counter() - started
        sizes = {
            name: os.path.getsize(os.path.join(target, name)) / 2**20 for name in ("model.safetensors", "optimizer.pt")
        }
    finally:
        shutil.rmtree(target)
    print(
        "ViT-B/16 "
        + json.dumps(
            dict(
                parameters=model.num_parameters(),
                weights_mb=round(sizes["model.safetensors"], 1),
                weights_save_seconds=round(weights_seconds, 2),
                optimizer_mb=round(sizes["optimizer.pt"], 1),
                optimizer_save_seconds=round(optimizer_seconds, 2),
            )
        )
    )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
