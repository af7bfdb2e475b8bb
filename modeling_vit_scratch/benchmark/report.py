"""What the rounds' samples come to: per implementation, the medians and the ratios paired chunk by chunk
(`summarise`); the markdown table; the verdict lines on the bars given; the header that names the machine."""

import os
import platform
import statistics
from pathlib import Path

import torch

from modeling_vit_scratch.training.precision import cpu_flags

from .models import BASELINE, DTYPE_OF, OURS, PEERS

# The CPU flags that decide which precision and attention kernel is fast (docs/performance.md): vector width, bf16
# and int8 dot products, and Intel's AMX matrix units. The header names those the CPU has and those it lacks.
MATRIX_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def speed_ratio(sample: dict, reference_chunk_seconds: list[float]) -> float:
    """How many times faster than the reference one round was: the median over chunks of reference time / sample
    time, each chunk against the reference's chunk of the same index, timed next to it."""
    pairs = zip(sample["chunk_seconds"], reference_chunk_seconds)
    return statistics.median(reference / seconds for seconds, reference in pairs)


def fastest_chunks(results: list[dict]) -> list[float]:
    """Chunk by chunk, the least seconds per step among `results` (several implementations of one round)."""
    return [min(chunk) for chunk in zip(*(result["chunk_seconds"] for result in results))]


def summarise(
    samples: list[dict],
    by_implementation: dict[str, list[dict]],
    references: dict[str, list[dict] | None] | None = None,
) -> dict:
    """Median, min-max and peak memory of one implementation, and its ratios to transformers' ViT (SDPA) and to the
    fastest peer (`by_implementation`: every implementation in the same precision) and to each of `references`
    given samples (e.g. {"ratio_to_float32": the same model in float32}): medians over rounds of each round's
    ratio, paired chunk by chunk (`speed_ratio`)."""
    values = [sample["images_per_second"] for sample in samples]
    summary = dict(
        median=statistics.median(values),
        min=min(values),
        max=max(values),
        milliseconds_per_batch=statistics.median(sample["milliseconds_per_batch"] for sample in samples),
        peak_memory_mb=statistics.median(sample["peak_memory_mb"] for sample in samples),
    )
    if BASELINE in by_implementation:
        baseline = by_implementation[BASELINE]
        summary["ratio"] = statistics.median(speed_ratio(s, b["chunk_seconds"]) for s, b in zip(samples, baseline))
        # a baseline whose peak did not rise above its tiny warm-up model's (0 MB: a tiny config) gives no ratio
        memory_ratios = [
            s["peak_memory_mb"] / b["peak_memory_mb"] for s, b in zip(samples, baseline) if b["peak_memory_mb"]
        ]
        if memory_ratios:
            summary["memory_ratio"] = statistics.median(memory_ratios)
    peers = [name for name in PEERS if name in by_implementation]
    if peers:  # against the fastest of the peers at each chunk
        fastest = [
            fastest_chunks([by_implementation[name][round_index] for name in peers])
            for round_index in range(len(samples))
        ]
        summary["ratio_to_fastest_peer"] = statistics.median(speed_ratio(s, f) for s, f in zip(samples, fastest))
    for key, reference in (references or {}).items():
        if reference:
            pairs = zip(samples, reference)
            summary[key] = statistics.median(speed_ratio(s, r["chunk_seconds"]) for s, r in pairs)
    for extra in ("achieved_tflops", "mfu"):
        if samples[0].get(extra) is not None:
            summary[extra] = statistics.median(sample[extra] for sample in samples)
    return summary


def markdown(rows: list[dict]) -> str:
    """The table: one row per config, mode, precision, batch and implementation; an MFU column on CUDA, a "vs
    uncompiled" column where compiled variants were measured."""
    on_cuda = any("mfu" in row for row in rows)
    compiled = any("ratio_to_uncompiled" in row for row in rows)
    header = [
        "config",
        "mode",
        "precision",
        "batch",
        "implementation",
        "images/s (median)",
        "min-max",
        "ms/batch",
        "vs transformers SDPA",
        "vs fastest of eager/timm",
        "peak memory MB",
        "memory vs transformers",
        "vs float32",
        "model TFLOP/s",
        "of matmul rate",
    ]
    header += ["vs uncompiled"] if compiled else []
    header += ["MFU"] if on_cuda else []
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    ratio = lambda row, key: f"{row[key]:.2f}x" if key in row else ""
    rate = lambda value: f"{value:.0f}" if value >= 100 else f"{value:.1f}"
    for row in rows:
        cells = [
            row["config"],
            row["mode"],
            row.get("precision", "float32"),
            row["batch"],
            row["implementation"],
            rate(row["median"]),
            f"{rate(row['min'])}-{rate(row['max'])}",
            f"{row['milliseconds_per_batch']:.1f}",
            ratio(row, "ratio"),
            ratio(row, "ratio_to_fastest_peer") if row["implementation"] == OURS else "",
            f"{row['peak_memory_mb']:.0f}",
            ratio(row, "memory_ratio"),
            ratio(row, "ratio_to_float32"),
            f"{row['achieved_tflops']:.3g}" if "achieved_tflops" in row else "",
            share(row),
        ]
        if compiled:
            cells.append(ratio(row, "ratio_to_uncompiled"))
        if on_cuda:
            cells.append(f"{row['mfu']:.1%}" if row.get("mfu") else "")
        lines.append("| " + " | ".join(str(cell) for cell in cells) + " |")
    return "\n".join(lines)


def bar_text(bar: float) -> str:
    """A bar as the verdict shows it: two decimals (1.00x), more only when the bar has them (0.975x)."""
    return f"{bar:.2f}x" if round(bar, 2) == bar else f"{bar:g}x"


def bars(
    rows: list[dict],
    min_speedup_vs_sdpa: float | None = None,
    min_speedup_vs_fastest: float | None = None,
    max_memory_ratio: float | None = None,
    min_bf16_matmul_fraction: float | None = None,
    min_bf16_speedup: float | None = None,
) -> list[str]:
    """The verdict on our model, per config/mode/precision/batch, against the bars given (None: not judged): speed
    ratio to transformers SDPA >= `min_speedup_vs_sdpa`, to the fastest of transformers eager and timm >=
    `min_speedup_vs_fastest` (where eager or timm was measured), peak memory ratio to transformers SDPA <=
    `max_memory_ratio`; for bf16 rows, model FLOP/s >= `min_bf16_matmul_fraction` of the bf16 matmul rate (where it
    was measured, not emulated) and speed >= `min_bf16_speedup` times the same model's in float32 (where float32 was
    measured). No bar, no lines."""
    lines = []
    for row in rows:
        if row["implementation"] != OURS or "ratio" not in row:
            continue
        checks = []
        if min_speedup_vs_sdpa is not None:
            checks.append(
                (
                    f"{row['ratio']:.3f}x transformers SDPA (bar {bar_text(min_speedup_vs_sdpa)})",
                    row["ratio"] >= min_speedup_vs_sdpa,
                )
            )
        if min_speedup_vs_fastest is not None and "ratio_to_fastest_peer" in row:
            text = f"{row['ratio_to_fastest_peer']:.3f}x fastest of eager/timm (bar {bar_text(min_speedup_vs_fastest)})"
            checks.append((text, row["ratio_to_fastest_peer"] >= min_speedup_vs_fastest))
        if max_memory_ratio is not None and "memory_ratio" not in row:
            checks.append(
                (f"memory not measured: transformers' peak was 0 MB (bar <= {bar_text(max_memory_ratio)})", False)
            )
        elif max_memory_ratio is not None:
            checks.append(
                (
                    f"memory {row['memory_ratio']:.3f}x (bar <= {bar_text(max_memory_ratio)})",
                    row["memory_ratio"] <= max_memory_ratio,
                )
            )
        bf16 = DTYPE_OF[row.get("precision", "float32")] == torch.bfloat16
        if min_bf16_matmul_fraction is not None and bf16 and "matmul_fraction" in row:
            text = f"{row['matmul_fraction']:.1%} of the bf16 matmul rate (bar {min_bf16_matmul_fraction:.0%})"
            checks.append((text, row["matmul_fraction"] >= min_bf16_matmul_fraction))
        if min_bf16_speedup is not None and bf16 and "ratio_to_float32" in row:
            text = f"{row['ratio_to_float32']:.3f}x float32 (bar {bar_text(min_bf16_speedup)})"
            checks.append((text, row["ratio_to_float32"] >= min_bf16_speedup))
        if not checks:
            continue
        verdict = "met" if all(ok for _, ok in checks) else "NOT met"
        lines.append(
            f"{row['config']} {row['mode']} {row.get('precision', 'float32')} batch {row['batch']}: "
            + ", ".join(t for t, _ in checks)
            + f": {verdict}"
        )
    return lines


def machine_name() -> str:
    """The CPU's model name (Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags_text(flags: list[str] | None) -> str:
    """Which of MATRIX_FLAGS the CPU has and which it lacks, e.g. "flags avx2 avx512_bf16; without amx_tile"."""
    if flags is None:
        return "flags unknown: no /proc/cpuinfo"
    has = [flag for flag in MATRIX_FLAGS if flag in flags]
    lacks = [flag for flag in MATRIX_FLAGS if flag not in flags]
    return f"flags {' '.join(has) or 'none of ' + ' '.join(MATRIX_FLAGS)}" + (
        f"; without {' '.join(lacks)}" if has and lacks else ""
    )


def share(row: dict) -> str:
    """The share-of-peak cell: the model's FLOP/s as a share of the matmul rate; 'unmeasured' where it is above
    100% (the matrix product reached no peak); empty where there is no rate to share."""
    if "matmul_fraction_over_peak" in row:
        return "unmeasured (model above the product's rate)"
    return f"{row['matmul_fraction']:.0%}" if "matmul_fraction" in row else ""


def machine_header(args, matmul_rates: dict[str, float], sizes: dict[str, int]) -> str:
    """The first line of a measurement's report: the machine, its matmul rates (`args.matmul_rates` holds those
    that the rows are set against) and how the run measured."""
    on_cuda = torch.cuda.is_available()
    rates = ", ".join(
        f"{name} {rate / 1e9:.1f} GFLOP/s ({sizes[name]}x{sizes[name]}"
        + (", emulated: no share of it is shown" if name not in args.matmul_rates else "")
        + ")"
        for name, rate in matmul_rates.items()
    )
    return (
        f"{machine_name()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{'CUDA ' + torch.cuda.get_device_name() if on_cuda else 'CPU'}"
        f"{'' if on_cuda else ' (' + cpu_flags_text(cpu_flags()) + ')'}, "
        f"matmul {rates}, "
        f"{'torch.compile (not timed), ' if args.compile else ''}"
        f"{args.rounds} rounds of {args.chunks} interleaved chunks of >= {args.chunk_seconds} s, "
        f"throughput from the fastest chunk of each round, ratios paired chunk by chunk; malloc "
        f"{'glibc defaults' if args.glibc_malloc_defaults else 'thresholds fixed (STEADY_MALLOC)'}"
    )


def end_to_end_header(args) -> str:
    """The first line of an end-to-end report."""
    return f"{machine_name()}, {os.cpu_count()} cores, torch {torch.__version__}, end to end, {args.rounds} rounds"
