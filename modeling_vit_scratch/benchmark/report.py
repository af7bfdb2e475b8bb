"""What the samples come to: medians and ratios paired chunk by chunk, the tables, the verdicts, the machine."""

import os
import platform
import statistics
from pathlib import Path

import torch

from ..training.precision import cpu_flags
from .models import BASELINE, OURS, PEERS

# The CPU flags that decide which precision and attention kernel is fast (docs/performance.md)
MATRIX_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def speed_ratio(sample: dict, reference: list[float]) -> float:
    """How many times faster than the reference one round was: the median over chunks of the reference's seconds
    over the sample's, each chunk against the reference's chunk of the same index, timed next to it."""
    return statistics.median(theirs / ours for ours, theirs in zip(sample["chunk_seconds"], reference))


def summarise(samples: list[dict], by_implementation: dict[str, list[dict]], references: dict) -> dict:
    """One implementation's medians over rounds, and its ratios (medians over rounds of `speed_ratio`) to
    transformers' SDPA, to the fastest peer chunk by chunk (`by_implementation`: every implementation in the same
    precision) and to each of `references` given (e.g. {"ratio_to_float32": the same model's samples in float32})."""
    median = lambda key: statistics.median(sample[key] for sample in samples)
    values = [sample["images_per_second"] for sample in samples]
    summary = dict(median=statistics.median(values), min=min(values), max=max(values))
    summary.update(milliseconds_per_batch=median("milliseconds_per_batch"), peak_memory_mb=median("peak_memory_mb"))
    baseline, peers = by_implementation.get(BASELINE), [by_implementation[p] for p in PEERS if p in by_implementation]
    fastest = [dict(chunk_seconds=[min(chunk) for chunk in zip(*(p[i]["chunk_seconds"] for p in peers))]) for i in
               range(len(samples))]  # fmt: skip
    references = dict(ratio=baseline, ratio_to_fastest_peer=fastest if peers else None, **references)
    for key, reference in references.items():
        if reference:
            summary[key] = statistics.median(speed_ratio(s, r["chunk_seconds"]) for s, r in zip(samples, reference))
    # a baseline whose peak did not rise above its tiny warm-up model's (a tiny config) gives no memory ratio
    memory = [s["peak_memory_mb"] / b["peak_memory_mb"] for s, b in zip(samples, baseline or []) if b["peak_memory_mb"]]
    if memory:
        summary["memory_ratio"] = statistics.median(memory)
    summary.update({key: median(key) for key in ("achieved_tflops", "mfu") if samples[0].get(key) is not None})
    return summary


def table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows])


def markdown(rows: list[dict]) -> str:
    """The table: a row per config, mode, precision, batch and implementation; a "vs uncompiled" column where
    compiled variants were measured, an MFU column on a GPU."""
    compiled, on_cuda = any("ratio_to_uncompiled" in row for row in rows), any("mfu" in row for row in rows)
    header = "config|mode|precision|batch|implementation|images/s (median)|min-max|ms/batch|vs transformers SDPA"
    header += "|vs fastest of eager/timm|peak memory MB|memory vs transformers|vs float32|model TFLOP/s|of matmul rate"
    header = header.split("|") + ["vs uncompiled"] * compiled + ["MFU"] * on_cuda
    ratio = lambda row, key: f"{row[key]:.2f}x" if key in row else ""
    rate = lambda value: f"{value:.0f}" if value >= 100 else f"{value:.1f}"
    cells = []
    for row in rows:
        share = f"{row['matmul_fraction']:.0%}" if "matmul_fraction" in row else ""
        cells.append(
            [row["config"], row["mode"], row["precision"], row["batch"], row["implementation"], rate(row["median"])]
            + [f"{rate(row['min'])}-{rate(row['max'])}", f"{row['milliseconds_per_batch']:.1f}", ratio(row, "ratio")]
            + [ratio(row, "ratio_to_fastest_peer") if row["implementation"] == OURS else ""]
            + [f"{row['peak_memory_mb']:.0f}", ratio(row, "memory_ratio"), ratio(row, "ratio_to_float32")]
            + [f"{row['achieved_tflops']:.3g}" if "achieved_tflops" in row else "", share]
            + [ratio(row, "ratio_to_uncompiled")] * compiled
            + [f"{row['mfu']:.1%}" if row.get("mfu") else ""] * on_cuda
        )
    return table(header, cells)


def bar_text(bar: float) -> str:
    """A bar as a verdict shows it: two decimals (1.00x), more where the bar has them (0.975x)."""
    return f"{bar:.2f}x" if round(bar, 2) == bar else f"{bar:g}x"


# bar argument -> the row's value it judges, whether bf16 rows alone, the verdict's words, whether a value meets it
JUDGED = {
    "min_speedup_vs_sdpa": ("ratio", False, "{:.3f}x transformers SDPA (bar {})", float.__ge__),
    "min_speedup_vs_fastest": ("ratio_to_fastest_peer", False, "{:.3f}x fastest of eager/timm (bar {})", float.__ge__),
    "max_memory_ratio": ("memory_ratio", False, "memory {:.3f}x (bar <= {})", float.__le__),
    "min_bf16_matmul_fraction": ("matmul_fraction", True, "{:.1%} of the bf16 matmul rate (bar {})", float.__ge__),
    "min_bf16_speedup": ("ratio_to_float32", True, "{:.3f}x float32 (bar {})", float.__ge__),
}


def bars(rows: list[dict], args) -> list[str]:
    """The verdict on each row of ours against the bars given (no bar, no line); a bar whose value was not measured
    is not judged, but for memory: a baseline at 0 MB cannot meet a memory bar."""
    lines = []
    for row in (row for row in rows if row["implementation"] == OURS and "ratio" in row):
        checks = []
        for name, (key, bf16_only, words, meets) in JUDGED.items():
            bar = getattr(args, name)
            if bar is None or (bf16_only and not row["precision"].startswith("bf16")):
                continue
            shown_bar = f"{bar:.0%}" if key == "matmul_fraction" else bar_text(bar)
            if key in row:
                checks.append((words.format(row[key], shown_bar), meets(float(row[key]), bar)))
            elif key == "memory_ratio":
                checks.append((f"memory not measured: transformers' peak was 0 MB (bar <= {shown_bar})", False))
        if checks:
            verdict = "met" if all(ok for _, ok in checks) else "NOT met"
            what = f"{row['config']} {row['mode']} {row['precision']} batch {row['batch']}"
            lines.append(f"{what}: {', '.join(text for text, _ in checks)}: {verdict}")
    return lines


def machine() -> str:
    """The first line of a report: the machine, the CPU flags it has and lacks among `MATRIX_FLAGS`, torch."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        name = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.processor() or platform.machine()
    flags = cpu_flags() or []
    has, lacks = (" ".join(flag for flag in MATRIX_FLAGS if (flag in flags) == want) for want in (True, False))
    flagged = f"flags {has or 'none of ' + lacks}" + (f"; without {lacks}" if has and lacks else "")
    where = f"CUDA {torch.cuda.get_device_name()}" if torch.cuda.is_available() else f"CPU ({flagged})"
    return f"{name}, {os.cpu_count()} cores, torch {torch.__version__}, {where}"


def machine_header(args, rates: dict[str, float], sizes: dict[str, int]) -> str:
    """`machine`, the matmul rates (those the rows are set against: `args.matmul_rates`) and how the run measured."""
    matmul = ", ".join(
        f"{name} {rate / 1e9:.1f} GFLOP/s ({sizes[name]}x{sizes[name]}"
        + (")" if name in args.matmul_rates else ", emulated: no share of it is shown)")
        for name, rate in rates.items()
    )
    malloc = "glibc defaults" if args.glibc_malloc_defaults else "thresholds fixed (STEADY_MALLOC)"
    return (
        f"{machine()}, matmul {matmul}, {'torch.compile (not timed), ' * args.compile}{args.rounds} rounds of "
        f"{args.chunks} interleaved chunks of >= {args.chunk_seconds} s, throughput from the fastest chunk of each "
        f"round, ratios paired chunk by chunk; malloc {malloc}"
    )


def end_to_end_report(rows: list[dict], bar: float | None) -> tuple[str, list[str]]:
    """The end-to-end table, and the verdict per recipe on `--max_end_to_end_ratio` (None: no verdict)."""
    header = ["recipe", "extra arguments", "steps", "batch", "train_runtime + data preparation s", "model alone s"]
    cells = [
        [row[key] for key in ("recipe", "train_args", "steps", "batch")]
        + [f"{row['end_to_end_seconds']:.1f}", f"{row['model_only_seconds']:.1f}", f"{row['ratio']:.2f}x"]
        for row in rows
    ]
    verdicts = [
        f"{row['recipe']} {row['train_args']}".strip() + f": end to end {row['ratio']:.3f}x the model alone (bar <= "
        f"{bar_text(bar)}): {'met' if row['ratio'] <= bar else 'NOT met'}" for row in rows if bar is not None
    ]  # fmt: skip
    return table([*header, "ratio"], cells), verdicts
