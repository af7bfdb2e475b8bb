"""Stop training at the first non-finite loss, before a checkpoint or the model is saved with broken weights.

Once a loss is NaN or infinite, the gradients and then the weights that follow are too, and every later step only
spreads them: the run can never recover, and a checkpoint saved after it would replace a good one with garbage.
`LossWatchingTrainer` records each training step's loss on its device (no host sync per step), and its
`LossWatch` callback reads the record only where the Trainer is about to log, evaluate or save (and at the end of
each epoch and of training): the first non-finite loss stops the run with one line naming the step, the loss, the
likely cause and the fix, and the checkpoints already written stay as they are, so the run resumes from the last.
"""

from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback

from modeling_vit_scratch.common.folders import checkpoints, is_complete_checkpoint


class NonFiniteLoss(ValueError):
    """A training loss that is NaN or infinite; the message is the one line the command prints."""


class LossWatch(TrainerCallback):
    """The first step whose loss was not finite, kept on the loss's device until it is read (`check`)."""

    def __init__(self):
        self.step: torch.Tensor | None = None  # the first bad step, -1 while every loss was finite
        self.loss: torch.Tensor | None = None  # its loss
        self.accelerator = None  # the Trainer's, to read every process's record at once

    def record(self, loss: torch.Tensor, step: int) -> None:
        """Note `loss` (a scalar tensor of `step`) if it is the first that is not finite, without a host sync."""
        loss = loss.detach().float().reshape(())
        if self.step is None:
            self.step = torch.full((), -1, dtype=torch.long, device=loss.device)
            self.loss = torch.zeros((), device=loss.device)
        first = ~torch.isfinite(loss) & (self.step < 0)
        self.step = torch.where(first, step, self.step)  # a Python int: no tensor made per step
        self.loss = torch.where(first, loss, self.loss)

    def check(self, args) -> None:
        """Raise `NonFiniteLoss` if any process has recorded a non-finite loss (one sync, on every process)."""
        if self.step is None:
            return
        record = torch.stack([self.step.float(), self.loss])[None]  # (1, 2): step, loss
        if self.accelerator is not None and self.accelerator.num_processes > 1:
            record = self.accelerator.gather(record)
        bad = record[record[:, 0] >= 0]
        if len(bad):
            step, loss = bad[bad[:, 0].argmin()].tolist()
            raise NonFiniteLoss(stop_message(int(step), loss, args))

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_log or control.should_evaluate or control.should_save or control.should_training_stop:
            self.check(args)

    def on_epoch_end(self, args, state, control, **kwargs):
        self.check(args)

    def on_train_end(self, args, state, control, **kwargs):
        self.check(args)


def stop_message(step: int, loss: float, args) -> str:
    """What happened, what is kept, and how to go on."""
    complete = [path for path in checkpoints(Path(args.output_dir)) if is_complete_checkpoint(path)]
    kept = (
        f"the last good checkpoint, {complete[-1].name}, is kept: resume from it with --resume_from_checkpoint true"
        if complete
        else "no checkpoint was saved before it"
    )
    return (
        f"The training loss is {loss:g} at step {step}: the weights diverged (a --learning_rate of "
        f"{args.learning_rate:g} too high for this model, or images with non-finite pixels); {kept}. "
        "Lower --learning_rate (or raise --warmup_steps) and check the data."
    )


class LossWatchingTrainer(Trainer):
    """The `Trainer`, stopped by `LossWatch` at the first non-finite training loss."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_watch = LossWatch()
        self.loss_watch.accelerator = self.accelerator
        self.add_callback(self.loss_watch)

    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = super().training_step(model, inputs, num_items_in_batch)
        self.loss_watch.record(loss, self.state.global_step + 1)  # the optimizer step this batch belongs to
        return loss
