"""Weights between vit_scratch and transformers' ViT / DeiT / Dinov2 (with registers too) / ViTMAE, in memory (timm's
models: `timm_weights.py`).

Each direction is an explicit renaming of the state dict: our fused query/key/value projection is transformers'
three projections concatenated, every other tensor keeps its shape. The result is loaded strictly (every key, every
shape), so nothing is dropped without a word; only transformers' `pooler` (a tanh layer no classification head
uses, which vit_scratch has not), Dinov2's `mask_token` (read only by masked-image pre-training) and ViTMAE's fixed
sin-cos tables (which vit_scratch computes; checked to be that table, or refused) are left out. transformers' own
classes build and save their side, so the folder written holds the key layout transformers saves. Whether a
conversion computes what its source computes is the command's parity check (`command.py`), which every written
folder passes.
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
# transformers' Dinov2 block names -> ours (transformers' ViT names, which every other key already shares)
DINOV2_NAMES = {"encoder.layer.": "layers.", ".norm1.": ".layernorm_before.", ".norm2.": ".layernorm_after."}
DINOV2_TYPES = ("dinov2", "dinov2_with_registers")
# how each Dinov2 resamples its position embeddings for another image size
DINOV2_INTERPOLATION = {"dinov2": "bicubic", "dinov2_with_registers": "bicubic_antialias"}
# the masked autoencoder's fields, under ViTMAEConfig's names
MAE_FIELDS = (
    "decoder_hidden_size",
    "decoder_num_hidden_layers",
    "decoder_num_attention_heads",
    "decoder_intermediate_size",
    "mask_ratio",
    "norm_pix_loss",
)


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


def mae_decoder_table(reference, config: ViTScratchConfig) -> None:
    """Refuse a ViTMAE whose decoder position table is not MAE's fixed sin-cos table, the one vit_scratch computes
    (and does not store)."""
    table = reference.state_dict()["decoder.decoder_pos_embed"]
    expected = mae_position_table(config.grid_size, config.decoder_hidden_size)
    if table.shape != expected.shape or not torch.allclose(table.float(), expected.float(), atol=1e-6):
        raise UserError(
            "--input holds decoder position embeddings other than MAE's fixed 2-D sin-cos table, which vit_scratch "
            "computes instead of storing: a ViTMAE that transformers built from a config holds zeros there, and "
            "saving or reloading it keeps them; convert a trained ViTMAE checkpoint, or fill its position tables with "
            "MAE's sin-cos tables first"
        )


def from_transformers(reference, settings: dict | None = None):
    """A transformers ViT, DeiT, Dinov2 or ViTMAE model (`ViTModel`, `ViTForImageClassification`, `DeiTModel`,
    `DeiTFor...`, `Dinov2Model`, `Dinov2WithRegistersModel`, `ViTMAEForPreTraining`) and its `preprocessor_config.json`
    settings -> our model and image processor. DeiT keeps its distillation token, and its two-headed classifier becomes
    ours; Dinov2 keeps its layer scale and registers; a model without a head converts with no labels; ViTMAE becomes
    our masked autoencoder, its frozen encoder position table our learned one."""
    source = reference.config
    if source.model_type not in ("vit", "deit", "vit_mae", *DINOV2_TYPES):
        raise UserError(
            f"--input is a {source.model_type!r} model: --from transformers converts ViT, DeiT, Dinov2 and ViTMAE only"
        )
    if source.hidden_act != "gelu":
        raise UserError(f"--input uses hidden_act={source.hidden_act!r}: vit_scratch has the exact GELU only")
    dinov2, mae = source.model_type in DINOV2_TYPES, source.model_type == "vit_mae"
    two_heads = hasattr(reference, "cls_classifier")
    has_head = two_heads or isinstance(getattr(reference, "classifier", None), torch.nn.Linear)
    if dinov2 and has_head:
        raise UserError(
            f"--input is a {type(reference).__name__}, whose head reads the class token and the mean patch token "
            "side by side, which vit_scratch's head does not: convert the Dinov2Model (no head) instead"
        )
    labels = {"id2label": dict(source.id2label)} if has_head else {}
    fields = {name: getattr(source, name) for name in SHARED_FIELDS if hasattr(source, name)}
    # ViTMAE's frozen encoder table is held as our learned one (MAE's layout differs from our sincos table's)
    mae_fields = {name: getattr(source, name) for name in MAE_FIELDS} | {"position_embedding": "learned"} if mae else {}
    config = ViTScratchConfig(
        **fields | (dinov2_fields(source) if dinov2 else {}),
        **(labels or {"num_labels": 0}),
        distillation_token=source.model_type == "deit",
        **mae_fields,
    )
    if mae:
        mae_decoder_table(reference, config)
    state = {}
    for key, tensor in reference.state_dict().items():
        key = re.sub(r"^(vit|deit|dinov2)\.", "", key)
        for theirs, ours in DINOV2_NAMES.items():
            key = key.replace(theirs, ours)
        if key.startswith(HEADS):
            state[key.removeprefix("cls_")] = tensor
        elif key == "decoder.decoder_pos_embed":  # MAE's fixed table, which ours computes (checked above)
            continue
        elif key.startswith("decoder."):  # ViTMAE's decoder, under our names
            state[key] = tensor
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
    return build(config, state, two_heads, ViTScratchForPreTraining if mae else None), processor


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
    return theirs.eval(), transformers_processor(processor, 3 if gray else 1)


def transformers_processor(processor, channels: int = 1) -> ViTImageProcessorPil | None:
    """`ViTImageProcessor` settings from our processor; each mean and std repeated `channels` times (a gray model's
    one, for each of R, G and B)."""
    if processor is None:
        return None
    settings = dict(
        size=dict(processor.size), resample=int(processor.resample), rescale_factor=processor.rescale_factor
    )
    settings |= dict(image_mean=list(processor.image_mean) * channels, image_std=list(processor.image_std) * channels)
    return ViTImageProcessorPil(**settings)  # saved as ViTImageProcessor, needing no torchvision


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
