"""Pretrained interop: transformers ViT (4.x and 5.x key names) and timm ViT checkpoints <-> vit_scratch, timm's
hybrids (`vit_*_r*`: a ResNet-V2 stem, or its root alone, before the patch projection) included.

Each direction is an explicit key map, `our key -> the reference keys it is made of` (three keys for our fused
query/key/value projection, one for everything else). A key the map does not expect, or one it needs and does not
find, is an error that names it: nothing is silently dropped; the few keys listed in `IGNORED_KEYS` (a ViTModel's
pooler) are dropped with a line that says so, before anything is written.

Neither transformers' ViT classes nor timm are imported here: a transformers checkpoint is read as files, and a
timm model object (built by the caller, e.g. `scripts/convert_checkpoint.py`) is read through its attributes.
"""

import json
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from modeling_vit_scratch.common.folders import CONVERSION_FILE, replaced_folder
from modeling_vit_scratch.common.remote_code import check_no_foreign_code
from modeling_vit_scratch.common.secrets import refuse_secrets_in_settings, weights_sha256
from modeling_vit_scratch.common.sources import looks_like_local_path
from modeling_vit_scratch.common.weights import check_finite, weight_files
from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig, to_pair
from modeling_vit_scratch.image_processing_vit_scratch import LUMA_WEIGHTS, ViTScratchImageProcessor
from modeling_vit_scratch.modeling_vit_scratch import (
    ViTScratchForImageClassification,
    ViTScratchForImageClassificationWithTeacher,
)

# Per block: our sub-module -> the reference sub-modules it is made of.
TRANSFORMERS_V5_BLOCK = {
    "attention.qkv_proj": ("attention.q_proj", "attention.k_proj", "attention.v_proj"),
    "attention.o_proj": ("attention.o_proj",),
    "layernorm_before": ("layernorm_before",),
    "layernorm_after": ("layernorm_after",),
    "mlp.fc1": ("mlp.fc1",),
    "mlp.fc2": ("mlp.fc2",),
}
TRANSFORMERS_V4_BLOCK = {
    "attention.qkv_proj": ("attention.attention.query", "attention.attention.key", "attention.attention.value"),
    "attention.o_proj": ("attention.output.dense",),
    "layernorm_before": ("layernorm_before",),
    "layernorm_after": ("layernorm_after",),
    "mlp.fc1": ("intermediate.dense",),
    "mlp.fc2": ("output.dense",),
}
TIMM_BLOCK = {
    "attention.qkv_proj": ("attn.qkv",),
    "attention.o_proj": ("attn.proj",),
    "layernorm_before": ("norm1",),
    "layernorm_after": ("norm2",),
    "mlp.fc1": ("mlp.fc1",),
    "mlp.fc2": ("mlp.fc2",),
}
# transformers' ViTModel has a tanh "pooler" that no classification head uses; it has no counterpart here.
IGNORED_KEYS = ("pooler.dense.weight", "pooler.dense.bias")
TRANSFORMERS_CONFIG_FIELDS = (
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


def block_key_map(num_layers: int, ours_prefix: str, theirs_prefix: str, block: dict) -> dict[str, tuple[str, ...]]:
    """Weights and biases of every block:
    `{ours_prefix}{i}.{ours}.weight -> ({theirs_prefix}{i}.{theirs}.weight, ...)`."""
    key_map = {}
    for i in range(num_layers):
        for ours, theirs in block.items():
            for param in ("weight", "bias"):
                key_map[f"{ours_prefix}{i}.{ours}.{param}"] = tuple(f"{theirs_prefix}{i}.{t}.{param}" for t in theirs)
    return key_map


def transformers_key_map(
    num_layers: int, layout: str = "v4", prefix: str = "vit.", class_head: str = "classifier"
) -> dict[str, tuple[str, ...]]:
    """Our keys -> transformers ViT or DeiT keys, in the 4.x (`encoder.layer.i.attention.attention.query`) or the
    5.x (`layers.i.attention.q_proj`) layout. `prefix` is "vit." for `ViTForImageClassification`, "deit." for
    DeiT's classifiers, "" for a base model; DeiT's two-headed model calls its class head `cls_classifier`."""
    key_map = {
        f"vit.embeddings.{name}": (f"{prefix}embeddings.{name}",)
        for name in (
            "cls_token",
            "distillation_token",
            "position_embeddings",
            "patch_embeddings.projection.weight",
            "patch_embeddings.projection.bias",
        )
    }
    blocks = f"{prefix}encoder.layer." if layout == "v4" else f"{prefix}layers."
    key_map |= block_key_map(
        num_layers, "vit.layers.", blocks, TRANSFORMERS_V4_BLOCK if layout == "v4" else TRANSFORMERS_V5_BLOCK
    )
    key_map |= {f"vit.layernorm.{p}": (f"{prefix}layernorm.{p}",) for p in ("weight", "bias")}
    key_map |= {f"classifier.{p}": (f"{class_head}.{p}",) for p in ("weight", "bias")}
    key_map |= {f"distillation_classifier.{p}": (f"distillation_classifier.{p}",) for p in ("weight", "bias")}
    return key_map


# timm's ResNet-V2 bottleneck (post-activation, as in its hybrids) -> ours: our names -> timm's.
TIMM_BOTTLENECK = {
    "conv1": "conv1",
    "norm1": "norm1",
    "conv2": "conv2",
    "norm2": "norm2",
    "conv3": "conv3",
    "norm3": "norm3",
    "shortcut_conv": "downsample.conv",
    "shortcut_norm": "downsample.norm",
}


def timm_stem_key_map(config: ViTScratchConfig) -> dict[str, tuple[str, ...]]:
    """Our stem's keys -> timm's hybrid backbone keys: a ResNetV2 (`stem.conv`, `stages.i.blocks.j`), or for
    `stem_depths=[]` its root alone (`conv`, `norm`). Keys the model does not have (a block without a shortcut) are
    never asked for."""
    ours, theirs = "vit.embeddings.patch_embeddings.stem.", "patch_embed.backbone."
    root = theirs if not config.stem_depths else f"{theirs}stem."
    key_map = {f"{ours}root_conv.weight": (f"{root}conv.weight",)}
    key_map |= {f"{ours}root_norm.{p}": (f"{root}norm.{p}",) for p in ("weight", "bias")}
    for i, depth in enumerate(config.stem_depths):
        for j in range(depth):
            for our_name, their_name in TIMM_BOTTLENECK.items():
                for p in ("weight", "bias") if "norm" in our_name else ("weight",):
                    key_map[f"{ours}stages.{i}.{j}.{our_name}.{p}"] = (
                        f"{theirs}stages.{i}.blocks.{j}.{their_name}.{p}",
                    )
    return key_map


def timm_key_map(num_layers: int) -> dict[str, tuple[str, ...]]:
    """Our keys -> timm `VisionTransformer` keys (its qkv projection is fused like ours). A hybrid's projection
    is `patch_embed.proj` too; its stem's keys are in `timm_stem_key_map`."""
    key_map = {
        "vit.embeddings.cls_token": ("cls_token",),
        "vit.embeddings.distillation_token": ("dist_token",),  # VisionTransformerDistilled (DeiT)
        "vit.embeddings.position_embeddings": ("pos_embed",),
        "vit.embeddings.patch_embeddings.projection.weight": ("patch_embed.proj.weight",),
        "vit.embeddings.patch_embeddings.projection.bias": ("patch_embed.proj.bias",),
    }
    key_map |= block_key_map(num_layers, "vit.layers.", "blocks.", TIMM_BLOCK)
    pairs = (("vit.layernorm", "norm"), ("vit.fc_norm", "fc_norm"), ("classifier", "head"))
    for ours, theirs in (*pairs, ("distillation_classifier", "head_dist")):
        key_map |= {f"{ours}.{p}": (f"{theirs}.{p}",) for p in ("weight", "bias")}
    return key_map


def remap(source: dict[str, torch.Tensor], key_map: dict[str, tuple[str, ...]], wanted: list[str], origin: str):
    """Our state dict from `source`: every wanted key from its reference keys (concatenated when there are several).

    Raises a KeyError naming the first reference key that is missing and one naming every key left over.
    """
    state_dict, used = {}, set(IGNORED_KEYS)
    for key in wanted:
        if key not in key_map:
            raise KeyError(f"{key!r} has no counterpart in {origin} checkpoints: this model cannot be converted.")
        parts = key_map[key]
        missing = [part for part in parts if part not in source]
        if missing:
            raise KeyError(
                f"{origin} checkpoint is missing {missing[0]!r} (needed for {key!r}): it is incomplete "
                "or not of the architecture its config describes."
            )
        state_dict[key] = torch.cat([source[part] for part in parts]) if len(parts) > 1 else source[parts[0]]
        used.update(parts)
    unexpected = sorted(set(source) - used)
    if unexpected:
        raise KeyError(
            f"{origin} checkpoint has keys this conversion does not know: {unexpected[:5]}"
            f"{' ...' if len(unexpected) > 5 else ''}; refusing to drop weights silently."
        )
    return state_dict


def expected_keys(config: ViTScratchConfig, model_class=ViTScratchForImageClassification) -> list[str]:
    """The state-dict keys of our classification model for `config`, without allocating weights."""
    with torch.device("meta"):
        return list(model_class(config).state_dict())


def read_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    """Weights of a saved folder: `model.safetensors` or sharded safetensors, each header checked first. A pickle
    (`pytorch_model.bin`) is never read: the error names the command that converts it."""
    state_dict = {}
    for path in weight_files(folder):
        state_dict |= check_finite(load_file(path), path)
    return state_dict


def local_folder(path_or_repo: str, revision: str | None = None) -> Path:
    """A local folder as is; a hub repo id downloaded at `revision` (config, processor and safetensors weights only). Either is
    checked before it is read: its auto_map names no code but the package's own (its weights are checked as they
    are read, by `read_state_dict`)."""
    path = Path(path_or_repo)
    if not path.is_dir():
        if looks_like_local_path(path_or_repo):
            raise FileNotFoundError(f"Folder {path_or_repo!r} does not exist: give a saved folder or a hub repo id.")
        from huggingface_hub import snapshot_download

        patterns = ["config.json", "preprocessor_config.json", "*.safetensors", "*.safetensors.index.json"]
        path = Path(snapshot_download(path_or_repo, revision=revision, allow_patterns=patterns))
    check_no_foreign_code(path, NO_CODE_RUNS)
    refuse_secrets_in_settings(path, path_or_repo)
    return path


# the fix a refused folder's error ends with
NO_CODE_RUNS = (
    "conversion never runs a model folder's own code; give a folder saved by vit-scratch, or by transformers for a "
    "ViT or DeiT (no auto_map)"
)


def check_convertible(source: str, revision: str | None = None) -> None:
    """A saved vit_scratch folder or repo (at `revision`) to convert out: no code but the package's own named
    (conversion runs none), and (a folder) safetensors weights that fit their files."""
    check_no_foreign_code(source, NO_CODE_RUNS, revision=revision)
    if Path(source).is_dir():
        weight_files(source)
        refuse_secrets_in_settings(source)


def processor_from_reference(config: ViTScratchConfig, mean, std, size: tuple[int, int], resample: int):
    """Our image processor with the reference's normalisation, input size and resampling filter. Statistics of
    another channel count (timm and transformers keep RGB ones for models built with other channels) are averaged."""
    mean, std = list(mean), list(std)
    if len(mean) != config.num_channels or len(std) != config.num_channels:
        mean, std = ([sum(values) / len(values)] * config.num_channels for values in (mean, std))
    return ViTScratchImageProcessor.for_config(
        config,
        image_mean=list(mean),
        image_std=list(std),
        size={"height": size[0], "width": size[1]},
        resample=resample,
    )


def from_transformers(
    path_or_repo: str, revision: str | None = None
) -> tuple[ViTScratchForImageClassification, ViTScratchImageProcessor]:
    """A transformers `ViTForImageClassification` or `ViTModel` folder or repo -> our model and image processor.
    DeiT too: `DeiTForImageClassificationWithTeacher` -> `ViTScratchForImageClassificationWithTeacher`,
    `DeiTForImageClassification` (the class token's head) and `DeiTModel` -> ours with a distillation token."""
    folder = local_folder(path_or_repo, revision)
    reference = json.loads((folder / "config.json").read_text())
    model_type = reference.get("model_type")
    if model_type == "vit_scratch":  # a hub repo: a local folder was classified by conversion/inputs.py already
        raise ValueError(
            f"--input {path_or_repo!r} is a vit_scratch model already: to make a transformers folder of it, use --to "
            "transformers instead of --from."
        )
    if model_type not in ("vit", "deit"):
        raise ValueError(f"{path_or_repo} holds a {model_type!r} model, not a transformers 'vit' or 'deit' one.")
    if reference.get("hidden_act", "gelu") != "gelu":
        raise ValueError(f"hidden_act {reference['hidden_act']!r} is not supported: vit_scratch uses exact GELU.")
    fields = {name: reference[name] for name in TRANSFORMERS_CONFIG_FIELDS if name in reference}
    source = read_state_dict(folder)
    pooler = sorted(key for key in source if key.removeprefix(f"{model_type}.") in IGNORED_KEYS)
    if pooler:  # said before anything is written
        print(
            f"Not converted: the pooler of {path_or_repo} ({', '.join(pooler)}), a tanh layer on the class token "
            "that no classification head uses and vit_scratch does not have; the hidden states convert exactly, "
            "the pooler's output is not kept."
        )
    two_heads = "cls_classifier.weight" in source  # DeiTForImageClassificationWithTeacher
    class_head = "cls_classifier" if two_heads else "classifier"
    labels = reference_labels(reference, source, path_or_repo, class_head)
    config = ViTScratchConfig(**fields, **labels, distillation_token=model_type == "deit")
    prefix = f"{model_type}." if any(key.startswith(f"{model_type}.") for key in source) else ""
    layout = "v4" if any(".encoder.layer." in f".{key}" for key in source) else "v5"
    key_map = transformers_key_map(config.num_hidden_layers, layout, prefix, class_head)
    model_class = ViTScratchForImageClassificationWithTeacher if two_heads else ViTScratchForImageClassification
    wanted = expected_keys(config, model_class)
    origin = f"transformers {'DeiT' if model_type == 'deit' else 'ViT'}"
    model = build_with_weights(config, remap(source, key_map, wanted, origin), model_class)
    processor_file = folder / "preprocessor_config.json"  # absent from some folders: transformers' ViT defaults
    settings = json.loads(processor_file.read_text()) if processor_file.exists() else {}
    height, width = to_pair(config.image_size)
    size = settings.get("size", {"height": height, "width": width})
    if settings.get("do_center_crop") and "crop_size" in settings:  # DeiT: resize to 256, crop 224; ours resizes
        size = settings["crop_size"]
    mean, std = (settings.get(name, [0.5] * config.num_channels) for name in ("image_mean", "image_std"))
    resample = settings.get("resample", 2)  # transformers' ViTImageProcessor default: bilinear
    processor = processor_from_reference(config, mean, std, (size["height"], size["width"]), resample)
    return model, processor


def reference_labels(reference: dict, source: dict[str, torch.Tensor], origin: str, head: str = "classifier") -> dict:
    """Our label fields for a transformers ViT: the head's size from its weights (transformers 5 writes no
    `id2label` for 2 labels, its default), the names from `id2label` when given; no head -> `num_labels=0`."""
    if f"{head}.weight" not in source:
        return {"num_labels": 0}
    num_labels = source[f"{head}.weight"].shape[0]
    id2label = {int(k): v for k, v in (reference.get("id2label") or {}).items()}
    if id2label and sorted(id2label) != list(range(num_labels)):
        raise ValueError(
            f"{origin}: config.json names labels {sorted(id2label)} but the classifier has {num_labels} "
            "outputs: fix id2label in config.json."
        )
    return {"id2label": id2label or {i: f"LABEL_{i}" for i in range(num_labels)}}


def timm_config(timm_model) -> ViTScratchConfig:
    """Hyper-parameters of a timm `VisionTransformer` object (built without weights), as our config."""
    distilled = getattr(timm_model, "dist_token", None) is not None  # VisionTransformerDistilled (DeiT)
    unsupported = {
        "a class token": getattr(timm_model, "cls_token", None) is None,
        "register tokens": getattr(timm_model, "num_reg_tokens", 0) > 0,
        "position embeddings without the class token (no_embed_class)": getattr(timm_model, "no_embed_class", False),
        "global_pool other than 'token' or 'avg'": getattr(timm_model, "global_pool", "token") not in ("token", "avg"),
    }
    problems = [name for name, found in unsupported.items() if found]
    if problems:
        raise ValueError(f"The timm model uses {', '.join(problems)}, which vit_scratch does not implement.")
    block = timm_model.blocks[0]
    head = timm_model.head
    backbone = getattr(timm_model.patch_embed, "backbone", None)  # timm's HybridEmbed
    stem = (
        timm_stem_fields(backbone)
        if backbone is not None
        else {"num_channels": timm_model.patch_embed.proj.in_channels}
    )
    return ViTScratchConfig(
        **stem,
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
        distillation_token=distilled,
    )


def timm_stem_fields(backbone) -> dict:
    """Our stem fields for the backbone of a timm hybrid: a `ResNetV2` of post-activation bottlenecks, or its root
    alone (an `nn.Sequential` of `conv`, `norm`, `pool`), with weight-standardised "SAME" convolutions (timm's
    `StdConv2dSame`, eps 1e-8) as in `vit_*_r*` models. Anything else is refused, naming what differs."""
    stages = getattr(backbone, "stages", None)
    root = backbone.stem if stages is not None else backbone
    convs = [module for module in backbone.modules() if isinstance(module, torch.nn.Conv2d)]
    blocks = [block for stage in stages or () for block in stage.blocks]
    problems = {
        "convolutions other than weight-standardised SAME ones (StdConv2dSame)": any(
            type(conv).__name__ != "StdConv2dSame" for conv in convs
        ),
        "a weight-standardisation eps other than 1e-8": any(getattr(conv, "eps", 1e-8) != 1e-8 for conv in convs),
        "a root other than a 7x7 conv, GroupNorm and a max pool": [name for name, _ in root.named_children()]
        != ["conv", "norm", "pool"],
        "blocks other than post-activation bottlenecks": any(type(block).__name__ != "Bottleneck" for block in blocks),
    }
    found = [name for name, present in problems.items() if present]
    if found:
        raise ValueError(f"The timm hybrid's backbone has {', '.join(found)}, which vit_scratch does not implement.")
    width = root.conv.out_channels
    depths = [len(stage.blocks) for stage in stages or ()]
    widths = [stage.blocks[-1].conv3.out_channels for stage in stages or ()]
    if widths != [4 * width * 2**i for i in range(len(depths))]:
        raise ValueError(
            f"The timm hybrid's stages are {widths} channels wide; vit_scratch's ResNet-V2 has 4 * {width} * 2**i."
        )
    return dict(
        stem="resnetv2",
        stem_width=width,
        stem_depths=depths,
        stem_preactivation=False,
        num_channels=root.conv.in_channels,
    )


def from_timm(
    timm_model, state_dict: dict[str, torch.Tensor]
) -> tuple[ViTScratchForImageClassification, ViTScratchImageProcessor]:
    """A timm `VisionTransformer` (for its hyper-parameters) and a state dict for it -> our model and processor."""
    config = timm_config(timm_model)
    key_map = timm_key_map(config.num_hidden_layers) | (timm_stem_key_map(config) if config.stem != "none" else {})
    # a distilled DeiT with heads computes the mean of both in eval mode: our two-headed model
    two_heads = config.distillation_token and config.num_labels > 0
    model_class = ViTScratchForImageClassificationWithTeacher if two_heads else ViTScratchForImageClassification
    wanted = expected_keys(config, model_class)
    model = build_with_weights(config, remap(state_dict, key_map, wanted, "timm ViT"), model_class)
    data_config = getattr(timm_model, "pretrained_cfg", None) or {}
    resample = {"bilinear": 2, "bicubic": 3, "nearest": 0}.get(data_config.get("interpolation", "bicubic"), 3)
    mean, std = (data_config.get(name, [0.5] * config.num_channels) for name in ("mean", "std"))
    processor = processor_from_reference(config, mean, std, to_pair(config.image_size), resample)
    return model, processor


def build_with_weights(
    config: ViTScratchConfig, state_dict: dict[str, torch.Tensor], model_class=ViTScratchForImageClassification
) -> ViTScratchForImageClassification:
    """Our model holding exactly `state_dict` (strict: every key, every shape)."""
    model = model_class(config)
    model.load_state_dict(state_dict, strict=True)
    return model.eval()


def save_converted(
    model: ViTScratchForImageClassification,
    processor,
    output_dir: str | Path,
    overwrite: bool = False,
    check: Callable[[Path], None] | None = None,
    source: dict | None = None,
) -> Path:
    """`save_pretrained` of the model and its processor into `output_dir`, all or nothing (see `replaced_folder`).
    `check` is called with the written folder before it is moved into place: if it raises, nothing is replaced.
    `source` (what was converted: `input`, `from`, ...) is kept as `CONVERSION_FILE` with the weights' digest, so
    the card a push writes says the weights were converted, not trained, while they are these weights."""
    with replaced_folder(output_dir, overwrite) as staging:
        model.save_pretrained(staging)
        processor.save_pretrained(staging)
        if check:
            check(staging)
        write_conversion_record(staging, source)
    return Path(output_dir)


def write_conversion_record(staging: Path, source: dict | None) -> None:
    """`source` (what was converted: `input`, `from` or `to`, the input's `history`) kept as `CONVERSION_FILE` with
    the written weights' digest: a later conversion or push reads it while the weights are those."""
    if source is not None:
        record = {**source, "weights_sha256": weights_sha256(staging)}
        (staging / CONVERSION_FILE).write_text(json.dumps(record, indent=2) + "\n")


def luma_kernel(kernel: torch.Tensor) -> torch.Tensor:
    """A grayscale patch kernel (D, 1, p, p) -> the RGB kernel (D, 3, p, p) that computes the same on the image our
    processor would make gray: each channel's share is its weight in the processor's luma (PIL's ITU-R 601,
    `LUMA_WEIGHTS`), and the shares sum to exactly 1. With the gray mean and std given to each channel, an image
    whose channels are equal gives the same output, and a colour image that of its luma (before our processor rounds
    it to 8 bits)."""
    shares = torch.tensor(LUMA_WEIGHTS, dtype=torch.float64) / sum(LUMA_WEIGHTS)  # exact in float32: 16-bit numerators
    return kernel * shares.to(kernel.dtype).view(1, 3, 1, 1)


def to_transformers(
    model: ViTScratchForImageClassification,
    output_dir: str | Path,
    processor=None,
    overwrite: bool = False,
    check: Callable[[Path], None] | None = None,
    source: dict | None = None,
) -> Path:
    """Write our model as a transformers `ViTForImageClassification` folder (the 4.x key layout, which transformers
    4.x and 5.x both load): config.json, model.safetensors and preprocessor_config.json. A model with a
    distillation token is written as transformers' DeiT: `DeiTForImageClassificationWithTeacher` from our
    two-headed model, `DeiTForImageClassification` from the one-headed one. Every check runs before anything is
    written, and the folder is written all or nothing (see `replaced_folder`); `check` is called with the written
    folder before it is moved into place; `source` is kept as `save_converted` keeps it. transformers' pipeline makes every image RGB, so a grayscale model is
    written as an RGB one that computes what ours computes (`luma_kernel`)."""
    config = model.config
    deit = config.distillation_token
    reference_name = "DeiT" if deit else "ViT"
    features = {
        "pooling='mean'": config.pooling != "cls",
        "fc_norm": config.fc_norm,
        "position_embedding='sincos'": config.position_embedding != "learned",
        f"stem={config.stem!r} (a hybrid; transformers 5 has no ViT hybrid)": config.stem != "none",
    }
    problems = [name for name, used in features.items() if used]
    if problems:
        raise ValueError(
            f"transformers' {reference_name} has no {', '.join(problems)}: this model cannot be exported to it."
        )
    height, width = to_pair(config.image_size)
    patch_h, patch_w = to_pair(config.patch_size)
    if height != width or patch_h != patch_w:
        raise ValueError(
            f"transformers' {reference_name} config takes square image and patch sizes only: "
            "this model cannot be exported to it."
        )
    two_heads = isinstance(model, ViTScratchForImageClassificationWithTeacher)
    gray = config.num_channels == 1  # transformers' pipeline gives every image as RGB: the kernel takes RGB
    if deit:
        architecture = "DeiTForImageClassificationWithTeacher" if two_heads else "DeiTForImageClassification"
        key_map = transformers_key_map(
            config.num_hidden_layers, "v4", "deit.", "cls_classifier" if two_heads else "classifier"
        )
    else:
        architecture = "ViTForImageClassification"
        key_map = transformers_key_map(config.num_hidden_layers, "v4", "vit.")
    state_dict = {}
    for key, tensor in model.state_dict().items():
        parts = key_map[key]
        if key.endswith("patch_embeddings.projection.weight") and tensor.ndim == 2:  # linear form -> conv kernel
            tensor = tensor.reshape(config.hidden_size, config.num_channels, *to_pair(config.patch_size))
        if key.endswith("patch_embeddings.projection.weight") and gray:
            tensor = luma_kernel(tensor)
        for part, chunk in zip(parts, tensor.chunk(len(parts)) if len(parts) > 1 else (tensor,)):
            state_dict[part] = chunk.contiguous()
    reference = {name: getattr(config, name) for name in TRANSFORMERS_CONFIG_FIELDS}
    reference |= dict(
        image_size=height,
        patch_size=patch_h,
        model_type="deit" if deit else "vit",
        hidden_act="gelu",
        architectures=[architecture],
        encoder_stride=patch_h,
        id2label={str(k): v for k, v in config.id2label.items()},
        label2id=dict(config.label2id),
        num_channels=3 if gray else config.num_channels,
    )
    channels = 3 if gray else 1  # a gray model's one mean and std, for each of R, G and B
    with replaced_folder(output_dir, overwrite) as staging:
        save_file(state_dict, staging / "model.safetensors", metadata={"format": "pt"})
        (staging / "config.json").write_text(json.dumps(reference, indent=2) + "\n")
        if processor is not None:
            settings = {
                "image_processor_type": "ViTImageProcessor",
                "do_resize": True,
                "do_rescale": True,
                "do_normalize": True,
                "size": dict(processor.size),
                "resample": int(processor.resample),
                "rescale_factor": processor.rescale_factor,
                "image_mean": list(processor.image_mean) * channels,
                "image_std": list(processor.image_std) * channels,
            }
            (staging / "preprocessor_config.json").write_text(json.dumps(settings, indent=2) + "\n")
        if check:
            check(staging)
        write_conversion_record(staging, source)
    return Path(output_dir)
