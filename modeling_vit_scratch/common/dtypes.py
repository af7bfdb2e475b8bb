"""Numeric precision as the tools take it (`--dtype float32|bfloat16`) and how closely two runs of one model agree
in each."""

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
ALIASES = {"fp32": "float32", "bf16": "bfloat16"}
# Largest |logit difference| two computations of one model may show, relative to the largest |logit| (at least 1).
# float32 rounds at 2^-24, so 1e-4 leaves room for another order of summation; bfloat16 keeps 8 bits of mantissa
# (rounding at 2^-9 per operation) and a ViT chains a few hundred of them: 2^-4.
LOGIT_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2**-4}


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
