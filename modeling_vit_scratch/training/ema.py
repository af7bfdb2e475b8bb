"""An exponential moving average (EMA) of the weights, evaluated and saved as the model (`--ema_decay`).

After every optimizer step the average moves towards the trained weights, `average = decay * average + (1 - decay) *
weights` (torch's `AveragedModel` with `get_ema_multi_avg_fn`), starting from the weights after the first step;
buffers follow the trained model. Every data-parallel process keeps its own average of the same weights.

`WeightAverage` is a TrainerCallback: it updates the average after each step and keeps it in each checkpoint
(`AVERAGE_FILE`, safetensors), where `load` restores it on resume; the trainer scores the average
(`applied`) and ends holding it, so what is tested and saved is the average.
"""

from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from transformers import TrainerCallback

AVERAGE_FILE = "ema.safetensors"  # in each checkpoint: tensors only, nothing unpickled on resume


def copy_parameters(source: torch.nn.Module, target: torch.nn.Module) -> None:
    with torch.no_grad():
        for source_parameter, target_parameter in zip(source.parameters(), target.parameters(), strict=True):
            target_parameter.copy_(source_parameter)


class WeightAverage(TrainerCallback):
    """The EMA of `model`'s parameters with `decay` in [0, 1)."""

    def __init__(self, model: torch.nn.Module, decay: float):
        self.average = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay)).requires_grad_(False)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.average.update_parameters(model)

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir, f"checkpoint-{state.global_step}")
        if args.should_save and folder.is_dir():
            tensors = {name: value.detach().contiguous().cpu() for name, value in self.average.state_dict().items()}
            save_file(tensors, folder / AVERAGE_FILE)

    def load(self, checkpoint: str | Path | None) -> bool:
        """The average kept in `checkpoint`; False (the average untouched) where it keeps none."""
        path = Path(checkpoint or "", AVERAGE_FILE)
        if not checkpoint or not path.is_file():
            return False
        self.average.load_state_dict(load_file(path, device=str(self.average.n_averaged.device)))
        return True

    @contextmanager
    def applied(self, model: torch.nn.Module):
        """`model` holds the average inside the block, its trained weights again after it (before any step the
        average is the model)."""
        if self.average.n_averaged.item() == 0:
            yield
            return
        trained = [parameter.detach().clone() for parameter in model.parameters()]
        copy_parameters(self.average.module, model)
        try:
            yield
        finally:
            with torch.no_grad():
                for parameter, kept in zip(model.parameters(), trained, strict=True):
                    parameter.copy_(kept)


def ema_text(ema_decay: float | None) -> str | None:
    """What the saved weights are, in words for the model card and the record (None without an average)."""
    if ema_decay is None:
        return None
    return (
        f"an exponential moving average of the trained weights (decay {ema_decay:g}, updated after every "
        "optimizer step); validation and test scores are the average's"
    )
