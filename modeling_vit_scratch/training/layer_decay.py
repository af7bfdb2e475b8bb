"""Layer-wise learning-rate decay (`--layer_decay`), for fine-tuning, as BEiT, MAE and timm do: the layers near the
input learned general features that fine-tuning should change least.

With L blocks and decay d, the optimizer gets one parameter group per depth:

    head (final norm, classifier heads)           lr
    block i (0 = the first)                       lr * d^(L - i)
    embeddings (patch projection and any stem,    lr * d^(L + 1)
      class / distillation tokens, positions)

Weight decay is split within each depth as timm's `param_groups_layer_decay` splits it: none on one-dimensional
parameters (biases, norms), position embeddings and the tokens. The groups reach the Trainer as
`optimizer_cls_and_kwargs`, so the optimizer stays the one `--optim` names; the head's group comes first, so the
learning rate the Trainer logs is the full one.
"""

import re
from collections import defaultdict

from torch import nn
from transformers import Trainer

from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig
from modeling_vit_scratch.errors import UserError

NO_WEIGHT_DECAY = (
    "vit.embeddings.position_embeddings",
    "vit.embeddings.cls_token",
    "vit.embeddings.distillation_token",
    "vit.embeddings.register_tokens",
)
BLOCK = re.compile(r"vit\.layers\.(\d+)\.")


def depth(name: str, num_layers: int) -> int:
    """0 for the embeddings, i + 1 for block i, num_layers + 1 for the head (the final norm and the heads)."""
    if name.startswith("vit.embeddings."):
        return 0
    block = BLOCK.match(name)
    return int(block.group(1)) + 1 if block else num_layers + 1


def layer_decay_groups(model: nn.Module, learning_rate: float, weight_decay: float, decay: float) -> list[dict]:
    """The optimizer's parameter groups for a vit_scratch classifier, one per depth and weight-decay choice."""
    if not isinstance(model.config, ViTScratchConfig):
        raise UserError(
            f"--layer_decay scales the learning rate by block, and the {model.config.model_type} model has no "
            "vit_scratch blocks: drop --layer_decay, or fine-tune a vit_scratch model"
        )
    num_layers = model.config.num_hidden_layers
    groups = defaultdict(list)
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
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


def layer_decay_optimizer(model: nn.Module, training_args, decay: float) -> tuple[type, dict]:
    """The optimizer `--optim` names with the groups of `layer_decay_groups`, as `optimizer_cls_and_kwargs`."""
    optimizer_cls, kwargs = Trainer.get_optimizer_cls_and_kwargs(training_args, model)
    groups = layer_decay_groups(model, training_args.learning_rate, training_args.weight_decay, decay)
    return optimizer_cls, {**kwargs, "params": groups}


def layer_decay_text(layer_decay: float | None, config) -> str | None:
    """The learning rates by depth, in words for the model card and the record (None without layer decay)."""
    if layer_decay is None:
        return None
    layers = config.num_hidden_layers
    return (
        f"layer-wise decay {layer_decay:g}: the head at the full rate, block i of {layers} at rate x "
        f"{layer_decay:g}^({layers} - i), the embeddings at rate x {layer_decay:g}^{layers + 1}"
    )
