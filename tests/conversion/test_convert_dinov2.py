"""`vit-scratch convert` with the DINOv2 family: transformers' Dinov2Model and Dinov2WithRegistersModel both ways,
at their own image size and at another with `interpolate_pos_encoding` (transformers' Dinov2 always resamples), on
random weights the reference draws; and what neither side can hold, refused by name."""

from functools import partial

import pytest
import torch
from helpers import in_process
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import (
    AutoModel,
    Dinov2Config,
    Dinov2ForImageClassification,
    Dinov2Model,
    Dinov2WithRegistersConfig,
    Dinov2WithRegistersModel,
)

from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification
from modeling_vit_scratch.conversion import command
from modeling_vit_scratch.conversion.convert import from_transformers, to_transformers
from modeling_vit_scratch.errors import UserError

SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, patch_size=14, layerscale_value=0.5)
REFERENCES = {Dinov2Model: Dinov2Config, Dinov2WithRegistersModel: Dinov2WithRegistersConfig}


def reference(model_class, image_size=98, **fields):
    """The reference with its own random weights, made non-trivial everywhere (norms, biases, scales, tokens)."""
    model = model_class(REFERENCES[model_class](**SIZES | dict(image_size=image_size) | fields))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.1)
    return model.eval()


def pixels(size: int) -> torch.Tensor:
    return torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(size))


def outputs(model, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(final tokens, pooled output): ours resamples its positions when asked, transformers' Dinov2 always does."""
    options = {"interpolate_pos_encoding": True} if isinstance(model, ViTScratchForImageClassification) else {}
    with torch.no_grad():
        output = model.base_model(pixel_values=pixels(size), **options)
    return output.last_hidden_state, output.pooler_output


convert = partial(in_process, command.main)  # the command in this process: 0, a status or its error line


@pytest.mark.parametrize("model_class", list(REFERENCES))
def test_dinov2_converts_both_ways_computing_what_it_computes_at_its_size_and_another(tmp_path, model_class):
    source = reference(model_class)
    source.save_pretrained(tmp_path / "source")
    assert convert("--from", "transformers", "--input", tmp_path / "source", "--output", tmp_path / "ours") == 0
    ours = AutoModel.from_pretrained(tmp_path / "ours", trust_remote_code=True)
    assert ours.config.num_register_tokens == (4 if model_class is Dinov2WithRegistersModel else 0)
    ours = ViTScratchForImageClassification.from_pretrained(tmp_path / "ours").eval()
    for size in (98, 224, 56):  # its own, a larger one and a smaller one: the two resampling directions
        for theirs, mine in zip(outputs(source, size), outputs(ours, size), strict=True):
            torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)

    assert convert("--to", "transformers", "--input", tmp_path / "ours", "--output", tmp_path / "back") == 0
    back = AutoModel.from_pretrained(tmp_path / "back", trust_remote_code=False).eval()
    assert type(back) is model_class
    for size in (98, 224):
        for theirs, again in zip(outputs(source, size), outputs(back, size), strict=True):
            torch.testing.assert_close(again, theirs, atol=1e-5, rtol=0)


@pytest.mark.parametrize("model_class", list(REFERENCES))
def test_the_518_pixel_checkpoints_shape_matches_at_224(model_class):
    source = reference(model_class, image_size=518)
    ours, _ = from_transformers(source)
    for theirs, mine in zip(outputs(source, 224), outputs(ours, 224), strict=True):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


def test_each_dinov2_resamples_with_its_own_kernel():
    """Dinov2WithRegisters resamples antialiased, Dinov2 not: with the other kernel the 224 outputs differ."""
    source = reference(Dinov2WithRegistersModel)
    ours, _ = from_transformers(source)
    assert ours.config.position_interpolation == "bicubic_antialias"
    ours.vit.embeddings.antialias = False
    assert not torch.allclose(outputs(ours, 224)[0], outputs(source, 224)[0], atol=1e-3)
    assert from_transformers(reference(Dinov2Model))[0].config.position_interpolation == "bicubic"


@settings(max_examples=15, deadline=None)
@given(registers=st.integers(0, 3), scale=st.sampled_from([None, 0.1]), layers=st.integers(1, 2))
def test_ours_to_dinov2_and_back_is_the_identity_on_weights(registers, scale, layers):
    if not registers and scale is None:
        scale = 1.0  # one of the two, or it is written as transformers' ViT
    config = ViTScratchConfig(
        image_size=28, patch_size=14, hidden_size=8, num_attention_heads=2, num_hidden_layers=layers,
        intermediate_size=16, num_labels=0, num_register_tokens=registers, layerscale_value=scale,
        position_interpolation="bicubic_antialias" if registers else "bicubic",
    )  # fmt: skip
    model = ViTScratchForImageClassification(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.1)
    theirs, _ = to_transformers(model)
    assert type(theirs) is (Dinov2WithRegistersModel if registers else Dinov2Model)
    back, _ = from_transformers(theirs)
    expected = model.state_dict()
    if scale is None:  # no layer scale written as Dinov2's scales of one
        assert all(torch.equal(tensor, torch.ones(8)) for key, tensor in theirs.state_dict().items() if "scale" in key)
        expected = {key: tensor for key, tensor in back.state_dict().items() if "layer_scale" in key} | expected
    assert back.state_dict().keys() == expected.keys()
    for key, tensor in expected.items():
        assert torch.equal(back.state_dict()[key], tensor), key
    with torch.no_grad():
        x = torch.randn(1, 3, 28, 28)
        torch.testing.assert_close(back.vit(pixel_values=x).last_hidden_state, theirs(pixel_values=x).last_hidden_state)


def test_what_dinov2_cannot_be_is_refused_by_name():
    with pytest.raises(UserError, match="use_swiglu_ffn=True.*SwiGLU is not supported"):
        from_transformers(reference(Dinov2Model, use_swiglu_ffn=True))
    classifier = Dinov2ForImageClassification(Dinov2Config(**SIZES, image_size=28, num_labels=3))
    with pytest.raises(UserError, match="convert the Dinov2Model"):
        from_transformers(classifier)
    base = dict(image_size=28, patch_size=14, hidden_size=8, num_attention_heads=2, num_hidden_layers=1)
    cases = {
        "a classification head": dict(num_register_tokens=1, num_labels=3),
        "a distillation token": dict(layerscale_value=1.0, num_labels=0, distillation_token=True),
        "intermediate_size=12": dict(layerscale_value=1.0, num_labels=0, intermediate_size=12),
        "position_interpolation='bicubic'": dict(num_register_tokens=2, num_labels=0),
    }
    for name, fields in cases.items():
        with pytest.raises(UserError, match=name):
            to_transformers(ViTScratchForImageClassification(ViTScratchConfig(**base | fields)))
