"""Augmentation policies: the photo transforms on batches (per-image parameters, seeded), Mixup / CutMix and their
soft targets, the loss on soft targets (plain, label smoothing, distillation), evaluation's centre crop and flip
averaging, and the bad input refused before any work."""

import json

import numpy as np
import pytest
import torch
from helpers import tiny_config, tiny_model_file, training_args, write_imagefolder
from PIL import Image

from modeling_vit_scratch import ViTScratchForImageClassification, ViTScratchImageProcessor
from modeling_vit_scratch.training.arguments import DataArguments, ModelArguments, parse_arguments
from modeling_vit_scratch.training.augmentation import AugmentingTrainer
from modeling_vit_scratch.training.data import collate_images, load_image_dataset, prepare_splits
from modeling_vit_scratch.training.distillation import Distillation
from modeling_vit_scratch.training.mixing import BatchMixing, soft_target_loss, soft_targets
from modeling_vit_scratch.training.model_source import build_model
from modeling_vit_scratch.training.policies import (
    POLICIES,
    AugmentationPolicy,
    PhotoAugmentation,
    augmentation_policy,
    check_mixing_batch,
    describe_policy,
    training_augmentation,
)
from modeling_vit_scratch.training.trainer import train

MEAN, STD = [0.5, 0.5, 0.5], [0.5, 0.5, 0.5]


def gradient_images(batch=16, channels=3, side=24) -> torch.Tensor:
    """(batch, channels, side, side) normalised images, each a distinct left-to-right ramp: a flip or crop shows."""
    ramp = torch.linspace(-1, 1, side).expand(side, side)
    return torch.stack([(ramp * (0.5 + index / (2 * batch))).expand(channels, -1, -1) for index in range(batch)])


def photo(**knobs) -> PhotoAugmentation:
    return PhotoAugmentation(AugmentationPolicy(**knobs), (24, 24), MEAN, STD)


def changed(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """(batch,) whether each image changed."""
    return (before - after).abs().amax((1, 2, 3)) > 1e-4


def test_a_flip_mirrors_some_images_of_a_batch_and_leaves_the_others():
    images = gradient_images(64)
    torch.manual_seed(0)
    flipped = photo(hflip=0.5)(images)
    mirrored = torch.isclose(flipped, images.flip(-1)).flatten(1).all(1)
    kept = torch.isclose(flipped, images).flatten(1).all(1)
    assert bool((mirrored | kept).all()) and 16 < int(mirrored.sum()) < 48  # per image, about half


def test_random_resized_crops_differ_per_image_keep_the_shape_and_follow_the_seed():
    images = gradient_images(16).expand(-1, -1, -1, -1).clone()
    same = images[:1].expand(16, -1, -1, -1).clone()  # one image 16 times: per-image crops make 16 different ones
    crop = photo(crop_scale=0.1, crop_ratio=0.5)
    torch.manual_seed(3)
    first = crop(same)
    torch.manual_seed(3)
    again = crop(same)
    assert first.shape == same.shape and torch.equal(first, again)
    assert len({tuple(image.flatten().round(decimals=3).tolist()) for image in first}) == 16
    assert bool(changed(same, first).all())


@pytest.mark.parametrize("spec", ["rand-m9-n2", "trivial"])
@pytest.mark.parametrize("channels", [1, 3])
def test_rand_augment_changes_images_on_colour_and_grey_batches(spec, channels):
    images = torch.rand(32, channels, 24, 24) * 2 - 1
    torch.manual_seed(1)
    augmented = PhotoAugmentation(AugmentationPolicy(rand_augment=spec), (24, 24), MEAN[:channels], STD[:channels])(
        images
    )
    assert augmented.shape == images.shape and augmented.dtype == images.dtype
    assert int(changed(images, augmented).sum()) >= 16
    assert augmented.min() >= -1 - 1e-5 and augmented.max() <= 1 + 1e-5  # still in the normalised [0, 1] range


def test_random_erasing_sets_a_rectangle_of_some_images_to_the_mean_colour():
    images = torch.rand(64, 3, 24, 24) + 0.5  # no pixel is 0, the mean colour in normalised units
    torch.manual_seed(2)
    erased = photo(random_erasing=0.5)(images)
    zeros = (erased == 0).all(1)  # (batch, H, W): pixels erased in every channel
    touched = zeros.flatten(1).any(1)
    assert 16 < int(touched.sum()) < 48
    assert bool((erased[~zeros[:, None].expand_as(erased)] == images[~zeros[:, None].expand_as(images)]).all())


def test_the_photos_policy_and_knobs_that_replace_its_values():
    data = DataArguments(augmentation="photos", mixup=0.3, hflip=0.0)
    policy = augmentation_policy(data)
    assert policy == AugmentationPolicy(**{**POLICIES["photos"], "mixup": 0.3, "hflip": 0.0})
    assert augmentation_policy(DataArguments()) == AugmentationPolicy(shift_rotate=True)  # today's default
    assert augmentation_policy(DataArguments(augmentation="photos", augment=False)) == AugmentationPolicy()


def test_photo_knobs_given_with_the_digits_policy_run_after_its_shifts_and_rotations():
    """`--augmentation digits --hflip 1`: every image shifted and rotated (here by nothing), then mirrored; the card
    says flips, so they must run."""
    from modeling_vit_scratch.training.augmentation import RandomShiftRotate

    processor = ViTScratchImageProcessor(size={"height": 24, "width": 24}, image_mean=MEAN, image_std=STD)
    still = RandomShiftRotate.for_processor(processor, max_shift=0.0, max_degrees=0.0)
    policy = augmentation_policy(DataArguments(hflip=1.0))
    assert policy.shift_rotate and policy.hflip == 1.0
    images = gradient_images(8)
    assert torch.allclose(training_augmentation(policy, processor, still)(images), images.flip(-1), atol=1e-5)
    assert training_augmentation(augmentation_policy(DataArguments()), processor, still) is still  # digits alone


@pytest.mark.parametrize("hflip", [None, 0.5])
def test_the_policy_in_words_says_what_ran_once(hflip):
    data = DataArguments(augmentation="digits", hflip=hflip, mixup=0.5)
    words = describe_policy(augmentation_policy(data), data)
    assert words.startswith("random shifts of up to ")
    assert ("no flips" in words) == (hflip is None) and ("horizontal flips (50% of images)" in words) == bool(hflip)
    assert words.endswith("; Mixup on 50% of batches (soft targets)") and "CutMix" not in words


def test_mixup_blends_pairs_and_their_targets_with_the_same_weight():
    torch.manual_seed(0)
    images = torch.rand(8, 3, 6, 6)
    labels = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    mixed, targets = BatchMixing(mixup=1.0, cutmix=0.0, num_labels=5)(images, labels)
    assert targets.shape == (8, 5) and torch.allclose(targets.sum(1), torch.ones(8))
    for index in range(8):  # each image is (1 - w) itself + w another; its target (1 - w) its label + w the other's
        own = targets[index, labels[index]]
        partner = [j for j in range(8) if torch.allclose(mixed[index], own * images[index] + (1 - own) * images[j])]
        assert partner, f"image {index} is no blend of itself with a batch image at its target's weight"
        expected = own * torch.nn.functional.one_hot(labels[index], 5) + (1 - own) * torch.nn.functional.one_hot(
            labels[partner[0]], 5
        )
        assert torch.allclose(targets[index], expected.float(), atol=1e-6) or labels[index] == labels[partner[0]]
    assert len({round(float(targets[index].max()), 4) for index in range(8)}) > 2  # a weight per image


def test_cutmix_targets_weigh_each_label_by_its_share_of_the_pixels():
    torch.manual_seed(4)
    images = torch.arange(8.0).reshape(8, 1, 1, 1).expand(8, 1, 16, 16).clone()  # image i holds the value i
    labels = torch.arange(8)
    mixed, targets = BatchMixing(mixup=0.0, cutmix=1.0, num_labels=8)(images, labels)
    shares = torch.stack([(mixed == value).float().mean((1, 2, 3)) for value in range(8)], 1)  # (batch, label)
    torch.testing.assert_close(targets, shares, atol=1e-6, rtol=0)
    assert int((targets.max(1).values < 1).sum()) >= 4  # most images hold a pasted rectangle


def test_unmixed_batches_of_a_mixing_run_get_one_hot_targets_and_a_batch_of_one_trains():
    labels = torch.tensor([2, 0, 1])
    _, targets = BatchMixing(mixup=0.0, cutmix=0.0, num_labels=3)(torch.rand(3, 1, 4, 4), labels)
    assert torch.equal(targets, torch.nn.functional.one_hot(labels, 3).float())
    _, single = BatchMixing(mixup=1.0, cutmix=0.0, num_labels=3)(torch.rand(1, 1, 4, 4), labels[:1])
    assert torch.allclose(single, torch.tensor([[0.0, 0.0, 1.0]]))  # the last batch of an epoch may hold one image


def test_kornia_class_output_becomes_soft_targets():
    mixed = torch.tensor([[0.0, 2.0, 0.25], [1.0, 1.0, 0.6]])
    expected = torch.tensor([[0.75, 0.0, 0.25], [0.0, 1.0, 0.0]])
    assert torch.allclose(soft_targets(mixed, 3), expected)


def test_the_soft_target_loss_equals_cross_entropy_on_one_hot_targets_and_mixes_linearly():
    logits = torch.randn(6, 4)
    labels = torch.tensor([0, 1, 2, 3, 0, 1])
    one_hot = torch.nn.functional.one_hot(labels, 4).float()
    for smoothing in (0.0, 0.1):
        plain = torch.nn.functional.cross_entropy(logits, labels, label_smoothing=smoothing)
        torch.testing.assert_close(soft_target_loss(logits, one_hot, smoothing), plain)
    other = one_hot.roll(1, 0)
    blended = soft_target_loss(logits, 0.3 * one_hot + 0.7 * other)
    torch.testing.assert_close(blended, 0.3 * soft_target_loss(logits, one_hot) + 0.7 * soft_target_loss(logits, other))


def test_the_distillation_loss_takes_soft_targets():
    student, distilled, teacher = torch.randn(3, 5, 4).unbind(0)
    labels = torch.tensor([0, 3, 1, 2, 0])
    loss = Distillation("hard", 0.5)
    hard = loss.loss(student, distilled, teacher, labels, 0.1)
    soft = loss.loss(student, distilled, teacher, torch.nn.functional.one_hot(labels, 4).float(), 0.1)
    torch.testing.assert_close(soft, hard)


def rows(count=16, side=8, classes=2) -> list[dict]:
    generator = torch.Generator().manual_seed(0)
    return [
        {"pixel_values": torch.rand(3, side, side, generator=generator) * 2 - 1, "labels": index % classes}
        for index in range(count)
    ]


def test_the_trainer_trains_on_mixed_batches_with_soft_targets_and_evaluates_on_labels(tmp_path):
    model = ViTScratchForImageClassification(tiny_config(image_size=8, num_labels=2))
    seen = []
    model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs), with_kwargs=True)
    losses = []
    original = AugmentingTrainer.compute_loss

    def recording(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        result = original(self, model, inputs, return_outputs, num_items_in_batch)
        if model.training:
            losses.append((inputs["labels"].clone(), (result[0] if return_outputs else result).detach()))
        return result

    args = training_args(
        tmp_path,
        num_train_epochs=1,
        save_strategy="no",
        load_best_model_at_end=False,
        metric_for_best_model=None,
        label_smoothing_factor=0.1,
        remove_unused_columns=False,
    )
    trainer = AugmentingTrainer(
        model=model,
        args=args,
        train_dataset=rows(),
        eval_dataset=rows(),
        data_collator=collate_images,
        mixing=BatchMixing(mixup=1.0, cutmix=0.0, num_labels=2),
    )
    trainer.compute_loss = recording.__get__(trainer)
    trainer.train()
    assert len(losses) == 2 and all(targets.shape == (8, 2) and targets.is_floating_point() for targets, _ in losses)
    assert all(torch.isfinite(loss) for _, loss in losses)
    metrics = trainer.evaluate()
    assert 0 <= metrics["eval_loss"] < 10 and "labels" not in seen[-1]  # evaluation: the model's own loss, no soft


def test_evaluation_with_flip_averages_the_logits_of_each_image_and_its_mirror(tmp_path):
    model = ViTScratchForImageClassification(tiny_config(image_size=8, num_labels=2)).eval()
    data = rows(4)
    args = training_args(
        tmp_path, eval_strategy="no", save_strategy="no", load_best_model_at_end=False, metric_for_best_model=None
    )
    flipping = AugmentingTrainer(model=model, args=args, data_collator=collate_images, eval_flip=True)
    plain = AugmentingTrainer(model=model, args=args, data_collator=collate_images)
    averaged = torch.from_numpy(flipping.predict(data).predictions)
    pixel_values = torch.stack([row["pixel_values"] for row in data])
    with torch.no_grad():
        expected = (model(pixel_values).logits + model(pixel_values.flip(-1)).logits) / 2
    torch.testing.assert_close(averaged, expected, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(torch.from_numpy(plain.predict(data).predictions), averaged, atol=1e-4)


def test_the_processor_crops_the_centre_when_crop_pct_is_set_and_squashes_as_before_otherwise(tmp_path):
    pixels = np.zeros((40, 80), dtype=np.uint8)
    pixels[:, 20:60] = 255  # a white centre square between black sides, on a 2:1 image
    image = Image.fromarray(pixels)
    settings = dict(size={"height": 20, "width": 20}, num_channels=1, image_mean=[0.0], image_std=[1.0])
    squashed = ViTScratchImageProcessor(**settings)(image, return_tensors="pt").pixel_values[0, 0]
    cropped = ViTScratchImageProcessor(**settings, crop_pct=0.8)(image, return_tensors="pt").pixel_values[0, 0]
    assert squashed[:, 0].max() == 0 and squashed[:, 10].min() == 1  # the black sides squashed in
    assert cropped.min() > 0.99  # the centre crop of 20 x 20 out of 25 x 50 is all white
    asked = ViTScratchImageProcessor(**settings)(image, crop_pct=0.8, return_tensors="pt").pixel_values[0, 0]
    torch.testing.assert_close(asked, cropped)  # crop_pct given with a call applies to it
    processor = ViTScratchImageProcessor(**settings, crop_pct=0.8)
    processor.save_pretrained(tmp_path / "cropped")
    ViTScratchImageProcessor(**settings).save_pretrained(tmp_path / "plain")
    assert json.loads((tmp_path / "cropped" / "preprocessor_config.json").read_text())["crop_pct"] == 0.8
    assert "crop_pct" not in json.loads((tmp_path / "plain" / "preprocessor_config.json").read_text())
    assert ViTScratchImageProcessor.from_pretrained(tmp_path / "cropped").crop_pct == 0.8


@pytest.mark.timm  # torchvision: run where timm's tests run
def test_the_torchvision_processor_crops_as_the_pil_one():
    pytest.importorskip("torchvision")
    from modeling_vit_scratch import ViTScratchImageProcessorFast

    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 50, 3), dtype=np.uint8))
    settings = dict(size={"height": 16, "width": 16}, num_channels=3, crop_pct=0.875)
    pil = ViTScratchImageProcessor(**settings)(image, return_tensors="pt").pixel_values
    fast = ViTScratchImageProcessorFast(**settings)(image, return_tensors="pt").pixel_values
    assert fast.shape == pil.shape == (1, 3, 16, 16)
    torch.testing.assert_close(fast, pil, atol=2 / 255 + 1e-6, rtol=0)  # 1/255 of a pixel, over std 0.5


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--augmentation", "cats"], "--augmentation: invalid choice: 'cats' (choose from 'digits', 'photos', 'none')"),
        (["--hflip", "1.5"], "--hflip 1.5 is out of range: give a number in [0, 1], e.g. 0.5."),
        (["--random_erasing", "-0.1"], "--random_erasing -0.1 is out of range: give a number in [0, 1]"),
        (["--mixup", "2"], "--mixup 2 is out of range: give a number in [0, 1]"),
        (["--crop_scale", "1.5"], "--crop_scale 1.5 is out of range: give a number in (0, 1]"),
        (["--crop_pct", "1.2"], "--crop_pct 1.2 is out of range: give a number in (0, 1]"),
        (["--mixup", "0.7", "--cutmix", "0.7"], "add up to more than 1"),
        (["--rand_augment", "rand-9-2"], "--rand_augment 'rand-9-2' is not a policy: give 'rand-m9-n2'"),
        (["--rand_augment", "rand-m12-n2"], "give a magnitude above 0 and below 10"),
        (
            ["--augmentation", "photos", "--per_device_train_batch_size", "1"],
            "the batch on each device holds 1 image: give a per-device batch of at least 2",
        ),
        (
            ["--cutmix", "0.5", "--total_train_batch_size", "1"],
            "the batch on each device holds 1 image: give a per-device batch of at least 2",
        ),
    ],
)
def test_bad_augmentation_input_is_one_line_before_any_data_is_read(tmp_path, monkeypatch, extra, message):
    def no_data(*args, **kwargs):
        raise AssertionError("the data was read before the augmentation was checked")

    monkeypatch.setattr("modeling_vit_scratch.training.trainer.load_image_dataset", no_data)
    argv = ["--model", tiny_model_file(tmp_path), "--output_dir", str(tmp_path / "out"), "--report_to", "none", *extra]
    with pytest.raises(ValueError) as refused:
        model_args, data_args, output_args, args = parse_arguments(argv)
        train(model_args, data_args, args, output_args)
    assert message in " ".join(str(refused.value).split())
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_batch_of_two_may_mix():
    args = training_args("unused", per_device_train_batch_size=2)
    check_mixing_batch(AugmentationPolicy(mixup=0.5), args, None)  # no error
    with pytest.raises(ValueError, match="holds 1 image"):
        check_mixing_batch(AugmentationPolicy(mixup=0.5), training_args("unused", per_device_train_batch_size=1), None)


@pytest.mark.integration
def test_the_photo_policy_trains_on_a_colour_imagefolder_and_saves_the_centre_crop(tmp_path):
    folder = write_imagefolder(tmp_path / "pets", per_class=10, size=(14, 10), mode="RGB")
    argv = [
        "--model",
        tiny_model_file(tmp_path, num_channels=3),
        "--dataset",
        str(folder),
        "--augmentation",
        "photos",
        "--crop_scale",
        "0.35",
        "--crop_pct",
        "0.875",
        "--eval_flip",
        "true",
        "--validation_fraction",
        "0.2",
        "--test_fraction",
        "0.2",
        "--output_dir",
        str(tmp_path / "out"),
        "--num_train_epochs",
        "3",
        "--per_device_train_batch_size",
        "6",
        "--learning_rate",
        "0.003",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        "--save_strategy",
        "no",
    ]
    model_args, data_args, output_args, args = parse_arguments(argv)
    metrics = train(model_args, data_args, args, output_args)
    assert np.isfinite(metrics["train_loss"]) and 0 <= metrics["test_accuracy"] <= 1
    saved = json.loads((tmp_path / "out" / "preprocessor_config.json").read_text())
    assert saved["crop_pct"] == 0.875
    record = json.loads((tmp_path / "out" / "training_record.json").read_text())
    assert "photos" in json.dumps(record)


@pytest.mark.parametrize(
    "mode, model, overrides, channels",
    [
        ("RGB", "preset", None, 3),
        ("L", "preset", None, 1),
        ("L", "preset", "num_channels=3", 3),
        ("RGB", "file without num_channels", None, 3),
        ("L", "file without num_channels", None, 1),
        ("RGB", "file with num_channels=1", None, 1),
    ],
)
def test_a_new_model_takes_the_data_sets_channels_unless_its_config_names_them(
    tmp_path, mode, model, overrides, channels
):
    folder = write_imagefolder(tmp_path / "pets", per_class=4, mode=mode)
    data = prepare_splits(load_image_dataset(str(folder)), validation_fraction=0.25, test_fraction=0.25)
    if model == "preset":
        source = "vit-tiny-patch16-224"
        overrides = ",".join(filter(None, ["num_hidden_layers=1,hidden_size=12,num_attention_heads=1", overrides]))
    else:
        source = tiny_model_file(tmp_path, **({"num_channels": 1} if "=1" in model else {}))
    built, processor = build_model(ModelArguments(model=source, config_overrides=overrides), data)
    assert built.config.num_channels == channels and processor.num_channels == channels
