"""The EMA of the weights (`--ema_decay`): the update, the file in each checkpoint, evaluation on the average, and
the saved model being the average after a run, a resumed run, gradient accumulation and two processes."""

import json

import pytest
import torch
from helpers import killed_while_saving, run_script, tiny_model_file, training_args
from safetensors.torch import load_file
from torch import nn
from transformers import Trainer, TrainingArguments

from modeling_vit_scratch.training.arguments import DataArguments, ModelArguments
from modeling_vit_scratch.training.ema import AVERAGE_FILE, averaging, load_average, save_average, weight_average
from modeling_vit_scratch.training.trainer import train


def test_the_average_follows_the_ema_formula_step_by_step():
    """The first update copies the weights; each later one is decay * average + (1 - decay) * weights."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    average = weight_average(model, decay=0.75)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    expected = None
    for _ in range(4):
        model(torch.randn(8, 3)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        average.update_parameters(model)
        weights = [parameter.detach().clone() for parameter in model.parameters()]
        expected = (
            weights if expected is None else [0.75 * e + 0.25 * w for e, w in zip(expected, weights, strict=True)]
        )
        for kept, want in zip(average.module.parameters(), expected, strict=True):
            torch.testing.assert_close(kept, want, rtol=1e-6, atol=1e-7)
    assert not torch.equal(next(average.module.parameters()), next(model.parameters()))  # an average, not a copy
    # buffers (BatchNorm's running statistics) follow the trained model
    torch.testing.assert_close(average.module[1].running_mean, model[1].running_mean, rtol=0, atol=0)
    assert not any(parameter.requires_grad for parameter in average.parameters())


def test_the_average_is_saved_and_loaded_whole(tmp_path):
    model = nn.Linear(3, 2)
    average = weight_average(model, decay=0.5)
    for _ in range(3):
        with torch.no_grad():
            model.weight.add_(1.0)
        average.update_parameters(model)
    save_average(average, tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == [AVERAGE_FILE]  # no partial file left
    restored = weight_average(nn.Linear(3, 2), decay=0.5)
    assert load_average(restored, tmp_path)
    assert restored.n_averaged.item() == 3
    for name, tensor in average.state_dict().items():
        assert torch.equal(restored.state_dict()[name], tensor), name
    assert not load_average(restored, tmp_path / "elsewhere")  # a folder without one: False, nothing changed


class Scaled(nn.Module):
    """loss = mean((w * x - y)^2): a model whose loss tells which weight it was computed with."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(1.0))

    def forward(self, x, labels=None):
        prediction = self.weight * x
        return {"loss": (prediction - labels).square().mean(), "logits": prediction}


def test_evaluation_scores_the_average_and_leaves_the_trained_weights(tmp_path):
    rows = [{"x": torch.tensor(1.0), "labels": torch.tensor(3.0)} for _ in range(4)]
    args = TrainingArguments(str(tmp_path), report_to="none", use_cpu=True, per_device_eval_batch_size=4)
    trainer = averaging(Trainer)(model=Scaled(), args=args, eval_dataset=rows, ema_decay=0.5)
    assert trainer.evaluate()["eval_loss"] == pytest.approx(4.0)  # before any update the average is the model
    trainer.average.update_parameters(trainer.model)  # average: w = 1
    with torch.no_grad():
        trainer.model.weight.fill_(2.0)
    trainer.average.update_parameters(trainer.model)  # average: w = 0.5 * 1 + 0.5 * 2 = 1.5
    assert trainer.evaluate()["eval_loss"] == pytest.approx((1.5 - 3) ** 2)
    assert trainer.model.weight.item() == 2.0  # the trained weight is back for the next step


@pytest.mark.integration
def test_a_resumed_run_ends_with_the_average_of_the_uninterrupted_one(tmp_path):
    """With gradient accumulation: the checkpoints keep the average, a run killed while saving epoch 3 resumes from
    epoch 2 and ends with the same average; the saved model is that average (of the last step: the last epoch is
    kept), not the trained weights."""
    model_args = ModelArguments(model=tiny_model_file(tmp_path, num_channels=1), ema_decay=0.8)
    data_args = DataArguments(max_train_samples=64)
    args = dict(
        gradient_accumulation_steps=2, per_device_train_batch_size=4, num_train_epochs=3, load_best_model_at_end=False
    )
    full = train(model_args, data_args, training_args(tmp_path / "full", **args))
    steps_per_epoch = 64 // 8
    checkpoint = tmp_path / "full" / f"checkpoint-{3 * steps_per_epoch}"
    saved = load_file(checkpoint / AVERAGE_FILE)
    assert saved["n_averaged"].item() == 3 * steps_per_epoch  # one update per optimizer step, not per batch
    interrupted = tmp_path / "interrupted"
    killed_while_saving(tmp_path / "full", interrupted, [2 * steps_per_epoch, 3 * steps_per_epoch])
    resumed = train(model_args, data_args, training_args(interrupted, resume_from_checkpoint="true", **args))
    for key in ("eval_loss", "eval_accuracy", "test_loss", "test_accuracy"):
        assert resumed[key] == pytest.approx(full[key], abs=1e-6), key
    trained = load_file(checkpoint / "model.safetensors")
    for folder in (tmp_path / "full", interrupted):
        weights = load_file(folder / "model.safetensors")
        for name, tensor in weights.items():
            torch.testing.assert_close(tensor, saved[f"module.{name}"], atol=1e-6, rtol=0)
        assert any(not torch.equal(tensor, trained[name]) for name, tensor in weights.items())
    assert full["ema_decay"] == 0.8
    record = json.loads((tmp_path / "full" / "training_record.json").read_text())
    assert "moving average" in record["weight_average"]
    assert "The weights are an exponential moving average" in (tmp_path / "full" / "README.md").read_text()


@pytest.mark.integration
def test_with_the_best_epoch_kept_the_model_is_the_best_checkpoint_s_average(tmp_path):
    model_args = ModelArguments(model=tiny_model_file(tmp_path, num_channels=1), ema_decay=0.5)
    # "best" = the lowest validation loss: here an early epoch (it rises on 32 images), not the last one
    args = training_args(tmp_path / "out", num_train_epochs=3, metric_for_best_model="loss", greater_is_better=False)
    train(model_args, DataArguments(max_train_samples=32), args)
    state = json.loads((tmp_path / "out" / "checkpoint-12" / "trainer_state.json").read_text())
    best = tmp_path / "out" / state["best_model_checkpoint"].split("/")[-1]
    assert best.name != "checkpoint-12"
    average = load_file(best / AVERAGE_FILE)
    for name, tensor in load_file(tmp_path / "out" / "model.safetensors").items():
        torch.testing.assert_close(tensor, average[f"module.{name}"], atol=1e-6, rtol=0)
    evaluations = [entry["eval_loss"] for entry in state["log_history"] if "eval_loss" in entry]
    assert state["best_metric"] == min(evaluations)


@pytest.mark.integration
@pytest.mark.slow
def test_two_processes_keep_the_average_one_process_keeps(tmp_path):
    """torchrun with 2 ranks (gloo) and 1 process, global batch 16: the saved averages match."""
    common = [
        *("--model", tiny_model_file(tmp_path, num_channels=1), "--augment", "false", "--max_train_samples", "64"),
        *("--total_train_batch_size", "16", "--num_train_epochs", "2", "--eval_strategy", "epoch"),
        *("--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true", "--learning_rate", "0.003"),
        *("--seed", "5", "--ema_decay", "0.5"),
    ]
    outputs = {}
    for nproc in (1, 2):
        outputs[nproc] = tmp_path / f"nproc{nproc}"
        result = run_script(*common, "--output_dir", str(outputs[nproc]), nproc=nproc)
        assert result.returncode == 0, result.stderr[-3000:]
    one, two = (load_file(outputs[n] / "model.safetensors") for n in (1, 2))
    for name, tensor in one.items():
        torch.testing.assert_close(two[name], tensor, atol=1e-5, rtol=1e-4)
