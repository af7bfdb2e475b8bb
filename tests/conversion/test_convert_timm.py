"""`vit-scratch convert --from timm`: parity with timm's ViT, DeiT (distilled, two heads), a ResNet hybrid and a
head-less mean-pooled model on random weights, and what timm is never asked to do (download, unpickle)."""

import json

import pytest
import torch
from safetensors.torch import save_file

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


def convert(*argv) -> int | str:
    try:
        command.main([str(word) for word in argv])
    except SystemExit as stop:
        return stop.code
    return 0


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
