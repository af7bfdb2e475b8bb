"""Speed and memory of vit_scratch against transformers' ViT (SDPA and eager) and timm on identical configs; or, with
`--end_to_end RECIPE`, a training run against its model alone. The method and the tables: docs/performance.md.

    python scripts/benchmark.py --configs digits tiny224 --rounds 5 --json results.json --min_speedup_vs_sdpa 1.0
    python scripts/benchmark.py --configs base224 --modes inference --dtype bfloat16 --int8
    python scripts/benchmark.py --configs tiny224 --implementations vit_scratch vit_scratch-compiled transformers-sdpa
    python scripts/benchmark.py --configs mnist28 tiny224 --modes train pretrain --dtype float32
    python scripts/benchmark.py --end_to_end configs/train_digits.json --rounds 3 --max_end_to_end_ratio 1.25

Each round measures every implementation and precision in a fresh process, their timed chunks interleaved; a ratio
pairs each chunk with the reference's chunk timed next to it. Every variant of a round is alive at once: measure one
--dtype at a time where memory is short. A bar not met ends the command with exit status 1. `--json FILE` gets every
sample, written whole at the end (a FILE already there is replaced only if it is an earlier result).
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

from ..errors import UserError, command, on_interrupt
from ..secrets import redact, shown
from ..sources import read_json
from ..training.recipes import shipped_recipe
from .end_to_end import end_to_end
from .measure import benchmark, bf16_emulated, once
from .models import ALL_IMPLEMENTATIONS, BASELINE, CONFIGS, IMPLEMENTATIONS, MODES
from .report import JUDGED, bars, end_to_end_report, machine, machine_header, markdown

DTYPES = ("float32", "bfloat16")
EMULATED_BF16_MATMUL_SIZE = 1024  # an emulated bf16 product's rate is that of larger ones, which take minutes
RESULT_KEYS = {"machine", "argv", "rows", "bars"}  # in every result the benchmark writes
TIMM = "pip install 'vit-scratch[timm]'"


def count(text: str) -> int:
    if int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number >= 1")
    return int(text)


def dtypes(text: str) -> list[str]:
    if not text or set(names := text.split(",")) - set(DTYPES):
        raise argparse.ArgumentTypeError(f"{text!r}: give float32, bfloat16 or both, comma-separated")
    return list(dict.fromkeys(names))


def main_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    add = parser.add_argument
    add("--configs", nargs="+", default=["digits", "digits-plain", "tiny224"], choices=CONFIGS, metavar="CONFIG",
        help=f"of {', '.join(CONFIGS)}")  # fmt: skip
    names = ", ".join(ALL_IMPLEMENTATIONS)
    add("--implementations", nargs="+", choices=ALL_IMPLEMENTATIONS, metavar="NAME",
        help=f"of {names} (default: {' '.join(IMPLEMENTATIONS)}, timm where installed)")  # fmt: skip
    add("--modes", nargs="+", default=["inference", "train"], choices=MODES,
        help="pretrain: a training step of the masked autoencoder (default: inference train)")  # fmt: skip
    add("--dtype", type=dtypes, default=list(DTYPES), help="float32, bfloat16 or both (the default), comma-separated")
    add("--int8", action="store_true", help="also inference with int8 linear layers (torchao: the int8 extra)")
    add("--batch", type=count, nargs="+", help="inference batch sizes (default: each config's own)")
    add("--rounds", type=count, default=5)
    add("--chunks", type=count, default=5, help="timed chunks per variant and round")
    add("--chunk_seconds", "--chunk-seconds", type=float, default=1.0, help="least duration of a timed chunk")
    add("--steps", type=count, default=3, help="least number of steps in a timed chunk")
    add("--warmup", type=int, default=5, help="untimed steps before timing")
    add("--matmul_size", type=count, default=4096, help="side of the product that measures each dtype's matmul rate")
    add("--compile", action="store_true", help="torch.compile every model (as NAME-compiled does one)")
    add("--glibc_malloc_defaults", "--glibc-malloc-defaults", action="store_true", help="malloc's dynamic thresholds")
    add("--peak_tflops", "--peak-tflops", type=float, help="the GPU's peak dense bf16 TFLOP/s, for MFU")
    add("--json", type=Path, default=Path("benchmark_results.json"), help="where to write every sample")
    for name in (*JUDGED, "max_end_to_end_ratio"):  # bars: verdict lines, and exit status 1 when one is NOT met
        add(f"--{name}", type=float, metavar="RATIO", help="a bar (docs/performance.md); none by default")
    add("--end_to_end", nargs="+", type=lambda text: str(shipped_recipe(text) or text), metavar="RECIPE")
    add("--end_to_end_steps", type=count, help="train this many steps (default: the whole recipe)")
    add("--train_args", nargs=argparse.REMAINDER, default=[], help="last: arguments of the training command")
    return parser


@contextmanager
def results_file(path: Path):
    """A staged file beside `path`, made before any measurement (a run never ends unable to write), moved over `path`
    when the block ends normally, else removed. A `path` already there is replaced only if it holds a result."""
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
    """Those named, or every one whose package is installed; refused: a run without the baseline or a package."""
    has_timm, named = importlib.util.find_spec("timm") is not None, args.implementations or []
    if not has_timm and any(name.startswith("timm") for name in named):
        raise UserError(f"--implementations timm needs the timm package: install it with {TIMM}")
    if named and BASELINE not in named:
        raise UserError(f"--implementations must include the baseline {BASELINE} (every ratio is against it): add it")
    if args.int8 and importlib.util.find_spec("torchao") is None:
        raise UserError("--int8 needs torchao, which is not installed: pip install 'vit-scratch[int8]'")
    if not named and not has_timm:
        print(f"Not measured: timm, which is not installed ({TIMM}).")
    return named or [name for name in IMPLEMENTATIONS if has_timm or name != "timm"]


def run_measurements(args, argv: list[str]) -> tuple[dict, str]:
    """The matmul rates, then every config's rounds: the result, its header, table and verdicts."""
    args.implementations = implementations(args)
    emulated = "bfloat16" in args.dtype and bf16_emulated()
    if emulated:
        print("warning: this CPU has no bf16 units and torch emulates bf16: the bf16 rows will take long; give "
              "--dtype float32 to measure float32 alone.", file=sys.stderr)  # fmt: skip
    sizes = {name: args.matmul_size for name in args.dtype}
    sizes.update({"bfloat16": min(args.matmul_size, EMULATED_BF16_MATMUL_SIZE)} if emulated else {})
    rates = once("the matrix products", ("matmul", sizes), args)
    # emulated bf16 has no ceiling to share: its rate depends on the shapes, so its rows get no share
    args.matmul_rates = {name: rate for name, rate in rates.items() if not (emulated and name == "bfloat16")}
    rows = benchmark(args)
    result = dict(machine=machine_header(args, rates, sizes), argv=argv, matmul_flops=rates, matmul_sizes=sizes)
    return dict(result, rows=rows, bars=bars(rows, args)), markdown(rows)


def run_end_to_end(args, argv: list[str]) -> tuple[dict, str]:
    """Every recipe's rounds: the result and its table."""
    rows = end_to_end(args)
    text, verdicts = end_to_end_report(rows, args.max_end_to_end_ratio)
    return dict(machine=f"{machine()}, end to end, {args.rounds} rounds", argv=argv, rows=rows, bars=verdicts), text


@command
def main(argv: list[str]) -> None:
    args, started = main_parser().parse_args(argv), time.time()
    with results_file(args.json) as staged:
        on_interrupt(f"Interrupted: no results were written (--json {args.json} is as it was); run it again.")
        result, table = (run_end_to_end if args.end_to_end else run_measurements)(args, argv)
        staged.write_text(redact(json.dumps(result, indent=2)) + "\n")
    verdicts = "".join(f"{line}\n" for line in result["bars"]) + "\n" * bool(result["bars"])
    print(shown(f"\n{result['machine']}\n\n{table}\n\n{verdicts}({time.time() - started:.0f} s)", keep="\n"))
    if failed := [line for line in result["bars"] if line.endswith("NOT met")]:
        sys.exit(f"error: {len(failed)} of {len(result['bars'])} verdicts NOT met; every sample is in {args.json}")


if __name__ == "__main__":  # python -m modeling_vit_scratch.benchmark.command: as `vit-scratch benchmark` runs it
    from vit_scratch_command import run

    run("modeling_vit_scratch.benchmark.command")
