"""Augmentation: batched shifts and rotations on tensors, seeded validation views, and the Trainer that applies them
to training batches only."""

import math

import pytest
import torch
from datasets import Dataset
from helpers import tiny_config, training_args

from modeling_vit_scratch import ViTScratchForImageClassification, ViTScratchImageProcessor
from modeling_vit_scratch.training.augmentation import AugmentedViews, AugmentingTrainer, RandomShiftRotate
from modeling_vit_scratch.training.data import collate_images


def square(height=28, width=28, batch=1) -> torch.Tensor:
    """(batch, 1, height, width) zeros with an 8x8 white square in the middle."""
    image = torch.zeros(batch, 1, height, width)
    top, left = height // 2 - 4, width // 2 - 4
    image[..., top : top + 8, left : left + 8] = 1.0
    return image


def centres(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Centres of mass (rows, columns) of (batch, 1, H, W) images."""
    rows, columns = torch.arange(images.shape[2], dtype=torch.float32), torch.arange(images.shape[3]).float()
    mass = images.sum((1, 2, 3))
    return (images.sum((1, 3)) * rows).sum(-1) / mass, (images.sum((1, 2)) * columns).sum(-1) / mass


def test_nothing_asked_nothing_moves():
    image = square()
    assert torch.equal(RandomShiftRotate(0.0, 0.0)(image), image)


def test_shifts_stay_within_the_asked_share_of_the_side_and_keep_the_image_whole():
    torch.manual_seed(0)
    moved = RandomShiftRotate(0.1, 10.0)(square(batch=64))
    rows, columns = centres(moved)
    for centre in (rows, columns):
        assert (centre - 13.5).abs().max() <= 2.8 + 0.5  # within 10% of the side (plus resampling)
        assert (centre - 13.5).abs().max() > 1.0  # and some really moved
    assert torch.allclose(moved.sum((1, 2, 3)), torch.full((64,), 64.0), rtol=0.1)  # the square stays whole
    assert len(torch.unique(moved)) > 50  # sub-pixel: resampled, not moved by whole pixels


def test_a_rotation_of_a_wide_image_turns_it_without_shearing():
    """On a 24x48 image a centred square, turned by up to 45 degrees, keeps its spread equal along both axes (a
    rotation written in the grid's -1..1 coordinates without the aspect ratio would stretch it by 2)."""
    image = square(24, 48, batch=16)
    turned = RandomShiftRotate(0.0, 45.0)(image, generator=torch.Generator().manual_seed(1))
    rows, columns = centres(turned)
    assert torch.allclose(rows, torch.full((16,), 11.5), atol=0.05)
    assert torch.allclose(columns, torch.full((16,), 23.5), atol=0.05)
    row_positions = torch.arange(24.0)[:, None] - 11.5
    column_positions = torch.arange(48.0)[None, :] - 23.5
    mass = turned.sum((1, 2, 3))
    row_spread = (turned[:, 0] * row_positions**2).sum((1, 2)) / mass
    column_spread = (turned[:, 0] * column_positions**2).sum((1, 2)) / mass
    torch.testing.assert_close(row_spread, column_spread, rtol=0.05, atol=0)
    assert (turned - image).abs().amax((1, 2, 3)).min() > 0.1  # every image turned visibly


def test_outside_is_black_in_the_processors_units():
    processor = ViTScratchImageProcessor(num_channels=3, image_mean=[0.2, 0.5, 0.7], image_std=[0.1, 0.5, 0.25])
    augmentation = RandomShiftRotate.for_processor(processor, max_shift=0.3, max_degrees=0)
    black = torch.tensor([-2.0, -1.0, -2.8])
    white = ((1 - torch.tensor([0.2, 0.5, 0.7])) / torch.tensor([0.1, 0.5, 0.25])).reshape(1, 3, 1, 1)
    moved = augmentation(white.expand(8, 3, 16, 16).clone(), generator=torch.Generator().manual_seed(0))
    low = moved.amin((2, 3))  # in each channel the darkest value: black where the image moved away
    torch.testing.assert_close(low, black.expand(8, 3), atol=1e-5, rtol=0)
    assert moved.amax() <= white.amax() + 1e-5


def test_a_grey_model_with_rgb_statistics_takes_their_mean():
    processor = ViTScratchImageProcessor(num_channels=1, image_mean=[0.2, 0.5, 0.8], image_std=[0.5, 0.5, 0.5])
    augmentation = RandomShiftRotate.for_processor(processor, 0.1, 0)
    assert augmentation.black.flatten().tolist() == pytest.approx([-1.0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_seeded_and_keeps_the_dtype(dtype):
    images = square(batch=4).to(dtype)
    augmentation = RandomShiftRotate(0.1, 10.0)
    first = augmentation(images, generator=torch.Generator().manual_seed(5))
    again = augmentation(images, generator=torch.Generator().manual_seed(5))
    other = augmentation(images, generator=torch.Generator().manual_seed(6))
    assert first.dtype == dtype and torch.equal(first, again) and not torch.equal(first, other)


def digit_rows(count=10, size=8) -> Dataset:
    """`count` rows of normalised pixel_values (1, size, size), each a square at its own place, with labels."""
    rows = []
    for index in range(count):
        image = torch.full((1, size, size), -1.0)
        image[:, index % 5 : index % 5 + 3, 2:5] = 1.0
        rows.append({"pixel_values": image, "labels": index % 2})
    return rows


def test_validation_views_are_the_images_then_seeded_shifted_copies():
    rows = digit_rows()
    augmentation = RandomShiftRotate(0.25, 0, black=(-1.0,))
    views = AugmentedViews(rows, 4, augmentation)
    assert len(views) == 40 and [views[i]["labels"] for i in range(40)] == [row["labels"] for row in rows] * 4
    assert all(torch.equal(views[i]["pixel_values"], rows[i]["pixel_values"]) for i in range(10))
    again = AugmentedViews(rows, 4, augmentation)
    assert all(torch.equal(views[i]["pixel_values"], again[i]["pixel_values"]) for i in range(40))  # seeded
    moved = sum(not torch.equal(views[i]["pixel_values"], rows[i % 10]["pixel_values"]) for i in range(10, 40))
    assert moved >= 25  # the copies are shifted
    batch = views.__getitems__([3, 17, 38])
    assert all(
        torch.equal(b["pixel_values"], views[i]["pixel_values"]) for b, i in zip(batch, (3, 17, 38), strict=True)
    )


class Recording(torch.nn.Module):
    """An augmentation that marks its batches (adds 100 to the first pixel) and counts them."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, pixel_values):
        self.calls += 1
        marked = pixel_values.clone()
        marked[:, 0, 0, 0] += 100
        return marked


def test_the_trainer_augments_training_batches_only(tmp_path):
    model = ViTScratchForImageClassification(tiny_config(image_size=8, num_channels=1, num_labels=2))
    marked_batches = {True: 0, False: 0}  # training mode -> batches that reached the model marked

    def count_marked(module, args, kwargs):
        marked_batches[module.training] += bool((kwargs["pixel_values"][:, 0, 0, 0] > 50).all())

    model.register_forward_pre_hook(count_marked, with_kwargs=True)
    data = digit_rows(16)
    augmentation = Recording()
    args = training_args(
        tmp_path,
        num_train_epochs=2,
        per_device_train_batch_size=8,
        save_strategy="no",
        load_best_model_at_end=False,
        metric_for_best_model=None,
        remove_unused_columns=False,
    )
    trainer = AugmentingTrainer(
        model=model,
        args=args,
        train_dataset=data,
        eval_dataset=data,
        data_collator=collate_images,
        augmentation=augmentation,
    )
    trainer.train()
    assert augmentation.calls == 4 and marked_batches == {True: 4, False: 0}  # 2 epochs x 2 batches
    assert math.isfinite(trainer.evaluate()["eval_loss"]) and augmentation.calls == 4
