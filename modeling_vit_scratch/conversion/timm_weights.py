"""timm's ViT (its ResNet hybrids and DINOv2 models included) -> ours, in memory: the config read from the model's
attributes and modules, then an explicit renaming of its state dict, loaded strictly (`convert.build`).
"""

import re

import torch

from ..configuration_vit_scratch import ViTScratchConfig, to_pair
from ..errors import UserError
from .convert import build, processor_for

TIMM_BLOCK = {"attn.qkv": "attention.qkv_proj", "attn.proj": "attention.o_proj", "norm1": "layernorm_before"}
TIMM_BLOCK |= {"norm2": "layernorm_after", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
TIMM_BLOCK |= {"ls1": "layer_scale1", "ls2": "layer_scale2"}
TIMM_NAMES = {"cls_token": "cls_token", "dist_token": "distillation_token", "pos_embed": "position_embeddings"}
TIMM_NAMES |= {"reg_token": "register_tokens"}
TIMM_NAMES |= {"patch_embed.proj": "patch_embeddings.projection"}
# timm's post-activation ResNet-V2 bottleneck (its hybrids' stages) -> our stem block's names
TIMM_BOTTLENECK = {"downsample.conv": "shortcut_conv", "downsample.norm": "shortcut_norm"}


def timm_config(timm_model) -> ViTScratchConfig:
    """The hyper-parameters of a timm `VisionTransformer` (built without weights) as our config; what vit_scratch
    does not implement is refused by name (anything else that differs shows in the parity check)."""
    block, head = timm_model.blocks[0], timm_model.head
    mlp = type(block.mlp).__name__  # DINOv2-giant's SwiGLU is a GluMlp
    unsupported = {
        "no class token": timm_model.cls_token is None,
        f"global_pool={timm_model.global_pool!r}": timm_model.global_pool not in ("token", "avg"),
        f"mlp_layer={mlp} (SwiGLU is not supported: only Linear-GELU-Linear)": mlp != "Mlp",
    }
    if found := [name for name, present in unsupported.items() if present]:
        raise UserError(f"the timm model has {', '.join(found)}, which vit_scratch does not implement")
    backbone = getattr(timm_model.patch_embed, "backbone", None)  # a hybrid's (timm's HybridEmbed)
    registers = getattr(timm_model, "num_reg_tokens", 0)
    return ViTScratchConfig(
        **(timm_stem(backbone) if backbone is not None else {"num_channels": timm_model.patch_embed.proj.in_channels}),
        image_size=list(timm_model.patch_embed.img_size),
        patch_size=list(timm_model.patch_embed.patch_size),
        hidden_size=timm_model.embed_dim,
        num_hidden_layers=len(timm_model.blocks),
        num_attention_heads=block.attn.num_heads,
        intermediate_size=block.mlp.fc1.out_features,
        qkv_bias=block.attn.qkv.bias is not None,
        layer_norm_eps=block.norm1.eps,
        pooling="cls" if timm_model.global_pool == "token" else "mean",
        fc_norm=isinstance(timm_model.fc_norm, torch.nn.LayerNorm),
        num_labels=head.out_features if isinstance(head, torch.nn.Linear) else 0,
        distillation_token=getattr(timm_model, "dist_token", None) is not None,
        num_register_tokens=registers,
        layerscale_value=getattr(block.ls1, "init_values", None),
        # timm resamples antialiased (resample_abs_pos_embed: at run time with dynamic_img_size), as transformers'
        # Dinov2WithRegisters does; the models that predate the field keep the default
        **({"position_interpolation": "bicubic_antialias"} if timm_model.dynamic_img_size or registers else {}),
    )


def timm_stem(backbone) -> dict:
    """Our stem fields for a timm hybrid's backbone: a ResNetV2 of post-activation bottlenecks, or its root alone
    (conv, norm, pool), with the weight-standardised SAME convolutions of timm's `vit_*_r*` models."""
    stages = getattr(backbone, "stages", None)
    root = backbone.stem if stages is not None else backbone
    convs = [module for module in backbone.modules() if isinstance(module, torch.nn.Conv2d)]
    blocks = [block for stage in stages or () for block in stage.blocks]
    width, depths = root.conv.out_channels, [len(stage.blocks) for stage in stages or ()]
    widths = [stage.blocks[-1].conv3.out_channels for stage in stages or ()]
    if (
        any(type(conv).__name__ != "StdConv2dSame" or getattr(conv, "eps", 1e-8) != 1e-8 for conv in convs)
        or [name for name, _ in root.named_children()] != ["conv", "norm", "pool"]
        or any(type(block).__name__ != "Bottleneck" for block in blocks)
        or widths != [4 * width * 2**i for i in range(len(depths))]
    ):
        raise UserError(
            "the timm hybrid's backbone is not the ResNet-V2 of timm's vit_*_r* models (StdConv2dSame, post-"
            "activation bottlenecks, stages 4 * width * 2**i wide), the one vit_scratch implements"
        )
    return dict(stem="resnetv2", stem_width=width, stem_depths=depths, num_channels=root.conv.in_channels)


def timm_key(key: str) -> str:
    """A timm ViT key -> ours."""
    if match := re.match(r"blocks\.(\d+)\.(.+)\.(weight|bias|gamma)$", key):
        index, name, kind = match.groups()
        return f"vit.layers.{index}.{TIMM_BLOCK.get(name, name)}.{'lambda1' if kind == 'gamma' else kind}"
    if key.startswith(("head.", "head_dist.", "norm.", "fc_norm.")):
        head = {"head": "classifier", "head_dist": "distillation_classifier", "norm": "vit.layernorm"}
        name, _, kind = key.partition(".")
        return f"{head.get(name, 'vit.fc_norm')}.{kind}"
    if key.startswith("patch_embed.backbone."):
        stem = key.removeprefix("patch_embed.backbone.").removeprefix("stem.")
        stem = re.sub(r"^(conv|norm)\.", r"root_\1.", stem)
        stem = re.sub(r"^stages\.(\d+)\.blocks\.(\d+)\.", r"stages.\1.\2.", stem)
        for theirs, ours in TIMM_BOTTLENECK.items():
            stem = stem.replace(theirs, ours)
        return f"vit.embeddings.patch_embeddings.stem.{stem}"
    for theirs, ours in TIMM_NAMES.items():
        key = key.replace(theirs, ours) if key.startswith(theirs) else key
    return f"vit.embeddings.{key}"


def timm_positions(timm_model, config: ViTScratchConfig, state: dict[str, torch.Tensor]) -> dict:
    """timm's position table as ours: a row for each class token, then the patches', none for the registers.
    timm's `no_embed_class` adds no position to the class token: ours gets a zero row. A position timm adds to a
    register is a constant added to a constant: it is folded into the register token."""
    name, registers = "vit.embeddings.position_embeddings", "vit.embeddings.register_tokens"
    positions, classes, count = state[name], config.num_class_tokens, config.num_register_tokens
    if getattr(timm_model, "no_embed_class", False):
        zeros = positions.new_zeros(1, classes, positions.shape[-1])
        return {name: torch.cat([zeros, positions], dim=1)}
    if not count:
        return {}
    # (1, C + R + N, D): the class tokens' rows, the registers', the patches'
    folded = state[registers] + positions[:, classes : classes + count]
    return {name: torch.cat([positions[:, :classes], positions[:, classes + count :]], dim=1), registers: folded}


def from_timm(timm_model, state_dict: dict[str, torch.Tensor] | None = None):
    """A timm `VisionTransformer` (for its hyper-parameters and data config) and its weights (by default its own)
    -> our model and image processor. A distilled DeiT with heads becomes our two-headed model."""
    config = timm_config(timm_model)
    state = {timm_key(key): tensor for key, tensor in (state_dict or timm_model.state_dict()).items()}
    state |= timm_positions(timm_model, config, state)
    data = getattr(timm_model, "pretrained_cfg", None) or {}
    resample = {"bilinear": 2, "bicubic": 3, "nearest": 0}.get(data.get("interpolation", "bicubic"), 3)
    mean, std = (data.get(name, [0.5] * config.num_channels) for name in ("mean", "std"))
    processor = processor_for(config, mean, std, to_pair(config.image_size), resample)
    return build(config, state, config.distillation_token and config.num_labels > 0), processor
