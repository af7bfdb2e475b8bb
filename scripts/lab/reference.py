"""The reference: a plain Trainer loop that `scripts/train.py`'s defaults must match.

transformers' `ViTForImageClassification` (or this package's model, `model_kind="ours"`) of the reference size
(patch 4, width 64, 6 blocks, 4 heads, MLP 128, dropout 0.1; the input's side and channels follow the set's images:
28x28 gray for the glyphs, 32x32 RGB for small colour sets), or a plain four-layer ConvNet (`model_kind="convnet"`,
`ReferenceConvNet`), the yardstick a ViT on small data is held against, trained with the reference budget: AdamW
1e-3, weight decay 0.05, cosine schedule with 10% warmup, batch 64, 40 epochs, small random shifts and rotations
done on tensors, no label smoothing, no validation split and no model selection: every training image is trained on
and the last epoch is tested. Images are read from the same imagefolder (`train/` and `test/`) as
`scripts/train.py`.

A yardstick for benchmarks, never imported by the model files (it imports transformers' ViT).
"""

import json
import time
from pathlib import Path

import numpy as np
import torch
from datasets import ClassLabel
from datasets import Image as ImageFeature
from transformers import Trainer, TrainingArguments, ViTConfig, ViTForImageClassification
from transformers.modeling_outputs import ImageClassifierOutput

from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig
from modeling_vit_scratch.image_processing_vit_scratch import to_model_mode
from modeling_vit_scratch.modeling_vit_scratch import ViTScratchForImageClassification
from modeling_vit_scratch.training.augmentation import RandomShiftRotate
from modeling_vit_scratch.training.columns import IMAGE_COLUMN_NAMES, LABEL_COLUMN_NAMES, find_column
from modeling_vit_scratch.training.data import load_image_dataset

REFERENCE_SIZE = dict(  # image_size and num_channels are the defaults; `train_plain` takes the set's
    image_size=28,
    patch_size=4,
    num_channels=1,
    hidden_size=64,
    num_hidden_layers=6,
    num_attention_heads=4,
    intermediate_size=128,
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
)
REFERENCE_BUDGET = dict(
    num_train_epochs=40,
    per_device_train_batch_size=64,
    learning_rate=1e-3,
    weight_decay=0.05,
    lr_scheduler_type="cosine",
    warmup_steps=0.1,  # a float below 1 is a share of the steps
)
CONVNET_WIDTHS = (32, 64, 128, 256)  # the channels of the ConvNet's four 3x3 convolutions
MODEL_KINDS = ("transformers", "ours", "convnet")


def image_tensors(split, size: int, num_channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A `datasets` split -> (images (N, channels, size, size) uint8, labels (N,) int64), resized if needed."""
    image_column = find_column(split, None, "image", IMAGE_COLUMN_NAMES, ImageFeature)
    label_column = find_column(split, None, "label", LABEL_COLUMN_NAMES, ClassLabel)
    images = []
    for image in split[image_column]:
        image = to_model_mode(image, num_channels)
        if image.size != (size, size):
            image = image.resize((size, size))
        pixels = np.asarray(image)
        images.append(pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1))
    return torch.from_numpy(np.stack(images)), torch.tensor(split[label_column], dtype=torch.long)


class TensorImages(torch.utils.data.Dataset):
    """uint8 images + labels -> rows {"pixel_values": (C, H, W) normalised to [-1, 1], "labels"}, augmented if asked."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, augment: bool, max_shift=0.1, max_degrees=10.0):
        self.images, self.labels = images, labels
        self.augmentation = RandomShiftRotate(max_shift, max_degrees) if augment else None  # black is 0 in [0, 1]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict:
        pixels = self.images[index].float()[None] / 255  # (1, C, H, W)
        if self.augmentation is not None:
            pixels = self.augmentation(pixels)
        return {"pixel_values": (pixels[0] - 0.5) / 0.5, "labels": self.labels[index]}


def images_geometry(split) -> tuple[int, int]:
    """(side, channels) of a `datasets` image split, from its first image: the larger side, and 3 for colour
    images (any mode but grayscale), 1 for gray ones."""
    image_column = find_column(split, None, "image", IMAGE_COLUMN_NAMES, ImageFeature)
    image = split[0][image_column]
    return max(image.size), 1 if image.mode in ("1", "L", "LA", "I", "I;16", "F") else 3


def train_test_tensors(dataset: str) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """An imagefolder's ((train images, labels), (test images, labels), (side, channels)), the images as
    `image_tensors` makes them at the side and channels of the set's own images (`images_geometry`)."""
    raw = load_image_dataset(dataset)
    if "test" not in raw:
        raise ValueError(f"{dataset!r} has no test split: give an imagefolder with train/ and test/ sub-folders.")
    size, channels = images_geometry(raw["train"])
    return image_tensors(raw["train"], size, channels), image_tensors(raw["test"], size, channels), (size, channels)


class ReferenceConvNet(torch.nn.Module):
    """A plain ConvNet: four (3x3 convolution, BatchNorm, ReLU) of CONVNET_WIDTHS channels, 2x2 max-pooling after
    every second, global average pooling and a linear head. Called as the ViTs are by the Trainer."""

    def __init__(self, *, image_size: int, num_channels: int, num_labels: int):
        super().__init__()
        if image_size < 4:
            raise ValueError(f"image_size is {image_size}: the ConvNet halves its input twice, give at least 4.")
        layers, width_in = [], num_channels
        for index, width in enumerate(CONVNET_WIDTHS):
            layers += [
                torch.nn.Conv2d(width_in, width, 3, padding=1, bias=False),  # the BatchNorm's shift is the bias
                torch.nn.BatchNorm2d(width),
                torch.nn.ReLU(),
            ]
            if index % 2 == 1:
                layers.append(torch.nn.MaxPool2d(2))
            width_in = width
        self.features = torch.nn.Sequential(*layers)
        self.classifier = torch.nn.Linear(width_in, num_labels)

    def forward(self, pixel_values: torch.Tensor, labels: torch.Tensor | None = None) -> ImageClassifierOutput:
        """(batch, channels, side, side) -> logits (batch, num_labels), with the cross-entropy loss given labels."""
        features = self.features(pixel_values).mean(dim=(2, 3))  # (batch, width, side / 4, side / 4) -> (batch, width)
        logits = self.classifier(features)
        loss = torch.nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return ImageClassifierOutput(loss=loss, logits=logits)


def reference_model(model_kind: str, num_labels: int, seed: int, **geometry) -> torch.nn.Module:
    """transformers' ViT or this package's model, of the reference size, or the reference ConvNet, initialised from
    `seed`; `geometry` (image_size, num_channels) overrides the reference's input."""
    torch.manual_seed(seed)
    size = {**REFERENCE_SIZE, **geometry}
    if model_kind == "transformers":
        return ViTForImageClassification(ViTConfig(**size, num_labels=num_labels))
    if model_kind == "ours":
        return ViTScratchForImageClassification(ViTScratchConfig(**size, num_labels=num_labels))
    if model_kind == "convnet":
        return ReferenceConvNet(image_size=size["image_size"], num_channels=size["num_channels"], num_labels=num_labels)
    raise ValueError(f"Unknown model kind {model_kind!r}: choose one of {', '.join(MODEL_KINDS)}.")


def accuracy(eval_prediction) -> dict[str, float]:
    logits = eval_prediction.predictions
    logits = logits[0] if isinstance(logits, tuple) else logits
    return {"accuracy": float((logits.argmax(-1) == eval_prediction.label_ids).mean())}


def train_plain(
    dataset: str, model_kind: str, output_dir: str | Path, seed: int = 0, **budget_overrides
) -> dict[str, float]:
    """Train `model_kind` on `dataset`'s train split with the reference budget and test its last epoch.

    The model's input side and channels are those of the set's first training image (28x28 gray, 32x32 colour).

    Returns test accuracy, final training loss (mean of the last epoch), wall time and parameter count; they are
    also written to `output_dir/reference_results.json`. The model is not saved.
    """
    started = time.time()
    (train_images, train_labels), (test_images, test_labels), (size, channels) = train_test_tensors(dataset)
    num_labels = int(max(train_labels.max(), test_labels.max())) + 1
    model = reference_model(model_kind, num_labels, seed, image_size=size, num_channels=channels)
    args = TrainingArguments(
        output_dir=str(output_dir),
        **{**REFERENCE_BUDGET, **budget_overrides},
        per_device_eval_batch_size=256,
        eval_strategy="no",
        save_strategy="no",
        logging_strategy="epoch",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        dataloader_pin_memory=False,
        remove_unused_columns=False,
        seed=seed,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=TensorImages(train_images, train_labels, augment=True),
        compute_metrics=accuracy,
    )
    trainer.train()
    test = trainer.evaluate(TensorImages(test_images, test_labels, augment=False), metric_key_prefix="test")
    epoch_losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    results = {
        "model_kind": model_kind,
        "dataset": str(dataset),
        "seed": seed,
        "test_accuracy": test["test_accuracy"],
        "final_train_loss": epoch_losses[-1] if epoch_losses else float("nan"),
        "num_train": len(train_labels),
        "num_test": len(test_labels),
        "image_size": size,
        "num_channels": channels,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "wall_time_seconds": round(time.time() - started, 1),
    }
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    (Path(output_dir) / "reference_results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results
