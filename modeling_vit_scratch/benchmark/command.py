"""Speed and memory of vit_scratch against transformers' ViT (SDPA and eager) and timm, on identical configs; or,
with `--end_to_end RECIPE`, a training run against its model alone. The method and the measured tables:
docs/performance.md.

    python scripts/benchmark.py                       # digits, digits-plain and tiny224: inference and training
    python scripts/benchmark.py --configs base224 --modes inference --dtype bfloat16 --json results.json
    python scripts/benchmark.py --configs digits tiny224 --modes inference --int8   # float32, bf16 and int8 rows
    python scripts/benchmark.py --configs tiny224 --implementations vit_scratch vit_scratch-compiled transformers-sdpa
    python scripts/benchmark.py --end_to_end configs/train_digits.json --rounds 3 --max_end_to_end_ratio 1.25

Each round measures every implementation and precision in a fresh process, their timed chunks interleaved; ratios
pair each chunk with the reference's chunk timed next to it. An implementation's name + `-compiled` is that model
under torch.compile. Every variant of a round is alive at once: measure one --dtype at a time where memory is short.
Bars (none by default) give a verdict line per row of ours; the exit status is 1 when one is NOT met. `--json FILE`
gets every sample, written whole at the end (a FILE already there is replaced only if it is an earlier result).
"""

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from ..errors import UserError, command, on_interrupt
from ..secrets import redact, shown
from ..sources import read_json
from ..training.recipes import shipped_recipe
from .end_to_end import end_to_end
from .measure import benchmark, bf16_emulated, once
from .models import ALL_IMPLEMENTATIONS, BASELINE, CONFIGS, IMPLEMENTATIONS, MODES
from .report import bars, end_to_end_bars, end_to_end_markdown, machine, machine_header, markdown

DTYPES = ("float32", "bfloat16")
EMULATED_BF16_MATMUL_SIZE = 1024  # an emulated bf16 product's rate is that of larger ones, which take minutes
RESULT_KEYS = {"machine", "argv", "rows", "bars"}  # in every result the benchmark writes
TIMM = "pip install 'vit-scratch[timm]'"


def count(text: str) -> int:
    if int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number >= 1")
    return int(text)


def dtypes(text: str) -> list[str]:
    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if not names or set(names) - set(DTYPES):
        raise argparse.ArgumentTypeError(f"{text!r}: give float32, bfloat16 or both, comma-separated")
    return names


def recipe(text: str) -> str:
    """A recipe as train reads it: the file, or the recipe the package ships that it names (`train_digits`)."""
    return str(shipped_recipe(text) or text)


def main_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    add = parser.add_argument
    add("--configs", nargs="+", default=["digits", "digits-plain", "tiny224"], choices=list(CONFIGS))
    add("--implementations", nargs="+", choices=ALL_IMPLEMENTATIONS, help="default: " + " ".join(IMPLEMENTATIONS))
    add("--modes", nargs="+", default=list(MODES), choices=MODES)
    add("--dtype", type=dtypes, default=list(DTYPES), help="comma-separated: float32,bfloat16 (the default)")
    add("--int8", action="store_true", help="also inference with int8 linear layers (torchao: the int8 extra)")
    add("--batch", type=count, nargs="+", help="inference batch sizes (default: each config's own)")
    add("--rounds", type=count, default=5)
    add("--chunks", type=count, default=5, help="timed chunks per variant and round")
    add("--chunk_seconds", "--chunk-seconds", type=float, default=1.0, help="least duration of a timed chunk")
    add("--steps", type=count, default=3, help="least number of steps in a timed chunk")
    add("--warmup", type=int, default=5, help="untimed steps before timing")
    add("--matmul_size", type=count, default=4096, help="side of the square product that measures each dtype's rate")
    add("--compile", action="store_true", help="torch.compile every model (compiling is not timed)")
    add("--glibc_malloc_defaults", "--glibc-malloc-defaults", action="store_true", help="keep malloc's dynamic "
        "thresholds in the measuring processes (noisier on a CPU)")  # fmt: skip
    add("--peak_tflops", "--peak-tflops", type=float, help="the GPU's peak dense bf16 TFLOP/s, for MFU")
    add("--json", type=Path, default=Path("benchmark_results.json"), help="where to write every sample")
    judged = parser.add_argument_group("bars", "a verdict line per row of ours; exit status 1 if one is NOT met")
    for name, meaning in (
        ("min_speedup_vs_sdpa", "least speed ratio of ours to transformers' ViT with SDPA, e.g. 1.0"),
        ("min_speedup_vs_fastest", "least speed ratio of ours to the fastest of transformers eager and timm"),
        ("max_memory_ratio", "most peak memory of ours relative to transformers' SDPA, e.g. 1.05"),
        ("min_bf16_matmul_fraction", "least share of the bf16 matmul rate of ours in bf16 rows, e.g. 0.85"),
        ("min_bf16_speedup", "least speed ratio of ours in bf16 to ours in float32, e.g. 2.5"),
        ("max_end_to_end_ratio", "most train_runtime over the model alone (--end_to_end), e.g. 1.25"),
    ):
        judged.add_argument(f"--{name}", type=float, metavar="RATIO", help=meaning)
    end = parser.add_argument_group("end to end", "the training command with a recipe against its model alone")
    end.add_argument("--end_to_end", nargs="+", type=recipe, metavar="RECIPE", help="recipes to run end to end")
    end.add_argument("--end_to_end_steps", type=count, help="train this many steps (default: the whole recipe)")
    end.add_argument("--train_args", nargs=argparse.REMAINDER, default=[], help="last: the training command's")
    return parser


@contextmanager
def results_file(path: Path):
    """A staged file beside `path`, made before any measurement (a run never ends unable to write), moved over `path`
    if the block ends normally, removed otherwise: `path` is the earlier file or the new one, whole. A `path` already
    there is replaced only if it holds a result of the benchmark (a user's own file never is)."""
    if os.path.lexists(path):
        try:
            earlier = read_json(path) if path.is_file() else {}
        except (UserError, OSError):
            earlier = {}
        if not RESULT_KEYS <= earlier.keys():
            raise UserError(f"--json {shown(path)} is there and holds no benchmark result: give a new file name")
    descriptor, staged = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    os.close(descriptor)
    try:
        yield Path(staged)
        os.chmod(staged, 0o644)  # mkstemp's file is private; a result is meant to be shared
        os.replace(staged, path)
    finally:
        Path(staged).unlink(missing_ok=True)


def implementations(args) -> list[str]:
    """The implementations to measure: those named, or every one whose package is installed (the others said)."""
    has_timm = importlib.util.find_spec("timm") is not None
    if args.implementations and not has_timm and any(name.startswith("timm") for name in args.implementations):
        raise UserError(f"--implementations timm needs the timm package: install it with {TIMM}")
    if args.implementations and BASELINE not in args.implementations:
        raise UserError(f"--implementations must include the baseline {BASELINE} (every ratio is against it): add it")
    if args.int8 and importlib.util.find_spec("torchao") is None:
        raise UserError("--int8 needs torchao, which is not installed: pip install 'vit-scratch[int8]'")
    if not args.implementations and not has_timm:
        print(f"Not measured: timm, which is not installed ({TIMM}).")
    return args.implementations or [name for name in IMPLEMENTATIONS if has_timm or name != "timm"]


def run_measurements(args, argv: list[str]) -> dict:
    """The matmul rates, then every config's rounds; prints the table and the verdicts; returns the result."""
    args.implementations = implementations(args)
    emulated = bf16_emulated() and "bfloat16" in args.dtype
    if emulated:
        print("warning: this CPU has no bf16 units and torch emulates bf16: the bf16 rows will take long; give "
              "--dtype float32 to measure float32 alone.", file=sys.stderr)  # fmt: skip
    started = time.time()
    sizes = {name: args.matmul_size for name in args.dtype}
    sizes.update({"bfloat16": min(args.matmul_size, EMULATED_BF16_MATMUL_SIZE)} if emulated else {})
    rates = once("the matrix products", ("matmul", sizes), args)
    # emulated bf16 has no ceiling to share: its rate depends on the shapes, so its rows get no share
    args.matmul_rates = {name: rate for name, rate in rates.items() if not (emulated and name == "bfloat16")}
    args.dtypes = [getattr(torch, name) for name in args.dtype]
    rows = benchmark(args)
    header, verdicts = machine_header(args, rates, sizes), bars(rows, args)
    show(header, markdown(rows), verdicts, started)
    return dict(machine=header, argv=argv, matmul_flops=rates, matmul_sizes=sizes, rows=rows, bars=verdicts)


def run_end_to_end(args, argv: list[str]) -> dict:
    """Every recipe's rounds; prints the table and the verdicts; returns the result."""
    started = time.time()
    rows = end_to_end(args)
    header = f"{machine()}, end to end, {args.rounds} rounds"
    verdicts = end_to_end_bars(rows, args.max_end_to_end_ratio)
    show(header, end_to_end_markdown(rows), verdicts, started)
    return dict(machine=header, argv=argv, rows=rows, bars=verdicts)


def show(header: str, table: str, verdicts: list[str], started: float) -> None:
    block = "".join(f"{line}\n" for line in verdicts) + "\n" * bool(verdicts)
    print(shown(f"\n{header}\n\n{table}\n\n{block}({time.time() - started:.0f} s)", keep="\n"))


@command
def main(argv: list[str]) -> None:
    args = main_parser().parse_args(argv)
    with results_file(args.json) as staged:
        on_interrupt(f"Interrupted: no results were written (--json {args.json} is as it was); run it again.")
        result = (run_end_to_end if args.end_to_end else run_measurements)(args, argv)
        staged.write_text(redact(json.dumps(result, indent=2)) + "\n")
    failed = [line for line in result["bars"] if line.endswith("NOT met")]
    if failed:
        sys.exit(
            f"error: {len(failed)} of {len(result['bars'])} verdicts NOT met (above); the samples are in {args.json}"
        )


if __name__ == "__main__":  # python -m modeling_vit_scratch.benchmark.command: as `vit-scratch benchmark` runs it
    from vit_scratch_command import run

    run("modeling_vit_scratch.benchmark.command")
