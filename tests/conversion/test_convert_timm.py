"""Conversion from timm's VisionTransformer: same function to 1e-5, for class-token and average pooling.

timm imports torchvision, which has no CPU build for the CPU torch of the main environment; `make test` runs this
file in a second environment (.venv-timm) that has both, with the `timm` marker.
"""

import subprocess
import sys

import pytest
import torch
from helpers import PROCESS_TIMEOUT, REPO
from safetensors.torch import save_file

from modeling_vit_scratch.conversion.convert import from_timm

pytestmark = pytest.mark.timm  # deselected in the main environment, selected in .venv-timm


def timm_vit(**kwargs):
    """vit_tiny_patch16_224 as timm builds it (random weights), at a smaller size to keep the test quick."""
    import timm

    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, num_classes=9, **kwargs).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.1)
    return model


def max_difference(ours, reference, images) -> float:
    with torch.no_grad():
        return (ours(pixel_values=images).logits - reference(images)).abs().max().item()


@pytest.mark.parametrize("pool", ["token", "avg"])
def test_converted_timm_model_computes_the_same_logits(pool):
    reference = timm_vit(global_pool=pool)
    ours, processor = from_timm(reference, reference.state_dict())
    assert ours.config.pooling == ("cls" if pool == "token" else "mean")
    assert ours.config.fc_norm == (pool == "avg") and ours.config.layer_norm_eps == 1e-6
    assert max_difference(ours, reference, torch.randn(3, 3, 64, 64)) < 1e-5
    assert list(processor.image_mean) == list(reference.pretrained_cfg["mean"]) and processor.resample == 3  # bicubic


def test_full_size_vit_tiny_converts():
    import timm

    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False).eval()
    ours, _ = from_timm(reference, reference.state_dict())
    assert ours.num_parameters() == sum(p.numel() for p in reference.parameters())
    assert max_difference(ours, reference, torch.randn(1, 3, 224, 224)) < 1e-5


@pytest.mark.parametrize("change", ["missing", "extra"])
def test_a_missing_or_extra_timm_key_is_an_error_naming_it(change):
    reference = timm_vit()
    weights = dict(reference.state_dict())
    if change == "missing":
        del weights["blocks.1.attn.proj.weight"]
        name = "blocks.1.attn.proj.weight"
    else:
        weights["blocks.0.ls1.gamma"] = torch.ones(192)
        name = "blocks.0.ls1.gamma"
    with pytest.raises(KeyError, match=name.replace(".", r"\.")):
        from_timm(reference, weights)


def test_unsupported_timm_variant_is_refused():
    with pytest.raises(ValueError, match="class token"):
        from_timm(timm_vit(class_token=False, global_pool="avg"), {})


def test_convert_script_from_timm_file(tmp_path):
    reference = timm_vit(global_pool="avg")
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, tmp_path / "weights.safetensors")
    command = [
        sys.executable,
        str(REPO / "scripts" / "convert_checkpoint.py"),
        "--from",
        "timm",
        "--timm-model",
        "vit_tiny_patch16_224",
        "--timm-kwargs",
        "global_pool=avg,img_size=64",
        "--input",
        str(tmp_path / "weights.safetensors"),
        "--output",
        str(tmp_path / "ours"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=PROCESS_TIMEOUT)
    assert result.returncode == 0, result.stderr[-2000:]
    # torch pytree's Enum deprecation (logged as torchao is imported) is a note for library authors, not the user's
    assert "_pytree" not in result.stdout + result.stderr, result.stderr[:2000]
    from transformers import AutoModelForImageClassification

    ours = AutoModelForImageClassification.from_pretrained(tmp_path / "ours", trust_remote_code=True).eval()
    assert max_difference(ours, reference, torch.randn(2, 3, 64, 64)) < 1e-5


# timm's hybrids (ResNet-V2 stems) and the stem fields each converts to.
TIMM_HYBRIDS = {
    "vit_tiny_r_s16_p8_224": dict(stem_width=64, stem_depths=[], patch_size=[8, 8]),
    "vit_small_r26_s32_224": dict(stem_width=64, stem_depths=[2, 2, 2, 2], patch_size=[1, 1]),
    "vit_base_r50_s16_224": dict(stem_width=64, stem_depths=[3, 4, 9], patch_size=[1, 1]),
}


def timm_hybrid(name: str, **kwargs):
    """A timm hybrid with random weights, its norms' scales and every bias moved off their initial 1 and 0, so that
    a GroupNorm or bias mapped to the wrong place changes the logits."""
    import timm

    model = timm.create_model(name, pretrained=False, num_classes=7, **kwargs).eval()
    with torch.no_grad():
        for key, parameter in model.named_parameters():
            if "norm" in key and key.endswith("weight"):
                parameter.uniform_(0.5, 1.5)
            elif key.endswith("bias"):
                parameter.normal_(0, 0.1)
    return model


def assert_same_logits(ours, reference, images):
    with torch.no_grad():
        torch.testing.assert_close(ours(pixel_values=images).logits, reference(images), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", sorted(TIMM_HYBRIDS))
def test_converted_timm_hybrid_computes_the_same_logits_at_an_odd_grid(name):
    reference = timm_hybrid(name, img_size=96)  # a 3x3 (R26, R-Ti) or 6x6 (R50) grid of cells: quick
    ours, processor = from_timm(reference, reference.state_dict())
    config = ours.config
    assert config.stem == "resnetv2" and not config.stem_preactivation
    assert {key: getattr(config, key) for key in TIMM_HYBRIDS[name]} == TIMM_HYBRIDS[name]
    assert config.grid_size == tuple(reference.patch_embed.grid_size)
    assert ours.num_parameters() == sum(p.numel() for p in reference.parameters())
    assert_same_logits(ours, reference, torch.randn(2, 3, 96, 96))
    assert list(processor.image_mean) == [0.5, 0.5, 0.5] and processor.resample == 3  # the hybrids' bicubic


@pytest.mark.parametrize(
    "name",
    [
        "vit_tiny_r_s16_p8_224",
        "vit_small_r26_s32_224",
        pytest.param("vit_base_r50_s16_224", marks=pytest.mark.slow),
    ],
)
def test_full_size_timm_hybrid_converts_with_the_same_logits(name):
    reference = timm_hybrid(name)
    ours, _ = from_timm(reference, reference.state_dict())
    assert_same_logits(ours, reference, torch.randn(2, 3, 224, 224))


def test_a_missing_stem_key_of_a_timm_hybrid_is_an_error_naming_it():
    reference = timm_hybrid("vit_small_r26_s32_224", img_size=64)
    weights = dict(reference.state_dict())
    del weights["patch_embed.backbone.stages.1.blocks.0.downsample.norm.bias"]
    with pytest.raises(KeyError, match=r"patch_embed\.backbone\.stages\.1\.blocks\.0\.downsample\.norm\.bias"):
        from_timm(reference, weights)


def test_a_timm_hybrid_with_another_backbone_is_refused_naming_what_differs():
    import timm

    reference = timm.create_model("vit_small_resnet26d_224", pretrained=False, img_size=64)  # a ResNet-D backbone
    with pytest.raises(ValueError, match=r"convolutions other than weight-standardised SAME ones \(StdConv2dSame\)"):
        from_timm(reference, reference.state_dict())


def test_convert_script_from_a_timm_hybrid_file_loads_by_remote_code(tmp_path):
    reference = timm_hybrid("vit_tiny_r_s16_p8_224", img_size=64)
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, tmp_path / "weights.safetensors")
    command = [
        sys.executable,
        str(REPO / "scripts" / "convert_checkpoint.py"),
        "--from",
        "timm",
        "--timm_model",
        "vit_tiny_r_s16_p8_224",
        "--timm_kwargs",
        "img_size=64",
        "--input",
        str(tmp_path / "weights.safetensors"),
        "--output",
        str(tmp_path / "ours"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=PROCESS_TIMEOUT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "ours" / "stems_vit_scratch.py").is_file()
    from transformers import AutoModelForImageClassification

    ours = AutoModelForImageClassification.from_pretrained(tmp_path / "ours", trust_remote_code=True).eval()
    assert_same_logits(ours, reference, torch.randn(2, 3, 64, 64))


@pytest.mark.parametrize("stride, in_channels", [(1, 64), (2, 64), (1, 128)])
def test_preactivation_bottleneck_is_timms_with_the_same_weights(stride, in_channels):
    """timm's hybrids use post-activation blocks (parity above); BiT's pre-activation block is checked against timm's
    PreActBottleneck built with the same weight-standardised SAME convolution, block by block."""
    from functools import partial

    from timm.layers import StdConv2dSame
    from timm.models.resnetv2 import DownsampleConv, PreActBottleneck

    from modeling_vit_scratch.stems_vit_scratch import ViTScratchPreActBottleneck

    reshapes = stride != 1 or in_channels != 128
    theirs = PreActBottleneck(
        in_channels,
        128,
        stride=stride,
        conv_layer=partial(StdConv2dSame, eps=1e-8),
        proj_layer=DownsampleConv if reshapes else None,
    ).eval()
    with torch.no_grad():
        for key, parameter in theirs.named_parameters():
            if "norm" in key and key.endswith("weight"):
                parameter.uniform_(0.5, 1.5)
            else:
                parameter.normal_(0, 0.1)
    ours = ViTScratchPreActBottleneck(in_channels, 128, stride=stride)
    renamed = {key.replace("downsample.conv", "shortcut_conv"): value for key, value in theirs.state_dict().items()}
    ours.load_state_dict(renamed, strict=True)
    x = torch.randn(2, in_channels, 9, 11)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-5, rtol=1e-4)


# timm's distilled DeiTs (VisionTransformerDistilled): a distillation token and a second head, mean of both in eval


def timm_distilled_deit(name: str = "deit_tiny_distilled_patch16_224", **kwargs):
    import timm

    model = timm.create_model(name, pretrained=False, **kwargs).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.1)
    return model


def test_a_timm_distilled_deit_converts_to_two_heads_within_1e_5():
    reference = timm_distilled_deit(img_size=64, num_classes=9)
    ours, _ = from_timm(reference, reference.state_dict())
    assert type(ours).__name__ == "ViTScratchForImageClassificationWithTeacher" and ours.config.distillation_token
    images = torch.randn(3, 3, 64, 64)
    assert max_difference(ours, reference, images) < 1e-5  # timm's eval forward: the mean of both heads
    with torch.no_grad():
        tokens = reference.forward_features(images)  # (batch, 2 + N, D) after the final norm
        output = ours(pixel_values=images)
    torch.testing.assert_close(output.cls_logits, reference.head(tokens[:, 0]), atol=1e-5, rtol=0)
    torch.testing.assert_close(output.distillation_logits, reference.head_dist(tokens[:, 1]), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["deit_tiny_distilled_patch16_224", "deit_small_distilled_patch16_224"])
def test_full_size_timm_distilled_deits_convert(name):
    reference = timm_distilled_deit(name)
    ours, _ = from_timm(reference, reference.state_dict())
    assert ours.num_parameters() == sum(p.numel() for p in reference.parameters())
    assert max_difference(ours, reference, torch.randn(1, 3, 224, 224)) < 1e-5


def test_convert_script_from_a_timm_distilled_deit_file(tmp_path):
    reference = timm_distilled_deit(img_size=64, num_classes=9)
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, tmp_path / "weights.safetensors")
    command = [sys.executable, str(REPO / "scripts" / "convert_checkpoint.py"), "--from", "timm"]
    command += ["--timm_model", "deit_tiny_distilled_patch16_224", "--timm_kwargs", "img_size=64"]
    command += ["--input", str(tmp_path / "weights.safetensors"), "--output", str(tmp_path / "ours")]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=PROCESS_TIMEOUT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Parity with the source model" in result.stdout
    from transformers import AutoModelForImageClassification

    ours = AutoModelForImageClassification.from_pretrained(tmp_path / "ours", trust_remote_code=True).eval()
    assert type(ours).__name__ == "ViTScratchForImageClassificationWithTeacher"
    assert max_difference(ours, reference, torch.randn(2, 3, 64, 64)) < 1e-5


def test_a_timm_distilled_deit_reaches_transformers_deit_through_ours(tmp_path):
    """timm -> vit_scratch -> transformers' DeiTForImageClassificationWithTeacher: the same logits, both heads."""
    from transformers import DeiTForImageClassificationWithTeacher

    from modeling_vit_scratch.conversion.convert import to_transformers

    reference = timm_distilled_deit(img_size=64, num_classes=9)
    ours, processor = from_timm(reference, reference.state_dict())
    to_transformers(ours, tmp_path / "deit", processor)
    exported = DeiTForImageClassificationWithTeacher.from_pretrained(tmp_path / "deit").eval()
    images = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        output, tokens = exported(pixel_values=images), reference.forward_features(images)
        torch.testing.assert_close(output.logits, reference(images), atol=1e-5, rtol=0)
        torch.testing.assert_close(output.distillation_logits, reference.head_dist(tokens[:, 1]), atol=1e-5, rtol=0)


def test_a_headless_timm_distilled_deit_converts_to_its_final_tokens():
    reference = timm_distilled_deit(img_size=64, num_classes=0)
    ours, _ = from_timm(reference, reference.state_dict())
    assert type(ours).__name__ == "ViTScratchForImageClassification" and ours.config.num_labels == 0
    assert ours.config.distillation_token
    images = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected, got = reference.forward_features(images), ours.vit(images).last_hidden_state
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
