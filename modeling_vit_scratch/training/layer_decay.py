"""Layer-wise learning-rate decay (`--layer_decay`), for fine-tuning a pretrained or converted vit_scratch model, as
BEiT, MAE and timm do: the layers near the input learned general features that fine-tuning should change least.

With L blocks and decay d, the optimizer gets one parameter group per depth:

    head (final norm, classifier heads)           lr
    block i (0 = the first)                       lr * d^(L - i)
    embeddings (patch projection and any stem,    lr * d^(L + 1)
      class / distillation tokens, positions)

Weight decay is split within each depth as timm's `param_groups_layer_decay` splits it: none on biases, norms (any
one-dimensional parameter), position embeddings and the class / distillation tokens.

The groups reach the Trainer as `optimizer_cls_and_kwargs`, so the optimizer stays the one `--optim` names, and its
schedule scales each group's rate alike. The head's group comes first: the `learning_rate` the Trainer logs is the
head's, the full rate.
"""

import re
from collections import defaultdict
from pathlib import Path

import torch
from torch import nn
from transformers import Trainer, TrainingArguments
from transformers.trainer_pt_utils import safe_globals

from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig

# Parameters that are no weights to shrink (timm's `no_weight_decay`): where each token is, and the tokens
NO_WEIGHT_DECAY = (
    "vit.embeddings.position_embeddings",
    "vit.embeddings.cls_token",
    "vit.embeddings.distillation_token",
)
BLOCK = re.compile(r"vit\.layers\.(\d+)\.")


def depth(name: str, num_layers: int) -> int:
    """0 for the embeddings, i + 1 for block i, num_layers + 1 for the head (the final norm and the heads)."""
    if name.startswith("vit.embeddings."):
        return 0
    block = BLOCK.match(name)
    return int(block.group(1)) + 1 if block else num_layers + 1


def layer_decay_groups(model: nn.Module, learning_rate: float, weight_decay: float, decay: float) -> list[dict]:
    """The optimizer's parameter groups for `model` (a vit_scratch classifier): one per depth and weight-decay
    choice, each with its own `lr`, the head's first (see the module docstring)."""
    num_layers = model.config.num_hidden_layers
    groups = defaultdict(list)
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        decays = parameter.ndim > 1 and name not in NO_WEIGHT_DECAY
        groups[depth(name, num_layers), decays].append(parameter)
    return [
        {
            "params": parameters,
            "lr": learning_rate * decay ** (num_layers + 1 - layer),
            "weight_decay": weight_decay if decays else 0.0,
        }
        for (layer, decays), parameters in sorted(groups.items(), key=lambda item: (-item[0][0], not item[0][1]))
    ]


def layer_decay_optimizer(model: nn.Module, training_args: TrainingArguments, decay: float) -> tuple[type, dict]:
    """The optimizer `--optim` names with the groups of `layer_decay_groups`, as the Trainer's
    `optimizer_cls_and_kwargs`."""
    optimizer_cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(training_args, model)
    groups = layer_decay_groups(model, training_args.learning_rate, training_args.weight_decay, decay)
    return optimizer_cls, {**kwargs, "params": groups}


def check_layer_decay(layer_decay: float | None, config, training_args: TrainingArguments) -> None:
    """One line before any data is read where layer decay cannot apply: a model without vit_scratch blocks to
    decay (another transformers classifier), or FSDP (whose flattened parameters have no block names)."""
    if layer_decay is None:
        return
    if not isinstance(config, ViTScratchConfig):
        raise ValueError(
            f"--layer_decay {layer_decay:g} scales the learning rate by block, and the {config.model_type} model "
            "--model names has no vit_scratch blocks to decay: drop --layer_decay, or fine-tune a vit_scratch model."
        )
    if training_args.fsdp:
        raise ValueError(f"--layer_decay {layer_decay:g} does not work with --fsdp: drop --layer_decay or --fsdp.")


# The Trainer's own optimizer groups: the parameters with weight decay, and those without
TRAINER_GROUPS = 2


def check_resumed_groups(checkpoint: str | Path, optimizer_cls_and_kwargs: tuple[type, dict] | None) -> None:
    """One line when the checkpoint's optimizer was built with other parameter groups than this run's (those of
    `layer_decay_optimizer`, or None: the Trainer's own), before the Trainer fails to load it: a run resumes with the
    `--layer_decay` it began with."""
    path = Path(checkpoint) / "optimizer.pt"
    if not path.is_file():
        return
    with safe_globals():  # read as the Trainer reads it (and as `check_checkpoint` has checked it)
        saved = len(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["param_groups"])
    groups = None if optimizer_cls_and_kwargs is None else optimizer_cls_and_kwargs[1]["params"]
    expected = TRAINER_GROUPS if groups is None else len(groups)
    if saved != expected:
        raise ValueError(
            f"The checkpoint {checkpoint} was trained with {saved} optimizer parameter groups and this run has "
            f"{expected} ({'without' if groups is None else 'with'} --layer_decay): resume with the --layer_decay "
            "that run began with (or none, if it had none)."
        )


def layer_decay_text(layer_decay: float | None, config) -> str | None:
    """The learning rates by depth, in words for the model card and the record (None without layer decay)."""
    if layer_decay is None:
        return None
    num_layers = config.num_hidden_layers
    return (
        f"layer-wise decay {layer_decay:g}: the head at the full rate, block i of {num_layers} at rate x "
        f"{layer_decay:g}^({num_layers} - i), the embeddings at rate x {layer_decay:g}^{num_layers + 1}"
    )
