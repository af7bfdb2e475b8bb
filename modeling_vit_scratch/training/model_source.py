"""What `--model` names, built for the data: a preset, an architecture JSON file (a new model), or a saved folder or
Hub repo (fine-tuning, read through `sources`: a checked folder, safetensors only, no foreign code).

A new model takes the data's labels, and its channels unless its file or `--config_overrides` names them. A saved
model keeps its body (`--config_overrides` may change how it runs, never its tensors); a new label set gets new
heads, initialised afresh (a pretraining folder's encoder becomes a classifier's body, its decoder left out). With
`--teacher` a new model gets a distillation token (and its second head); a saved one must have it. With
`--objective masked_image_modeling` the model is a masked autoencoder (`ViTScratchForPreTraining`), new or from a
saved vit_scratch folder (a classifier's gets a new decoder).
"""

import dataclasses
import difflib
import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn
from transformers import AutoConfig, AutoModelForImageClassification, PreTrainedConfig

from modeling_vit_scratch.configuration_vit_scratch import PRESETS, ViTScratchConfig, is_masked_autoencoder
from modeling_vit_scratch.errors import UserError, check_fits
from modeling_vit_scratch.image_processing_vit_scratch import ViTScratchImageProcessor
from modeling_vit_scratch.loading_vit_scratch import LOADING_LOGGER, without_load_report
from modeling_vit_scratch.modeling_vit_scratch import (
    ViTScratchForImageClassification,
    ViTScratchForImageClassificationWithTeacher,
    ViTScratchForPreTraining,
    ViTScratchModel,
)
from modeling_vit_scratch.secrets import shown
from modeling_vit_scratch.sources import check_model_folder, is_local, read_json, resolve

HEADS = ("classifier", "distillation_classifier")
PRETRAINING = "masked_image_modeling"  # the --objective that pretrains


@dataclass
class ModelPlan:
    """The architecture `--model` names, before the data is read: `folder` is the saved model's (None: a new one)."""

    config: PreTrainedConfig
    folder: Path | None = None
    channels_given: bool = False  # a new model's num_channels named by its file or the overrides


def parse_overrides(text: str | None) -> dict:
    """`--config_overrides`: 'a=1,b=0.5,c=mean' (each value read as JSON where it is JSON, else as text) or a JSON
    object (what a recipe's mapping becomes)."""
    if not text or not text.strip():
        return {}
    if text.lstrip().startswith("{"):
        overrides = json.loads(text)  # a recipe's mapping, written as JSON by the recipe reader
        return overrides if isinstance(overrides, dict) else {}
    overrides = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, equals, value = item.partition("=")
        if not equals:
            raise UserError(f"--config_overrides item {shown(item)!r} is not key=value: write e.g. 'hidden_size=64'")
        try:
            overrides[key.strip()] = json.loads(value.lower() if value.lower() in ("true", "false") else value)
        except json.JSONDecodeError:
            overrides[key.strip()] = value.strip()
    return overrides


def check_config_fields(given: dict) -> None:
    """Refuse a field no config has (a typo such as `hiden_size`): transformers would store it and build the default."""
    known = {field.name for field in dataclasses.fields(ViTScratchConfig)} | set(PreTrainedConfig().to_dict())
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
            hint = f"did you mean {close[0]!r}?" if close else "see configs/models/*.json for the fields"
            raise UserError(f"unknown config field {shown(key)!r}: {hint}")


def new_model(model: str, overrides: dict) -> ModelPlan | None:
    """The plan for a preset or an architecture JSON file (a new model), else None (a saved folder or Hub repo)."""
    if model in PRESETS:
        return ModelPlan(ViTScratchConfig.from_preset(model, **overrides), None, "num_channels" in overrides)
    if not (model.endswith(".json") and Path(model).is_file()):
        return None
    written = read_json(model, f"--model {shown(model)}")
    model_type = written.pop("model_type", ViTScratchConfig.model_type)
    fields = {**written, **overrides}
    if model_type == ViTScratchConfig.model_type:
        check_config_fields(fields)
        config = ViTScratchConfig(**fields)
    else:  # a transformers image classifier (a teacher's architecture, e.g. resnet)
        config = AutoConfig.for_model(model_type, **fields)
    return ModelPlan(config, None, "num_channels" in fields)


def model_plan(args) -> ModelPlan:
    """The architecture of `args.model` (ModelArguments), every error in the model arguments said before any data is
    read; then a memory estimate at the batch size is checked by `check_memory`."""
    overrides = parse_overrides(args.config_overrides)
    check_config_fields(overrides)
    try:
        plan = new_model(args.model, overrides) or saved_model(args, overrides)
    except ValueError as error:  # the config's own checks: a field's range, fields that do not fit together
        given = " with --config_overrides" if overrides else ""
        raise UserError(f"--model {shown(args.model)}{given}: {' '.join(str(error).split())}") from None
    if overrides and plan.folder is not None:
        check_keeps_weights(plan, overrides, args)
    if args.objective == PRETRAINING:
        if args.teacher:
            raise UserError("--teacher distils labels, which masked image modelling does not learn: drop --teacher")
        if not isinstance(plan.config, ViTScratchConfig):
            raise UserError(
                f"--objective {PRETRAINING} pretrains vit_scratch models, and --model {shown(args.model)} is a "
                f"{plan.config.model_type}: give a preset, a vit_scratch architecture file or folder"
            )
    if args.teacher:
        if plan.folder is None and isinstance(plan.config, ViTScratchConfig):
            plan.config.distillation_token = True
        elif not getattr(plan.config, "distillation_token", False):
            raise UserError(
                f"--teacher trains a distillation token, which the model {shown(args.model)} has not: train a new "
                "vit_scratch model with --teacher, or drop --teacher"
            )
    return plan


def saved_model(args, overrides: dict) -> ModelPlan:
    """The plan for a saved folder or Hub repo: its config, with `overrides` set on it."""
    if not is_local(args.model) and "/" not in args.model:
        raise UserError(
            f"--model {shown(args.model)} is no preset, file, folder or Hub repo id: give one of "
            f"{', '.join(sorted(PRESETS))}, an architecture .json, a saved folder or owner/name"
        )
    folder = resolve(args.model, revision=args.model_revision)
    check_model_folder(folder, trust_option=None)  # training runs the package's code only
    return ModelPlan(AutoConfig.from_pretrained(folder, trust_remote_code=False, **overrides), folder)


def check_keeps_weights(plan: ModelPlan, overrides: dict, args) -> None:
    """`--config_overrides` on a saved model may change how it runs (pooling, dropout, the mask ratio), never the
    tensors it saved: every tensor the model is built with is saved with the same shape (but a classifier's heads,
    and a masked autoencoder's decoder when the folder is a classifier's), and every saved tensor is used (but a
    decoder by a classifier, and heads by a masked autoencoder)."""
    if not isinstance(plan.config, ViTScratchConfig):
        raise UserError(
            f"--config_overrides on {shown(args.model)}: a {plan.config.model_type} model keeps its saved config; "
            "drop --config_overrides"
        )
    pretraining = args.objective == PRETRAINING
    model_class = ViTScratchForPreTraining if pretraining else classifier_class(plan.config)
    with torch.device("meta"):
        built = {key: tuple(tensor.shape) for key, tensor in model_class._from_config(plan.config).state_dict().items()}
    saved = saved_shapes(plan.folder, f"{model_class.base_model_prefix}.")
    if not pretraining:
        may_be_new, may_be_unused = HEADS, ("decoder",)
    else:
        may_be_new, may_be_unused = () if is_masked_autoencoder(plan.config) else ("decoder",), HEADS
    for key in sorted(built.keys() | saved.keys()):
        allowed = may_be_new if key in built else may_be_unused
        if built.get(key) != saved.get(key) and key.split(".")[0] not in allowed:
            before = read_json(plan.folder / "config.json", "config.json")
            differing = ", ".join(
                f"{name}={value} (saved: {before.get(name)})"
                for name, value in overrides.items()
                if before.get(name) != value
            )
            now = f"{built[key]}" if key in built else "dropped"
            raise UserError(
                f"--config_overrides (a recipe's too) {differing} would change the saved weights of "
                f"{shown(args.model)} ({key}: {now}, {f'saved as {saved[key]}' if key in saved else 'not saved'}): "
                "a saved model keeps its tensors; give the saved values, override only what runs differently "
                "(pooling, dropout, mask_ratio, ...), or train a new model from an architecture file"
            )


def saved_shapes(folder: Path, prefix: str) -> dict[str, tuple]:
    """Tensor name -> shape in the weights `from_pretrained` reads from `folder` (its shards, when sharded; not an
    EMA's or any other file), named as in the model: a base model's folder names its tensors without `prefix`."""
    index = folder / "model.safetensors.index.json"
    files = sorted(set(read_json(index)["weight_map"].values())) if index.is_file() else ["model.safetensors"]
    shapes = {}
    for file in files:
        with safe_open(folder / file, "pt") as weights:
            for key in weights.keys():  # noqa: SIM118 (a safetensors file, not a dict)
                named = key if key.startswith(prefix) or key.split(".")[0] in (*HEADS, "decoder") else prefix + key
                shapes[named] = tuple(weights.get_slice(key).get_shape())
    return shapes


def classifier_class(config: ViTScratchConfig):
    """The classifier a vit_scratch config builds: with a distillation token, the two-headed one."""
    return (
        ViTScratchForImageClassificationWithTeacher if config.distillation_token else ViTScratchForImageClassification
    )


def check_memory(config: PreTrainedConfig, batch_size: int) -> None:
    """Parameters, gradients and AdamW's two moments (16 bytes a parameter) and the activations a float32 step keeps
    for backward at `batch_size`, against the memory free now: one line before any data is read."""
    if not isinstance(config, ViTScratchConfig):
        return
    hidden, layers, heads = config.hidden_size, config.num_hidden_layers, config.num_attention_heads
    rows, columns = config.grid_size  # a stem's cells, or the patches of the image
    tokens = rows * columns + 2
    parameters = layers * (4 * hidden * hidden + 2 * hidden * config.intermediate_size)
    activations = batch_size * layers * (16 * tokens * hidden + 3 * heads * tokens * tokens)
    check_fits(
        16 * parameters + 4 * activations,
        f"training this model at a batch of {batch_size}",
        "use a smaller model (--model, --config_overrides) or --per_device_train_batch_size",
    )


def build_model(
    plan: ModelPlan,
    labels: list[str],
    num_channels: int,
    attn_implementation: str | None = None,
    objective: str = "classification",
):
    """(model, processor) for the data's `labels` and `num_channels`: new, or the saved one with new heads where
    its labels differ; for `objective` PRETRAINING, a masked autoencoder (the labels unused)."""
    id2label = dict(enumerate(labels))
    kernel = {"attn_implementation": attn_implementation} if attn_implementation else {}
    if objective == PRETRAINING:
        return pretraining_model(plan, num_channels, kernel)
    label2id = {name: index for index, name in id2label.items()}
    config = plan.config
    if plan.folder is not None:
        saved = [str(config.id2label[index]) for index in sorted(config.id2label or {})]
        # new labels, or a pretraining folder (no classifier, whatever its labels): new heads; else every tensor loaded
        new_heads = saved != labels or is_masked_autoencoder(config)
        model = saved_classifier(plan.folder, config, id2label, label2id, new_heads, kernel)
        if new_heads:  # the same number of other labels: new heads all the same
            for name in HEADS:
                if isinstance(head := getattr(model, name, None), nn.Linear):
                    setattr(model, name, nn.Linear(head.in_features, len(labels)))
                    model._init_weights(getattr(model, name))
        if (plan.folder / "preprocessor_config.json").is_file():
            return model, ViTScratchImageProcessor.from_pretrained(plan.folder)
        return model, ViTScratchImageProcessor.for_config(model.config)
    config.id2label, config.label2id, config.num_labels = id2label, label2id, len(labels)
    if not plan.channels_given:
        config.num_channels = num_channels
    if not isinstance(config, ViTScratchConfig):
        return AutoModelForImageClassification.from_config(config, **kernel), ViTScratchImageProcessor.for_config(
            config
        )
    return classifier_class(config)._from_config(config, **kernel), ViTScratchImageProcessor.for_config(config)


def saved_classifier(folder: Path, config: PreTrainedConfig, id2label: dict, label2id: dict, new_heads: bool, kernel):
    """The classifier saved in `folder` (`config`: its own, or with overrides), labelled `id2label`: every tensor as
    saved, or with `new_heads` its body as saved and new heads (a pretraining folder's decoder left out). New heads are what fine-tuning means, so
    transformers' load report, which lists them and the decoder as if by accident, is shown only when a tensor
    outside them does not load as saved (a vit_scratch model refuses that before: `checked_loading`)."""
    config.id2label, config.label2id = id2label, label2id
    loading = dict(config=config, use_safetensors=True, trust_remote_code=False, **kernel)
    if not new_heads:
        return AutoModelForImageClassification.from_pretrained(folder, **loading)
    with without_load_report() as report:
        model, info = AutoModelForImageClassification.from_pretrained(
            folder, ignore_mismatched_sizes=True, output_loading_info=True, **loading
        )
    reshaped = [key for key, *_ in info["mismatched_keys"]]
    if any(
        key.split(".")[0] not in (*HEADS, "decoder")
        for key in [*info["missing_keys"], *info["unexpected_keys"], *reshaped]
    ):
        for record in report.held:
            logging.getLogger(LOADING_LOGGER).handle(record)
    return model


def pretraining_model(plan: ModelPlan, num_channels: int, kernel: dict):
    """(masked autoencoder, processor): new at the data's channels, or from a saved vit_scratch folder (a
    pretraining folder continues whole; a classifier's body gets a new decoder)."""
    if plan.folder is not None:
        loading = dict(config=plan.config, use_safetensors=True, trust_remote_code=False, **kernel)
        if is_masked_autoencoder(plan.config):
            model = ViTScratchForPreTraining.from_pretrained(plan.folder, **loading)
        else:  # a classifier's encoder, every tensor of it as saved (its heads left out), and a new decoder
            model = ViTScratchForPreTraining._from_config(plan.config, **kernel)
            model.vit = ViTScratchModel.from_pretrained(plan.folder, **loading)
        if (plan.folder / "preprocessor_config.json").is_file():
            return model, ViTScratchImageProcessor.from_pretrained(plan.folder)
        return model, ViTScratchImageProcessor.for_config(model.config)
    if not plan.channels_given:
        plan.config.num_channels = num_channels
    return ViTScratchForPreTraining._from_config(plan.config, **kernel), ViTScratchImageProcessor.for_config(
        plan.config
    )
