"""Numeric precision as the scripts take it (`--dtype float32|bfloat16`) and how closely two runs of one model agree
in each. Half precision is fast on GPUs and on CPUs with bf16 units: `lscpu` lists `avx512_bf16` or `amx_bf16`."""

from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
ALIASES = {"fp32": "float32", "bf16": "bfloat16"}
# Largest |logit difference| two computations of one model may show, relative to the largest |logit| (at least 1).
# float32 rounds at 2^-24, so 1e-4 leaves room for another order of summation; bfloat16 keeps 8 bits of mantissa
# (rounding at 2^-9 per operation) and a ViT chains a few hundred of them: 2^-4.
LOGIT_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2**-4}
# /proc/cpuinfo flags of instructions that compute in bf16: x86's, then Arm's
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
FLAG_LINES = ("flags", "Features")  # the /proc/cpuinfo lines that list them on x86 and on Arm


def parse_dtype(name: str) -> torch.dtype:
    """`float32`/`fp32` or `bfloat16`/`bf16` as a torch dtype; a ValueError naming the choices otherwise."""
    key = ALIASES.get(name.strip().lower(), name.strip().lower())
    if key not in DTYPES:
        raise ValueError(f"Unknown dtype {name!r}: choose from {', '.join(DTYPES)} (or {', '.join(ALIASES)}).")
    return DTYPES[key]


def parse_dtypes(text: str) -> list[torch.dtype]:
    """A comma-separated list of dtypes, e.g. "float32,bfloat16", each once, in the order given."""
    dtypes = [parse_dtype(name) for name in text.split(",") if name.strip()]
    if not dtypes:
        raise ValueError(f"No dtype in {text!r}: give e.g. float32,bfloat16.")
    return list(dict.fromkeys(dtypes))


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> "bfloat16"."""
    return str(dtype).removeprefix("torch.")


def logits_agree(reference: torch.Tensor, candidate: torch.Tensor, dtype: torch.dtype) -> tuple[bool, float, float]:
    """Whether two logits tensors of one model run in `dtype` agree: (agree, max |difference|, tolerance)."""
    reference, candidate = reference.float(), candidate.float()
    tolerance = LOGIT_TOLERANCE[dtype] * max(1.0, reference.abs().max().item())
    difference = (reference - candidate).abs().max().item()
    return difference <= tolerance, difference, tolerance


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


def slow_bf16_warning(device: torch.device | str, instead: str, cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """One line for a user about to compute in bf16 on `device`, if that is a CPU where bf16 is emulated (no bf16
    flags and no oneDNN bf16: dozens of times slower than float32); None elsewhere, or where the flags are unknown
    (no /proc/cpuinfo: not Linux). `instead` says how to stay in float32, e.g. "Leave out --bf16 true"."""
    flags = cpu_flags(cpuinfo)
    bf16_units = flags is not None and bool(set(flags) & set(CPU_BF16_FLAGS))
    if torch.device(device).type != "cpu" or flags is None or bf16_units or onednn_computes_bf16():
        return None
    return (
        f"This CPU has no bf16 units (`lscpu` lists none of {', '.join(CPU_BF16_FLAGS)}) and torch emulates bf16 on "
        f"it: matrix products run dozens of times slower than in float32. {instead} to compute in float32."
    )
