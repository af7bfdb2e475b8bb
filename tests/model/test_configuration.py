import json
from pathlib import Path

import pytest
import torch

from modeling_vit_scratch import PRESETS, ViTScratchConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "models"


def test_defaults_are_vit_base_16():
    config = ViTScratchConfig()
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (768, 12, 12)
    assert (config.intermediate_size, config.patch_size, config.image_size) == (3072, 16, 224)
    assert config.grid_size == (14, 14)


@pytest.mark.parametrize(
    "name, layers, hidden, mlp, heads, patch",
    [
        ("vit-tiny-patch16-224", 12, 192, 768, 3, 16),
        ("vit-small-patch32-224", 12, 384, 1536, 6, 32),
        ("vit-base-patch8-224", 12, 768, 3072, 12, 8),
        ("vit-large-patch14-224", 24, 1024, 4096, 16, 14),
        ("vit-huge-patch14-224", 32, 1280, 5120, 16, 14),
        ("vit-base-patch16-384", 12, 768, 3072, 12, 16),
    ],
)
def test_presets_follow_table_1(name, layers, hidden, mlp, heads, patch):
    config = ViTScratchConfig.from_preset(name)
    assert (config.num_hidden_layers, config.hidden_size, config.intermediate_size) == (layers, hidden, mlp)
    assert (config.num_attention_heads, config.patch_size) == (heads, patch)


@pytest.mark.parametrize(
    "name, depths, patch, grid, parameters",
    [
        ("vit-tiny-r-s16-p8-224", [], 8, (7, 7), 6_337_704),
        ("vit-small-r26-s32-224", [2, 2, 2, 2], 1, (7, 7), 36_431_912),
        ("vit-base-r50-s16-224", [3, 4, 9], 1, (14, 14), 98_659_112),
    ],
)
def test_hybrid_presets_are_timms_hybrids(name, depths, patch, grid, parameters):
    """Parameter counts with a 1000-class head, as timm counts `timm.create_model(name)` (R50's default there is the
    head-less ImageNet-21k model: 97,890,112 plus the head's 769,000). tests/conversion/test_convert_timm.py checks that a
    converted timm hybrid has as many parameters as timm's."""
    from modeling_vit_scratch import ViTScratchForImageClassification

    config = ViTScratchConfig.from_preset(name, num_labels=1000)
    assert (config.stem, config.stem_depths, config.patch_size, config.grid_size) == ("resnetv2", depths, patch, grid)
    with torch.device("meta"):
        assert ViTScratchForImageClassification(config).num_parameters() == parameters


def test_preset_overrides_and_unknown_preset():
    assert ViTScratchConfig.from_preset("vit-tiny-patch16-224", num_labels=7).num_labels == 7
    with pytest.raises(ValueError, match="Unknown preset 'vit-gigantic'.*vit-base-patch16-224"):
        ViTScratchConfig.from_preset("vit-gigantic")
    assert "vit-huge-patch16-224" not in PRESETS  # no published ViT-H/16: presets exist where checkpoints do


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("vit-*.json")), ids=lambda p: p.stem)
def test_config_files_equal_their_presets(path):
    saved = json.loads(path.read_text())
    preset = ViTScratchConfig.from_preset(path.stem).to_dict()
    for key in ("image_size", "patch_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "stem"):
        assert saved.get(key, "none") == preset[key]
    for key in ("stem_width", "stem_depths", "stem_preactivation"):  # a hybrid's stem, as its file says
        assert saved.get(key, preset[key]) == preset[key]
    assert ViTScratchConfig.from_json_file(str(path)).to_dict()["intermediate_size"] == preset["intermediate_size"]


def test_main_presets_ship_as_json():
    assert {p.stem for p in CONFIGS.glob("vit-*.json")} >= {
        "vit-tiny-patch16-224",
        "vit-small-patch16-224",
        "vit-base-patch16-224",
        "vit-large-patch16-224",
        "vit-huge-patch14-224",
    }


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            dict(hidden_size=100, num_attention_heads=3),
            "hidden_size \\(100\\) must be divisible by num_attention_heads",
        ),
        (dict(image_size=225), "image_size 225 must be divisible by patch_size 16"),
        (dict(image_size=(224, 230)), "must be divisible by patch_size"),
        (dict(pooling="max"), "pooling must be one of"),
        (dict(position_embedding="rope"), "position_embedding must be one of"),
        (dict(patch_embedding="mlp"), "patch_embedding must be one of"),
        (dict(num_channels=0), "num_channels must be a positive integer"),
        (dict(num_hidden_layers=-1), "num_hidden_layers must be a positive integer"),
        (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob must be in"),
        (dict(drop_path_rate=-0.1), "drop_path_rate must be in"),
        (dict(layer_norm_eps=0.0), "layer_norm_eps must be > 0"),
        (dict(position_embedding="sincos", hidden_size=18, num_attention_heads=3), "divisible by 4"),
        (dict(patch_size=[16, 16, 3]), "patch_size must be an int or a \\(height, width\\) pair"),
        (dict(stem="cnn"), "stem must be one of \\('none', 'resnetv2', 'conv'\\)"),
        (dict(stem="conv"), "divisible by patch_size 16 times the stem's stride 16 \\(config.stem_stride\\)"),
        (dict(stem="resnetv2", stem_depths=[3, 4, 9], image_size=200, patch_size=1), "stem's stride 16"),
        (dict(stem="resnetv2", patch_size=1, stem_width=48), "stem_width must be a positive multiple of 32"),
        (dict(stem="resnetv2", patch_size=1, stem_depths=[2, 0]), "stem_depths must hold positive block counts"),
        (dict(stem="conv", patch_size=1, stem_channels=[]), "stem_channels must list at least one positive"),
        (dict(stem="conv", patch_size=1, stem_channels=[8, -1]), "stem_channels must list at least one positive"),
        (dict(stem_depths=[1, "2"]), "stem_depths must be list\\[int\\] \\| tuple\\[int, ...\\], got \\[1, '2'\\]"),
    ],
)
def test_invalid_values_raise_value_error_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        ViTScratchConfig(**fields)


def test_json_round_trip_keeps_every_field(tmp_path):
    config = ViTScratchConfig(
        image_size=(32, 48),
        patch_size=8,
        pooling="mean",
        position_embedding="sincos",
        patch_embedding="linear",
        qkv_bias=False,
        layer_norm_eps=1e-12,
        drop_path_rate=0.1,
        id2label={0: "cat", 1: "dog"},
    )
    config.save_pretrained(tmp_path)
    loaded = ViTScratchConfig.from_pretrained(tmp_path)
    assert loaded.grid_size == (4, 6)
    for key in ("pooling", "position_embedding", "patch_embedding", "qkv_bias", "layer_norm_eps", "drop_path_rate"):
        assert getattr(loaded, key) == getattr(config, key)
    assert loaded.id2label == {0: "cat", 1: "dog"} and loaded.label2id == {"cat": 0, "dog": 1}


@pytest.mark.parametrize(
    "fields, stride, grid",
    [
        (dict(), 1, (14, 14)),
        (dict(stem="resnetv2", patch_size=1), 4, (56, 56)),  # the root alone
        (dict(stem="resnetv2", patch_size=8), 4, (7, 7)),  # timm's vit_tiny_r_s16_p8_224
        (dict(stem="resnetv2", stem_depths=[3, 4, 9], patch_size=1), 16, (14, 14)),  # the paper's R50+ViT-B/16
        (dict(stem="resnetv2", stem_depths=[2, 2, 2, 2], patch_size=1), 32, (7, 7)),  # R26+ViT-S/32
        (dict(stem="conv", patch_size=1), 16, (14, 14)),  # Xiao et al.'s 4GF stem
        (dict(stem="conv", stem_channels=[8], patch_size=(2, 4), image_size=(28, 40)), 2, (7, 5)),
    ],
)
def test_stem_stride_and_the_grid_of_feature_map_cells(fields, stride, grid):
    config = ViTScratchConfig(**fields)
    assert config.stem_stride == stride and config.grid_size == grid


def test_stem_fields_survive_a_json_round_trip_as_lists(tmp_path):
    config = ViTScratchConfig(stem="resnetv2", stem_width=32, stem_depths=(1, 2), stem_preactivation=True, patch_size=2)
    assert config.stem_depths == [1, 2] and ViTScratchConfig().stem_depths == []  # one type, whatever was given
    config.save_pretrained(tmp_path)
    loaded = ViTScratchConfig.from_pretrained(tmp_path)
    for key in ("stem", "stem_width", "stem_depths", "stem_preactivation", "stem_channels"):
        assert getattr(loaded, key) == getattr(config, key), key
    assert loaded.grid_size == config.grid_size == (14, 14)


@pytest.mark.parametrize(
    "override, message",
    [
        (dict(num_attention_heads=5), "hidden_size \\(768\\) must be divisible by num_attention_heads \\(5\\)"),
        (dict(pooling="avg"), "pooling must be one of \\('cls', 'mean'\\), got 'avg'"),
        (dict(image_size=225), "image_size 225 must be divisible by patch_size 16"),
    ],
)
def test_overrides_at_load_get_the_constructors_checks(tmp_path, override, message):
    """transformers sets `from_pretrained` keyword overrides on the built config, after the constructor's checks."""
    from transformers import AutoConfig

    from modeling_vit_scratch import ViTScratchModel

    ViTScratchConfig().save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=message):
        ViTScratchConfig(**override)
    for load in (ViTScratchConfig.from_pretrained, AutoConfig.from_pretrained, ViTScratchModel.from_pretrained):
        with pytest.raises(ValueError, match=message):
            load(tmp_path, **override)
    loaded = AutoConfig.from_pretrained(tmp_path, hidden_size=48, num_attention_heads=4, pooling="mean")
    assert (loaded.hidden_size, loaded.num_attention_heads, loaded.pooling) == (48, 4, "mean")


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("hidden_size", 16.5, "hidden_size must be int, got 16.5 \\(float\\)"),
        ("qkv_bias", "yes", "qkv_bias must be bool, got 'yes' \\(str\\)"),
        ("image_size", "large", "image_size must be int \\| list\\[int\\] \\| tuple\\[int, int\\], got 'large'"),
    ],
)
def test_a_value_of_the_wrong_type_is_one_line_naming_the_field(tmp_path, field, value, message):
    """@strict raises a two-line StrictDataclassFieldValidationError, not a ValueError; ours is both, in one line."""
    from huggingface_hub.errors import StrictDataclassError

    ViTScratchConfig().save_pretrained(tmp_path)
    for make, arguments in ((ViTScratchConfig, ()), (ViTScratchConfig.from_pretrained, (tmp_path,))):
        with pytest.raises(ValueError, match=message) as raised:
            make(*arguments, **{field: value})
        assert isinstance(raised.value, StrictDataclassError) and "\n" not in str(raised.value)


def test_an_unknown_config_field_is_refused_with_the_closest_name():
    from modeling_vit_scratch.errors import UserError
    from modeling_vit_scratch.training.model_source import check_config_fields

    assert ViTScratchConfig(hiden_size=8).hidden_size == 768  # the typo is stored, silently: why the check exists
    check_config_fields({"hidden_size": 48, "drop_path_rate": 0.1, "id2label": {"0": "a"}})
    with pytest.raises(UserError, match="'hidden_size'"):
        check_config_fields({"hidden_size": 48, "hiden_size": 8})
    with pytest.raises(UserError, match="zzz"):
        check_config_fields({"zzz": 1})


MAE_FIELDS = ("mask_ratio", "decoder_hidden_size", "decoder_num_hidden_layers", "decoder_num_attention_heads")
MAE_FIELDS += ("decoder_intermediate_size", "norm_pix_loss")


def test_the_masked_autoencoder_fields_default_to_vitmae_and_a_folder_saved_without_them_loads_the_same(tmp_path):
    from transformers import ViTMAEConfig

    assert all(getattr(ViTScratchConfig(), name) == getattr(ViTMAEConfig(), name) for name in MAE_FIELDS)
    config = ViTScratchConfig(hidden_size=48, num_attention_heads=4, decoder_hidden_size=64)
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["decoder_hidden_size"] == 64
    older = {key: value for key, value in saved.items() if key not in MAE_FIELDS}  # saved before these fields
    (tmp_path / "config.json").write_text(json.dumps(older))
    loaded = ViTScratchConfig.from_pretrained(tmp_path)
    assert loaded.to_dict() == {**config.to_dict(), "decoder_hidden_size": 512}


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"mask_ratio": 1.0}, r"mask_ratio must be in \[0, 1\), got 1.0"),
        ({"decoder_num_hidden_layers": 0}, "decoder_num_hidden_layers must be a positive integer, got 0"),
        (
            {"decoder_hidden_size": 30, "decoder_num_attention_heads": 3},
            r"decoder_hidden_size \(30\) must be divisible",
        ),
        ({"decoder_hidden_size": 24, "decoder_num_attention_heads": 5}, r"by decoder_num_attention_heads \(5\)"),
    ],
)
def test_masked_autoencoder_fields_are_checked(fields, message):
    with pytest.raises(ValueError, match=message):
        ViTScratchConfig(**fields)
