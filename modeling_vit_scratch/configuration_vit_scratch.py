"""Configuration of the from-scratch Vision Transformer (Dosovitskiy et al., 2021).

One config object drives every module. Defaults are ViT-B/16 at 224x224; `ViTScratchConfig.from_preset` builds
the paper's Table 1 models (plus the DeiT Tiny and Small widths) by name, e.g. `"vit-base-patch16-224"`, and its
ResNet hybrids, e.g. `"vit-base-r50-s16-224"`.
"""

from dataclasses import dataclass
from typing import Literal, get_args, get_origin

from huggingface_hub.dataclasses import strict
from huggingface_hub.errors import StrictDataclassClassValidationError, StrictDataclassFieldValidationError
from transformers import PreTrainedConfig

# The closed sets of values, typed as such: @strict refuses any other value when set, at construction and load.
Pooling = Literal["cls", "mean"]
PositionEmbedding = Literal["learned", "sincos"]
PatchEmbedding = Literal["conv", "linear"]
Stem = Literal["none", "resnetv2", "conv"]
PositionInterpolation = Literal["bicubic", "bicubic_antialias"]

# Table 1 of the paper (Base, Large, Huge) and the DeiT widths (Tiny, Small): layers, hidden, MLP, heads.
MODEL_SIZES = {
    "tiny": dict(num_hidden_layers=12, hidden_size=192, intermediate_size=768, num_attention_heads=3),
    "small": dict(num_hidden_layers=12, hidden_size=384, intermediate_size=1536, num_attention_heads=6),
    "base": dict(num_hidden_layers=12, hidden_size=768, intermediate_size=3072, num_attention_heads=12),
    "large": dict(num_hidden_layers=24, hidden_size=1024, intermediate_size=4096, num_attention_heads=16),
    "huge": dict(num_hidden_layers=32, hidden_size=1280, intermediate_size=5120, num_attention_heads=16),
}
# Patch sizes for which a published checkpoint of that width exists.
PATCH_SIZES = {
    "tiny": (16,),
    "small": (8, 16, 32),
    "base": (8, 16, 32),
    "large": (14, 16, 32),
    "huge": (14,),
}
RESOLUTIONS = (224, 384)


def _preset_table() -> dict[str, dict]:
    table = {}
    for size, dims in MODEL_SIZES.items():
        for patch in PATCH_SIZES[size]:
            for resolution in RESOLUTIONS:
                table[f"vit-{size}-patch{patch}-{resolution}"] = dict(dims, patch_size=patch, image_size=resolution)
    return table


# The paper's hybrids as timm names them (section 3.1; R26+S/32 from "How to train your ViT?"): a ResNet-V2 stem
# of post-activation bottlenecks, then 1x1 patches of its feature map (8x8 on the root alone for R+Ti/S16).
HYBRID_PRESETS = {
    "vit-tiny-r-s16-p8-224": dict(MODEL_SIZES["tiny"], stem="resnetv2", stem_depths=(), patch_size=8),
    "vit-small-r26-s32-224": dict(MODEL_SIZES["small"], stem="resnetv2", stem_depths=(2, 2, 2, 2), patch_size=1),
    "vit-base-r50-s16-224": dict(MODEL_SIZES["base"], stem="resnetv2", stem_depths=(3, 4, 9), patch_size=1),
}
PRESETS = _preset_table() | HYBRID_PRESETS


# The model's own code, named once: the files a saved folder carries (save_pretrained copies each class's file and
# its relative imports), nothing else. They import only torch, transformers and each other, so a saved folder loads
# with `trust_remote_code=True` where this package is not installed. The package's registration, save_pretrained's
# `auto_map` and the Hub gate all read this list and `auto_map_entry`.
MODEL_FILES = (
    "configuration_vit_scratch.py",
    "modeling_vit_scratch.py",
    "stems_vit_scratch.py",
    "loading_vit_scratch.py",
    "image_processing_vit_scratch.py",
)


def auto_map_entry(cls: type) -> str:
    """How a saved folder's `auto_map` names a class of the model files: "module.Class", e.g.
    "modeling_vit_scratch.ViTScratchModel" (the module's file name, whatever package it was imported from)."""
    module = cls.__module__.rsplit(".", 1)[-1]
    if f"{module}.py" not in MODEL_FILES:
        raise ValueError(f"{cls.__name__} is defined in {module}.py, which is not one of MODEL_FILES.")
    return f"{module}.{cls.__name__}"


def is_masked_autoencoder(config: dict | PreTrainedConfig) -> bool:
    """Whether a saved config (a config.json's mapping, or loaded) is a masked autoencoder's: an encoder to
    fine-tune and a decoder, no classes."""
    architectures = config.get("architectures") if isinstance(config, dict) else config.architectures
    return "ViTScratchForPreTraining" in (architectures or ())


def to_pair(value: int | list[int] | tuple[int, int]) -> tuple[int, int]:
    """An int or a (height, width) pair, as a (height, width) tuple."""
    return (value, value) if isinstance(value, int) else (value[0], value[1])


class ConfigFieldTypeError(StrictDataclassFieldValidationError, ValueError):
    """A config field given a value of the wrong type, in one line; both `ValueError` and huggingface_hub's
    `StrictDataclassError` catch it."""

    def __init__(self, name: str, value, expected):
        if get_origin(expected) is Literal:
            message = f"{name} must be one of {get_args(expected)}, got {value!r}."
        else:
            expected = getattr(expected, "__name__", str(expected))
            message = f"{name} must be {expected}, got {value!r} ({type(value).__name__}): give a value of that type."
        Exception.__init__(self, message)  # not StrictDataclassFieldValidationError's two-line message


def one_line_errors(cls):
    """@strict's errors as one-line `ValueError`s: a field of the wrong type is a `ConfigFieldTypeError` naming the
    field; a failed cross-field check (a `validate_*` method, which @strict runs after `__init__` and on
    `.validate()`) raises its own ValueError instead of @strict's two-line wrapper."""
    strict_setattr, strict_validate = cls.__setattr__, cls.validate

    def __setattr__(self, name, value):
        try:
            strict_setattr(self, name, value)
        except StrictDataclassFieldValidationError:
            raise ConfigFieldTypeError(name, value, cls.__dataclass_fields__[name].type) from None  # fields only

    def validate(self) -> None:
        try:
            strict_validate(self)
        except StrictDataclassClassValidationError as error:
            raise error.__cause__ from None

    validate.__is_defined_by_strict_decorator__ = True  # @strict on a subclass may replace it
    cls.__setattr__, cls.validate = __setattr__, validate
    return cls


@one_line_errors
@strict(accept_kwargs=True)
@dataclass(repr=False)
class ViTScratchConfig(PreTrainedConfig):
    r"""
    Args:
        image_size: side (or `(height, width)`) of the images the position embeddings are built for.
        patch_size: side (or `(height, width)`) of a patch; the image is cut into a grid of patches.
        num_channels: channels of the input images (1 for grayscale, 3 for RGB).
        hidden_size: width D of every token.
        num_hidden_layers: number of encoder blocks L.
        num_attention_heads: heads of multi-head self-attention; D must divide by it.
        intermediate_size: hidden width of the MLP.
        hidden_dropout_prob: dropout after the embeddings, the attention output and the MLP.
        attention_probs_dropout_prob: dropout on the attention weights.
        drop_path_rate: stochastic depth; rates grow linearly from 0 to this value over the blocks.
        qkv_bias: whether the query/key/value projection has a bias.
        layer_norm_eps: epsilon of every LayerNorm.
        initializer_range: std of the normal (cut at +-2 absolute) that initialises weights and tokens.
        pooling: `"cls"` reads the class token, `"mean"` averages the patch tokens.
        fc_norm: move the final LayerNorm after the pooling (timm's `fc_norm`, used with mean pooling).
        position_embedding: `"learned"` (the paper) or `"sincos"` (fixed 2-D sine-cosine table).
        patch_embedding: `"conv"` (a strided Conv2d) or `"linear"` (flattened patches through nn.Linear).
        stem: what runs before the patch projection (the paper's hybrid, section 3.1): `"none"` (pixels),
            `"resnetv2"` (a BiT ResNet-V2: weight-standardised convolutions, GroupNorm) or `"conv"` (the small stem
            of Xiao et al. 2021, "Early convolutions help transformers see better"). With a stem, `patch_size`
            counts cells of its feature map, and the image is cut into `image_size / (stem_stride * patch_size)`.
        stem_width: `"resnetv2"`: channels of the root convolution (64 in the paper); a multiple of 32, GroupNorm's
            group count. Stage i has `4 * stem_width * 2**i` output channels.
        stem_depths: `"resnetv2"`: bottleneck blocks per stage, e.g. `[3, 4, 9]` (R50 in the paper's hybrid) or
            `[2, 2, 2, 2]` (R26); `[]` is the root alone (7x7 conv and max pool, stride 4).
        stem_preactivation: `"resnetv2"`: pre-activation bottlenecks (BiT: norm, ReLU, conv) instead of the
            post-activation form (conv, norm, ReLU) that the paper's and timm's hybrids use.
        stem_channels: `"conv"`: output channels of each 3x3 convolution (stride 2, BatchNorm, ReLU); the default is
            the paper's ViT_C-4GF stem (stride 16, then a 1x1 projection: `patch_size=1`).
        distillation_token: a second learned token after the class token (DeiT, Touvron et al. 2021), read by a
            second head that learns from a teacher's predictions (`ViTScratchForImageClassificationWithTeacher`).
        num_register_tokens: learned tokens after the class (and distillation) token that no head reads and no
            position embedding marks (Darcet et al. 2023, "Vision Transformers Need Registers"): attention parks its
            global scratch work there instead of in background patches. 0 (the default) is the paper's ViT.
        layerscale_value: a learned per-channel scale on each residual branch (attention and MLP), initialised to
            this value (Touvron et al. 2021, "Going deeper with image transformers"; DINOv2, timm's `init_values`).
            None (the default) is the paper's ViT, with no scale.
        position_interpolation: how learned position embeddings are resampled for another image size
            (`interpolate_pos_encoding`): `"bicubic"` (transformers' ViT and Dinov2) or `"bicubic_antialias"`
            (torch's antialiased bicubic, a different kernel even when upsampling: Dinov2WithRegisters and timm).
        mask_ratio: masked autoencoding (`ViTScratchForPreTraining`, He et al. 2021): the share of patch tokens
            hidden from the encoder, in [0, 1).
        decoder_hidden_size: width of the masked-autoencoder decoder's tokens; a multiple of 4 (its sin-cos table)
            and of `decoder_num_attention_heads`.
        decoder_num_hidden_layers: blocks of the masked-autoencoder decoder.
        decoder_num_attention_heads: heads of the decoder's self-attention.
        decoder_intermediate_size: hidden width of the decoder's MLP.
        norm_pix_loss: the masked-autoencoder loss compares each patch normalised by its own mean and variance (the
            MAE paper's Table 1d) instead of the pixels.
    """

    model_type = "vit_scratch"

    image_size: int | list[int] | tuple[int, int] = 224
    patch_size: int | list[int] | tuple[int, int] = 16
    num_channels: int = 3
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_dropout_prob: float | int = 0.0
    attention_probs_dropout_prob: float | int = 0.0
    drop_path_rate: float | int = 0.0
    qkv_bias: bool = True
    layer_norm_eps: float = 1e-6
    initializer_range: float = 0.02
    pooling: Pooling = "cls"
    fc_norm: bool = False
    position_embedding: PositionEmbedding = "learned"
    patch_embedding: PatchEmbedding = "conv"
    stem: Stem = "none"
    stem_width: int = 64
    # tuples as defaults (a dataclass default must be immutable), lists once constructed: one type, as JSON gives
    stem_depths: list[int] | tuple[int, ...] = ()
    stem_preactivation: bool = False
    stem_channels: list[int] | tuple[int, ...] = (48, 96, 192, 384)
    distillation_token: bool = False
    num_register_tokens: int = 0
    layerscale_value: float | int | None = None
    position_interpolation: PositionInterpolation = "bicubic"
    # masked autoencoding: read by ViTScratchForPreTraining only (ViTMAEConfig's names and defaults)
    mask_ratio: float | int = 0.75
    decoder_hidden_size: int = 512
    decoder_num_hidden_layers: int = 8
    decoder_num_attention_heads: int = 16
    decoder_intermediate_size: int = 2048
    norm_pix_loss: bool = False

    def __post_init__(self, **kwargs):
        self.stem_depths, self.stem_channels = list(self.stem_depths), list(self.stem_channels)
        super().__post_init__(**kwargs)
        # transformers' Auto classes pick between our two classifiers by `architectures` and iterate over it, None
        # included (auto_factory._get_model_class): an empty list means "the first", the one-head classifier
        if self.architectures is None:
            self.architectures = []
        if self.id2label is not None and not self.label2id:  # the pipeline and the Trainer read both maps
            self.label2id = {label: index for index, label in self.id2label.items()}

    @classmethod
    def from_dict(cls, config_dict: dict, **kwargs):
        """`PreTrainedConfig.from_dict`, which sets keyword overrides (`from_pretrained(folder, pooling="avg")`)
        after the constructor has validated, then the cross-field checks again on the result."""
        loaded = super().from_dict(config_dict, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded).validate()
        return loaded

    @property
    def stem_stride(self) -> int:
        """The stem's total downsampling: 1 without a stem, 4 for the ResNet root and x2 for every stage after the
        first, x2 for each convolution of the conv stem."""
        if self.stem == "resnetv2":
            return 4 * 2 ** max(len(self.stem_depths) - 1, 0)
        return 2 ** len(self.stem_channels) if self.stem == "conv" else 1

    @property
    def cell_size(self) -> tuple[int, int]:
        """Pixels along (height, width) that one token covers: the patch size times the stem's stride."""
        patch_h, patch_w = to_pair(self.patch_size)
        return patch_h * self.stem_stride, patch_w * self.stem_stride

    @property
    def grid_size(self) -> tuple[int, int]:
        """Tokens along (height, width) at `image_size`: patches of the stem's feature map (of the image without)."""
        (height, width), (cell_h, cell_w) = to_pair(self.image_size), self.cell_size
        return height // cell_h, width // cell_w

    @property
    def num_class_tokens(self) -> int:
        """The tokens the heads read, each with a position embedding: the class token, and the distillation token
        if there is one."""
        return 2 if self.distillation_token else 1

    @property
    def num_prefix_tokens(self) -> int:
        """Learned tokens before the patch tokens: the class tokens (`num_class_tokens`), then the registers."""
        return self.num_class_tokens + self.num_register_tokens

    def validate_architecture(self):
        """Cross-field checks; each error names the field, the value and the fix."""
        for name in ("num_channels", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}.")
        for name in ("image_size", "patch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) and len(value) != 2:
                raise ValueError(f"{name} must be an int or a (height, width) pair, got {value!r}.")
            if min(to_pair(value)) <= 0:
                raise ValueError(f"{name} must be positive, got {value!r}.")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "drop_path_rate"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}.")
        if self.num_register_tokens < 0:
            raise ValueError(f"num_register_tokens must be 0 or more, got {self.num_register_tokens}.")
        if self.layerscale_value is not None and not 0 < self.layerscale_value < float("inf"):
            raise ValueError(
                f"layerscale_value must be a positive number (e.g. 1e-5) or None for no layer scale, "
                f"got {self.layerscale_value}."
            )
        if self.layer_norm_eps <= 0 or self.initializer_range < 0:
            raise ValueError(
                f"layer_norm_eps must be > 0 and initializer_range >= 0, "
                f"got {self.layer_norm_eps} and {self.initializer_range}."
            )
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads}): pick a head count that divides it, e.g. "
                f"{[h for h in range(1, 17) if self.hidden_size % h == 0]}."
            )
        self.validate_stem()
        self.validate_decoder()
        image, cell = to_pair(self.image_size), self.cell_size
        if image[0] % cell[0] or image[1] % cell[1]:
            stem = f" times the stem's stride {self.stem_stride} (config.stem_stride)" if self.stem != "none" else ""
            raise ValueError(
                f"image_size {self.image_size} must be divisible by patch_size {self.patch_size}{stem}: "
                f"resize the images or choose a patch size{' or stem' if stem else ''} that divides the image size."
            )
        if self.position_embedding == "sincos" and self.hidden_size % 4:
            raise ValueError(
                f"position_embedding='sincos' needs hidden_size divisible by 4, got {self.hidden_size}: "
                "use position_embedding='learned' or a hidden size that is a multiple of 4."
            )

    def validate_stem(self):
        """Checks of the stem fields (those of the stem in use)."""
        if self.stem == "resnetv2":
            if self.stem_width <= 0 or self.stem_width % 32:
                raise ValueError(
                    f"stem_width must be a positive multiple of 32 (GroupNorm's 32 groups), got {self.stem_width}: "
                    "use e.g. 32 or 64."
                )
            if any(depth <= 0 for depth in self.stem_depths):
                raise ValueError(
                    f"stem_depths must hold positive block counts, got {self.stem_depths}: "
                    "e.g. [3, 4, 9] for R50, or [] for the root alone."
                )
        if self.stem == "conv" and (not self.stem_channels or min(self.stem_channels) <= 0):
            raise ValueError(
                f"stem_channels must list at least one positive channel count for stem='conv', got "
                f"{self.stem_channels}: e.g. [48, 96, 192, 384]."
            )

    def validate_decoder(self):
        """Checks of the masked-autoencoder fields."""
        if not 0.0 <= self.mask_ratio < 1.0:
            raise ValueError(f"mask_ratio must be in [0, 1), got {self.mask_ratio}: e.g. 0.75, as in MAE.")
        names = ("decoder_hidden_size", "decoder_num_hidden_layers", "decoder_num_attention_heads")
        for name in (*names, "decoder_intermediate_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}.")
        width, heads = self.decoder_hidden_size, self.decoder_num_attention_heads
        if width % heads or width % 4:
            raise ValueError(
                f"decoder_hidden_size ({width}) must be divisible by decoder_num_attention_heads ({heads}) and by 4 "
                "(the decoder's sin-cos position table): e.g. decoder_hidden_size=128 with 4 heads."
            )

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "ViTScratchConfig":
        """A named architecture, e.g. `"vit-base-patch16-224"`; keyword arguments override its fields."""
        if name not in PRESETS:
            raise ValueError(f"Unknown preset {name!r}. Known presets: {', '.join(sorted(PRESETS))}.")
        return cls(**{**PRESETS[name], **overrides})


__all__ = ["MODEL_FILES", "PRESETS", "ViTScratchConfig", "auto_map_entry"]
