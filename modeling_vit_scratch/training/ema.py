"""An exponential moving average (EMA) of the weights, evaluated and saved as the model (`--ema_decay`).

After every optimizer step (so once per `--gradient_accumulation_steps` batches) the average moves towards the
trained weights, `average = decay * average + (1 - decay) * weights`, starting from the weights after the first step;
torch's `AveragedModel` with `get_ema_multi_avg_fn` does the update. Parameters are averaged; buffers (BatchNorm's
running statistics in a convolutional stem) follow the trained model, as `AveragedModel` does by default.

The average smooths out the noise of the last steps, which matters on long runs with many steps
(docs/training.md says when to use it). Every process keeps its own average of
the same weights (data-parallel processes hold the same weights after each step), so nothing is exchanged.

`averaging(trainer_class)` adds it to a Trainer class:
- evaluation during training (model selection, the curves) and after it scores the average;
- each checkpoint keeps it (`AVERAGE_FILE`, written before `trainer_state.json`, so a complete checkpoint holds it)
  and `--resume_from_checkpoint` restores it: a resumed run ends with the average of the uninterrupted one;
- once training ends the model holds the average (of the best checkpoint with `load_best_model_at_end`), so what is
  tested and saved is the average.
"""

import logging
import os
from contextlib import contextmanager
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

from modeling_vit_scratch.common.weights import check_safetensors

logger = logging.getLogger(__name__)

# The average's file in each checkpoint: safetensors (tensors only, nothing unpickled on resume).
AVERAGE_FILE = "ema.safetensors"


def weight_average(model: torch.nn.Module, decay: float) -> AveragedModel:
    """A copy of `model` whose parameters become the EMA of `model`'s with `update_parameters(model)`."""
    average = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay))
    average.requires_grad_(False)
    return average


def save_average(average: AveragedModel, folder: str | Path) -> None:
    """`average` (its weights and the number of updates) into folder/AVERAGE_FILE, written whole then moved."""
    path = Path(folder) / AVERAGE_FILE
    partial = path.with_name(f".{AVERAGE_FILE}.partial")
    save_file({name: tensor.detach().contiguous().cpu() for name, tensor in average.state_dict().items()}, partial)
    os.replace(partial, path)


def load_average(average: AveragedModel, folder: str | Path) -> bool:
    """`average` as saved in folder/AVERAGE_FILE; False (and `average` untouched) if the folder holds none."""
    path = Path(folder) / AVERAGE_FILE
    if not path.is_file():
        return False
    check_safetensors(path)
    average.load_state_dict(load_file(path, device=str(average.n_averaged.device)))
    return True


class UpdateAverage(TrainerCallback):
    """Moves the average towards the model's weights after each optimizer step (before any evaluation or
    checkpoint of that step)."""

    def __init__(self, average: AveragedModel):
        self.average = average

    def on_step_end(self, args, state, control, model=None, **kwargs):
        self.average.update_parameters(model)


def copy_parameters(source: torch.nn.Module, target: torch.nn.Module) -> None:
    with torch.no_grad():
        for source_parameter, target_parameter in zip(source.parameters(), target.parameters(), strict=True):
            target_parameter.copy_(source_parameter)


class WeightAveraging(Trainer):
    """A Trainer that keeps an EMA of the weights with `ema_decay` in [0, 1), scores it and ends holding it (see the
    module docstring). Mixed into the package's Trainer classes by `averaging`."""

    def __init__(self, *args, ema_decay: float, **kwargs):
        super().__init__(*args, **kwargs)
        self.average = weight_average(self.model, ema_decay)  # the model is on its device by now
        self.holds_average = False  # True once training has ended and the model's weights are the average
        self.add_callback(UpdateAverage(self.average))

    @contextmanager
    def averaged_weights(self):
        """The model holds the average inside the block, its trained weights again after it."""
        if self.holds_average or self.average.n_averaged.item() == 0:  # before any step the average is the model
            yield
            return
        trained = [parameter.detach().clone() for parameter in self.model.parameters()]
        copy_parameters(self.average.module, self.model)
        try:
            yield
        finally:
            with torch.no_grad():
                for parameter, kept in zip(self.model.parameters(), trained, strict=True):
                    parameter.copy_(kept)

    def evaluate(self, *args, **kwargs):
        with self.averaged_weights():
            return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        with self.averaged_weights():
            return super().predict(*args, **kwargs)

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """Train (restoring the average from the checkpoint resumed), then put the average into the model: that of
        the best checkpoint when `load_best_model_at_end` loaded it."""
        checkpoint = resume_from_checkpoint
        if checkpoint is True:
            checkpoint = get_last_checkpoint(self.args.output_dir)
        if (
            isinstance(checkpoint, str | Path)
            and not load_average(self.average, checkpoint)
            and self.is_world_process_zero()
        ):
            logger.warning(
                "The checkpoint %s holds no weight average (%s): the average starts from its weights.",
                checkpoint,
                AVERAGE_FILE,
            )
        result = super().train(resume_from_checkpoint, *args, **kwargs)
        best = self.state.best_model_checkpoint
        if (
            self.args.load_best_model_at_end
            and best
            and not load_average(self.average, best)
            and self.is_world_process_zero()
        ):
            logger.warning("The best checkpoint %s holds no weight average: the model keeps its last one.", best)
        copy_parameters(self.average.module, self.model)
        self.holds_average = True
        return result

    def _save_optimizer_and_scheduler(self, output_dir):
        """Beside the optimizer's state, so the checkpoint holds the average before `trainer_state.json` marks it
        complete."""
        super()._save_optimizer_and_scheduler(output_dir)
        if self.args.should_save:
            save_average(self.average, output_dir)


def averaging(trainer_class: type[Trainer]) -> type[Trainer]:
    """`trainer_class` keeping an EMA of the weights (`WeightAveraging`); built with `ema_decay=...`."""
    return type(f"Averaging{trainer_class.__name__}", (WeightAveraging, trainer_class), {})


def check_ema(ema_decay: float | None, training_args) -> None:
    """One line before training where the average cannot be kept: under FSDP each process holds a shard only."""
    if ema_decay is not None and training_args.fsdp:
        raise ValueError(
            f"--ema_decay {ema_decay:g} averages the whole model on each process, which --fsdp shards: drop "
            "--ema_decay or --fsdp."
        )


def ema_text(ema_decay: float | None) -> str | None:
    """What the saved weights are, in words for the model card and the record (None without an average)."""
    if ema_decay is None:
        return None
    return (
        f"an exponential moving average of the trained weights (decay {ema_decay:g}, updated after every "
        "optimizer step); validation and test scores are the average's"
    )
