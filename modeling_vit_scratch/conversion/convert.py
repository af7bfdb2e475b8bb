"""Weights between vit_scratch and transformers' ViT / DeiT / Dinov2 (with registers too) or timm's ViT (its ResNet
hybrids and DINOv2 models included), in memory.

Each direction is an explicit renaming of the state dict: our fused query/key/value projection is transformers'
three projections concatenated, every other tensor keeps its shape. The result is loaded strictly (every key, every
shape), so nothing is dropped without a word; only transformers' `pooler` (a tanh layer no classification head
uses, which vit_scratch has not) and Dinov2's `mask_token` (read only by masked-image pre-training) are left out. transformers' own classes build and save their side, so the folder
written holds the key layout transformers saves; timm's model is read through its attributes. Whether a conversion
computes what its source computes is the command's parity check (`command.py`), which every written folder passes.
"""

import re

import torch
from transformers import (
    DeiTConfig,
    DeiTForImageClassification,
    DeiTForImageClassificationWithTeacher,
    Dinov2Config,
    Dinov2Model,
    Dinov2WithRegistersConfig,
    Dinov2WithRegistersModel,
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessorPil,
)

from ..configuration_vit_scratch import ViTScratchConfig, to_pair
from ..errors import UserError
from ..image_processing_vit_scratch import LUMA_WEIGHTS, ViTScratchImageProcessor
from ..modeling_vit_scratch import ViTScratchForImageClassification, ViTScratchForImageClassificationWithTeacher

# the architecture fields transformers' ViT / DeiT configs share with ours, under the same names
SHARED_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "layer_norm_eps",
    "image_size",
    "patch_size",
    "num_channels",
    "qkv_bias",
    "initializer_range",
)
HEADS = ("classifier.", "cls_classifier.", "distillation_classifier.")
# transformers' Dinov2 block names -> ours (transformers' ViT names, which every other key already shares)
DINOV2_NAMES = {"encoder.layer.": "layers.", ".norm1.": ".layernorm_before.", ".norm2.": ".layernorm_after."}
DINOV2_TYPES = ("dinov2", "dinov2_with_registers")
# how each Dinov2 resamples its position embeddings for another image size
DINOV2_INTERPOLATION = {"dinov2": "bicubic", "dinov2_with_registers": "bicubic_antialias"}
TIMM_BLOCK = {"attn.qkv": "attention.qkv_proj", "attn.proj": "attention.o_proj", "norm1": "layernorm_before"}
TIMM_BLOCK |= {"norm2": "layernorm_after", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
TIMM_BLOCK |= {"ls1": "layer_scale1", "ls2": "layer_scale2"}
TIMM_NAMES = {"cls_token": "cls_token", "dist_token": "distillation_token", "pos_embed": "position_embeddings"}
TIMM_NAMES |= {"reg_token": "register_tokens"}
TIMM_NAMES |= {"patch_embed.proj": "patch_embeddings.projection"}
# timm's post-activation ResNet-V2 bottleneck (its hybrids' stages) -> our stem block's names
TIMM_BOTTLENECK = {"downsample.conv": "shortcut_conv", "downsample.norm": "shortcut_norm"}


def build(config: ViTScratchConfig, state: dict[str, torch.Tensor], two_heads: bool = False):
    """Our model holding exactly `state`: one head, or DeiT's two. Weights that are not finite are refused."""
    if bad := [key for key, tensor in state.items() if tensor.is_floating_point() and not tensor.isfinite().all()]:
        raise UserError(f"the weights {bad[0]} hold NaN or infinity: give weights that are finite")
    model = (ViTScratchForImageClassificationWithTeacher if two_heads else ViTScratchForImageClassification)(config)
    if extra := sorted(set(state) - set(model.state_dict())):
        raise UserError(
            f"the source has weights vit_scratch has no place for ({', '.join(extra[:3])}): it has a part "
            "vit_scratch does not implement"
        )
    model.load_state_dict(state, strict=True)
    return model.eval()


def processor_for(config: ViTScratchConfig, mean, std, size: tuple[int, int], resample: int):
    """Our processor with the source's statistics, input size and filter (RGB statistics of a model of another
    channel count averaged into one per channel)."""
    mean, std = list(mean), list(std)
    if len(mean) != config.num_channels or len(std) != config.num_channels:
        mean, std = ([sum(values) / len(values)] * config.num_channels for values in (mean, std))
    size = {"height": size[0], "width": size[1]}
    return ViTScratchImageProcessor.for_config(config, image_mean=mean, image_std=std, size=size, resample=resample)


def dinov2_fields(source) -> dict:
    """Our config fields for a transformers Dinov2 (with registers or not) config; its SwiGLU MLP is refused."""
    if source.use_swiglu_ffn:
        raise UserError(
            "--input uses use_swiglu_ffn=True (DINOv2-giant's SwiGLU MLP): vit_scratch's MLP is Linear-GELU-Linear, "
            "SwiGLU is not supported"
        )
    return dict(
        intermediate_size=int(source.hidden_size * source.mlp_ratio),
        layerscale_value=float(source.layerscale_value),
        num_register_tokens=getattr(source, "num_register_tokens", 0),
        position_interpolation=DINOV2_INTERPOLATION[source.model_type],
    )


def from_transformers(reference, settings: dict | None = None):
    """A transformers ViT, DeiT or Dinov2 model (`ViTModel`, `ViTForImageClassification`, `DeiTModel`, `DeiTFor...`,
    `Dinov2Model`, `Dinov2WithRegistersModel`) and its `preprocessor_config.json` settings -> our model and image
    processor. DeiT keeps its distillation token, and its two-headed classifier becomes ours; Dinov2 keeps its layer
    scale and registers; a model without a head converts with no labels."""
    source = reference.config
    if source.model_type not in ("vit", "deit", *DINOV2_TYPES):
        raise UserError(
            f"--input is a {source.model_type!r} model: --from transformers converts ViT, DeiT and Dinov2 only"
        )
    if source.hidden_act != "gelu":
        raise UserError(f"--input uses hidden_act={source.hidden_act!r}: vit_scratch has the exact GELU only")
    dinov2 = source.model_type in DINOV2_TYPES
    two_heads = hasattr(reference, "cls_classifier")
    has_head = two_heads or isinstance(getattr(reference, "classifier", None), torch.nn.Linear)
    if dinov2 and has_head:
        raise UserError(
            f"--input is a {type(reference).__name__}, whose head reads the class token and the mean patch token "
            "side by side, which vit_scratch's head does not: convert the Dinov2Model (no head) instead"
        )
    labels = {"id2label": dict(source.id2label)} if has_head else {}
    fields = {name: getattr(source, name) for name in SHARED_FIELDS if hasattr(source, name)}
    config = ViTScratchConfig(
        **fields | (dinov2_fields(source) if dinov2 else {}),
        **(labels or {"num_labels": 0}),
        distillation_token=source.model_type == "deit",
    )
    state = {}
    for key, tensor in reference.state_dict().items():
        key = re.sub(r"^(vit|deit|dinov2)\.", "", key)
        for theirs, ours in DINOV2_NAMES.items():
            key = key.replace(theirs, ours)
        if key.startswith(HEADS):
            state[key.removeprefix("cls_")] = tensor
        elif not key.startswith(("pooler.", "embeddings.mask_token")):
            state[f"vit.{key}"] = tensor
    for query in [key for key in state if ".attention.q_proj." in key]:
        parts = [state.pop(query.replace("q_proj", part)) for part in ("q_proj", "k_proj", "v_proj")]
        state[query.replace("q_proj", "qkv_proj")] = torch.cat(parts)
    settings = settings or {}
    size = settings.get("size") or dict(zip(("height", "width"), to_pair(config.image_size), strict=True))
    if settings.get("do_center_crop") and "crop_size" in settings:  # DeiT resizes to 256, then crops 224
        size = settings["crop_size"]
    mean, std = (settings.get(name, [0.5] * config.num_channels) for name in ("image_mean", "image_std"))
    height, width = size.get("height", size.get("shortest_edge")), size.get("width", size.get("shortest_edge"))
    processor = processor_for(config, mean, std, (height, width), settings.get("resample", 2))
    return build(config, state, two_heads), processor


def dinov2_target(config: ViTScratchConfig, fields: dict) -> tuple[type, type, dict]:
    """transformers' Dinov2Model, or Dinov2WithRegistersModel for a model with registers, and its config fields;
    what they cannot hold is refused by name. Without layer scale, its scales are ones (x * 1 is x exactly)."""
    model_type = "dinov2_with_registers" if config.num_register_tokens else "dinov2"
    expected = DINOV2_INTERPOLATION[model_type]
    refused = {
        "a distillation token": config.distillation_token,
        "a classification head (Dinov2's reads the class and mean patch tokens side by side)": config.num_labels > 0,
        f"intermediate_size={config.intermediate_size} (a multiple of hidden_size)": config.intermediate_size
        % config.hidden_size,
        f"position_interpolation={config.position_interpolation!r} (it resamples with {expected!r})": (
            config.position_interpolation != expected
        ),
    }
    if found := [name for name, present in refused.items() if present]:
        raise UserError(f"transformers' {model_type} cannot hold {', '.join(found)}: this model cannot be written")
    fields = {name: value for name, value in fields.items() if name != "intermediate_size"}
    fields |= dict(mlp_ratio=config.intermediate_size // config.hidden_size)
    fields |= dict(layerscale_value=float(config.layerscale_value or 1.0))
    if config.num_register_tokens:
        return (
            Dinov2WithRegistersModel,
            Dinov2WithRegistersConfig,
            fields | {"num_register_tokens": config.num_register_tokens},
        )
    return Dinov2Model, Dinov2Config, fields | {"use_mask_token": False}


def to_transformers(model, processor=None):
    """Our model -> transformers' `ViTForImageClassification`, or DeiT's classifier (two-headed from ours) for a
    model with a distillation token, or `Dinov2Model` / `Dinov2WithRegistersModel` for a model with layer scale or
    registers (without a head), and `ViTImageProcessor` settings from `processor`. A grayscale model becomes an
    RGB one computing the same on the gray image (transformers' pipeline makes every image RGB): its patch kernel is
    shared among R, G and B by the luma weights our processor uses."""
    config = model.config
    missing = {
        "pooling='mean'": config.pooling != "cls",
        "fc_norm": config.fc_norm,
        "position_embedding='sincos'": config.position_embedding != "learned",
        f"stem={config.stem!r}": config.stem != "none",
        "non-square image or patch sizes": len({*to_pair(config.image_size)}) + len({*to_pair(config.patch_size)}) > 2,
    }
    if found := [name for name, used in missing.items() if used]:
        raise UserError(f"transformers' ViT has no {', '.join(found)}: this model cannot be written as one")
    two_heads = isinstance(model, ViTScratchForImageClassificationWithTeacher)
    deit, gray = config.distillation_token, config.num_channels == 1
    dinov2 = config.layerscale_value is not None or config.num_register_tokens > 0
    fields = {name: getattr(config, name) for name in SHARED_FIELDS}
    fields |= dict(image_size=to_pair(config.image_size)[0], patch_size=to_pair(config.patch_size)[0])
    fields |= dict(num_channels=3 if gray else config.num_channels)
    fields |= dict(id2label=dict(config.id2label), label2id=dict(config.label2id), hidden_act="gelu")
    if dinov2:
        model_class, config_class, fields = dinov2_target(config, fields)
    elif deit:
        model_class = DeiTForImageClassificationWithTeacher if two_heads else DeiTForImageClassification
        config_class = DeiTConfig
    else:
        model_class, config_class = ViTForImageClassification, ViTConfig
    if not dinov2:
        fields |= dict(encoder_stride=fields["patch_size"])
    theirs = model_class(config_class(**fields))
    prefix, state = "" if dinov2 else "deit." if deit else "vit.", {}
    if isinstance(theirs, Dinov2WithRegistersModel):  # read only by masked-image pre-training
        state["embeddings.mask_token"] = torch.zeros_like(theirs.embeddings.mask_token)
    for key, tensor in model.state_dict().items():
        if dinov2:
            for theirs_name, ours in DINOV2_NAMES.items():
                key = key.replace(ours, theirs_name)
        if key.endswith("patch_embeddings.projection.weight"):
            tensor = tensor.reshape(config.hidden_size, config.num_channels, *to_pair(config.patch_size))
            if gray:  # each channel's share of the gray kernel: its luma weight (the shares sum to exactly 1)
                shares = torch.tensor(LUMA_WEIGHTS, dtype=torch.float64) / sum(LUMA_WEIGHTS)
                tensor = tensor * shares.to(tensor.dtype).view(1, 3, 1, 1)
        if key.startswith(HEADS):
            state[f"cls_{key}" if two_heads and key.startswith("classifier.") else key] = tensor
        elif ".qkv_proj." in key:
            for part, chunk in zip(("q_proj", "k_proj", "v_proj"), tensor.chunk(3), strict=True):
                state[prefix + key.removeprefix("vit.").replace("qkv_proj", part)] = chunk.clone()
        else:
            state[prefix + key.removeprefix("vit.")] = tensor
    if dinov2 and config.layerscale_value is None:  # registers without layer scale: Dinov2's scales, all ones
        state |= {key: torch.ones_like(scale) for key, scale in theirs.state_dict().items() if ".layer_scale" in key}
    theirs.load_state_dict(state, strict=True)
    if processor is None:
        return theirs.eval(), None
    channels = 3 if gray else 1  # a gray model's one mean and std, for each of R, G and B
    settings = dict(
        size=dict(processor.size), resample=int(processor.resample), rescale_factor=processor.rescale_factor
    )
    settings |= dict(image_mean=list(processor.image_mean) * channels, image_std=list(processor.image_std) * channels)
    return theirs.eval(), ViTImageProcessorPil(**settings)  # saved as ViTImageProcessor, without needing torchvision


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
