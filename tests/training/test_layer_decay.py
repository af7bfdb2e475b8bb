"""Layer-wise learning-rate decay (`--layer_decay`): the optimizer's groups, their rates and weight decay, and the
models it refuses."""

import json
import re

import pytest
import torch
from helpers import tiny_config, training_args
from transformers import ResNetConfig, Trainer, TrainingArguments

from modeling_vit_scratch import ViTScratchForImageClassification, ViTScratchForImageClassificationWithTeacher
from modeling_vit_scratch.training.layer_decay import (
    check_layer_decay,
    check_resumed_groups,
    layer_decay_groups,
    layer_decay_optimizer,
)


def group_of(groups: list[dict], model) -> dict[str, dict]:
    """Each parameter's name -> the group holding it."""
    by_id = {id(parameter): group for group in groups for parameter in group["params"]}
    return {name: by_id[id(parameter)] for name, parameter in model.named_parameters()}


@pytest.mark.parametrize(
    "overrides",
    [dict(), dict(stem="conv", stem_channels=[8, 16], patch_size=1), dict(distillation_token=True)],
    ids=["plain", "conv-stem", "distillation"],
)
def test_each_depth_gets_decay_to_the_power_of_its_distance_from_the_head(overrides):
    config = tiny_config(num_hidden_layers=3, **overrides)
    classifier = ViTScratchForImageClassificationWithTeacher if config.distillation_token else None
    model = (classifier or ViTScratchForImageClassification)(config)
    groups = layer_decay_groups(model, learning_rate=1e-3, weight_decay=0.05, decay=0.5)
    found = group_of(groups, model)
    assert sum(len(group["params"]) for group in groups) == len(found)  # each parameter in exactly one group
    for name, group in found.items():
        if name.startswith("vit.embeddings."):  # patch projection, any stem, the tokens, the positions
            power = 4  # L + 1
        elif name.startswith("vit.layers."):
            power = 3 - int(name.split(".")[2])  # L - i
        else:  # final norm and heads
            power = 0
        assert group["lr"] == pytest.approx(1e-3 * 0.5**power), name
    assert groups[0]["lr"] == pytest.approx(1e-3)  # the head first: the rate the Trainer logs is the full one
    if "stem" in overrides:
        assert found["vit.embeddings.patch_embeddings.stem.layers.0.weight"]["lr"] == pytest.approx(1e-3 * 0.5**4)


# The matrices and convolution kernels: the only parameters weight decay shrinks (a conv stem's BatchNorm is 1, 4)
DECAYED = re.compile(r".*(stem\.layers\.[03]|projection|qkv_proj|o_proj|fc1|fc2|classifier)\.weight")


def test_biases_norms_positions_and_tokens_are_never_decayed():
    model = ViTScratchForImageClassification(tiny_config(stem="conv", stem_channels=[8, 16], patch_size=1))
    found = group_of(layer_decay_groups(model, 1e-3, 0.05, 0.75), model)
    assert {name for name, group in found.items() if group["weight_decay"] == 0.05} == {
        name for name in found if DECAYED.fullmatch(name)
    }
    assert {group["weight_decay"] for group in found.values()} == {0.0, 0.05}


def test_the_trainer_builds_the_optimizer_named_with_the_groups_and_its_schedule_scales_each(tmp_path):
    model = ViTScratchForImageClassification(tiny_config(num_hidden_layers=2))
    args = TrainingArguments(
        str(tmp_path), learning_rate=1e-2, weight_decay=0.1, warmup_steps=4, max_steps=8, use_cpu=True, report_to="none"
    )
    trainer = Trainer(model=model, args=args)
    trainer.optimizer_cls_and_kwargs = layer_decay_optimizer(trainer.model, args, 0.5)
    trainer.create_optimizer_and_scheduler(num_training_steps=8)
    assert isinstance(trainer.optimizer, torch.optim.AdamW)
    assert all(group["lr"] == 0.0 for group in trainer.optimizer.param_groups)  # warm-up starts at zero
    initial = [group["initial_lr"] for group in trainer.optimizer.param_groups]
    assert sorted(set(initial), reverse=True) == pytest.approx([1e-2, 5e-3, 2.5e-3, 1.25e-3])
    for _ in range(2):  # half way through warm-up: every group at half its own rate
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
    for group in trainer.optimizer.param_groups:
        assert group["lr"] == pytest.approx(group["initial_lr"] * 2 / 4)


def test_a_model_without_vit_scratch_blocks_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"--layer_decay 0.75 .* the resnet model --model names has no vit_scratch"):
        check_layer_decay(0.75, ResNetConfig(), training_args(tmp_path))
    check_layer_decay(0.75, tiny_config(), training_args(tmp_path))  # a vit_scratch model passes
    check_layer_decay(None, ResNetConfig(), training_args(tmp_path))  # off: nothing to check


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--layer_decay", "0"], "--layer_decay 0 is out of range: give a number in (0, 1], e.g. 0.75."),
        (["--layer_decay", "1.5"], "--layer_decay 1.5 is out of range: give a number in (0, 1], e.g. 0.75."),
        (["--ema_decay", "1"], "--ema_decay 1 is out of range: give a number in [0, 1), e.g. 0.9998."),
        (["--ema_decay", "-0.1"], "--ema_decay -0.1 is out of range: give a number in [0, 1), e.g. 0.9998."),
        (
            ["--layer_decay", "0.75", "--model", "RESNET"],
            (
                "--layer_decay 0.75 scales the learning rate by block, and the resnet model --model names has no "
                "vit_scratch blocks to decay: drop --layer_decay, or fine-tune a vit_scratch model."
            ),
        ),
    ],
)
def test_bad_decays_are_one_line_before_training(tmp_path, extra, message):
    from modeling_vit_scratch.training.command import main

    resnet = tmp_path / "resnet.json"
    resnet.write_text(
        json.dumps(dict(model_type="resnet", image_size=16, num_channels=1, hidden_sizes=[8], depths=[1]))
    )
    extra = [str(resnet) if word == "RESNET" else word for word in extra]
    argv = ["--output_dir", str(tmp_path / "out"), "--report_to", "none", *extra]
    with pytest.raises(SystemExit) as refused:
        main(argv)
    assert str(refused.value) == f"error: {message}"
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_checkpoint_with_other_optimizer_groups_is_one_line_before_resuming(tmp_path):
    """A run begun without --layer_decay (the Trainer's 2 groups) resumed with it, or the other way round."""
    model = ViTScratchForImageClassification(tiny_config())
    args = TrainingArguments(str(tmp_path), report_to="none", use_cpu=True)
    with_decay = layer_decay_optimizer(model, args, 0.75)
    torch.save({"state": {}, "param_groups": [{"params": []}] * 2}, tmp_path / "optimizer.pt")
    check_resumed_groups(tmp_path, None)
    with pytest.raises(ValueError, match=r"trained with 2 optimizer parameter groups and this run has \d+ \(with --la"):
        check_resumed_groups(tmp_path, with_decay)
    groups = with_decay[1]["params"]
    torch.save({"state": {}, "param_groups": [{"params": []}] * len(groups)}, tmp_path / "optimizer.pt")
    check_resumed_groups(tmp_path, with_decay)
    with pytest.raises(ValueError, match=f"trained with {len(groups)} .* this run has 2 \\(without --layer_decay\\)"):
        check_resumed_groups(tmp_path, None)
