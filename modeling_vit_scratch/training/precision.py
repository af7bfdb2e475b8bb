"""bf16 on this machine: whether it has bf16 units, how long a training step takes in each precision, and the choice
of `--bf16_when_faster`. Half precision is fast on GPUs and on CPUs with bf16 units: `lscpu` lists `avx512_bf16` or
`amx_bf16`."""

import copy
import math
import statistics
import time
from pathlib import Path

import torch

# /proc/cpuinfo flags of instructions that compute in bf16: x86's, then Arm's
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
FLAG_LINES = ("flags", "Features")  # the /proc/cpuinfo lines that list them on x86 and on Arm
# --bf16_when_faster's timing: each sample at least this long in float32, of at most this many steps
PROBE_SAMPLE_SECONDS, PROBE_MAX_STEPS = 0.2, 20


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
    generic loop (measured on an AVX2 machine: 1.0 GFLOP/s against 83 in float32). True where torch cannot say (the
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
