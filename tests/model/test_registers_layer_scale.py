"""Register tokens and layer scale (DINOv2's additions), module by module on tiny odd-sized configs: where the
registers sit and what they carry, what pooling and the heads read, the scaled residual branches, and that a model
with both off is the paper's ViT, key for key."""

import json
from pathlib import Path

import pytest
import torch
from helpers import tiny_config
from transformers import AutoModelForImageClassification

from modeling_vit_scratch import (
    ViTScratchConfig,
    ViTScratchForImageClassification,
    ViTScratchForImageClassificationWithTeacher,
    ViTScratchModel,
)
from modeling_vit_scratch.modeling_vit_scratch import ViTScratchLayer, ViTScratchLayerScale

SAVED_BEFORE = Path(__file__).resolve().parents[1] / "fixtures" / "saved_before_registers"
PIXELS = torch.randn(2, 3, 20, 20, generator=torch.Generator().manual_seed(3))

# the keys of a one-block distilled model before registers and layer scale existed: every saved folder holds these
PAPER_KEYS = [
    "vit.embeddings.cls_token",
    "vit.embeddings.distillation_token",
    "vit.embeddings.position_embeddings",
    "vit.embeddings.patch_embeddings.projection.weight",
    "vit.embeddings.patch_embeddings.projection.bias",
    *(
        f"vit.layers.0.{name}.{kind}"
        for name in ("layernorm_before", "attention.qkv_proj", "attention.o_proj", "layernorm_after")
        + ("mlp.fc1", "mlp.fc2")
        for kind in ("weight", "bias")
    ),
    "vit.layernorm.weight",
    "vit.layernorm.bias",
    "classifier.weight",
    "classifier.bias",
    "distillation_classifier.weight",
    "distillation_classifier.bias",
]


def randomised(model):
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.1)
    return model.eval()


def test_with_both_off_the_model_is_the_papers_key_for_key():
    config = tiny_config(num_hidden_layers=1, distillation_token=True)
    assert config.num_register_tokens == 0 and config.layerscale_value is None
    model = ViTScratchForImageClassificationWithTeacher(config)
    assert sorted(model.state_dict()) == sorted(PAPER_KEYS)
    assert config.num_prefix_tokens == config.num_class_tokens == 2


def test_a_folder_saved_before_registers_and_layer_scale_loads_and_computes_as_saved():
    """A folder the code wrote before these fields existed (tests/fixtures/README.md says how), read by today's code
    through the Auto classes: the fields default to off, every weight is read, the logits are those it saved."""
    loaded, loading = AutoModelForImageClassification.from_pretrained(SAVED_BEFORE, output_loading_info=True)
    assert type(loaded) is ViTScratchForImageClassification and not any(loading.values()), loading
    config = loaded.config
    assert (config.num_register_tokens, config.layerscale_value, config.position_interpolation) == (0, None, "bicubic")
    expected = torch.tensor(json.loads((SAVED_BEFORE / "logits.json").read_text())["logits"])
    with torch.no_grad():
        logits = loaded.eval()(pixel_values=torch.linspace(-1, 1, 128).reshape(2, 1, 8, 8)).logits
    torch.testing.assert_close(logits, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("position_embedding", ["learned", "sincos"])
@pytest.mark.parametrize("distillation_token", [False, True])
def test_registers_follow_the_class_tokens_and_carry_no_position(position_embedding, distillation_token):
    config = tiny_config(
        num_register_tokens=3, distillation_token=distillation_token, position_embedding=position_embedding
    )
    classes = config.num_class_tokens
    assert config.num_prefix_tokens == classes + 3
    embeddings = randomised(ViTScratchModel(config)).embeddings
    positions = embeddings.position_embeddings
    assert positions.shape == (1, classes + 25, 36)  # no row for a register
    with torch.no_grad():
        tokens = embeddings(PIXELS)
        patches = embeddings.patch_embeddings(PIXELS)
    assert tokens.shape == (2, classes + 3 + 25, 36)
    torch.testing.assert_close(tokens[:, 0], (embeddings.cls_token[0] + positions[:, 0]).expand(2, -1))
    torch.testing.assert_close(tokens[:, classes : classes + 3], embeddings.register_tokens.expand(2, -1, -1))
    torch.testing.assert_close(tokens[:, classes + 3 :], patches + positions[:, classes:])


def test_registers_are_drawn_at_init_and_change_what_the_model_computes():
    model = ViTScratchForImageClassification(tiny_config(num_register_tokens=2)).eval()
    registers = model.vit.embeddings.register_tokens
    assert registers.abs().max() > 0 and not torch.equal(registers[0, 0], registers[0, 1])
    with torch.no_grad():
        before = model(pixel_values=PIXELS).logits
        registers += 1.0
        assert not torch.allclose(model(pixel_values=PIXELS).logits, before)  # attended to by every token


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_pooling_reads_the_class_token_or_the_patches_never_the_registers(pooling):
    config = tiny_config(num_register_tokens=4, distillation_token=True, pooling=pooling)
    model = randomised(ViTScratchModel(config))
    with torch.no_grad():
        output = model(pixel_values=PIXELS)
    tokens = output.last_hidden_state
    assert tokens.shape[1] == 2 + 4 + 25
    expected = tokens[:, 0] if pooling == "cls" else tokens[:, 6:].mean(dim=1)
    torch.testing.assert_close(output.pooler_output, expected)


@pytest.mark.parametrize("model_class", [ViTScratchForImageClassification, ViTScratchForImageClassificationWithTeacher])
def test_heads_computing_only_the_class_tokens_give_the_same_logits_with_registers(model_class):
    model = randomised(model_class(tiny_config(num_register_tokens=3, distillation_token=True)))
    with torch.no_grad():
        short = model(pixel_values=PIXELS)
        full = model(pixel_values=PIXELS, output_hidden_states=True)  # every token through the last block
    torch.testing.assert_close(short.logits, full.logits)
    if model_class is ViTScratchForImageClassificationWithTeacher:  # the distillation token, not a register
        final = model.vit.layernorm(full.hidden_states[-1])
        torch.testing.assert_close(short.distillation_logits, model.distillation_classifier(final[:, 1]))


def test_layer_scale_scales_each_residual_branch_by_its_own_vector():
    config = tiny_config(layerscale_value=0.5)
    layer = randomised(ViTScratchLayer(config))
    hidden = torch.randn(2, 26, 36)
    with torch.no_grad():
        attention, _ = layer.attention(layer.layernorm_before(hidden))
        middle = hidden + layer.layer_scale1.lambda1 * attention
        expected = middle + layer.layer_scale2.lambda1 * layer.mlp(layer.layernorm_after(middle))
        torch.testing.assert_close(layer(hidden)[0], expected)
        assert not torch.equal(layer.layer_scale1.lambda1, layer.layer_scale2.lambda1)


def test_a_layer_scale_of_ones_is_the_unscaled_block_exactly():
    plain = randomised(ViTScratchLayer(tiny_config()))
    scaled = ViTScratchLayer(tiny_config(layerscale_value=1.0)).eval()
    missing, unexpected = scaled.load_state_dict(plain.state_dict(), strict=False)
    assert sorted(missing) == ["layer_scale1.lambda1", "layer_scale2.lambda1"] and not unexpected
    hidden = torch.randn(2, 26, 36)
    with torch.no_grad():
        assert torch.equal(scaled(hidden)[0], plain(hidden)[0])


def test_layer_scale_starts_at_its_value_and_loads_as_saved(tmp_path):
    model = ViTScratchForImageClassification(tiny_config(layerscale_value=1e-5))
    scales = [module.lambda1 for module in model.modules() if isinstance(module, ViTScratchLayerScale)]
    assert len(scales) == 2 * 2 and all(torch.equal(scale, torch.full((36,), 1e-5)) for scale in scales)
    randomised(model).save_pretrained(tmp_path)
    loaded = ViTScratchForImageClassification.from_pretrained(tmp_path)
    for key, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], tensor), key


def test_every_new_parameter_learns():
    model = ViTScratchForImageClassification(tiny_config(num_register_tokens=2, layerscale_value=0.1)).train()
    model(pixel_values=PIXELS, labels=torch.tensor([0, 1])).loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_position_interpolation_picks_torchs_antialiased_bicubic_kernel():
    tables = {}
    for mode in ("bicubic", "bicubic_antialias"):
        embeddings = ViTScratchModel(tiny_config(position_interpolation=mode)).embeddings
        with torch.no_grad():
            embeddings.position_embeddings.copy_(torch.randn(1, 26, 36, generator=torch.Generator().manual_seed(0)))
        tables[mode] = embeddings.position_embeddings_for((7, 3))
        grid = embeddings.position_embeddings[:, 1:].reshape(1, 5, 5, 36).permute(0, 3, 1, 2)
        expected = torch.nn.functional.interpolate(
            grid, size=(7, 3), mode="bicubic", align_corners=False, antialias=mode == "bicubic_antialias"
        )
        torch.testing.assert_close(tables[mode][:, 1:], expected.permute(0, 2, 3, 1).reshape(1, 21, 36))
    assert not torch.allclose(tables["bicubic"], tables["bicubic_antialias"])  # another kernel, even upsampling


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(num_register_tokens=-1), "num_register_tokens must be 0 or more"),
        (dict(layerscale_value=0.0), "layerscale_value must be a positive number"),
        (dict(layerscale_value="1e-5"), "layerscale_value must be"),
        (dict(position_interpolation="bilinear"), "position_interpolation must be one of"),
    ],
)
def test_invalid_register_and_layer_scale_values_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        ViTScratchConfig(**fields)


def test_the_new_fields_survive_a_json_round_trip(tmp_path):
    config = ViTScratchConfig(num_register_tokens=4, layerscale_value=1e-5, position_interpolation="bicubic_antialias")
    config.save_pretrained(tmp_path)
    loaded = ViTScratchConfig.from_pretrained(tmp_path)
    assert (loaded.num_register_tokens, loaded.layerscale_value, loaded.position_interpolation) == (
        4,
        1e-5,
        "bicubic_antialias",
    )
