"""Tests that mirror stems_vit_scratch.py and the hybrid model it makes, on tiny odd-sized configs."""

import math

import pytest
import torch
from helpers import tiny_config

from modeling_vit_scratch import ViTScratchForImageClassification, ViTScratchModel
from modeling_vit_scratch.configuration_vit_scratch import to_pair
from modeling_vit_scratch.stems_vit_scratch import (
    ViTScratchBottleneck,
    ViTScratchConvStem,
    ViTScratchMaxPoolSame,
    ViTScratchPreActBottleneck,
    ViTScratchResNetStem,
    ViTScratchStdConv2d,
    same_padding,
)

# Every stem form, each at a size its stride divides into an odd, non-square grid of tokens.
HYBRIDS = {
    "resnetv2 root only": dict(stem="resnetv2", stem_width=32, image_size=(12, 20), patch_size=1),
    "resnetv2 two stages": dict(stem="resnetv2", stem_width=32, stem_depths=[2, 1], image_size=(24, 40), patch_size=1),
    "resnetv2 pre-activation": dict(
        stem="resnetv2", stem_width=32, stem_depths=[1, 2], stem_preactivation=True, image_size=(24, 40), patch_size=1
    ),
    "conv": dict(stem="conv", stem_channels=[5, 7], image_size=(20, 28), patch_size=1),
    "conv, linear 2x2 patches": dict(
        stem="conv", stem_channels=[6], image_size=(12, 20), patch_size=2, patch_embedding="linear"
    ),
}


def hybrid(name: str, **overrides):
    return tiny_config(**{**HYBRIDS[name], **overrides})


def images(config, batch: int = 2, size: tuple[int, int] | None = None) -> torch.Tensor:
    return torch.randn(batch, config.num_channels, *(size or to_pair(config.image_size)))


@pytest.mark.parametrize("name", sorted(HYBRIDS))
def test_the_grid_is_the_stem_feature_map_cut_into_patches(name):
    config = hybrid(name)
    model = ViTScratchModel(config).eval()
    embeddings = model.embeddings.patch_embeddings
    height, width = to_pair(config.image_size)
    features = embeddings.stem(images(config))
    assert features.shape[1:] == (
        embeddings.feature_channels,
        height // config.stem_stride,
        width // config.stem_stride,
    )
    grid = config.grid_size
    assert grid == (height // config.cell_size[0], width // config.cell_size[1]) and grid[0] != grid[1]
    output = model(images(config, batch=3))
    assert output.last_hidden_state.shape == (3, 1 + grid[0] * grid[1], config.hidden_size)


@pytest.mark.parametrize("name", sorted(HYBRIDS))
def test_every_stem_parameter_gets_a_gradient_and_the_model_learns(name):
    config = hybrid(name)
    model = ViTScratchForImageClassification(config).train()
    pixel_values, labels = images(config, batch=4), torch.tensor([0, 1, 2, 3])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for step in range(20):
        loss = model(pixel_values, labels=labels).loss
        loss.backward()
        if step == 0:
            missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
            assert not missing, missing
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


def test_stem_stride_and_the_stem_fields_reach_the_modules():
    two_stages = ViTScratchResNetStem(hybrid("resnetv2 two stages"))
    assert hybrid("resnetv2 two stages").stem_stride == 8 and hybrid("resnetv2 root only").stem_stride == 4
    assert [len(stage) for stage in two_stages.stages] == [2, 1] and two_stages.out_channels == 256
    assert two_stages.root_conv.out_channels == 32 and isinstance(two_stages.stages[0][0], ViTScratchBottleneck)
    preact = ViTScratchResNetStem(hybrid("resnetv2 pre-activation"))
    assert isinstance(preact.stages[1][1], ViTScratchPreActBottleneck) and preact.final_norm.num_channels == 256
    conv = ViTScratchConvStem(hybrid("conv"))
    assert [m.out_channels for m in conv.layers if isinstance(m, torch.nn.Conv2d)] == [5, 7]
    assert hybrid("conv").stem_stride == 4 and tiny_config().stem_stride == 1
    assert isinstance(ViTScratchModel(tiny_config()).embeddings.patch_embeddings.stem, torch.nn.Identity)


def test_weight_standardised_conv_is_a_conv_with_the_standardised_kernel():
    conv = ViTScratchStdConv2d(5, 7, 3, stride=1)
    with torch.no_grad():
        conv.weight.normal_(0.3, 2.0)
    x = torch.randn(2, 5, 9, 11)
    weight = conv.weight.double().flatten(1)
    weight = ((weight - weight.mean(1, keepdim=True)) / weight.std(1, unbiased=False, keepdim=True)).view(7, 5, 3, 3)
    expected = torch.nn.functional.conv2d(x.double(), weight, padding=1)
    torch.testing.assert_close(conv(x), expected.float(), atol=1e-5, rtol=1e-5)
    with torch.no_grad():  # invariant to a per-channel scale and shift of its kernel
        conv.weight.mul_(torch.rand(7, 1, 1, 1) + 0.5).add_(torch.randn(7, 1, 1, 1))
    torch.testing.assert_close(conv(x), expected.float(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "size, kernel, stride, padding",
    [(7, 3, 2, (1, 1)), (8, 3, 2, (0, 1)), (8, 7, 2, (2, 3)), (9, 7, 2, (3, 3)), (5, 1, 1, (0, 0)), (5, 3, 1, (1, 1))],
)
def test_same_padding_is_tensorflows_with_the_odd_pixel_after(size, kernel, stride, padding):
    assert same_padding(size, kernel, stride) == padding
    output = ViTScratchStdConv2d(2, 3, kernel, stride)(torch.randn(1, 2, size, size + 1))
    assert output.shape[-2:] == (math.ceil(size / stride), math.ceil((size + 1) / stride))


def test_same_max_pool_pads_with_minus_infinity():
    negative = -1 - torch.rand(1, 2, 7, 8)
    pooled = ViTScratchMaxPoolSame()(negative)
    assert pooled.shape[-2:] == (4, 4) and (pooled < -1).all()  # zero padding would have won at the border


def test_preactivation_bottleneck_adds_its_residual_to_the_untouched_input():
    block = ViTScratchPreActBottleneck(128, 128, stride=1)
    assert block.shortcut_conv is None
    x = torch.randn(2, 128, 5, 7)
    with torch.no_grad():
        block.conv3.weight.zero_()  # an all-zero kernel standardises to zero: the residual vanishes
    torch.testing.assert_close(block(x), x)
    post = ViTScratchBottleneck(128, 128, stride=1)
    assert (post(x) >= 0).all()  # post-activation ends in a ReLU


def test_stem_initialisation_is_he_normal_and_unit_norms():
    model = ViTScratchModel(hybrid("resnetv2 two stages", stem_width=64))
    stem = model.embeddings.patch_embeddings.stem
    conv = stem.stages[0][0].conv2  # 3x3, fan_out = 64 * 9
    assert conv.weight.std().item() == pytest.approx(math.sqrt(2 / (64 * 9)), rel=0.1)
    assert torch.equal(stem.root_norm.weight, torch.ones(64)) and torch.equal(stem.root_norm.bias, torch.zeros(64))
    conv_stem = ViTScratchModel(hybrid("conv", stem_channels=[64, 48])).embeddings.patch_embeddings.stem
    assert conv_stem.layers[3].weight.std().item() == pytest.approx(math.sqrt(2 / (48 * 9)), rel=0.1)
    projection = model.embeddings.patch_embeddings.projection.weight
    assert projection.std().item() == pytest.approx(0.02, rel=0.2)  # the ViT's own init, not He


def test_batch_norm_statistics_train_save_and_reload(tmp_path):
    model = ViTScratchForImageClassification(hybrid("conv")).train()
    model(images(model.config, batch=4) * 3 + 1)
    batch_norm = model.vit.embeddings.patch_embeddings.stem.layers[1]
    assert batch_norm.num_batches_tracked.item() == 1 and not torch.equal(batch_norm.running_mean, torch.zeros(5))
    model.eval().save_pretrained(tmp_path)
    loaded = ViTScratchForImageClassification.from_pretrained(tmp_path).eval()
    loaded_norm = loaded.vit.embeddings.patch_embeddings.stem.layers[1]
    assert torch.equal(loaded_norm.running_mean, batch_norm.running_mean)
    assert torch.equal(loaded_norm.running_var, batch_norm.running_var)
    pixel_values = images(model.config)
    with torch.no_grad():
        assert torch.equal(loaded(pixel_values).logits, model(pixel_values).logits)


@pytest.mark.parametrize("name", ["resnetv2 two stages", "conv"])
def test_interpolate_pos_encoding_takes_sizes_the_cell_divides_and_names_the_cell_otherwise(name):
    config = hybrid(name)
    model = ViTScratchForImageClassification(config).eval()
    cell_h, cell_w = config.cell_size
    for rows, cols in ((5, 3), (2, 7)):
        output = model(images(config, size=(rows * cell_h, cols * cell_w)), interpolate_pos_encoding=True)
        assert output.logits.shape == (2, 5)
    same = images(config)
    torch.testing.assert_close(model(same, interpolate_pos_encoding=True).logits, model(same).logits)
    with pytest.raises(ValueError, match=rf"times the stem's stride \(config.cell_size: {cell_h}x{cell_w}\)"):
        model(images(config, size=(cell_h * 3 + 2, cell_w * 3)), interpolate_pos_encoding=True)


@pytest.mark.parametrize("name", ["resnetv2 two stages", "conv"])
def test_gradient_checkpointing_of_a_hybrid_gives_the_same_loss_and_gradients(name):
    config = hybrid(name)
    model = ViTScratchForImageClassification(config).eval()  # eval: BatchNorm's statistics stay put between passes
    pixel_values, labels = images(config), torch.tensor([1, 3])
    reference_loss = model(pixel_values, labels=labels).loss
    reference_loss.backward()
    reference = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.activation_checkpointing_enable()
    loss = model(pixel_values, labels=labels).loss
    loss.backward()
    torch.testing.assert_close(loss, reference_loss)
    for parameter_name, parameter in model.named_parameters():
        torch.testing.assert_close(parameter.grad, reference[parameter_name], msg=parameter_name)


@pytest.mark.parametrize("name", ["resnetv2 two stages", "conv"])
def test_a_hybrid_loads_in_bfloat16_close_to_float32(tmp_path, name):
    model = ViTScratchForImageClassification(hybrid(name)).eval()
    model.save_pretrained(tmp_path)
    loaded = ViTScratchForImageClassification.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    floats = {n: t.dtype for n, t in [*loaded.named_parameters(), *loaded.named_buffers()] if t.is_floating_point()}
    assert set(floats.values()) == {torch.bfloat16}, floats
    pixel_values = images(model.config, batch=4)
    with torch.no_grad():
        logits, expected = loaded(pixel_values).logits, model(pixel_values).logits
    torch.testing.assert_close(logits.float(), expected, atol=5e-2, rtol=0)
