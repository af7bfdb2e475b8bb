"""The transforms: shapes kept, identity at zero strength, soft targets that are distributions, training batches
augmented and evaluation batches never, evaluation views in order, images in memory equal to images read anew."""

import pytest
import torch
from datasets import ClassLabel, Dataset, Features
from datasets import Image as ImageFeature
from helpers import tiny_config
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from modeling_vit_scratch import ViTScratchImageProcessor
from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.training.arguments import DataArguments
from modeling_vit_scratch.training.augmentation import AugmentBatch, ImageTransform, ProcessedImages, RandomShiftRotate
from modeling_vit_scratch.training.data import soft_loss
from modeling_vit_scratch.training.mixing import BatchMixing
from modeling_vit_scratch.training.policies import (
    POLICIES,
    AugmentationPolicy,
    PhotoAugmentation,
    augmentation_policy,
    describe_policy,
    training_augmentation,
)
from modeling_vit_scratch.training.views import EvaluationViews


def processor(channels: int = 3) -> ViTScratchImageProcessor:
    return ViTScratchImageProcessor.for_config(tiny_config(image_size=8, num_channels=channels))


@given(st.integers(1, 4), st.sampled_from([1, 3]), st.integers(4, 12), st.integers(4, 12))
def test_shifts_and_rotations_keep_the_shape_and_do_nothing_at_zero(batch, channels, height, width):
    images = torch.randn(batch, channels, height, width)
    assert RandomShiftRotate(0.2, 15)(images).shape == images.shape
    assert torch.allclose(RandomShiftRotate(0.0, 0.0)(images), images, atol=1e-5)


def test_a_seeded_generator_gives_the_same_shift_twice():
    images = torch.randn(2, 3, 8, 8)
    augmentation = RandomShiftRotate(0.2, 15)
    first = augmentation(images, generator=torch.Generator().manual_seed(1))
    assert torch.equal(first, augmentation(images, generator=torch.Generator().manual_seed(1)))


@pytest.mark.parametrize("channels", [1, 3])
def test_the_photo_policy_keeps_the_shape_of_gray_and_colour_batches(channels):
    policy = AugmentationPolicy(**POLICIES["photos"])
    mean, std = [0.5] * channels, [0.5] * channels
    images = torch.randn(4, channels, 16, 16)
    assert PhotoAugmentation(policy, (16, 16), mean, std)(images).shape == images.shape


@settings(max_examples=10)
@given(st.floats(0, 1), st.integers(2, 6))
def test_mixed_batches_carry_soft_targets_that_are_distributions(mixup, batch):
    mixing = BatchMixing(mixup, 1 - mixup, 5)
    images, labels = torch.randn(batch, 3, 8, 8), torch.randint(0, 5, (batch,))
    mixed, targets = mixing(images, labels)
    assert mixed.shape == images.shape and targets.shape == (batch, 5)
    assert torch.allclose(targets.sum(1), torch.ones(batch)) and (targets >= 0).all()
    loss = soft_loss(0.1)(type("Out", (), {"logits": torch.randn(batch, 5)})(), targets)
    assert torch.isfinite(loss)


def test_a_training_batch_is_augmented_then_mixed_and_the_draws_follow_the_generator():
    batch = {"pixel_values": torch.randn(4, 3, 8, 8), "labels": torch.tensor([0, 1, 0, 1])}
    augment = AugmentBatch(RandomShiftRotate(0.3, 20), BatchMixing(1.0, 0.0, 2))
    state = torch.get_rng_state()
    trained = augment(batch)
    assert not torch.equal(trained["pixel_values"], batch["pixel_values"])
    assert trained["labels"].shape == (4, 2) and trained["labels"].is_floating_point()
    torch.set_rng_state(state)  # what a resumed run does: the same generator state draws the same batch
    assert torch.equal(augment(batch)["pixel_values"], trained["pixel_values"])


def test_the_policies_knobs_and_refusals():
    assert augmentation_policy(DataArguments(augment=False)) == AugmentationPolicy()
    flipped = augmentation_policy(DataArguments(hflip=0.5))
    assert flipped.shift_rotate and flipped.hflip == 0.5 and "flips" in describe_policy(flipped, DataArguments())
    assert describe_policy(augmentation_policy(DataArguments(augmentation="none")), DataArguments()) is None
    assert training_augmentation(AugmentationPolicy(), processor(), RandomShiftRotate(0.1, 10)) is None
    for bad in (dict(rand_augment="rand-m11-n2"), dict(rand_augment="strong"), dict(mixup=0.7, cutmix=0.7)):
        with pytest.raises(UserError):
            augmentation_policy(DataArguments(augmentation="photos", **bad))
    one = type("Args", (), {"per_device_train_batch_size": 1})()
    with pytest.raises(UserError, match="batch"):
        augmentation_policy(DataArguments(augmentation="photos"), one)


def tiny_split(rows: int = 5, mode: str = "RGB") -> Dataset:
    images = [
        Image.new(mode, (10, 6), (row * 40, 20, 200 - row * 30) if mode == "RGB" else row * 40) for row in range(rows)
    ]
    features = Features(image=ImageFeature(), label=ClassLabel(names=["a", "b"]))
    return Dataset.from_dict({"image": images, "label": [row % 2 for row in range(rows)]}, features=features)


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_images_held_in_memory_equal_images_read_anew(mode):
    transform = ImageTransform(processor())
    held, anew = (
        ProcessedImages(tiny_split(mode=mode), transform, 100),
        ProcessedImages(tiny_split(mode=mode), transform, 0),
    )
    assert held.pixel_values is not None and anew.pixel_values is None
    for index in range(5):
        assert torch.equal(held[index]["pixel_values"], anew[index]["pixel_values"])
        assert held[index]["labels"] == anew[index]["labels"] == index % 2


def test_evaluation_views_are_the_images_then_their_shifted_and_mirrored_copies_in_order():
    rows = ProcessedImages(tiny_split(), ImageTransform(processor()), 100)
    views = EvaluationViews(rows, 2, 2, RandomShiftRotate(0.2, 10))
    assert views.views == 4 and len(views) == 20
    for index in range(5):
        original = rows[index]["pixel_values"]
        assert torch.equal(views[index]["pixel_values"], original)
        assert torch.equal(views[10 + index]["pixel_values"], original.flip(-1))
        assert torch.equal(views[5 + index]["pixel_values"], views[5 + index]["pixel_values"])  # seeded
        assert [views[view * 5 + index]["labels"] for view in range(4)] == [index % 2] * 4
