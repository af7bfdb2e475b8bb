"""What the benchmark measures: the configs (architectures of configs/models), each implementation built at them
with random weights as a user gets it, the precisions, and a forward pass's FLOPs. transformers' ViT has no stem: a
config with one (`digits`, `make train`'s model; the hybrid `r26s32_224`) is measured against timm alone.

The `pretrain` mode trains the masked autoencoder (`ViTScratchForPreTraining`) against transformers'
`ViTMAEForPreTraining`, with one decoder rule (`mae_fields`); timm has no MAE, and ViTMAE has no stem, no layer scale
and no registers: such a config is measured for ours alone.

A config with layer scale or registers (the DINOv2 shapes) is measured against transformers' Dinov2 classifier
(`Dinov2ForImageClassification`, or its with-registers twin): the classifier that library builds on `Dinov2Model`,
so that both sides run a loss and a backward through a head as our classifier does. Its head reads the class token
and the mean patch token side by side (2 D inputs to ours' D, a negligible product), so its last block computes every
token, where ours computes the class token alone (docs/performance.md). timm's side is the preset the config names
(`vit_small_patch14_dinov2`: a head on the class token, as ours)."""

import tempfile
from functools import partial
from pathlib import Path

import torch
from transformers import (
    Dinov2Config,
    Dinov2ForImageClassification,
    Dinov2WithRegistersConfig,
    Dinov2WithRegistersForImageClassification,
    PreTrainedModel,
    TorchAoConfig,
    ViTConfig,
    ViTForImageClassification,
    ViTMAEConfig,
    ViTMAEForPreTraining,
)

from ..configuration_vit_scratch import ViTScratchConfig
from ..modeling_vit_scratch import ViTScratchForImageClassification, ViTScratchForPreTraining
from ..sources import read_json

ARCHITECTURES = Path(__file__).resolve().parents[1] / "configs" / "models"  # shipped with the package
# config -> (its architecture in configs/models, inference batch sizes, training batch, timm's preset of its shape)
MEASURED = {
    "digits": ("model_digits_convstem", [256], 64, None),
    "digits-plain": ("model_digits", [256], 256, None),
    "mnist28": ("model_28px", [128], 128, None),
    "tiny224": ("vit-tiny-patch16-224", [8], 16, None),  # ViT-Ti/16
    "base224": ("vit-base-patch16-224", [1, 8], 16, None),  # ViT-B/16
    "r26s32_224": ("vit-small-r26-s32-224", [8], 8, "vit_small_r26_s32_224"),  # the paper's R26+S/32 hybrid
    "dinov2_s14": ("dinov2-small-patch14-224", [8], 8, "vit_small_patch14_dinov2"),  # DINOv2-S/14 at 224
    "dinov2_b14": ("dinov2-base-patch14-224", [8], 8, "vit_base_patch14_dinov2"),  # DINOv2-B/14 at 224
}
NO_DROPOUT = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0)  # as the others
CONFIGS = {
    name: dict(read_json(ARCHITECTURES / f"{file}.json"), **NO_DROPOUT, batch=batch, train_batch=train, timm_model=timm)
    for name, (file, batch, train, timm) in MEASURED.items()
}
DIMENSIONS = ("image_size", "patch_size", "num_channels", "hidden_size", "num_hidden_layers", "num_attention_heads")
DIMENSIONS += ("intermediate_size",)  # what transformers' and timm's models are given
IMPLEMENTATIONS = ("vit_scratch", "transformers-sdpa", "transformers-eager", "timm")
COMPILED = "-compiled"  # an implementation's name + this: the same model under torch.compile
ALL_IMPLEMENTATIONS = (*IMPLEMENTATIONS, "vit_scratch-eager")
ALL_IMPLEMENTATIONS += tuple(name + COMPILED for name in ALL_IMPLEMENTATIONS)
OURS, BASELINE = "vit_scratch", "transformers-sdpa"  # every ratio is against transformers' ViT as a user gets it
PEERS = ("transformers-eager", "timm")  # the fastest of these, chunk by chunk, is the other bar
MODES = ("inference", "train", "pretrain")  # pretrain: the masked autoencoder's training step
# float32; bf16 autocast (float32 weights); weights loaded in bf16 (inference); int8 linear layers (inference, --int8)
PRECISIONS, INT8 = ("float32", "bf16-autocast", "bf16-weights"), "int8"
DTYPE_OF = {"float32": "float32", "bf16-autocast": "bfloat16", "bf16-weights": "bfloat16", INT8: "int8"}
NUM_LABELS = 10
MAE_FIELDS = ("mask_ratio", "norm_pix_loss", "decoder_hidden_size", "decoder_num_hidden_layers")
MAE_FIELDS += ("decoder_num_attention_heads", "decoder_intermediate_size")  # ViTMAEConfig's names, as ours


def mae_fields(config: dict) -> dict:
    """The masked autoencoder's fields at `config` (the `pretrain` mode), the one decoder rule: below 224 pixels, the
    small-images pretraining recipe's (a small decoder, as small data wants); at 224, MAE's own, our config's
    defaults (512 wide, 8 blocks, 16 heads, a 2048 MLP)."""
    if config["image_size"] < 224:
        overrides = read_json(ARCHITECTURES.parent / "pretrain_small_images.json")["config_overrides"]
        return {field: overrides[field] for field in MAE_FIELDS}
    defaults = ViTScratchConfig()
    return {field: getattr(defaults, field) for field in MAE_FIELDS}


def architecture(config: dict) -> dict:
    """The ViTScratchConfig fields of a benchmark config."""
    return {key: value for key, value in config.items() if key not in ("batch", "train_batch", "timm_model")}


def builds(implementation: str, config: dict, mode: str = "inference") -> bool:
    """Whether `implementation` has the architecture of `config` in `mode`: transformers has no hybrid (a config with
    a stem); in `pretrain`, timm has no masked autoencoder, and ViTMAE no layer scale nor registers."""
    plain = config.get("stem", "none") == "none"
    if mode == "pretrain" and not implementation.startswith("vit_scratch"):
        extras = config.get("num_register_tokens") or config.get("layerscale_value") is not None
        return implementation.startswith("transformers") and plain and not extras
    return plain or not implementation.startswith("transformers")


def build(implementation: str, config: dict, dtype: torch.dtype | None = None, mode: str = "inference"):
    """The model with random weights, in `dtype` as `from_pretrained(dtype=...)` loads it (None: float32): the
    classifier, or in `pretrain` the masked autoencoder."""
    name, pretrain = implementation.removesuffix(COMPILED), mode == "pretrain"
    dims = {key: config[key] for key in DIMENSIONS}
    if name.startswith("vit_scratch"):
        kernel = "eager" if name == "vit_scratch-eager" else None  # None: the model's default kernel
        fields = dict(architecture(config), **(mae_fields(config) if pretrain else {}))
        settings = ViTScratchConfig(**fields, num_labels=NUM_LABELS, attn_implementation=kernel)
        model_class = ViTScratchForPreTraining if pretrain else ViTScratchForImageClassification
        return model_class._from_config(settings, dtype=dtype)
    if name.startswith("transformers"):
        if pretrain:
            model_class, settings = ViTMAEForPreTraining, ViTMAEConfig(**dims, **mae_fields(config))
        else:
            model_class, settings = transformers_classifier(config, dims)
        return model_class._from_config(settings, attn_implementation=name.split("-")[1], dtype=dtype)
    return build_timm(config, dims).to(dtype)


def transformers_classifier(config: dict, dims: dict) -> tuple[type, PreTrainedModel]:
    """transformers' classifier of `config`'s shape and its config: ViT's, or Dinov2's where the config has layer
    scale or registers (Dinov2 takes a whole MLP ratio, and a layer scale of 1 stands for none: x * 1 is x)."""
    registers, scale = config.get("num_register_tokens", 0), config.get("layerscale_value")
    if scale is None and not registers:
        return ViTForImageClassification, ViTConfig(**dims, num_labels=NUM_LABELS)
    dims = {key: value for key, value in dims.items() if key != "intermediate_size"}
    dims.update(mlp_ratio=config["intermediate_size"] // config["hidden_size"], layerscale_value=scale or 1.0)
    if registers:
        return Dinov2WithRegistersForImageClassification, Dinov2WithRegistersConfig(
            **dims, num_register_tokens=registers, num_labels=NUM_LABELS
        )
    return Dinov2ForImageClassification, Dinov2Config(**dims, num_labels=NUM_LABELS)


def build_timm(config: dict, dims: dict):
    """timm's ViT (timm is optional: imported here only): the preset the config names (a hybrid, DINOv2); for a conv
    stem, a ViT over timm's `ConvStem` (3x3 stride-2 convolutions, BatchNorm, ReLU; the last convolution projects);
    else its plain VisionTransformer."""
    import timm
    from timm.layers import HybridEmbed
    from timm.models.vision_transformer import VisionTransformer
    from timm.models.vision_transformer_hybrid import ConvStem

    shared = dict(img_size=dims["image_size"], in_chans=dims["num_channels"], num_classes=NUM_LABELS)
    shared.update(embed_dim=dims["hidden_size"], depth=dims["num_hidden_layers"], num_heads=dims["num_attention_heads"])
    shared.update(mlp_ratio=dims["intermediate_size"] / dims["hidden_size"])
    if config["timm_model"]:
        return timm.create_model(config["timm_model"], pretrained=False, **shared)
    if config.get("stem") != "conv":
        return VisionTransformer(patch_size=dims["patch_size"], **shared)
    depth, patch, channels = len(config["stem_channels"]), dims["patch_size"], config["stem_channels"]
    stem = ConvStem(
        in_chans=dims["num_channels"], depth=depth + 1, channels=(*channels, dims["hidden_size"]),
        kernel_size=(*[3] * depth, patch), stride=(*[2] * depth, patch), padding=(*[1] * depth, 0),
    )  # fmt: skip
    return VisionTransformer(patch_size=1, embed_layer=partial(HybridEmbed, backbone=stem, proj=False), **shared)


def stem_stride(config: dict) -> int:
    """Pixels per feature-map cell of a hybrid's stem (1 without one)."""
    return ViTScratchConfig(**architecture(config)).stem_stride


def layer_flops(tokens: int, dim: int, mlp: int) -> float:
    """Matrix-multiply FLOPs of one transformer block over `tokens` tokens (2 per multiply-add)."""
    return 2 * tokens * (4 * dim * dim + 2 * dim * mlp) + 4 * tokens * tokens * dim


def forward_flops(config: dict, mode: str = "inference") -> float:
    """Matrix-multiply FLOPs of one forward pass for one image, of the transformer: a hybrid's stem convolutions are
    not counted, its projection is counted as if it read image channels. In `pretrain`, the masked autoencoder's:
    the encoder on the class token and the kept patches, the decoder on every patch, its pixel prediction."""
    cell = config["patch_size"] * stem_stride(config)
    patches, dim = (config["image_size"] // cell) ** 2, config["hidden_size"]
    embedding = 2 * patches * config["num_channels"] * config["patch_size"] ** 2 * dim
    if mode != "pretrain":
        return config["num_hidden_layers"] * layer_flops(1 + patches, dim, config["intermediate_size"]) + embedding
    mae = mae_fields(config)
    kept, decoder = int(patches * (1 - mae["mask_ratio"])), mae["decoder_hidden_size"]
    encoder = config["num_hidden_layers"] * layer_flops(1 + kept, dim, config["intermediate_size"]) + embedding
    blocks = mae["decoder_num_hidden_layers"] * layer_flops(1 + patches, decoder, mae["decoder_intermediate_size"])
    return encoder + 2 * (1 + kept) * dim * decoder + blocks + 2 * patches * decoder * config["num_channels"] * cell**2


def precisions_for(mode: str, dtypes: list[str], int8: bool = False) -> list[str]:
    """The precisions measured for `mode`: those of the dtypes asked for; bf16 weights and int8 at inference only."""
    wanted = [precision for precision in PRECISIONS if DTYPE_OF[precision] in dtypes] + ([INT8] if int8 else [])
    return [precision for precision in wanted if mode == "inference" or precision in PRECISIONS[:2]]


def to_int8(model):
    """`model` with int8 linear layers (torchao's dynamic int8 activations, int8 weights), as a user gets it: a
    transformers model saved and loaded back with `quantization_config=TorchAoConfig(...)`, timm's by `quantize_`."""
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

    if not isinstance(model, PreTrainedModel):
        quantize_(model, Int8DynamicActivationInt8WeightConfig())
        return model
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        quantized = TorchAoConfig(Int8DynamicActivationInt8WeightConfig())
        return type(model).from_pretrained(folder, quantization_config=quantized, use_safetensors=True)
