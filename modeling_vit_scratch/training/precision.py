"""bf16 training in one place: the CPU's bf16 flags, the timing of training steps in float32 and under bf16 autocast,
the choice `--bf16_when_faster` makes (kept in each checkpoint, so a resumed run trains on as it began), and the words
the output, the record and the card use for a run's precision.

Half precision is fast on GPUs and on CPUs with bf16 units (`lscpu` lists `avx512_bf16` or `amx_bf16`); elsewhere
torch emulates it, many times slower than float32. Why the threshold is where it is: docs/training.md.
"""

import copy
import json
import statistics
import time
from pathlib import Path

import torch
from torch import nn
from transformers import TrainerCallback

CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # /proc/cpuinfo flags of bf16 instructions: x86's, then Arm's
BF16_MIN_SPEEDUP = 1.25  # bf16 rounds: it is chosen only where a step is at least this many times as fast
PRECISION_CHOICE_FILE = "precision_choice.json"  # in each checkpoint of a --bf16_when_faster run


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str] | None:
    """The CPU's instruction flags as the kernel reports them (Linux: x86 `flags`, Arm `Features`); None elsewhere."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return None
    lines = (line for line in text.splitlines() if line.startswith(("flags", "Features")))
    return next((line.split(":", 1)[1].split() for line in lines), None)


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on `device` (an accelerator runs asynchronously; a CPU does not)."""
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def training_steps_seconds(model, images: torch.Tensor, labels: torch.Tensor, steps: int, bf16: bool) -> float:
    """Seconds for `steps` training steps of `model` on `images` (B, C, H, W) and `labels` (B,): forward (under bf16
    autocast if `bf16`), cross-entropy, backward and an AdamW step. The model's weights change."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    synchronize(images.device)
    started = time.perf_counter()
    for _ in range(steps):
        with torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=bf16):
            output = model(images)
        loss = output.loss if output.loss is not None else nn.functional.cross_entropy(output.logits.float(), labels)
        loss.backward()  # a classifier's cross-entropy, or a pretraining model's own loss
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    synchronize(images.device)
    return time.perf_counter() - started


def measured_choice(model, input_shape: tuple[int, ...], batch_size: int, device: torch.device) -> dict:
    """{"bf16": ..., "why": words}: the median of five timings of a training step of a copy of `model` each way, on
    random images; the model and the random state are left as they were. A CPU without bf16 flags is not timed."""
    flags = cpu_flags()
    if device.type == "cpu" and flags is not None and not set(flags) & set(CPU_BF16_FLAGS):
        return {"bf16": False, "why": "this CPU has no bf16 units, so bf16 is emulated there"}
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        probe = copy.deepcopy(model).to(device).train()
        images = torch.randn(batch_size, *input_shape, device=device)
        labels = torch.randint(0, model.config.num_labels, (batch_size,), device=device)
        for bf16 in (False, True):  # warm-up
            training_steps_seconds(probe, images, labels, 1, bf16)
        float32, bf16 = (
            statistics.median(training_steps_seconds(probe, images, labels, 2, half) for _ in range(5))
            for half in (False, True)
        )
    faster = float32 / bf16 >= BF16_MIN_SPEEDUP
    return {
        "bf16": faster,
        "why": f"a training step took {bf16 / 2:.3g} s under bf16 autocast and {float32 / 2:.3g} s in float32 on this "
        f"{device.type}: {float32 / bf16:.2f}x, {'at least' if faster else 'under'} the {BF16_MIN_SPEEDUP:g}x it needs",
    }


def choose_bf16(model, input_shape, training_args, checkpoint: str | None) -> str | None:
    """--bf16_when_faster: bf16 where it is measurably faster here (or as the resumed `checkpoint` chose). Sets
    `training_args` and returns the choice in words; None where the command chose a precision itself."""
    if training_args.bf16 or training_args.fp16 or getattr(training_args, "mixed_precision", "no") != "no":
        return None
    kept = Path(checkpoint or "", PRECISION_CHOICE_FILE)
    if checkpoint and kept.is_file():
        choice = json.loads(kept.read_text())
    else:
        choice = measured_choice(model, input_shape, training_args.per_device_train_batch_size, training_args.device)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        shared = [choice]
        torch.distributed.broadcast_object_list(shared, src=0)  # every process trains as the first one chose
        choice = shared[0]
    if choice["bf16"]:
        training_args.bf16 = True
        if hasattr(training_args, "mixed_precision"):
            training_args.mixed_precision = "bf16"
    return f"chosen by --bf16_when_faster: {choice['why']}"


class KeepPrecisionChoice(TrainerCallback):
    """Writes the choice into each checkpoint, where `choose_bf16` finds it when the run is resumed."""

    def __init__(self, bf16: bool, why: str):
        self.choice = {"bf16": bf16, "why": why}

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir, f"checkpoint-{state.global_step}")
        if state.is_world_process_zero and folder.is_dir():
            (folder / PRECISION_CHOICE_FILE).write_text(json.dumps(self.choice) + "\n")


def training_precision(training_args) -> str:
    """The precision a run trains in, as the output, the record and the card name it."""
    mixed = getattr(training_args, "mixed_precision", "no")  # set by --bf16/--fp16 or by `accelerate launch`
    if training_args.bf16 or mixed == "bf16":
        return "bf16 mixed precision"
    return "fp16 mixed precision" if training_args.fp16 or mixed == "fp16" else "float32"


def precision_words(precision: str, choice: str | None) -> str:
    """`precision`, with --bf16_when_faster's `choice` in brackets where it made one."""
    return f"{precision} ({choice})" if choice else precision
