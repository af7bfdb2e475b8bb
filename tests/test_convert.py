"""Conversion from and to transformers' ViT: same function to 1e-5, bit-exact round trip, clear key errors."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import ViTConfig, ViTForImageClassification, ViTModel, pipeline

from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification, ViTScratchImageProcessor
from modeling_vit_scratch.convert import (
    from_transformers,
    timm_key_map,
    to_transformers,
    transformers_key_map,
)

REFERENCE_SIZES = {
    "small-rgb": dict(image_size=32, patch_size=8, num_channels=3, hidden_size=48, num_hidden_layers=2,
                      num_attention_heads=3, intermediate_size=37),
    "larger-gray": dict(image_size=48, patch_size=6, num_channels=1, hidden_size=64, num_hidden_layers=3,
                        num_attention_heads=4, intermediate_size=96, qkv_bias=False, layer_norm_eps=1e-12),
}  # fmt: skip


def reference_vit(size: str, attn_implementation: str = "eager", num_labels: int = 7) -> ViTForImageClassification:
    config = ViTConfig(**REFERENCE_SIZES[size], num_labels=num_labels)
    model = ViTForImageClassification(config).eval()
    with torch.no_grad():  # random, non-trivial weights everywhere (LayerNorms and biases too)
        for parameter in model.parameters():
            parameter.normal_(0, 0.1)
    model.set_attn_implementation(attn_implementation)
    return model


def logits(model, pixel_values, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model(pixel_values=pixel_values, **kwargs).logits


@pytest.mark.parametrize("size", sorted(REFERENCE_SIZES))
@pytest.mark.parametrize("kernel", ["eager", "sdpa"])
def test_converted_transformers_model_computes_the_same_logits(tmp_path, size, kernel):
    reference = reference_vit(size, kernel)
    reference.save_pretrained(tmp_path / "reference")
    ours, processor = from_transformers(str(tmp_path / "reference"))
    ours.set_attn_implementation(kernel)
    config = REFERENCE_SIZES[size]
    images = torch.randn(3, config["num_channels"], config["image_size"], config["image_size"])
    assert (logits(ours, images) - logits(reference, images)).abs().max() < 1e-5
    assert ours.config.layer_norm_eps == reference.config.layer_norm_eps
    assert ours.config.qkv_bias == reference.config.qkv_bias and ours.config.id2label == reference.config.id2label
    assert processor.size == {"height": config["image_size"], "width": config["image_size"]}


@pytest.mark.parametrize("new_size", [(64, 64), (32, 56)])
def test_interpolated_position_embeddings_match_transformers(tmp_path, new_size):
    reference = reference_vit("small-rgb")
    reference.save_pretrained(tmp_path / "reference")
    ours, _ = from_transformers(str(tmp_path / "reference"))
    images = torch.randn(2, 3, *new_size)
    expected = logits(reference, images, interpolate_pos_encoding=True)
    assert (logits(ours, images, interpolate_pos_encoding=True) - expected).abs().max() < 1e-5


def test_both_key_layouts_and_the_base_model_convert(tmp_path):
    """transformers 5 saves the 4.x layout (`encoder.layer.i.attention.attention.query`); its modules, and so any
    state dict written straight from them, use the 5.x names (`layers.i.attention.q_proj`). Both convert."""
    reference = reference_vit("small-rgb")
    reference.save_pretrained(tmp_path / "saved")
    assert any(".encoder.layer." in key for key in load_file(tmp_path / "saved" / "model.safetensors"))
    (tmp_path / "in_memory").mkdir()
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, tmp_path / "in_memory" / "model.safetensors")
    reference.config.to_json_file(tmp_path / "in_memory" / "config.json")
    images = torch.randn(2, 3, 32, 32)
    for folder in ("saved", "in_memory"):
        ours, _ = from_transformers(str(tmp_path / folder))
        assert (logits(ours, images) - logits(reference, images)).abs().max() < 1e-5, folder

    base = ViTModel(reference.config, add_pooling_layer=True).eval()  # its tanh pooler has no counterpart
    base.save_pretrained(tmp_path / "base")
    ours_base, _ = from_transformers(str(tmp_path / "base"))
    with torch.no_grad():
        expected = base(images).last_hidden_state
        got = ours_base.vit(images).last_hidden_state
    assert ours_base.config.num_labels == 0 and (got - expected).abs().max() < 1e-5


def test_round_trip_through_the_transformers_layout_is_bit_exact(tmp_path):
    config = ViTScratchConfig(**REFERENCE_SIZES["larger-gray"], id2label={0: "no", 1: "yes"})
    ours = ViTScratchForImageClassification(config).eval()
    processor = ViTScratchImageProcessor.for_config(config)
    to_transformers(ours, tmp_path / "hf", processor)
    exported = ViTForImageClassification.from_pretrained(tmp_path / "hf").eval()
    images = torch.randn(2, 1, 48, 48)
    assert (logits(exported, images) - logits(ours, images)).abs().max() < 1e-5
    back, back_processor = from_transformers(str(tmp_path / "hf"))
    for key, tensor in ours.state_dict().items():
        assert torch.equal(back.state_dict()[key], tensor), key
    assert back.config.id2label == {0: "no", 1: "yes"}
    assert back_processor.image_mean == processor.image_mean and back_processor.resample == processor.resample


def test_mean_pooling_cannot_be_exported_to_transformers(tmp_path):
    ours = ViTScratchForImageClassification(ViTScratchConfig(**REFERENCE_SIZES["small-rgb"], pooling="mean"))
    with pytest.raises(ValueError, match="pooling='mean'"):
        to_transformers(ours, tmp_path / "hf")


@pytest.mark.parametrize("change", ["missing", "extra"])
def test_a_missing_or_extra_key_is_an_error_naming_it(tmp_path, change):
    reference_vit("small-rgb").save_pretrained(tmp_path / "reference")
    weights = load_file(tmp_path / "reference" / "model.safetensors")
    if change == "missing":
        del weights["vit.encoder.layer.1.output.dense.bias"]
    else:
        weights["vit.layers.0.attention.rotary.weight"] = torch.zeros(3)
    save_file(weights, tmp_path / "reference" / "model.safetensors")
    name = "vit.encoder.layer.1.output.dense.bias" if change == "missing" else "vit.layers.0.attention.rotary.weight"
    with pytest.raises(KeyError, match=name.replace(".", r"\.")):
        from_transformers(str(tmp_path / "reference"))


def test_not_a_vit_folder_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="not a transformers 'vit'"):
        from_transformers(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        from_transformers(str(tmp_path / "missing" / "folder"))


def test_timm_key_map_covers_every_parameter_of_our_model():
    for fc_norm in (False, True):
        config = ViTScratchConfig(**REFERENCE_SIZES["small-rgb"], pooling="mean" if fc_norm else "cls", fc_norm=fc_norm)
        assert set(ViTScratchForImageClassification(config).state_dict()) <= set(timm_key_map(2))


def test_converted_folder_classifies_with_the_pipeline(tmp_path):
    reference_vit("small-rgb").save_pretrained(tmp_path / "reference")
    ours, processor = from_transformers(str(tmp_path / "reference"))
    ours.save_pretrained(tmp_path / "ours")
    processor.save_pretrained(tmp_path / "ours")
    from PIL import Image

    predictions = pipeline("image-classification", model=str(tmp_path / "ours"))(Image.new("RGB", (50, 40)))
    assert len(predictions) == 5 and predictions[0]["label"].startswith("LABEL_")


def test_convert_script_both_ways(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "convert_checkpoint.py"
    reference = reference_vit("small-rgb")
    reference.save_pretrained(tmp_path / "reference")
    for args in (["--from", "transformers", "--input", str(tmp_path / "reference"), "--output", str(tmp_path / "ours")],
                 ["--to", "transformers", "--input", str(tmp_path / "ours"), "--output", str(tmp_path / "back")]):
        result = subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
    back = ViTForImageClassification.from_pretrained(tmp_path / "back")
    for key, tensor in reference.state_dict().items():
        assert torch.equal(back.state_dict()[key], tensor), key
    failed = subprocess.run([sys.executable, str(script), "--from", "transformers", "--input", str(tmp_path / "nope"),
                             "--output", str(tmp_path / "x")], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert failed.returncode != 0 and failed.stderr.strip().splitlines()[-1].startswith("error: Folder")
