"""What each training augmentation costs per batch on this machine: the package's photo policy (kornia, each image
its own parameters) and, where torchvision imports, torchvision's v2 transforms on the same batch (one parameter
set per call: per batch, or per image in a loop). The figures in docs/training.md#photos come from here.

    OMP_NUM_THREADS=1 python scripts/lab/augmentation_cost.py
"""

import time

import torch

from modeling_vit_scratch.training.mixing import BatchMixing
from modeling_vit_scratch.training.policies import POLICIES, AugmentationPolicy, PhotoAugmentation

# (batch, channels, side): the small-images recipe's batch and a 224x224 photo batch
BATCHES = ((64, 1, 28), (32, 3, 224))
TRANSFORMS = {  # name -> the policy that does only it
    "random-resized crop": AugmentationPolicy(crop_scale=0.08, crop_ratio=0.75),
    "horizontal flip": AugmentationPolicy(hflip=0.5),
    "RandAugment rand-m9-n2": AugmentationPolicy(rand_augment="rand-m9-n2"),
    "TrivialAugment": AugmentationPolicy(rand_augment="trivial"),
    "random erasing 0.25": AugmentationPolicy(random_erasing=0.25),
}


def milliseconds(function, *args, repeat: int = 20) -> float:
    """Mean time of `function(*args)` over `repeat` calls after one warm-up, in ms."""
    function(*args)
    started = time.perf_counter()
    for _ in range(repeat):
        function(*args)
    return (time.perf_counter() - started) / repeat * 1000


def one_by_one(transform, images: torch.Tensor) -> list:
    """`transform` applied to each image of the batch on its own: a parameter set per image."""
    return [transform(image) for image in images]


def torchvision_transforms(side: int) -> dict | None:
    """torchvision's v2 counterparts, or None where torchvision does not import."""
    try:
        from torchvision.transforms import v2
    except Exception:  # noqa: BLE001 not installed, or a build for another torch
        return None
    return {
        "random-resized crop": v2.RandomResizedCrop(side, scale=(0.08, 1.0), antialias=True),
        "horizontal flip": v2.RandomHorizontalFlip(),
        "RandAugment rand-m9-n2": v2.RandAugment(num_ops=2, magnitude=9),
        "TrivialAugment": v2.TrivialAugmentWide(),
        "random erasing 0.25": v2.RandomErasing(p=0.25),
        "Mixup": v2.MixUp(num_classes=10),
        "CutMix": v2.CutMix(num_classes=10),
    }


def main() -> None:
    for batch, channels, side in BATCHES:
        images = torch.rand(batch, channels, side, side) * 2 - 1
        labels = torch.randint(0, 10, (batch,))
        mean, std = [0.5] * channels, [0.5] * channels
        others = torchvision_transforms(side)
        print(f"\nbatch of {batch} x {channels} x {side} x {side}, ms per batch")
        print("| transform | kornia, per image | torchvision v2, per batch | torchvision v2, image by image |")
        print("| --- | --- | --- | --- |")
        for name, policy in TRANSFORMS.items():
            ours = milliseconds(PhotoAugmentation(policy, (side, side), mean, std), images)
            theirs = per_image = "-"
            if others:
                tensors = ((images + 1) * 127.5).to(torch.uint8) if "Augment" in name else images
                theirs = f"{milliseconds(others[name], tensors):.1f}"
                per_image = f"{milliseconds(one_by_one, others[name], tensors, repeat=3):.1f}"
            print(f"| {name} | {ours:.1f} | {theirs} | {per_image} |")
        for name, mixing in (("Mixup", BatchMixing(1.0, 0.0, 10)), ("CutMix", BatchMixing(0.0, 1.0, 10))):
            theirs = f"{milliseconds(others[name], images, labels):.1f}" if others else "-"
            print(f"| {name} | {milliseconds(mixing, images, labels):.1f} | {theirs} | - |")
        photos = PhotoAugmentation(AugmentationPolicy(**POLICIES["photos"]), (side, side), mean, std)
        whole = milliseconds(BatchMixing(0.5, 0.5, 10), photos(images), labels) + milliseconds(photos, images)
        print(f"| the whole 'photos' policy | {whole:.1f} | - | - |")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
