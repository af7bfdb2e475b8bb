"""Non-finite loss: the first NaN or infinite training loss stops the run with one line naming the step, the loss
and the fix; no checkpoint is written after it, the last good one is kept, and the run resumes from it."""

import math
from types import SimpleNamespace

import pytest
import torch
from entry_points import Scenario, outcome, with_arguments
from safetensors.torch import load_file

from modeling_vit_scratch.training.augmentation import AugmentingTrainer
from modeling_vit_scratch.training.loss_watch import LossWatch, NonFiniteLoss


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_the_first_non_finite_loss_is_named_with_its_step(tmp_path, bad):
    watch = LossWatch()
    for step, loss in enumerate([2.3, 1.9, bad, math.nan, 0.5], start=1):
        watch.record(torch.tensor(loss), step)
    args = SimpleNamespace(output_dir=str(tmp_path), learning_rate=3.0)
    with pytest.raises(NonFiniteLoss) as stop:
        watch.check(args)
    message = str(stop.value)
    assert f"is {bad:g} at step 3" in message and "Lower --learning_rate" in message, message
    assert "\n" not in message


def test_finite_losses_pass(tmp_path):
    watch = LossWatch()
    for step in range(1, 5):
        watch.record(torch.tensor(1.0 / step), step)
    watch.check(SimpleNamespace(output_dir=str(tmp_path), learning_rate=1e-3))


@pytest.mark.integration
def test_a_run_whose_loss_turns_nan_stops_keeps_the_last_good_checkpoint_and_resumes(tmp_path, monkeypatch):
    scenario = Scenario(tmp_path)
    output = tmp_path / "out"
    # 18 training images in batches of 8: 3 steps an epoch; a checkpoint every 2 steps, a log line never
    argv = with_arguments(
        scenario.argv("train", output),
        ["--num_train_epochs", "3", "--save_strategy", "steps", "--save_steps", "2", "--logging_steps", "1000"],
    )
    original = AugmentingTrainer.compute_loss

    def diverging(self, *args, **kwargs):  # from step 3 on, the loss (and so every weight after it) is NaN
        loss = original(self, *args, **kwargs)
        training = self.model.training and not isinstance(loss, tuple)  # evaluation asks for (loss, outputs)
        return loss * math.nan if training and self.state.global_step >= 2 else loss

    monkeypatch.setattr(AugmentingTrainer, "compute_loss", diverging)
    result = outcome("train", argv)
    assert result.one_line, result
    assert "The training loss is nan at step 3" in result.error, result.error
    assert "checkpoint-2, is kept" in result.error and "--resume_from_checkpoint true" in result.error
    assert sorted(path.name for path in output.glob("checkpoint-*")) == ["checkpoint-2"]
    assert not (output / "model.safetensors").exists()
    weights = load_file(output / "checkpoint-2" / "model.safetensors")
    assert all(torch.isfinite(tensor).all() for tensor in weights.values())

    monkeypatch.setattr(AugmentingTrainer, "compute_loss", original)
    resumed = outcome("train", [*argv, "--resume_from_checkpoint", "true"])
    assert resumed.code == 0, resumed
    weights = load_file(output / "model.safetensors")
    assert all(torch.isfinite(tensor).all() for tensor in weights.values())
