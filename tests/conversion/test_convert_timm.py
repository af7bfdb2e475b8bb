"""`vit-scratch convert --from timm`: parity with timm's ViT, DeiT (distilled, two heads), a ResNet hybrid and a
head-less mean-pooled model on random weights, DINOv2 (layer scale, registers; on to transformers' Dinov2WithRegisters;
the giant's SwiGLU refused by name), and what timm is never asked to do (download, unpickle)."""

import json
from functools import partial

import pytest
import torch
from helpers import in_process
from safetensors.torch import save_file
from transformers import AutoModel, Dinov2WithRegistersModel

from modeling_vit_scratch import ViTScratchForImageClassification
from modeling_vit_scratch.conversion import command
from modeling_vit_scratch.conversion.timm_source import timm_kwargs
from modeling_vit_scratch.modeling_vit_scratch import ViTScratchForImageClassificationWithTeacher

timm = pytest.importorskip("timm")
pytestmark = pytest.mark.timm

CASES = {
    "vit_tiny_patch16_224": "img_size=32,depth=2",
    "deit_tiny_distilled_patch16_224": "img_size=32,depth=2",
    "vit_tiny_r_s16_p8_224": "img_size=64,depth=1",  # a hybrid: the ResNet root before the patch projection
    "vit_small_patch16_224": "img_size=32,depth=1,global_pool=avg,fc_norm=True",  # no head: pooled features
}
# DINOv2: layer scale and registers (timm's reg4 adds no position to the class token)
SMALL = "img_size=56,depth=2"
DINOV2_CASES = [
    ("vit_small_patch14_dinov2", SMALL),
    ("vit_small_patch14_reg4_dinov2", SMALL),
    ("vit_small_patch14_reg4_dinov2", f"{SMALL},no_embed_class=False"),  # registers with positions: folded in
    ("vit_small_patch14_reg4_dinov2", f"{SMALL},dynamic_img_size=True"),  # timm resamples at run time
]


convert = partial(in_process, command.main)  # the command in this process: 0, a status or its error line


def timm_weights(tmp_path, name: str, kwargs: str, classes: int):
    model = timm.create_model(name, pretrained=False, num_classes=classes, **timm_kwargs(kwargs)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    path = tmp_path / f"{name}.safetensors"
    save_file({key: tensor.contiguous() for key, tensor in model.state_dict().items()}, path)
    return model, path


@pytest.mark.parametrize("name", list(CASES))
def test_from_timm_computes_what_timm_computes(tmp_path, name):
    classes = 0 if "global_pool" in CASES[name] else 5
    reference, path = timm_weights(tmp_path, name, CASES[name], classes)
    argv = ["--from", "timm", "--timm_model", name, "--timm_kwargs", CASES[name], "--input", path]
    assert convert(*argv, "--output", tmp_path / "out") == 0
    loaded = ViTScratchForImageClassification.from_pretrained(tmp_path / "out").eval()
    if "distilled" in name:
        loaded = ViTScratchForImageClassificationWithTeacher.from_pretrained(tmp_path / "out").eval()
    size = reference.patch_embed.img_size
    pixels = torch.randn(2, 3, *size)
    with torch.no_grad():
        torch.testing.assert_close(loaded(pixel_values=pixels).logits, reference(pixels), atol=1e-4, rtol=1e-4)
    record = json.loads((tmp_path / "out" / "conversion_record.json").read_text())
    assert record["from"] == "timm" and record["timm_model"] == name and record["input"] == path.name


@pytest.mark.parametrize(
    "change",
    [
        ["--timm_kwargs", "img_size=64,depth=2"],  # weights made for 32-pixel images
        ["--timm_kwargs", "img_size=32,depth=2,pretrained=True"],  # would download
        ["--timm_kwargs", "img_size=32,depth=2,checkpoint_path=w.pth"],  # would unpickle
        ["--timm_model", "hf-hub:someone/vit"],  # a model source, not an architecture
        ["--timm_model", "vit_not_an_architecture"],
    ],
)
def test_what_timm_would_download_read_or_not_fit_is_one_line_and_nothing_written(tmp_path, change):
    _, path = timm_weights(tmp_path, "vit_tiny_patch16_224", CASES["vit_tiny_patch16_224"], 5)
    argv = {"--timm_model": "vit_tiny_patch16_224", "--timm_kwargs": "img_size=32,depth=2"} | dict([change])
    words = [word for pair in argv.items() for word in pair]
    error = convert("--from", "timm", *words, "--input", path, "--output", tmp_path / "out")
    assert isinstance(error, str) and error.startswith("error: ") and "\n" not in error and change[0] in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name, kwargs", DINOV2_CASES)
def test_timms_dinov2_converts_computing_what_timm_computes(tmp_path, name, kwargs):
    reference, path = timm_weights(tmp_path, name, kwargs, 5)
    argv = ["--from", "timm", "--timm_model", name, "--timm_kwargs", kwargs, "--input", path]
    assert convert(*argv, "--output", tmp_path / "out") == 0
    ours = ViTScratchForImageClassification.from_pretrained(tmp_path / "out").eval()
    assert ours.config.layerscale_value == 1e-5 and ours.config.num_register_tokens == (4 if "reg4" in name else 0)
    sizes = [(56, 56)] + ([(70, 84)] if "dynamic" in kwargs else [])
    for size in sizes:
        pixels = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            logits = ours(pixel_values=pixels, interpolate_pos_encoding=True).logits
            torch.testing.assert_close(logits, reference(pixels), atol=1e-5, rtol=1e-4)


def test_timms_reg4_goes_on_to_transformers_dinov2_with_registers(tmp_path):
    reference, path = timm_weights(tmp_path, "vit_small_patch14_reg4_dinov2", SMALL, 0)
    argv = ["--timm_model", "vit_small_patch14_reg4_dinov2", "--timm_kwargs", SMALL, "--input", path]
    assert convert("--from", "timm", *argv, "--output", tmp_path / "ours") == 0
    assert convert("--to", "transformers", "--input", tmp_path / "ours", "--output", tmp_path / "theirs") == 0
    theirs = AutoModel.from_pretrained(tmp_path / "theirs").eval()
    assert isinstance(theirs, Dinov2WithRegistersModel)
    pixels = torch.randn(2, 3, 56, 56)
    with torch.no_grad():
        expected = reference.forward_features(pixels)  # final tokens, after the norm: [class, registers, patches]
        torch.testing.assert_close(theirs(pixel_values=pixels).last_hidden_state, expected, atol=1e-5, rtol=1e-4)


def test_dinov2_giants_swiglu_is_refused_by_name(tmp_path):
    kwargs = "img_size=28,depth=1,embed_dim=48,num_heads=2"
    _, path = timm_weights(tmp_path, "vit_giant_patch14_dinov2", kwargs, 0)
    argv = ["--timm_model", "vit_giant_patch14_dinov2", "--timm_kwargs", kwargs, "--input", path]
    error = convert("--from", "timm", *argv, "--output", tmp_path / "out")
    assert isinstance(error, str) and "\n" not in error and "mlp_layer=GluMlp" in error and "SwiGLU" in error
    assert not (tmp_path / "out").exists()
