"""Weights between vit_scratch and transformers' ViT / DeiT / ViTMAE or timm's ViT (its ResNet hybrids included), in
memory.

Each direction is an explicit renaming of the state dict: our fused query/key/value projection is transformers'
three projections concatenated, every other tensor keeps its shape. The result is loaded strictly (every key, every
shape), so nothing is dropped without a word; only transformers' `pooler` (a tanh layer no classification head
uses, which vit_scratch has not) is left out, and ViTMAE's fixed sin-cos tables, which vit_scratch computes
(checked to be that table, or refused). transformers' own classes build and save their side, so the folder
written holds the key layout transformers saves; timm's model is read through its attributes. Whether a conversion
computes what its source computes is the command's parity check (`command.py`), which every written folder passes.
"""

import re

import torch
from transformers import (
    DeiTConfig,
    DeiTForImageClassification,
    DeiTForImageClassificationWithTeacher,
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessor,
    ViTMAEConfig,
    ViTMAEForPreTraining,
)

from ..configuration_vit_scratch import ViTScratchConfig, to_pair
from ..errors import UserError
from ..image_processing_vit_scratch import LUMA_WEIGHTS, ViTScratchImageProcessor
from ..modeling_vit_scratch import (
    ViTScratchForImageClassification,
    ViTScratchForImageClassificationWithTeacher,
    ViTScratchForPreTraining,
    mae_position_table,
)

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
# the masked autoencoder's fields, under ViTMAEConfig's names
MAE_FIELDS = (
    "decoder_hidden_size",
    "decoder_num_hidden_layers",
    "decoder_num_attention_heads",
    "decoder_intermediate_size",
    "mask_ratio",
    "norm_pix_loss",
)
TIMM_BLOCK = {"attn.qkv": "attention.qkv_proj", "attn.proj": "attention.o_proj", "norm1": "layernorm_before"}
TIMM_BLOCK |= {"norm2": "layernorm_after", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
TIMM_NAMES = {"cls_token": "cls_token", "dist_token": "distillation_token", "pos_embed": "position_embeddings"}
TIMM_NAMES |= {"patch_embed.proj": "patch_embeddings.projection"}
# timm's post-activation ResNet-V2 bottleneck (its hybrids' stages) -> our stem block's names
TIMM_BOTTLENECK = {"downsample.conv": "shortcut_conv", "downsample.norm": "shortcut_norm"}


def build(config: ViTScratchConfig, state: dict[str, torch.Tensor], two_heads: bool = False, model_class=None):
    """Our model holding exactly `state`: one head, DeiT's two, or `model_class`. Weights that are not finite are
    refused."""
    if bad := [key for key, tensor in state.items() if tensor.is_floating_point() and not tensor.isfinite().all()]:
        raise UserError(f"the weights {bad[0]} hold NaN or infinity: give weights that are finite")
    model_class = model_class or (
        ViTScratchForImageClassificationWithTeacher if two_heads else ViTScratchForImageClassification
    )
    model = model_class(config)
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


def mae_decoder_table(reference, config: ViTScratchConfig) -> None:
    """Refuse a ViTMAE whose decoder position table is not MAE's fixed sin-cos table, the one vit_scratch computes
    (and does not store)."""
    table = reference.state_dict()["decoder.decoder_pos_embed"]
    expected = mae_position_table(config.grid_size, config.decoder_hidden_size)
    if table.shape != expected.shape or not torch.allclose(table.float(), expected.float(), atol=1e-6):
        raise UserError(
            "--input holds decoder position embeddings other than MAE's fixed 2-D sin-cos table, which vit_scratch "
            "computes instead of storing: this decoder cannot be converted (a ViTMAEForPreTraining that transformers "
            "built from a config, not loaded, may hold zeros there)"
        )


def from_transformers(reference, settings: dict | None = None):
    """A transformers ViT, DeiT or ViTMAE model (`ViTModel`, `ViTForImageClassification`, `DeiTModel`, `DeiTFor...`,
    `ViTMAEForPreTraining`) and its `preprocessor_config.json` settings -> our model and image processor. DeiT keeps
    its distillation token, and its two-headed classifier becomes ours; a model without a head converts with no
    labels; ViTMAE becomes our masked autoencoder, its frozen encoder position table our learned one."""
    source = reference.config
    if source.model_type not in ("vit", "deit", "vit_mae"):
        raise UserError(
            f"--input is a {source.model_type!r} model: --from transformers converts ViT, DeiT and ViTMAE only"
        )
    if source.hidden_act != "gelu":
        raise UserError(f"--input uses hidden_act={source.hidden_act!r}: vit_scratch has the exact GELU only")
    two_heads, mae = hasattr(reference, "cls_classifier"), source.model_type == "vit_mae"
    labels = {"id2label": dict(source.id2label)} if two_heads or hasattr(reference, "classifier") else {}
    # ViTMAE's frozen encoder table is held as our learned one (MAE's layout differs from our sincos table's)
    mae_fields = {name: getattr(source, name) for name in MAE_FIELDS} | {"position_embedding": "learned"} if mae else {}
    config = ViTScratchConfig(
        **{name: getattr(source, name) for name in SHARED_FIELDS},
        **(labels or {"num_labels": 0}),
        distillation_token=source.model_type == "deit",
        **mae_fields,
    )
    if mae:
        mae_decoder_table(reference, config)
    state = {}
    for key, tensor in reference.state_dict().items():
        key = re.sub(r"^(vit|deit)\.", "", key)
        if key.startswith(HEADS):
            state[key.removeprefix("cls_")] = tensor
        elif key == "decoder.decoder_pos_embed":  # MAE's fixed table, which ours computes (checked above)
            continue
        elif key.startswith("decoder."):  # ViTMAE's decoder, under our names
            state[key] = tensor
        elif not key.startswith("pooler."):
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
    return build(config, state, two_heads, ViTScratchForPreTraining if mae else None), processor


def to_transformers(model, processor=None):
    """Our model -> transformers' `ViTForImageClassification`, or DeiT's classifier (two-headed from ours) for a
    model with a distillation token, and `ViTImageProcessor` settings from `processor`. A grayscale model becomes an
    RGB one computing the same on the gray image (transformers' pipeline makes every image RGB): its patch kernel is
    shared among R, G and B by the luma weights our processor uses. A masked autoencoder becomes transformers'
    `ViTMAEForPreTraining` (`to_transformers_mae`)."""
    if isinstance(model, ViTScratchForPreTraining):
        return to_transformers_mae(model, processor)
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
    fields = {name: getattr(config, name) for name in SHARED_FIELDS}
    fields |= dict(image_size=to_pair(config.image_size)[0], patch_size=to_pair(config.patch_size)[0])
    fields |= dict(num_channels=3 if gray else config.num_channels, encoder_stride=fields["patch_size"])
    fields |= dict(id2label=dict(config.id2label), label2id=dict(config.label2id), hidden_act="gelu")
    if deit:
        classes = (DeiTForImageClassificationWithTeacher if two_heads else DeiTForImageClassification, DeiTConfig)
    else:
        classes = (ViTForImageClassification, ViTConfig)
    theirs = classes[0](classes[1](**fields))
    prefix, state = "deit." if deit else "vit.", {}
    for key, tensor in model.state_dict().items():
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
    theirs.load_state_dict(state, strict=True)
    return theirs.eval(), transformers_processor(processor, 3 if gray else 1)


def transformers_processor(processor, channels: int = 1) -> ViTImageProcessor | None:
    """`ViTImageProcessor` settings from our processor; each mean and std repeated `channels` times (a gray model's
    one, for each of R, G and B)."""
    if processor is None:
        return None
    settings = dict(
        size=dict(processor.size), resample=int(processor.resample), rescale_factor=processor.rescale_factor
    )
    settings |= dict(image_mean=list(processor.image_mean) * channels, image_std=list(processor.image_std) * channels)
    return ViTImageProcessor(**settings)


def to_transformers_mae(model: ViTScratchForPreTraining, processor=None):
    """Our masked autoencoder -> transformers' `ViTMAEForPreTraining` (and `ViTImageProcessor` settings). Our fixed
    sin-cos tables, computed rather than stored, are written as the frozen tables ViTMAE keeps; a mean-pooling
    model's final LayerNorm (`fc_norm`) is ViTMAE's `layernorm`: in pretraining both norm every token."""
    config = model.config
    missing = {
        "distillation token": config.distillation_token,
        "non-square image or patch sizes": len({*to_pair(config.image_size)}) + len({*to_pair(config.patch_size)}) > 2,
    }
    if found := [name for name, used in missing.items() if used]:
        raise UserError(f"transformers' ViTMAE has no {', '.join(found)}: this model cannot be written as one")
    fields = {name: getattr(config, name) for name in SHARED_FIELDS + MAE_FIELDS}
    fields |= dict(image_size=to_pair(config.image_size)[0], patch_size=to_pair(config.patch_size)[0])
    theirs = ViTMAEForPreTraining(ViTMAEConfig(**fields, hidden_act="gelu"))
    state = {
        "vit.embeddings.position_embeddings": model.vit.embeddings.position_embeddings.detach().clone(),
        "decoder.decoder_pos_embed": model.decoder.position_embeddings.clone(),
    }
    for key, tensor in model.state_dict().items():
        key = key.replace("vit.fc_norm.", "vit.layernorm.")
        if ".qkv_proj." in key:
            for part, chunk in zip(("q_proj", "k_proj", "v_proj"), tensor.chunk(3), strict=True):
                state[key.replace("qkv_proj", part)] = chunk.clone()
        else:
            state[key] = tensor
    theirs.load_state_dict(state, strict=True)
    return theirs.eval(), transformers_processor(processor)


def timm_config(timm_model) -> ViTScratchConfig:
    """The hyper-parameters of a timm `VisionTransformer` (built without weights) as our config; what vit_scratch
    does not implement is refused by name (anything else that differs shows in the parity check)."""
    unsupported = {
        "no class token": timm_model.cls_token is None,
        "register tokens": getattr(timm_model, "num_reg_tokens", 0) > 0,
        "no_embed_class": getattr(timm_model, "no_embed_class", False),
        f"global_pool={timm_model.global_pool!r}": timm_model.global_pool not in ("token", "avg"),
    }
    if found := [name for name, present in unsupported.items() if present]:
        raise UserError(f"the timm model has {', '.join(found)}, which vit_scratch does not implement")
    block, head = timm_model.blocks[0], timm_model.head
    backbone = getattr(timm_model.patch_embed, "backbone", None)  # a hybrid's (timm's HybridEmbed)
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
    if match := re.match(r"blocks\.(\d+)\.(.+)\.(weight|bias)$", key):
        index, name, kind = match.groups()
        return f"vit.layers.{index}.{TIMM_BLOCK.get(name, name)}.{kind}"
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


def from_timm(timm_model, state_dict: dict[str, torch.Tensor] | None = None):
    """A timm `VisionTransformer` (for its hyper-parameters and data config) and its weights (by default its own)
    -> our model and image processor. A distilled DeiT with heads becomes our two-headed model."""
    config = timm_config(timm_model)
    state = {timm_key(key): tensor for key, tensor in (state_dict or timm_model.state_dict()).items()}
    data = getattr(timm_model, "pretrained_cfg", None) or {}
    resample = {"bilinear": 2, "bicubic": 3, "nearest": 0}.get(data.get("interpolation", "bicubic"), 3)
    mean, std = (data.get(name, [0.5] * config.num_channels) for name in ("mean", "std"))
    processor = processor_for(config, mean, std, to_pair(config.image_size), resample)
    return build(config, state, config.distillation_token and config.num_labels > 0), processor
