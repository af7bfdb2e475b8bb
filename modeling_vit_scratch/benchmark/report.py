"""What the rounds' samples come to: medians and ratios paired chunk by chunk (`summarise`), the markdown tables, the
verdicts on the bars given, and the header that names the machine."""

import os
import platform
import statistics

import torch

from ..training.precision import cpu_flags
from .models import BASELINE, DTYPE_OF, OURS, PEERS

# The CPU flags that decide which precision and attention kernel is fast (docs/performance.md)
MATRIX_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")


def speed_ratio(sample: dict, reference: list[float]) -> float:
    """How many times faster than the reference one round was: the median over chunks of the reference's seconds
    over the sample's, each chunk against the reference's chunk of the same index, timed next to it."""
    return statistics.median(theirs / ours for ours, theirs in zip(sample["chunk_seconds"], reference))


def summarise(samples: list[dict], by_implementation: dict[str, list[dict]], references: dict | None = None) -> dict:
    """One implementation's medians over rounds, and its ratios (medians over rounds of `speed_ratio`) to
    transformers' SDPA and the fastest peer (`by_implementation`: every implementation in the same precision) and to
    each of `references` given samples (e.g. {"ratio_to_float32": the same model's samples in float32})."""
    median = lambda key, of=samples: statistics.median(sample[key] for sample in of)
    values = [sample["images_per_second"] for sample in samples]
    summary = dict(median=statistics.median(values), min=min(values), max=max(values))
    summary.update(milliseconds_per_batch=median("milliseconds_per_batch"), peak_memory_mb=median("peak_memory_mb"))
    baseline = by_implementation.get(BASELINE)
    if baseline:
        summary["ratio"] = statistics.median(speed_ratio(s, b["chunk_seconds"]) for s, b in zip(samples, baseline))
        # a baseline whose peak did not rise above its tiny warm-up model's (a tiny config) gives no memory ratio
        memory = [s["peak_memory_mb"] / b["peak_memory_mb"] for s, b in zip(samples, baseline) if b["peak_memory_mb"]]
        if memory:
            summary["memory_ratio"] = statistics.median(memory)
    peers = [by_implementation[name] for name in PEERS if name in by_implementation]
    if peers:  # chunk by chunk, the fastest of the peers
        fastest = [[min(chunk) for chunk in zip(*(peer[index]["chunk_seconds"] for peer in peers))] for index in
                   range(len(samples))]  # fmt: skip
        summary["ratio_to_fastest_peer"] = statistics.median(speed_ratio(s, f) for s, f in zip(samples, fastest))
    for key, reference in (references or {}).items():
        if reference:
            summary[key] = statistics.median(speed_ratio(s, r["chunk_seconds"]) for s, r in zip(samples, reference))
    for extra in ("achieved_tflops", "mfu"):
        if samples[0].get(extra) is not None:
            summary[extra] = median(extra)
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
        share = "unmeasured (model above the product's rate)" if "matmul_fraction_over_peak" in row else share
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


def bars(rows: list[dict], args) -> list[str]:
    """The verdict on each row of ours against the bars given (None: not judged; no bar, no line): speed ratio to
    transformers' SDPA and to the fastest of eager and timm, memory ratio to SDPA; in bf16 rows, the share of the
    bf16 matmul rate (where measured, not emulated) and the speed-up over float32."""
    lines = []
    for row in rows:
        if row["implementation"] != OURS or "ratio" not in row:
            continue
        bf16, checks = DTYPE_OF[row["precision"]] == torch.bfloat16, []
        if args.min_speedup_vs_sdpa is not None:
            bar = args.min_speedup_vs_sdpa
            checks.append((f"{row['ratio']:.3f}x transformers SDPA (bar {bar_text(bar)})", row["ratio"] >= bar))
        if args.min_speedup_vs_fastest is not None and "ratio_to_fastest_peer" in row:
            value, bar = row["ratio_to_fastest_peer"], args.min_speedup_vs_fastest
            checks.append((f"{value:.3f}x fastest of eager/timm (bar {bar_text(bar)})", value >= bar))
        if args.max_memory_ratio is not None:
            bar = args.max_memory_ratio
            if "memory_ratio" in row:
                checks.append(
                    (f"memory {row['memory_ratio']:.3f}x (bar <= {bar_text(bar)})", row["memory_ratio"] <= bar)
                )
            else:
                checks.append((f"memory not measured: transformers' peak was 0 MB (bar <= {bar_text(bar)})", False))
        if args.min_bf16_matmul_fraction is not None and bf16 and "matmul_fraction" in row:
            value, bar = row["matmul_fraction"], args.min_bf16_matmul_fraction
            checks.append((f"{value:.1%} of the bf16 matmul rate (bar {bar:.0%})", value >= bar))
        if args.min_bf16_speedup is not None and bf16 and "ratio_to_float32" in row:
            value, bar = row["ratio_to_float32"], args.min_bf16_speedup
            checks.append((f"{value:.3f}x float32 (bar {bar_text(bar)})", value >= bar))
        if checks:
            verdict = "met" if all(ok for _, ok in checks) else "NOT met"
            what = f"{row['config']} {row['mode']} {row['precision']} batch {row['batch']}"
            lines.append(f"{what}: {', '.join(text for text, _ in checks)}: {verdict}")
    return lines


def machine_name() -> str:
    """The CPU's model name (Linux), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def machine() -> str:
    """The first line of a report: the machine, the CPU flags it has and lacks among `MATRIX_FLAGS`, torch."""
    flags = cpu_flags()
    has = [flag for flag in MATRIX_FLAGS if flag in (flags or [])]
    lacks = [flag for flag in MATRIX_FLAGS if flag not in has]
    flagged = f"flags {' '.join(has) or 'none of ' + ' '.join(MATRIX_FLAGS)}" + (
        f"; without {' '.join(lacks)}" if has and lacks else ""
    )
    flagged = "flags unknown: no /proc/cpuinfo" if flags is None else flagged
    where = f"CUDA {torch.cuda.get_device_name()}" if torch.cuda.is_available() else f"CPU ({flagged})"
    return f"{machine_name()}, {os.cpu_count()} cores, torch {torch.__version__}, {where}"


def machine_header(args, rates: dict[str, float], sizes: dict[str, int]) -> str:
    """`machine`, the matmul rates (those the rows are set against: `args.matmul_rates`) and how the run measured."""
    shown_rates = ", ".join(
        f"{name} {rate / 1e9:.1f} GFLOP/s ({sizes[name]}x{sizes[name]}"
        + ("" if name in args.matmul_rates else ", emulated: no share of it is shown")
        + ")"
        for name, rate in rates.items()
    )
    return (
        f"{machine()}, matmul {shown_rates}, {'torch.compile (not timed), ' * args.compile}"
        f"{args.rounds} rounds of {args.chunks} interleaved chunks of >= {args.chunk_seconds} s, throughput from the "
        "fastest chunk of each round, ratios paired chunk by chunk; malloc "
        f"{'glibc defaults' if args.glibc_malloc_defaults else 'thresholds fixed (STEADY_MALLOC)'}"
    )


def end_to_end_markdown(rows: list[dict]) -> str:
    header = [
        "recipe",
        "extra arguments",
        "steps",
        "batch",
        "train_runtime + data preparation s",
        "model alone s",
        "ratio",
    ]
    cells = [
        [row["recipe"], row["train_args"], row["steps"], row["batch"], f"{row['end_to_end_seconds']:.1f}"]
        + [f"{row['model_only_seconds']:.1f}", f"{row['ratio']:.2f}x"]
        for row in rows
    ]
    return table(header, cells)


def end_to_end_bars(rows: list[dict], bar: float | None) -> list[str]:
    """The verdict per recipe on `--max_end_to_end_ratio` (None: no verdict)."""
    return [
        f"{row['recipe']} {row['train_args']}".strip()
        + f": end to end {row['ratio']:.3f}x the model alone (bar <= {bar_text(bar)}): "
        + ("met" if row["ratio"] <= bar else "NOT met")
        for row in rows
        if bar is not None
    ]
