"""The Vision Transformer of "An Image is Worth 16x16 Words" (Dosovitskiy et al., 2021), written from torch.nn up.

Read top to bottom, it follows the paper's equations:
    Eq. 1  z_0 = [x_class; x_p^1 E; ...; x_p^N E] + E_pos        ViTScratchPatchEmbeddings, ViTScratchEmbeddings
    Eq. 2  z'_l = MSA(LN(z_{l-1})) + z_{l-1}                       ViTScratchAttention, ViTScratchLayer
    Eq. 3  z_l = MLP(LN(z'_l)) + z'_l                              ViTScratchMLP, ViTScratchLayer
    Eq. 4  y = LN(z_L^0)                                           ViTScratchModel (+ a linear head)
A DeiT-style model (Touvron et al., 2021) adds a distillation token after the class token, read by a second head
that learns from a teacher: ViTScratchForImageClassificationWithTeacher. Two later additions, both off by default
(DINOv2, Oquab et al. 2023, has both):
    registers  z_0 = [x_class; x_reg^1; ...; x_reg^R; x_p^1 E + E_pos^1; ...]   ViTScratchEmbeddings (no E_pos)
    layer scale  z'_l = diag(lambda_1) MSA(LN(z_{l-1})) + z_{l-1}, the same on the MLP   ViTScratchLayerScale
A hybrid (section 3.1) runs a CNN stem (stems_vit_scratch.py) before Eq. 1's projection, which then cuts the stem's
feature map into patches. A masked autoencoder (He et al., 2021) pretrains the encoder without labels: it sees a
random quarter of the patch tokens, and a small decoder rebuilds the pixels of the rest (ViTScratchForPreTraining).
Only torch, transformers' public API and the sibling files are imported, so the files
travel with a saved model and load with `trust_remote_code=True` where this package is not installed.
"""

import copy
import functools
import math
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPooling, ImageClassifierOutput
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.utils import ModelOutput, logging

from .configuration_vit_scratch import ViTScratchConfig, auto_map_entry, to_pair
from .loading_vit_scratch import checked_loading
from .stems_vit_scratch import ViTScratchStemConv2d, build_stem

logger = logging.get_logger(__name__)


def sincos_position_table(grid_size: tuple[int, int], dim: int, num_class_tokens: int = 1) -> torch.Tensor:
    """Fixed 2-D sine-cosine position embeddings (as in MAE), a zero row first for the class token (and one for the
    distillation token): (1, num_class_tokens + h*w, dim).

    A quarter of the channels encodes the row with sines, a quarter with cosines, and the same for the column.
    Computed in float64, returned in torch's default dtype: the one `from_pretrained(dtype=...)` builds the model in.
    """
    omega = 1.0 / 10000 ** (torch.arange(dim // 4, dtype=torch.float64) / (dim // 4))  # (dim/4,)
    rows, cols = torch.meshgrid(
        torch.arange(grid_size[0], dtype=torch.float64), torch.arange(grid_size[1], dtype=torch.float64), indexing="ij"
    )
    row_angles = rows.reshape(-1, 1) * omega  # (h*w, dim/4)
    col_angles = cols.reshape(-1, 1) * omega
    table = torch.cat([row_angles.sin(), row_angles.cos(), col_angles.sin(), col_angles.cos()], dim=1)
    prefix = torch.zeros(num_class_tokens, dim, dtype=torch.float64)
    return torch.cat([prefix, table]).unsqueeze(0).to(torch.get_default_dtype())


class ViTScratchPatchEmbeddings(nn.Module):
    """Eq. 1, x_p E: cut (batch, channels, height, width) into P x P patches and project each to D.

    A hybrid first runs the stem (`nn.Identity` without one) and cuts its feature map instead, so a token covers
    `cell_size` = P * stem stride pixels. Two equivalent projections: a Conv2d with kernel = stride = P, or
    flattening each patch (channel, row, column order, the Conv2d kernel's own order) and an nn.Linear.
    Output: (batch, num_patches, D).
    """

    def __init__(self, config: ViTScratchConfig):
        super().__init__()
        self.patch_size = to_pair(config.patch_size)
        self.cell_size = config.cell_size
        self.num_channels = config.num_channels
        self.stem, self.feature_channels = build_stem(config)
        self.use_conv = config.patch_embedding == "conv"
        if self.use_conv:
            self.projection = nn.Conv2d(
                self.feature_channels, config.hidden_size, kernel_size=self.patch_size, stride=self.patch_size
            )
        else:
            patch_dim = self.feature_channels * self.patch_size[0] * self.patch_size[1]
            self.projection = nn.Linear(patch_dim, config.hidden_size)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        features = self.stem(pixel_values)  # (batch, C', H / s, W / s); the pixels themselves without a stem
        if self.use_conv:
            return self.projection(features).flatten(2).transpose(1, 2)  # (batch, D, h, w) -> (batch, h*w, D)
        batch, channels, height, width = features.shape
        patch_h, patch_w = self.patch_size
        # (batch, C, h, P, w, P) -> (batch, h, w, C, P, P) -> (batch, h*w, C*P*P)
        patches = features.reshape(batch, channels, height // patch_h, patch_h, width // patch_w, patch_w)
        patches = patches.permute(0, 2, 4, 1, 3, 5).reshape(batch, -1, channels * patch_h * patch_w)
        return self.projection(patches)


class ViTScratchEmbeddings(nn.Module):
    """Eq. 1: prepend the class token (and DeiT's distillation token) to the patch embeddings, add position
    embeddings, then insert the registers (if any) after the class tokens, as DINOv2 with registers does: they carry
    no position. -> (batch, T + N, D), T = config.num_prefix_tokens (class tokens, then registers)."""

    def __init__(self, config: ViTScratchConfig):
        super().__init__()
        self.patch_embeddings = ViTScratchPatchEmbeddings(config)
        self.image_size = to_pair(config.image_size)
        self.grid_size = config.grid_size
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.hidden_size))
        self.distillation_token = (
            nn.Parameter(torch.zeros(1, 1, config.hidden_size)) if config.distillation_token else None
        )
        self.register_tokens = (
            nn.Parameter(torch.zeros(1, config.num_register_tokens, config.hidden_size))
            if config.num_register_tokens
            else None
        )
        self.num_class_tokens, self.num_prefix_tokens = config.num_class_tokens, config.num_prefix_tokens
        self.learned_positions = config.position_embedding == "learned"
        self.antialias = config.position_interpolation == "bicubic_antialias"
        table = sincos_position_table(self.grid_size, config.hidden_size, self.num_class_tokens)
        if self.learned_positions:
            self.position_embeddings = nn.Parameter(torch.zeros_like(table))
        else:  # a fixed function of the grid, not state: never saved, refilled by _init_weights after loading
            self.register_buffer("position_embeddings", table, persistent=False)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def position_embeddings_for(self, grid_size: tuple[int, int]) -> torch.Tensor:
        """Position embeddings of the class tokens and a (rows, columns) patch grid, resampled from the stored grid
        if it differs: (1, num_class_tokens + rows * columns, D)."""
        if grid_size == self.grid_size:
            return self.position_embeddings
        if not self.learned_positions:
            table = sincos_position_table(grid_size, self.position_embeddings.shape[-1], self.num_class_tokens)
            return table.to(self.position_embeddings)
        prefix = self.num_class_tokens
        prefix_positions, patch_positions = self.position_embeddings[:, :prefix], self.position_embeddings[:, prefix:]
        dim = patch_positions.shape[-1]
        # (1, h*w, D) -> (1, D, h, w): the stored grid, never a guess from sqrt(N)
        patch_positions = patch_positions.reshape(1, *self.grid_size, dim).permute(0, 3, 1, 2)
        patch_positions = nn.functional.interpolate(
            patch_positions, size=grid_size, mode="bicubic", align_corners=False, antialias=self.antialias
        )
        patch_positions = patch_positions.permute(0, 2, 3, 1).reshape(1, -1, dim)
        return torch.cat([prefix_positions, patch_positions], dim=1)

    def check_pixel_values(self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool) -> None:
        """Raise a ValueError that names the problem and the fix for input the model cannot embed."""
        if pixel_values.ndim != 4:
            raise ValueError(
                f"pixel_values must have shape (batch, channels, height, width), got {tuple(pixel_values.shape)}; "
                "add a batch dimension with pixel_values.unsqueeze(0) or use the model's image processor."
            )
        channels, height, width = pixel_values.shape[1:]
        if channels != self.patch_embeddings.num_channels:
            raise ValueError(
                f"pixel_values have {channels} channels but the model expects {self.patch_embeddings.num_channels} "
                "(config.num_channels); convert the images (grayscale 'L' or 'RGB'), e.g. with the model's "
                "image processor."
            )
        (cell_h, cell_w), (patch_h, patch_w) = self.patch_embeddings.cell_size, self.patch_embeddings.patch_size
        if interpolate_pos_encoding and (height % cell_h or width % cell_w):
            stem = f" times the stem's stride (config.cell_size: {cell_h}x{cell_w})" if cell_h != patch_h else ""
            raise ValueError(
                f"Image size {height}x{width} must be divisible by the patch size {patch_h}x{patch_w}{stem}: "
                "resize the images to a multiple of it."
            )
        if not interpolate_pos_encoding and (height, width) != self.image_size:
            raise ValueError(
                f"Image size {height}x{width} does not match the model's {self.image_size[0]}x{self.image_size[1]} "
                "(config.image_size); resize the images (the image processor does) or pass "
                "interpolate_pos_encoding=True."
            )

    def forward(self, pixel_values: torch.Tensor, interpolate_pos_encoding: bool = False) -> torch.Tensor:
        self.check_pixel_values(pixel_values, interpolate_pos_encoding)
        batch, _, height, width = pixel_values.shape
        cell_h, cell_w = self.patch_embeddings.cell_size
        pixel_values = pixel_values.to(self.cls_token.dtype)
        patches = self.patch_embeddings(pixel_values)  # (batch, N, D)
        prefix = [self.cls_token] + ([self.distillation_token] if self.distillation_token is not None else [])
        tokens = torch.cat([token.expand(batch, -1, -1) for token in prefix] + [patches], dim=1)  # (batch, C + N, D)
        tokens = tokens + self.position_embeddings_for((height // cell_h, width // cell_w))
        if self.register_tokens is not None:  # after the class tokens, with no position: (batch, T + N, D)
            classes, patches = tokens[:, : self.num_class_tokens], tokens[:, self.num_class_tokens :]
            tokens = torch.cat([classes, self.register_tokens.expand(batch, -1, -1), patches], dim=1)
        return self.dropout(tokens)


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d)) v, written out. query/key/value: (batch, heads, tokens, head_dim).

    Returns the output (batch, tokens, heads, head_dim) and the attention weights (batch, heads, tokens, tokens)
    before dropout, so each row sums to 1. torch's softmax sums bf16 and fp16 in float32 and rounds once at the end,
    so no float32 copy of the scores is made (one made this path much slower in bf16 on a CPU: timings in
    docs/performance.md); CUDA's autocast returns float32 weights, cast back to the query's dtype.
    """
    scores = torch.matmul(query, key.transpose(-2, -1)) * scaling  # (batch, heads, tokens, tokens)
    if attention_mask is not None:
        scores = scores + attention_mask
    weights = scores.softmax(dim=-1).to(query.dtype)
    dropped = nn.functional.dropout(weights, p=dropout, training=module.training)
    return torch.matmul(dropped, value).transpose(1, 2), weights


@functools.cache
def probe_cpu_bf16_units() -> str:
    """The CPU's bf16 matrix units as torch reads them, once: "amx" (AMX tiles), "avx512_bf16", or "none" (no bf16
    instructions: AVX2-only CPUs emulate bf16 products). torch's probes are private: a torch without them reads
    "none"."""
    has = lambda probe: bool(getattr(torch.cpu, probe, lambda: False)())
    return "amx" if has("_is_amx_tile_supported") else "avx512_bf16" if has("_is_avx512_bf16_supported") else "none"


@torch.compiler.assume_constant_result
def cpu_bf16_units() -> str:
    """`probe_cpu_bf16_units()`, a constant to torch.compile (which would not trace the probe or its cache)."""
    return probe_cpu_bf16_units()


def attention_kernel(device_type: str, dtype: torch.dtype, needs_grad: bool, bf16_units: str) -> str:
    """The faster kernel for an "sdpa" model: "fused" (torch's scaled_dot_product_attention) or "explicit"
    (`eager_attention_forward`, whose two bf16 matrix products run on the CPU's bf16 units). Timings behind each
    row: docs/performance.md, "The attention kernel".

    | device    | dtype            | gradients | CPU's bf16 units         | kernel   |
    | not a CPU | any              | either    |                          | fused    |
    | CPU       | float32, float16 | either    | any                      | fused    |
    | CPU       | bfloat16         | no        | amx                      | fused    |
    | CPU       | bfloat16         | yes       | amx                      | explicit |
    | CPU       | bfloat16         | either    | avx512_bf16              | explicit |
    | CPU       | bfloat16         | either    | none                     | fused    |
    """
    if device_type != "cpu" or dtype != torch.bfloat16 or bf16_units == "none":
        return "fused"
    return "fused" if bf16_units == "amx" and not needs_grad else "explicit"


@functools.cache
def log_kernel_choice(kernel: str, device_type: str, dtype: torch.dtype, needs_grad: bool, bf16_units: str) -> None:
    """One debug line per choice, so that a user can see which attention kernel runs (and why)."""
    direction = "training (gradients)" if needs_grad else "inference"
    units = f", CPU bf16 units: {bf16_units}" if device_type == "cpu" else ""
    logger.debug(f"sdpa attention on {device_type} in {dtype} for {direction}{units}: the {kernel} kernel")


class ViTScratchAttention(nn.Module):
    """Eq. 2, multi-head self-attention: (batch, tokens, D) -> (batch, queries, D) and the weights or None.

    One fused projection makes queries, keys and values. Every token is a query unless `queries` picks some (the
    last block of a classifier needs the class token's only). The kernel comes from transformers'
    `attn_implementation`: "eager" runs the explicit path above; "sdpa" (the default) runs the faster of torch's
    fused kernel and the explicit path for the device, dtype, direction and CPU (`attention_kernel`); any other
    registered name runs as registered (register transformers' `sdpa_attention_forward` under a new name to force
    the fused kernel). The explicit path also runs when the attention weights are asked for (fused kernels do not
    return them).
    """

    def __init__(self, config: ViTScratchConfig):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_probs_dropout_prob
        self.is_causal = False  # read by transformers' attention kernels
        self.qkv_proj = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.qkv_bias)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size)
        self.output_dropout = nn.Dropout(config.hidden_dropout_prob)

    def kernel(self, query: torch.Tensor, output_attentions: bool):
        """The attention function for this call (see the class docstring)."""
        implementation = self.config._attn_implementation
        if output_attentions:
            return eager_attention_forward
        if implementation == "sdpa":
            # the query needs a gradient only where a backward follows: never under no_grad or for a frozen model
            choice = (query.device.type, query.dtype, query.requires_grad, cpu_bf16_units())
            kernel = attention_kernel(*choice)
            if not torch.compiler.is_compiling():
                log_kernel_choice(kernel, *choice)
            if kernel == "explicit":
                return eager_attention_forward
        return ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)

    def forward(self, hidden_states: torch.Tensor, output_attentions: bool = False, queries: slice = slice(None)):
        batch, tokens, _ = hidden_states.shape
        # (batch, tokens, 3*D) -> (3, batch, heads, tokens, head_dim)
        qkv = self.qkv_proj(hidden_states).view(batch, tokens, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        query, key, value = qkv.unbind(0)
        query = query[:, :, queries]
        output, weights = self.kernel(query, output_attentions)(
            self,
            query,
            key,
            value,
            None,
            scaling=self.scaling,
            dropout=self.attention_dropout if self.training else 0.0,
        )
        output = output.reshape(batch, query.shape[2], -1)  # (batch, queries, heads, head_dim) -> (batch, queries, D)
        return self.output_dropout(self.o_proj(output)), weights


class ViTScratchMLP(nn.Module):
    """Eq. 3's MLP: Linear -> GELU -> Linear with dropout, (batch, tokens, D) -> (batch, tokens, D)."""

    def __init__(self, config: ViTScratchConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.activation = nn.GELU()
        self.fc2 = nn.Linear(config.intermediate_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.dropout(self.activation(self.fc1(hidden_states)))
        return self.dropout(self.fc2(hidden_states))


class ViTScratchDropPath(nn.Module):
    """Stochastic depth: in training, drop a block's residual branch for whole samples with probability `rate`."""

    def __init__(self, rate: float):
        super().__init__()
        self.rate = rate

    def forward(self, branch: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return branch
        keep = 1.0 - self.rate
        mask = branch.new_empty(branch.shape[0], *([1] * (branch.ndim - 1))).bernoulli_(keep)  # (batch, 1, 1)
        return branch * mask / keep


class ViTScratchLayerScale(nn.Module):
    """Layer scale (CaiT, Touvron et al. 2021; DINOv2): a learned per-channel scale on a residual branch,
    diag(lambda) x, initialised to `config.layerscale_value`, so that a deep model starts close to the identity.
    (batch, tokens, D) -> (batch, tokens, D)."""

    def __init__(self, config: ViTScratchConfig):
        super().__init__()
        self.lambda1 = nn.Parameter(torch.full((config.hidden_size,), float(config.layerscale_value)))

    def forward(self, branch: torch.Tensor) -> torch.Tensor:
        return branch * self.lambda1


class ViTScratchLayer(GradientCheckpointingLayer):
    """Eq. 2-3, a pre-norm encoder block: z' = MSA(LN(z)) + z, then z'' = MLP(LN(z')) + z', each branch scaled by
    layer scale if the config has it. Shape (batch, tokens, D), or (batch, C, D) with `class_token_only`: every token
    is read, only the class token (and the distillation token, C = config.num_class_tokens) is computed."""

    def __init__(self, config: ViTScratchConfig, drop_path_rate: float = 0.0):
        super().__init__()
        self.layernorm_before = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attention = ViTScratchAttention(config)
        self.layernorm_after = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.mlp = ViTScratchMLP(config)
        scaled = config.layerscale_value is not None
        self.layer_scale1 = ViTScratchLayerScale(config) if scaled else nn.Identity()
        self.layer_scale2 = ViTScratchLayerScale(config) if scaled else nn.Identity()
        self.drop_path = ViTScratchDropPath(drop_path_rate) if drop_path_rate > 0 else nn.Identity()
        self.num_class_tokens = config.num_class_tokens

    def forward(self, hidden_states: torch.Tensor, *, output_attentions: bool = False, class_token_only: bool = False):
        queries = slice(0, self.num_class_tokens) if class_token_only else slice(None)
        attention_output, attention_weights = self.attention(
            self.layernorm_before(hidden_states), output_attentions, queries
        )
        hidden_states = hidden_states[:, queries] + self.drop_path(self.layer_scale1(attention_output))
        mlp_output = self.mlp(self.layernorm_after(hidden_states))
        hidden_states = hidden_states + self.drop_path(self.layer_scale2(mlp_output))
        return hidden_states, attention_weights


@torch.no_grad()
def truncated_normal_(tensor: torch.Tensor, std: float) -> torch.Tensor:
    """Fill `tensor` in place from N(0, std^2) cut at +-2 absolute, the cut transformers' ViT and timm get from
    `trunc_normal_(std=...)`: for std 0.02 it lies 100 std out and never bites. Sampled by inverting the normal CDF
    in place, with no temporaries: torch's rejection sampler allocates several tensor-sized buffers per call, which
    stayed resident after building a model. Tensors loaded from a checkpoint (`_is_hf_initialized`) are kept.

    A cut at +-2 std instead would shrink the std by 12%, which slowed training on a 28x28 glyph set enough to cost
    test accuracy (docs/training.md)."""
    if getattr(tensor, "_is_hf_initialized", False):
        return tensor
    # 2 Phi(2 / std) - 1, kept below 1 so that erfinv stays finite: uniform on (-bound, bound) maps onto (-2, 2);
    # for a small std that cap, not the cut, ends the float32 draw's tails, about 5 std out
    bound = min(math.erf(2.0 / (std * math.sqrt(2))), 1 - 2**-24)
    return tensor.uniform_(-bound, bound).erfinv_().mul_(std * math.sqrt(2)).clamp_(-2.0, 2.0)


class ViTScratchPreTrainedModel(PreTrainedModel):
    """Weight initialisation and the transformers flags shared by the models below."""

    config_class = ViTScratchConfig
    base_model_prefix = "vit"
    main_input_name = "pixel_values"
    input_modalities = ("image",)
    supports_gradient_checkpointing = True
    _no_split_modules = ["ViTScratchEmbeddings", "ViTScratchLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`, refusing what it would fill with random weights (`checked_loading`)."""
        return checked_loading(super().from_pretrained, pretrained_model_name_or_path, *args, **kwargs)

    def get_input_embeddings(self) -> nn.Module:
        """The patch embedding (its output is the first activation), which `enable_input_require_grads` hooks."""
        return self.base_model.embeddings.patch_embeddings

    def activation_checkpointing_enable(self, *args, **kwargs):
        """transformers' activation checkpointing, with the patch embedding's output marked as needing a gradient:
        with `use_reentrant=True` and a frozen patch embedding (LoRA, a frozen backbone) no block input would need
        one, and torch would skip the blocks' backward without a word (transformers marks it for text models only)."""
        super().activation_checkpointing_enable(*args, **kwargs)
        if not getattr(self, "_require_grads_hooks", None):
            self.enable_input_require_grads()

    def activation_checkpointing_disable(self):
        super().activation_checkpointing_disable()
        self.disable_input_require_grads()

    def save_pretrained(self, save_directory, *args, **kwargs):
        """`PreTrainedModel.save_pretrained`, with both model classes in the config's `auto_map`, so that the
        saved folder loads by `AutoModel` and `AutoModelForImageClassification` with `trust_remote_code=True`."""
        auto_map = dict(getattr(self.config, "auto_map", None) or {})
        auto_map.setdefault("AutoModel", auto_map_entry(ViTScratchModel))
        auto_map.setdefault("AutoModelForImageClassification", auto_map_entry(ViTScratchForImageClassification))
        self.config.auto_map = auto_map
        return super().save_pretrained(save_directory, *args, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """N(0, initializer_range^2) cut at +-2 absolute (`truncated_normal_`, as in transformers' ViT and timm) for
        weights and tokens, zero biases, unit LayerNorms; He normal for the stem's convolutions (they feed ReLUs, as
        in ResNets), unit norms with fresh statistics; a fixed sine-cosine position table is refilled."""
        std = self.config.initializer_range
        if isinstance(module, ViTScratchStemConv2d):
            init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(module, (nn.GroupNorm, nn.BatchNorm2d)):
            init.ones_(module.weight)
            init.zeros_(module.bias)
            if isinstance(module, nn.BatchNorm2d):
                init.zeros_(module.running_mean)
                init.ones_(module.running_var)
                init.zeros_(module.num_batches_tracked)
        elif isinstance(module, (nn.Linear, nn.Conv2d)):
            truncated_normal_(module.weight, std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, ViTScratchLayerScale):
            init.constant_(module.lambda1, self.config.layerscale_value)
        elif isinstance(module, ViTScratchEmbeddings):
            truncated_normal_(module.cls_token, std)
            if module.register_tokens is not None:
                truncated_normal_(module.register_tokens, std)
            if module.distillation_token is not None:
                truncated_normal_(module.distillation_token, std)
            if module.learned_positions:
                truncated_normal_(module.position_embeddings, std)
            else:
                table = sincos_position_table(module.grid_size, self.config.hidden_size, module.num_class_tokens)
                init.copy_(module.position_embeddings, table)


class ViTScratchModel(ViTScratchPreTrainedModel):
    """The encoder: embeddings, L blocks, final LayerNorm, pooling. Tokens (batch, T + N, D), pooled (batch, D)."""

    def __init__(self, config: ViTScratchConfig):
        super().__init__(config)
        self.embeddings = ViTScratchEmbeddings(config)
        # stochastic depth grows linearly with depth, computed once and handed to each block
        depth = config.num_hidden_layers
        drop_path_rates = [config.drop_path_rate * i / max(depth - 1, 1) for i in range(depth)]
        self.layers = nn.ModuleList(ViTScratchLayer(config, rate) for rate in drop_path_rates)
        # Eq. 4's LayerNorm, on every token, or (fc_norm, as in timm) on the pooled vector only
        final_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.layernorm = nn.Identity() if config.fc_norm else final_norm
        self.fc_norm = final_norm if config.fc_norm else nn.Identity()
        self.post_init()

    def forward_features(
        self,
        pixel_values: torch.Tensor,
        *,
        interpolate_pos_encoding: bool = False,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        class_token_only: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...] | None]:
        """Tokens (batch, T + N, D) after the final LayerNorm (unless fc_norm), and per-layer states/weights if asked.

        With `class_token_only` the last block computes the C class tokens alone, (batch, C, D): all the heads read,
        so the classifier asks for it. It is ignored when hidden states, attentions or mean pooling need every token.
        """
        every_token_needed = output_attentions or output_hidden_states or self.config.pooling != "cls"
        class_token_only = class_token_only and not every_token_needed
        hidden_states = self.embeddings(pixel_values, interpolate_pos_encoding)
        all_hidden_states = [hidden_states] if output_hidden_states else None
        all_attentions = [] if output_attentions else None
        last = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            last_class_token_only = class_token_only and index == last
            hidden_states, attention_weights = layer(
                hidden_states, output_attentions=output_attentions, class_token_only=last_class_token_only
            )
            if output_hidden_states:
                all_hidden_states.append(hidden_states)
            if output_attentions:
                all_attentions.append(attention_weights)
        return (
            self.layernorm(hidden_states),
            tuple(all_hidden_states) if output_hidden_states else None,
            tuple(all_attentions) if output_attentions else None,
        )

    def feature_options(self, output_attentions, output_hidden_states, interpolate_pos_encoding) -> dict[str, bool]:
        """`forward`'s optional flags as `forward_features` takes them: None means the config's setting."""
        return dict(
            interpolate_pos_encoding=bool(interpolate_pos_encoding),
            output_attentions=self.config.output_attentions if output_attentions is None else output_attentions,
            output_hidden_states=self.config.output_hidden_states
            if output_hidden_states is None
            else output_hidden_states,
        )

    def pool(self, tokens: torch.Tensor) -> torch.Tensor:
        """(batch, T + N, D) -> (batch, D): the class token (Eq. 4), or the mean of the patch tokens (registers and
        class tokens left out)."""
        patch_tokens = tokens[:, self.config.num_prefix_tokens :]
        pooled = tokens[:, 0] if self.config.pooling == "cls" else patch_tokens.mean(dim=1)
        return self.fc_norm(pooled)

    def forward(
        self,
        pixel_values: torch.Tensor,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        interpolate_pos_encoding: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutputWithPooling | tuple:
        tokens, hidden_states, attentions = self.forward_features(
            pixel_values, **self.feature_options(output_attentions, output_hidden_states, interpolate_pos_encoding)
        )
        output = BaseModelOutputWithPooling(
            last_hidden_state=tokens,
            pooler_output=self.pool(tokens),
            hidden_states=hidden_states,
            attentions=attentions,
        )
        return output if (self.config.return_dict if return_dict is None else return_dict) else output.to_tuple()


class ViTScratchForImageClassification(ViTScratchPreTrainedModel):
    """The encoder and a linear head on the pooled token: logits (batch, num_labels), cross-entropy with `labels`."""

    def __init__(self, config: ViTScratchConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.vit = ViTScratchModel(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels) if config.num_labels > 0 else nn.Identity()
        self.post_init()

    def forward(
        self,
        pixel_values: torch.Tensor,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        interpolate_pos_encoding: bool | None = None,
        return_dict: bool | None = None,
    ) -> ImageClassifierOutput | tuple:
        options = self.vit.feature_options(output_attentions, output_hidden_states, interpolate_pos_encoding)
        # the head reads the pooled token only: the last block need not compute the other tokens
        tokens, hidden_states, attentions = self.vit.forward_features(pixel_values, **options, class_token_only=True)
        logits = self.classifier(self.vit.pool(tokens))
        loss = self.loss_function(labels, logits, self.config) if labels is not None else None
        output = ImageClassifierOutput(loss=loss, logits=logits, hidden_states=hidden_states, attentions=attentions)
        return output if (self.config.return_dict if return_dict is None else return_dict) else output.to_tuple()


@dataclass
class ViTScratchWithTeacherOutput(ModelOutput):
    """`logits` (batch, num_labels): the mean of the two heads', what to predict with (DeiT); `cls_logits` and
    `distillation_logits`: each head's, which a distillation loss reads; `loss` with `labels`."""

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    cls_logits: torch.FloatTensor | None = None
    distillation_logits: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


class ViTScratchForImageClassificationWithTeacher(ViTScratchPreTrainedModel):
    """DeiT's two heads: one on the class token, one on the distillation token (config.distillation_token).

    The distillation head learns from a teacher's predictions (the training script's `--teacher`); at inference
    `logits` is the mean of both heads'. With `labels` alone (no teacher), both heads learn the labels.
    """

    def __init__(self, config: ViTScratchConfig):
        super().__init__(config)
        if not config.distillation_token:
            raise ValueError(
                f"{type(self).__name__} reads a distillation token, but config.distillation_token is False: "
                "set distillation_token=True in the config (or use ViTScratchForImageClassification)."
            )
        self.num_labels = config.num_labels
        self.vit = ViTScratchModel(config)
        head = lambda: nn.Linear(config.hidden_size, config.num_labels) if config.num_labels > 0 else nn.Identity()
        self.classifier, self.distillation_classifier = head(), head()
        self.post_init()

    def forward(
        self,
        pixel_values: torch.Tensor,
        labels: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        interpolate_pos_encoding: bool | None = None,
        return_dict: bool | None = None,
    ) -> ViTScratchWithTeacherOutput | tuple:
        options = self.vit.feature_options(output_attentions, output_hidden_states, interpolate_pos_encoding)
        tokens, hidden_states, attentions = self.vit.forward_features(pixel_values, **options, class_token_only=True)
        cls_logits = self.classifier(self.vit.pool(tokens))
        distillation_logits = self.distillation_classifier(tokens[:, 1])  # the distillation token, after the norm
        logits = (cls_logits + distillation_logits) / 2
        loss = None
        if labels is not None:
            loss = (
                self.loss_function(labels, cls_logits, self.config)
                + self.loss_function(labels, distillation_logits, self.config)
            ) / 2
        output = ViTScratchWithTeacherOutput(
            loss=loss,
            logits=logits,
            cls_logits=cls_logits,
            distillation_logits=distillation_logits,
            hidden_states=hidden_states,
            attentions=attentions,
        )
        return output if (self.config.return_dict if return_dict is None else return_dict) else output.to_tuple()


def mae_position_table(grid_size: tuple[int, int], dim: int, num_prefix_tokens: int = 1) -> torch.Tensor:
    """`sincos_position_table` with its column half first, (1, T + h*w, dim): the layout of MAE's own code (a swap
    of names there), which its published weights were trained with and transformers' ViTMAE keeps."""
    table = sincos_position_table(grid_size, dim, num_prefix_tokens)
    return torch.cat([table[..., dim // 2 :], table[..., : dim // 2]], dim=-1)


def patchify(pixel_values: torch.Tensor, patch_size: tuple[int, int]) -> torch.Tensor:
    """(batch, C, H, W) -> (batch, h*w, P*P*C), each patch's pixels in (row, column, channel) order: MAE's
    reconstruction target, in the order the decoder predicts them."""
    batch, channels, height, width = pixel_values.shape
    patch_h, patch_w = patch_size
    # (batch, C, h, P, w, P) -> (batch, h, w, P, P, C) -> (batch, h*w, P*P*C)
    patches = pixel_values.reshape(batch, channels, height // patch_h, patch_h, width // patch_w, patch_w)
    return patches.permute(0, 2, 4, 3, 5, 1).reshape(batch, -1, patch_h * patch_w * channels)


def unpatchify(patches: torch.Tensor, grid_size: tuple[int, int], patch_size: tuple[int, int]) -> torch.Tensor:
    """The inverse of `patchify`: (batch, h*w, P*P*C) -> (batch, C, H, W), e.g. a reconstruction as an image."""
    (rows, cols), (patch_h, patch_w) = grid_size, patch_size
    batch, channels = patches.shape[0], patches.shape[-1] // (patch_h * patch_w)
    # (batch, h, w, P, P, C) -> (batch, C, h, P, w, P)
    patches = patches.reshape(batch, rows, cols, patch_h, patch_w, channels).permute(0, 5, 1, 3, 2, 4)
    return patches.reshape(batch, channels, rows * patch_h, cols * patch_w)


class ViTScratchRandomMasking(nn.Module):
    """MAE's masking: keep a random `1 - mask_ratio` of the patch tokens of each image, the others are hidden.

    The tokens whose `noise` (uniform, drawn per call unless given) is lowest are kept, as in MAE and transformers'
    ViTMAE, so the same noise masks the same patches. Input (batch, N, D); returns the kept tokens (batch, K, D),
    `mask` (batch, N) with 1 where a patch is hidden, and `ids_restore` (batch, N), the position of each patch in
    the shuffled order (kept tokens first), which puts the sequence back in image order.
    """

    def __init__(self, config: ViTScratchConfig):
        super().__init__()
        self.mask_ratio = config.mask_ratio

    def kept(self, num_patches: int) -> int:
        return int(num_patches * (1 - self.mask_ratio))

    def hidden(self, noise: torch.Tensor) -> torch.Tensor:
        """The mask `forward` makes from `noise` (batch, N): 1 where a patch is hidden, in image order."""
        return (noise.argsort(dim=1).argsort(dim=1) >= self.kept(noise.shape[1])).float()

    def forward(self, tokens: torch.Tensor, noise: torch.Tensor | None = None):
        batch, num_patches, dim = tokens.shape
        if noise is None:
            noise = torch.rand(batch, num_patches, device=tokens.device)
        elif noise.shape != (batch, num_patches):
            raise ValueError(
                f"noise must have shape (batch, num_patches) = {(batch, num_patches)}, got {tuple(noise.shape)}: "
                "one value per patch token of each image."
            )
        keep = self.kept(num_patches)
        ids_shuffle = noise.to(tokens.device).argsort(dim=1)  # (batch, N): the kept patches first
        ids_restore = ids_shuffle.argsort(dim=1)
        kept = torch.gather(tokens, 1, ids_shuffle[:, :keep, None].expand(-1, -1, dim))  # (batch, K, D)
        mask = torch.ones(batch, num_patches, device=tokens.device)
        mask[:, :keep] = 0
        return kept, torch.gather(mask, 1, ids_restore), ids_restore  # the mask in image order


class ViTScratchDecoder(nn.Module):
    """MAE's decoder: the encoded tokens (batch, T + K, D) and mask tokens at the hidden patches, in image order,
    with fixed sin-cos positions, through a few blocks of our encoder layer at `decoder_hidden_size`, then a linear
    prediction of each patch's pixels: logits (batch, N, P*P*C) in `patchify`'s order."""

    def __init__(self, config: ViTScratchConfig):
        super().__init__()
        decoder_config = copy.deepcopy(config)  # the same blocks, at the decoder's sizes
        decoder_config.hidden_size = config.decoder_hidden_size
        decoder_config.num_hidden_layers = config.decoder_num_hidden_layers
        decoder_config.num_attention_heads = config.decoder_num_attention_heads
        decoder_config.intermediate_size = config.decoder_intermediate_size
        self.num_prefix_tokens, self.grid_size = config.num_prefix_tokens, config.grid_size
        patch_h, patch_w = config.cell_size  # the pixels of one token
        self.decoder_embed = nn.Linear(config.hidden_size, config.decoder_hidden_size)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, config.decoder_hidden_size))
        table = mae_position_table(self.grid_size, config.decoder_hidden_size, self.num_prefix_tokens)
        self.register_buffer("position_embeddings", table, persistent=False)  # refilled by _init_weights
        self.decoder_layers = nn.ModuleList(
            ViTScratchLayer(decoder_config) for _ in range(config.decoder_num_hidden_layers)
        )
        self.decoder_norm = nn.LayerNorm(config.decoder_hidden_size, eps=config.layer_norm_eps)
        self.decoder_pred = nn.Linear(config.decoder_hidden_size, patch_h * patch_w * config.num_channels)

    def position_embeddings_for(self, grid_size: tuple[int, int]) -> torch.Tensor:
        """The fixed table for a (rows, columns) grid: computed afresh for another grid than the stored one."""
        if grid_size == self.grid_size:
            return self.position_embeddings
        table = mae_position_table(grid_size, self.position_embeddings.shape[-1], self.num_prefix_tokens)
        return table.to(self.position_embeddings)

    def forward(self, latent: torch.Tensor, ids_restore: torch.Tensor, grid_size: tuple[int, int]) -> torch.Tensor:
        hidden_states = self.decoder_embed(latent)  # (batch, T + K, D_dec)
        prefix, kept = hidden_states[:, : self.num_prefix_tokens], hidden_states[:, self.num_prefix_tokens :]
        batch, num_patches = ids_restore.shape
        masked = self.mask_token.expand(batch, num_patches - kept.shape[1], -1)  # (batch, N - K, D_dec)
        # shuffled order (kept first, then the masked) -> image order: (batch, N, D_dec)
        index = ids_restore[..., None].expand(-1, -1, hidden_states.shape[-1])
        patches = torch.gather(torch.cat([kept, masked], dim=1), 1, index)
        hidden_states = torch.cat([prefix, patches], dim=1) + self.position_embeddings_for(grid_size)
        for layer in self.decoder_layers:
            hidden_states, _ = layer(hidden_states)
        return self.decoder_pred(self.decoder_norm(hidden_states))[:, self.num_prefix_tokens :]


class ViTScratchReconstructionLoss(nn.Module):
    """MAE's loss: the mean squared error between predicted and true pixels, over the hidden patches only; with
    `norm_pix_loss`, each true patch is first normalised by its own mean and variance. Returns a scalar."""

    def __init__(self, config: ViTScratchConfig):
        super().__init__()
        self.patch_size = config.cell_size  # the pixels of one token
        self.norm_pix_loss = config.norm_pix_loss

    def forward(self, pixel_values: torch.Tensor, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        target = patchify(pixel_values, self.patch_size).to(logits.dtype)  # (batch, N, P*P*C)
        if self.norm_pix_loss:
            mean, var = target.mean(dim=-1, keepdim=True), target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1.0e-6) ** 0.5
        per_patch = ((logits - target) ** 2).mean(dim=-1)  # (batch, N)
        return (per_patch * mask).sum() / mask.sum()


@dataclass
class ViTScratchForPreTrainingOutput(ModelOutput):
    """`loss`: the reconstruction loss; `logits` (batch, N, P*P*C): every patch's predicted pixels (`patchify`'s
    order; `unpatchify` makes them an image); `mask` (batch, N): 1 where a patch was hidden; `ids_restore` (batch,
    N): see `ViTScratchRandomMasking`. transformers' ViTMAEForPreTrainingOutput has the same fields."""

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    mask: torch.FloatTensor | None = None
    ids_restore: torch.LongTensor | None = None


class ViTScratchForPreTraining(ViTScratchPreTrainedModel):
    """A masked autoencoder (MAE, He et al. 2021): the encoder (`ViTScratchModel`'s embeddings, blocks and final
    LayerNorm) runs on the class token and the patch tokens `ViTScratchRandomMasking` keeps, `ViTScratchDecoder`
    predicts the pixels of every patch, `ViTScratchReconstructionLoss` scores the hidden ones. The encoder's weights
    are saved under `vit.`, as a classifier's: `ViTScratchForImageClassification.from_pretrained` on a saved folder
    builds a classifier from them (the decoder left out, a new head).

    With a convolutional stem (`config.stem`), whose receptive fields cross cell borders, the hidden cells' pixels
    are first set to zero (the data's mean, in normalised pixels), as SimMIM masks its input: the tokens kept never
    see a hidden pixel. Each token then covers a cell of `config.cell_size` pixels, the patches of the loss.
    """

    def __init__(self, config: ViTScratchConfig):
        super().__init__(config)
        self.vit = ViTScratchModel(config)
        self.masking = ViTScratchRandomMasking(config)
        self.decoder = ViTScratchDecoder(config)
        self.reconstruction_loss = ViTScratchReconstructionLoss(config)
        self.post_init()

    def save_pretrained(self, save_directory, *args, **kwargs):
        """`ViTScratchPreTrainedModel.save_pretrained`, with this class as the folder's `AutoModelForPreTraining`."""
        auto_map = dict(getattr(self.config, "auto_map", None) or {})
        self.config.auto_map = auto_map | {"AutoModelForPreTraining": auto_map_entry(ViTScratchForPreTraining)}
        return super().save_pretrained(save_directory, *args, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """The encoder's initialisation, and the decoder's mask token (as the class token) and fixed table."""
        super()._init_weights(module)
        if isinstance(module, ViTScratchDecoder):
            truncated_normal_(module.mask_token, self.config.initializer_range)
            table = mae_position_table(module.grid_size, self.config.decoder_hidden_size, module.num_prefix_tokens)
            init.copy_(module.position_embeddings, table)

    def encode(self, pixel_values: torch.Tensor, noise: torch.Tensor | None, interpolate_pos_encoding: bool):
        """The encoder on the visible tokens: latent (batch, T + K, D) after the final LayerNorm, mask, ids_restore."""
        if self.config.stem != "none":  # the stem sees the image whole: hide the hidden cells' pixels first
            cell_h, cell_w = self.config.cell_size
            batch, _, height, width = pixel_values.shape
            if noise is None:
                noise = torch.rand(batch, (height // cell_h) * (width // cell_w), device=pixel_values.device)
            hidden = self.masking.hidden(noise).reshape(batch, 1, height // cell_h, width // cell_w)
            hidden = hidden.repeat_interleave(cell_h, dim=2).repeat_interleave(cell_w, dim=3)
            pixel_values = pixel_values * (1 - hidden).to(pixel_values.dtype)
        tokens = self.vit.embeddings(pixel_values, interpolate_pos_encoding)  # (batch, T + N, D), positions added
        prefix = self.config.num_prefix_tokens
        kept, mask, ids_restore = self.masking(tokens[:, prefix:], noise)
        hidden_states = torch.cat([tokens[:, :prefix], kept], dim=1)
        for layer in self.vit.layers:
            hidden_states, _ = layer(hidden_states)
        # the final LayerNorm on every token, whichever slot holds it (layernorm, or fc_norm for a mean-pooling model)
        return self.vit.fc_norm(self.vit.layernorm(hidden_states)), mask, ids_restore

    def forward(
        self,
        pixel_values: torch.Tensor,
        noise: torch.Tensor | None = None,
        interpolate_pos_encoding: bool | None = None,
        return_dict: bool | None = None,
    ) -> ViTScratchForPreTrainingOutput | tuple:
        """`noise` (batch, N): which patches to hide (the lowest `1 - mask_ratio` are kept); drawn when None."""
        latent, mask, ids_restore = self.encode(pixel_values, noise, bool(interpolate_pos_encoding))
        cell_h, cell_w = self.config.cell_size
        grid_size = (pixel_values.shape[2] // cell_h, pixel_values.shape[3] // cell_w)
        logits = self.decoder(latent, ids_restore, grid_size)
        loss = self.reconstruction_loss(pixel_values.to(logits.dtype), logits, mask)
        output = ViTScratchForPreTrainingOutput(loss=loss, logits=logits, mask=mask, ids_restore=ids_restore)
        return output if (self.config.return_dict if return_dict is None else return_dict) else output.to_tuple()


__all__ = [
    "ViTScratchForImageClassification",
    "ViTScratchForImageClassificationWithTeacher",
    "ViTScratchForPreTraining",
    "ViTScratchForPreTrainingOutput",
    "ViTScratchModel",
    "ViTScratchPreTrainedModel",
    "ViTScratchWithTeacherOutput",
]
