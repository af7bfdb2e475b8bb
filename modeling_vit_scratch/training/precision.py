"""bf16 training in one place: whether this machine computes in bf16 (its CPU flags, oneDNN), the probe that times
training steps in float32 and under bf16 autocast, the choice of `--bf16_when_faster` and its threshold, the words
the output, the record and the model card use for a run's precision, and the choice each checkpoint keeps so that a
resumed run trains on in the precision it began in.

Half precision is fast on GPUs and on CPUs with bf16 units: `lscpu` lists `avx512_bf16` or `amx_bf16`. What the
threshold rests on, measured: docs/training.md.
"""

import copy
import json
import math
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import torch
from transformers import TrainerCallback, TrainingArguments

# /proc/cpuinfo flags of instructions that compute in bf16: x86's, then Arm's
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
FLAG_LINES = ("flags", "Features")  # the /proc/cpuinfo lines that list them on x86 and on Arm
# --bf16_when_faster's timing: each sample at least this long in float32, of at most this many steps
PROBE_SAMPLE_SECONDS, PROBE_MAX_STEPS = 0.2, 20
# --bf16_when_faster trains in bf16 only if a training step is at least this many times as fast in it as in float32:
# bf16 rounds, so a small gain is not worth it (the timings and accuracies behind this bar: docs/training.md)
BF16_MIN_SPEEDUP = 1.25
PRECISION_CHOICE_FILE = "precision_choice.json"  # in each checkpoint of a --bf16_when_faster run


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str] | None:
    """The CPU's instruction flags as the kernel reports them (Linux: x86 `flags`, Arm `Features`); None elsewhere."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return None
    return next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith(FLAG_LINES)), None)


def cpu_bf16_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str]:
    """Which of the CPU's bf16 instruction flags the kernel reports (Linux; empty elsewhere or if none)."""
    flags = cpu_flags(cpuinfo) or []
    return [flag for flag in CPU_BF16_FLAGS if flag in flags]


def onednn_computes_bf16() -> bool:
    """Whether torch hands bf16 matrix products on this CPU to oneDNN; where it does not, it falls back to a slow
    generic loop, many times slower than float32 (measured: docs/performance.md). True where torch cannot say (the
    check is torch's private `_is_mkldnn_bf16_supported`), so that no warning is given on a guess."""
    try:
        return bool(torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return True


def bf16_emulated(device: torch.device | str, cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether bf16 on `device` is emulated: a CPU with no bf16 flags and no oneDNN bf16 (dozens of times slower than
    float32). False elsewhere, or where the flags are unknown (no /proc/cpuinfo: not Linux)."""
    flags = cpu_flags(cpuinfo)
    bf16_units = flags is not None and bool(set(flags) & set(CPU_BF16_FLAGS))
    return torch.device(device).type == "cpu" and flags is not None and not bf16_units and not onednn_computes_bf16()


def slow_bf16_warning(device: torch.device | str, instead: str, cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """One line for a user about to compute in bf16 on `device` if bf16 is emulated there (`bf16_emulated`), else
    None. `instead` says how to stay in float32, e.g. "Leave out --bf16 true"."""
    if not bf16_emulated(device, cpuinfo):
        return None
    return (
        f"This CPU has no bf16 units (`lscpu` lists none of {', '.join(CPU_BF16_FLAGS)}) and torch emulates bf16 on "
        f"it: matrix products run dozens of times slower than in float32. {instead} to compute in float32."
    )


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on `device` (an accelerator runs asynchronously; a CPU does not)."""
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def training_steps_seconds(model, images: torch.Tensor, labels: torch.Tensor, steps: int, bf16: bool) -> float:
    """Seconds for `steps` training steps of `model` on `images` (B, C, H, W) and `labels` (B,): forward (under bf16
    autocast if `bf16`), cross-entropy, backward and an AdamW step. The model's weights change."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    autocast = torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=bf16)
    synchronize(images.device)
    started = time.perf_counter()
    for _ in range(steps):
        with autocast:
            logits = model(images).logits
        torch.nn.functional.cross_entropy(logits.float(), labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    synchronize(images.device)
    return time.perf_counter() - started


def bf16_training_step_seconds(
    model, input_shape: tuple[int, ...], batch_size: int, device: torch.device | str, samples: int = 5
) -> tuple[float, float]:
    """(float32, bf16 autocast) seconds of one training step of a copy of `model` on `batch_size` random images of
    `input_shape` (C, H, W) on `device`: the medians of `samples` samples of each, timed in turns after a warm-up
    step of each, a sample being as many steps as fill PROBE_SAMPLE_SECONDS in float32 (a single short step can
    take many times its time when the machine is busy). `model` and the random state are left as they were. A bf16
    warm-up step over twice as slow as float32's ends the measurement there: bf16 is emulated (that can take
    minutes a step), not worth timing further."""
    device = torch.device(device)
    accelerators = [device] if device.type != "cpu" else []
    with torch.random.fork_rng(devices=accelerators, device_type=device.type if accelerators else "cuda"):
        probe = copy.deepcopy(model).to(device).train()
        images = torch.randn(batch_size, *input_shape, device=device)
        labels = torch.randint(0, model.config.num_labels, (batch_size,), device=device)
        float32 = training_steps_seconds(probe, images, labels, 1, bf16=False)
        bf16 = training_steps_seconds(probe, images, labels, 1, bf16=True)
        if bf16 > 2 * float32:
            return float32, bf16
        steps = max(1, min(PROBE_MAX_STEPS, math.ceil(PROBE_SAMPLE_SECONDS / float32)))
        float32_samples, bf16_samples = [], []
        for _ in range(samples):
            float32_samples.append(training_steps_seconds(probe, images, labels, steps, bf16=False) / steps)
            bf16_samples.append(training_steps_seconds(probe, images, labels, steps, bf16=True) / steps)
    return statistics.median(float32_samples), statistics.median(bf16_samples)


def device_words(device_type: str) -> str:
    """ "CPU", or e.g. "cuda device": what a sentence calls a device of type `device_type`."""
    return "CPU" if device_type == "cpu" else f"{device_type} device"


@dataclass(frozen=True)
class PrecisionChoice:
    """What `--bf16_when_faster` chose (`bf16`, else float32) and on what grounds: bf16 is `emulated` on `device` (a
    device type: "cpu", "cuda", ...), or a training step was `measured` there at `float32_seconds` and
    `bf16_seconds` against the bar of `min_speedup`. `str()` gives it in words for the output, the record and the
    card. A resumed run reads it from the checkpoint named `kept_from`; a checkpoint keeps it without that name
    (`as_kept`), so the words name one checkpoint however often the run is resumed."""

    bf16: bool
    reason: Literal["measured", "emulated", "recorded"]
    device: str | None = None
    float32_seconds: float | None = None
    bf16_seconds: float | None = None
    min_speedup: float | None = None
    recorded_words: str | None = None  # the grounds as an older vit-scratch kept them: in words only
    kept_from: str | None = None

    @classmethod
    def measured(cls, float32_seconds: float, bf16_seconds: float, device: str) -> "PrecisionChoice":
        """bf16 if a step timed at `bf16_seconds` under bf16 autocast is at least BF16_MIN_SPEEDUP x as fast as one
        timed at `float32_seconds` in float32 on `device`."""
        faster = float32_seconds / bf16_seconds >= BF16_MIN_SPEEDUP
        return cls(faster, "measured", device, float32_seconds, bf16_seconds, BF16_MIN_SPEEDUP)

    @classmethod
    def emulated(cls, device: str) -> "PrecisionChoice":
        """float32, without timing: `device` has no bf16 units."""
        return cls(False, "emulated", device)

    def why(self) -> str:
        """The grounds in words: the timings and the bar, or that bf16 is emulated."""
        if self.reason == "recorded":
            return self.recorded_words
        where = f"this {device_words(self.device)}"
        if self.reason == "emulated":
            return f"bf16 is emulated on {where}, which has no bf16 units"
        speedup = self.float32_seconds / self.bf16_seconds
        return (
            f"a training step took {self.bf16_seconds:.3g} s under bf16 autocast and {self.float32_seconds:.3g} s in "
            f"float32 on {where}: bf16 is {speedup:.2f}x as fast, {'at least' if self.bf16 else 'under'} the "
            f"{self.min_speedup:g}x it needs"
        )

    def __str__(self) -> str:
        kept = f"; kept on resuming from {self.kept_from}" if self.kept_from else ""
        return f"chosen by --bf16_when_faster: {self.why()}{kept}"

    def as_kept(self) -> dict:
        """What a checkpoint keeps (PRECISION_CHOICE_FILE): the grounds, not the words, nor where they were read."""
        return {key: value for key, value in asdict(self).items() if value is not None and key != "kept_from"}

    def keep_in(self, checkpoint: Path) -> None:
        """Writes `as_kept` into the folder `checkpoint`, staged and moved into place whole: a resume reads all of it
        or none."""
        staged = checkpoint / f".{PRECISION_CHOICE_FILE}.partial"
        staged.write_text(json.dumps(self.as_kept(), indent=2) + "\n")
        staged.replace(checkpoint / PRECISION_CHOICE_FILE)

    @classmethod
    def kept_in(cls, checkpoint: str) -> "PrecisionChoice | None":
        """The choice the folder `checkpoint` keeps, None if it keeps none."""
        path = Path(checkpoint, PRECISION_CHOICE_FILE)
        if not path.is_file():
            return None
        kept = json.loads(path.read_text())
        if "reason" not in kept:  # an older vit-scratch kept {"bf16": ..., "why": words}: resumed as it chose
            kept = {"bf16": kept["bf16"], "reason": "recorded", "recorded_words": kept["why"]}
        return cls(**kept, kept_from=Path(checkpoint).name)


def choose_bf16(
    model, input_shape: tuple[int, ...], training_args: TrainingArguments, checkpoint: str | None = None
) -> PrecisionChoice | None:
    """--bf16_when_faster: train under bf16 autocast if a training step of `model` (inputs (C, H, W) =
    `input_shape`) runs at least BF16_MIN_SPEEDUP x as fast in it as in float32 on this device, measured now; else
    in float32. A run resumed from `checkpoint` keeps the choice made when it began. Sets `training_args` and returns
    the choice; None when the command chose a precision itself (--bf16, --fp16, accelerate's mixed_precision). Every
    process trains as the first one chose."""
    if training_args.bf16 or training_args.fp16 or training_args.mixed_precision != "no":
        return None
    device = training_args.device
    choice = PrecisionChoice.kept_in(checkpoint) if checkpoint else None
    if choice is None:
        if bf16_emulated(device) or (device.type == "cuda" and not torch.cuda.is_bf16_supported()):
            choice = PrecisionChoice.emulated(device.type)
        else:
            seconds = bf16_training_step_seconds(model, input_shape, training_args.per_device_train_batch_size, device)
            choice = PrecisionChoice.measured(*seconds, device.type)
    if training_args.world_size > 1 and torch.distributed.is_initialized():
        shared = [choice]
        torch.distributed.broadcast_object_list(shared, src=0)  # every process, one precision
        choice = shared[0]
    if choice.bf16:
        training_args.bf16, training_args.mixed_precision = True, "bf16"  # as TrainingArguments sets them
    return choice


class KeepPrecisionChoice(TrainerCallback):
    """Keeps `choice` in each checkpoint (PRECISION_CHOICE_FILE), where `choose_bf16` finds it when the run is
    resumed."""

    def __init__(self, choice: PrecisionChoice):
        self.choice = choice

    def keep_in_checkpoint(self, args, state) -> None:
        """Write the choice into the checkpoint of this step; the run's saving (`training/saving.py`) calls it
        inside the checkpoint's own save, so a write the system refuses is one line and removes the checkpoint."""
        folder = Path(args.output_dir, f"checkpoint-{state.global_step}")
        if state.is_world_process_zero and folder.is_dir():
            self.choice.keep_in(folder)

    def on_save(self, args, state, control, **kwargs):
        """A checkpoint saved outside the run's saving gets the choice too."""
        if not Path(args.output_dir, f"checkpoint-{state.global_step}", PRECISION_CHOICE_FILE).exists():
            self.keep_in_checkpoint(args, state)

    def on_train_end(self, args, state, control, **kwargs):
        """The checkpoint the Trainer saves outside its saving (--enable_jit_checkpoint's, on SIGTERM) keeps it too."""
        self.on_save(args, state, control, **kwargs)


def training_precision(training_args) -> str:
    """The precision a run trains in, as the output, the record and the card name it."""
    # accelerate's mixed_precision: set by --bf16/--fp16, by --bf16_when_faster, or by `accelerate launch` / its config
    mixed = getattr(training_args, "mixed_precision", "no")
    if training_args.bf16 or mixed == "bf16":
        return "bf16 mixed precision"
    return "fp16 mixed precision" if training_args.fp16 or mixed == "fp16" else "float32"


def precision_words(precision: str, choice: str | None) -> str:
    """`precision` (a `training_precision`), with `choice` (a `PrecisionChoice` in words) in brackets where
    --bf16_when_faster made one: "float32", "bf16 mixed precision (chosen by --bf16_when_faster: ...)"."""
    return f"{precision} ({choice})" if choice else precision
