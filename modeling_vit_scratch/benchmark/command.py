"""Speed and memory of vit_scratch against transformers' ViT (SDPA and eager) and timm, on identical configs.

    python scripts/benchmark.py                       # digits, digits-plain and tiny224: 5 rounds, inference, training
    python scripts/benchmark.py --configs digits-plain mnist28 tiny224 base224 --rounds 7 --json results.json
    python scripts/benchmark.py --configs base224 --modes inference --dtype bfloat16
    python scripts/benchmark.py --configs digits tiny224 --modes inference --int8   # float32, bf16 and int8 rows
    python scripts/benchmark.py --configs tiny224 --dtype float32 --implementations vit_scratch vit_scratch-compiled transformers-sdpa
    python scripts/benchmark.py --end_to_end configs/train_digits.json --rounds 3   # the data path's cost

(`python -m modeling_vit_scratch.benchmark.command` takes the same arguments.) `digits` is the model `make train`
trains, a conv stem before the transformer: transformers' ViT has no stem, so it is measured against timm;
`digits-plain` is the same transformer with plain patches, measured against every implementation.

Every measurement runs in its own subprocess (a fresh allocator, no warm caches shared between implementations). In
each round every implementation gets a fresh process; their timed chunks are interleaved (A B C D, D C B A, ...), so
a slow spell of the machine hits all of them. Each precision asked for (`--dtype`, float32 and bfloat16 by default)
is a variant of each implementation in the same rounds: float32; bf16 autocast (inference and training); and, for
inference, weights loaded in bf16 (`dtype=torch.bfloat16`); with `--int8`, also inference with int8 linear layers
(torchao, through `from_pretrained(..., quantization_config=TorchAoConfig(...))`). Reported: throughput (the
fastest chunk of a round; median and min-max over rounds); the median over rounds of each round's ratio to
transformers' ViT with SDPA (its default) in the same precision, for ours also to the fastest of transformers' eager
ViT and timm, and of each bf16 or int8 variant to the same implementation in float32, where a round's ratio pairs
each chunk with the reference's chunk timed next to it; the model's matrix-multiply FLOP/s (`forward_flops`) as a fraction of what a large matrix product
reaches in the same dtype on the same machine, measured at the start of the run (`--matmul_size`; on a CPU that
emulates bf16, a warning line, a smaller product and no share for its rows); then, for the bars given
(--min_speedup_vs_sdpa, --min_speedup_vs_fastest, --max_memory_ratio; none by default), whether ours meets them.
`torch.compile`: an implementation's name + `-compiled` (e.g. `vit_scratch-compiled`) is the same model compiled,
measured beside the others in the same rounds; `--compile` compiles every model (compiling is never timed). Needs
timm and transformers (`make install-timm` has both: run it with .venv-timm/bin/python); timm is imported only where
its rows are asked for. Memory: every variant of a round is alive at once, so measure one --dtype at a time where
memory is short (docs/performance.md has what each config takes). CPU figures are noisy: compare ratios from one
run, not numbers across runs.

`--end_to_end RECIPE ...` is another mode: the training command with each recipe, whole or for
`--end_to_end_steps` steps (its whole data path: decoding, augmentation, the image processor, evaluation and
checkpoints as the recipe asks), and the same steps of the same model alone (built from the run's saved config;
forward, loss, backward, AdamW on random inputs of the processor's shape, in a fresh process), in alternating order
over `--rounds`. It reports the Trainer's `train_runtime` plus the images processed once before it (the splits kept
in memory), the model's time and their ratio (median over rounds); `--max_end_to_end_ratio RATIO` judges it,
`--train_args ...` (last) passes arguments to the training command (e.g. `--bf16 true`; not those the benchmark
gives it itself, `end_to_end.py`'s `SET_BY_BENCHMARK`), checked as train checks them before any run. Threads as the
caller sets them (`make train` uses OMP_NUM_THREADS=1).
"""

import argparse
import importlib.util
import json
import sys
import time

import torch

from modeling_vit_scratch.common.commands import entry_point, when_interrupted
from modeling_vit_scratch.common.dtypes import dtype_name, parse_dtypes
from modeling_vit_scratch.common.folders import check_name_characters
from modeling_vit_scratch.common.numbers import Allowed, argument_type
from modeling_vit_scratch.common.secrets import RedactingArgumentParser, error_line, known_secrets, refuse_token_in_path
from modeling_vit_scratch.common.user_paths import user_path
from modeling_vit_scratch.training.arguments import command_secrets, mask_token_values
from modeling_vit_scratch.training.precision import slow_bf16_warning
from modeling_vit_scratch.training.recipes import shipped_recipe

from .end_to_end import check_train_args, end_to_end, end_to_end_bars, end_to_end_markdown, model_only_seconds
from .measure import benchmark, matmul_sizes, measure_matmul_rates, serve
from .models import (
    ALL_IMPLEMENTATIONS,
    BASELINE,
    CONFIGS,
    IMPLEMENTATIONS,
    MODES,
    check_packages,
    default_implementations,
    missing_install,
)
from .report import bars, end_to_end_header, machine_header, markdown
from .results_file import check_results_path, write_results
from .timing import matmul_flops

DEFAULT_CONFIGS = ["digits", "digits-plain", "tiny224"]
COUNT = Allowed(1, integer=True, example="5")
RATIO = Allowed(0, open_low=True, example="1.0")
# A smaller matrix product is bound by memory and call overhead, not by the machine's arithmetic: its rate is no peak
# to share (a model's FLOP/s would show as many times it)
MIN_MATMUL_SIZE = 1024
# What each number argument admits, checked by the parser (`argument_type`) before any measurement starts
BENCHMARK_LIMITS = {
    "end_to_end_steps": COUNT,
    "max_end_to_end_ratio": RATIO,
    "rounds": COUNT,
    "warmup": Allowed(0, integer=True, example="5"),
    "chunks": COUNT,
    "chunk_seconds": Allowed(0, example="1.0"),
    "steps": COUNT,
    "batch": Allowed(1, integer=True, example="32"),
    "matmul_size": Allowed(MIN_MATMUL_SIZE, integer=True, example="4096"),
    "peak_tflops": Allowed(0, open_low=True),
    "min_speedup_vs_sdpa": RATIO,
    "min_speedup_vs_fastest": RATIO,
    "max_memory_ratio": RATIO,
    "min_bf16_matmul_fraction": Allowed(0, 1, open_low=True, example="0.85"),
    "min_bf16_speedup": RATIO,
}


def recipe_path(text: str) -> str:
    """A recipe path as train reads it: `user_path`, or the recipe the package ships that it names
    (`train_digits`, `configs/train_digits.json` outside a checkout)."""
    path = user_path(text)
    shipped = shipped_recipe(path)
    return str(shipped) if shipped else path


def main_parser() -> argparse.ArgumentParser:
    parser = RedactingArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--worker", nargs=5, metavar=("IMPL", "CONFIG", "MODE", "PRECISION", "BATCH"), help=argparse.SUPPRESS
    )
    parser.add_argument("--matmul", nargs=2, metavar=("DTYPES", "SIZE"), help=argparse.SUPPRESS)
    parser.add_argument("--model_only", nargs=4, metavar=("FOLDER", "STEPS", "BATCH", "DTYPE"), help=argparse.SUPPRESS)
    end = parser.add_argument_group(
        "end to end",
        "the training command with a recipe (its whole data path, evaluation and checkpoints) against the same steps "
        "of its model alone; e.g. --end_to_end configs/train_digits.json --rounds 3",
    )
    end.add_argument(
        "--end_to_end", nargs="+", type=recipe_path, metavar="RECIPE", help="recipes to run end to end (this mode only)"
    )
    end.add_argument(
        "--end_to_end_steps",
        type=argument_type(BENCHMARK_LIMITS["end_to_end_steps"]),
        help="train only this many steps (default: the whole recipe; eval/save steps given as shares scale with it)",
    )
    end.add_argument(
        "--train_args",
        nargs=argparse.REMAINDER,
        default=[],
        help="last: arguments for the training command, e.g. --bf16 true",
    )
    end.add_argument(
        "--max_end_to_end_ratio",
        type=argument_type(BENCHMARK_LIMITS["max_end_to_end_ratio"]),
        metavar="RATIO",
        help="bar: most train_runtime / model alone, e.g. 1.25",
    )
    parser.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS, choices=list(CONFIGS))
    parser.add_argument(
        "--implementations",
        nargs="+",
        default=None,
        choices=ALL_IMPLEMENTATIONS,
        help="any name + '-compiled' is that model under torch.compile, measured in the same rounds as the others "
        f"(default: {' '.join(IMPLEMENTATIONS)}, those whose packages are installed)",
    )
    parser.add_argument("--rounds", type=argument_type(BENCHMARK_LIMITS["rounds"]), default=5)
    parser.add_argument(
        "--warmup", type=argument_type(BENCHMARK_LIMITS["warmup"]), default=5, help="untimed steps before timing"
    )
    parser.add_argument(
        "--chunks",
        type=argument_type(BENCHMARK_LIMITS["chunks"]),
        default=5,
        help="timed chunks per implementation and round (throughput: the fastest; ratios: all, paired)",
    )
    parser.add_argument(
        "--chunk_seconds",
        "--chunk-seconds",
        type=argument_type(BENCHMARK_LIMITS["chunk_seconds"]),
        default=1.0,
        help="least duration of a timed chunk",
    )
    parser.add_argument(
        "--steps",
        type=argument_type(BENCHMARK_LIMITS["steps"]),
        default=3,
        help="least number of steps in a timed chunk",
    )
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument(
        "--batch",
        type=argument_type(BENCHMARK_LIMITS["batch"]),
        nargs="+",
        help="inference batch sizes (default: each config's own)",
    )
    parser.add_argument(
        "--dtype",
        default="float32,bfloat16",
        help="comma-separated: float32 measures float32; bfloat16 bf16 autocast and (inference) bf16 weights",
    )
    parser.add_argument(
        "--int8",
        action="store_true",
        help="also measure inference with int8 linear layers (torchao's dynamic int8 activations and int8 weights, "
        "loaded through from_pretrained's quantization_config; needs the int8 extra)",
    )
    parser.add_argument(
        "--matmul_size",
        type=argument_type(BENCHMARK_LIMITS["matmul_size"]),
        default=4096,
        help="side of the square matrix product that measures each dtype's matmul rate at the start (at least "
        f"{MIN_MATMUL_SIZE}: a smaller one measures memory and overhead, not the machine's peak)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile every model (on CPU, inference with inductor's weight freezing); compiling is not timed",
    )
    parser.add_argument(
        "--glibc_malloc_defaults",
        "--glibc-malloc-defaults",
        action="store_true",
        help="workers keep glibc's dynamic malloc thresholds (noisier on CPU, see STEADY_MALLOC)",
    )
    parser.add_argument(
        "--peak_tflops",
        "--peak-tflops",
        type=argument_type(BENCHMARK_LIMITS["peak_tflops"]),
        help="the GPU's peak dense bf16 TFLOP/s, for MFU",
    )
    judged = parser.add_argument_group(
        "bars",
        "judge our model against these (a verdict line per config, mode, precision and batch); none given: no verdict",
    )
    judged.add_argument(
        "--min_speedup_vs_sdpa",
        type=argument_type(BENCHMARK_LIMITS["min_speedup_vs_sdpa"]),
        metavar="RATIO",
        help="least speed ratio of ours to transformers' ViT with SDPA, e.g. 1.0",
    )
    judged.add_argument(
        "--min_speedup_vs_fastest",
        type=argument_type(BENCHMARK_LIMITS["min_speedup_vs_fastest"]),
        metavar="RATIO",
        help="least speed ratio of ours to the fastest of transformers eager and timm, e.g. 0.95",
    )
    judged.add_argument(
        "--max_memory_ratio",
        type=argument_type(BENCHMARK_LIMITS["max_memory_ratio"]),
        metavar="RATIO",
        help="most peak memory of ours relative to transformers' ViT with SDPA, e.g. 1.05",
    )
    judged.add_argument(
        "--min_bf16_matmul_fraction",
        type=argument_type(BENCHMARK_LIMITS["min_bf16_matmul_fraction"]),
        metavar="FRACTION",
        help="least share of the bf16 matmul rate that ours reaches in bf16 rows (model FLOP/s), e.g. 0.85",
    )
    judged.add_argument(
        "--min_bf16_speedup",
        type=argument_type(BENCHMARK_LIMITS["min_bf16_speedup"]),
        metavar="RATIO",
        help="least speed ratio of ours in bf16 to ours in float32 (with --dtype float32,bfloat16), e.g. 2.5",
    )
    parser.add_argument("--json", default="benchmark_results.json", type=user_path, help="where to write every sample")
    return parser


# Arguments of the end-to-end mode, which the other mode would silently ignore: the argument -> the one it needs
APPLIES_ONLY_WITH = {
    "end_to_end_steps": "--end_to_end RECIPE",
    "max_end_to_end_ratio": "--end_to_end RECIPE",
    "train_args": "--end_to_end RECIPE",
}


def refuse_unused_companions(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """One line (argparse's) for an argument given without the one it works with (`APPLIES_ONLY_WITH`), as train
    refuses its own: it would be silently ignored."""
    for name, needs in APPLIES_ONLY_WITH.items():
        if getattr(args, name) not in (None, []) and not getattr(args, needs.split()[0][2:]):
            parser.error(
                f"--{name} is used only with {needs}, which is not given, so it would be ignored: add {needs}, or "
                f"drop --{name}"
            )


def benchmark_secrets(argv: list[str]) -> list[str]:
    """Every token the benchmark could print or write: those on its own command line, those of the training
    command it starts (`--train_args` with each `--end_to_end` recipe, as `train` collects its own) and those
    huggingface_hub knows. `main` masks them in all it prints, and `write_results` in the --json file."""
    forwarded = argv[argv.index("--train_args") + 1 :] if "--train_args" in argv else []
    try:
        recipes = main_parser().parse_known_args(argv)[0].end_to_end or []
    except SystemExit:  # a command line the parser refuses: main says so, with the secrets found so far
        recipes = []
    found = set(command_secrets(argv)) | set(command_secrets(forwarded))
    for recipe in recipes:
        found |= set(command_secrets([recipe, *forwarded]))
    return known_secrets(*found)


@entry_point(secrets=benchmark_secrets)
def main(argv: list[str]) -> None:
    parser = main_parser()
    args = parser.parse_args(argv)
    left_out = []
    if args.implementations is None:
        args.implementations, left_out = default_implementations()
    if args.worker or args.matmul or args.model_only:  # a process of the benchmark: its parent says what stopped
        when_interrupted(None)
    else:  # the results are written once, at the end, by a staged file moved into place
        when_interrupted(
            f"Interrupted: nothing was measured to the end, no results were written and --json {args.json} is as it "
            "was; run the same command again to measure."
        )
    if args.worker:  # a worker process of `measure_round`
        implementation, config_name, mode, precision, batch = args.worker
        serve(implementation, config_name, mode, precision, int(batch), args)
        return
    if args.matmul:  # a process of `measure_matmul_rates`
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        dtypes, size = parse_dtypes(args.matmul[0]), int(args.matmul[1])
        print(json.dumps({dtype_name(dtype): matmul_flops(dtype, device, size) for dtype in dtypes}))
        return
    if args.model_only:  # a process of `model_only_run`
        folder, steps, batch, precision = args.model_only
        print(json.dumps(dict(seconds=model_only_seconds(folder, int(steps), int(batch), precision == "bf16"))))
        return
    refuse_unused_companions(args, parser)
    try:
        refuse_token_in_path("--json", args.json)  # the rule of every output path: a token is no file name
        check_name_characters(args.json, "--json")  # and a name the writers and every printed line can hold
        args.json = check_results_path(args.json)  # before any measurement: a run never ends unable to write
        if args.end_to_end:  # the training command's arguments, as train reads them
            check_train_args(args.end_to_end, args.end_to_end_steps, args.train_args)
    except ValueError as error:
        sys.exit(error_line(error))
    if args.end_to_end:
        run_end_to_end(args, argv)
        return
    if BASELINE not in args.implementations:
        parser.error(
            f"--implementations must include the baseline {BASELINE} (what every ratio is measured against): add it"
        )
    try:
        args.dtypes = parse_dtypes(args.dtype)
    except ValueError as error:
        sys.exit(f"error: --dtype: {error}")
    if args.int8 and importlib.util.find_spec("torchao") is None:
        sys.exit("error: --int8 needs torchao, which is not installed: pip install 'vit-scratch[int8]'.")
    try:
        check_packages(args.implementations)
    except ValueError as error:
        sys.exit(error_line(error))
    if left_out:
        print(f"Not measured: {', '.join(left_out)}, whose package is not installed ({missing_install(left_out)}).")
    run_measurements(args, argv)


def run_measurements(args, argv: list[str]) -> None:
    """The matmul rates, then every config's rounds; prints the table and the verdicts and writes every sample to
    `args.json`."""
    slow_bf16 = slow_bf16_warning("cuda" if torch.cuda.is_available() else "cpu", "Give --dtype float32")
    if slow_bf16 and torch.bfloat16 in args.dtypes:
        print(f"warning: {slow_bf16} The bf16 rows will take long here.", file=sys.stderr)
    started = time.time()
    sizes = matmul_sizes(args.dtypes, args.matmul_size, bf16_emulated=slow_bf16 is not None)
    matmul_rates = measure_matmul_rates(sizes, args)
    # Emulated bf16 has no ceiling to share: its rate depends on the shapes (a ViT's small products run far above
    # the large product's rate there, docs/performance.md), so its rows get no fraction.
    args.matmul_rates = {name: rate for name, rate in matmul_rates.items() if not (slow_bf16 and name == "bfloat16")}
    rows = benchmark(args)
    header = machine_header(args, matmul_rates, sizes)
    verdicts = bars(
        rows,
        args.min_speedup_vs_sdpa,
        args.min_speedup_vs_fastest,
        args.max_memory_ratio,
        args.min_bf16_matmul_fraction,
        args.min_bf16_speedup,
    )
    verdict_block = "\n".join(verdicts) + "\n\n" if verdicts else ""  # no bars given: no verdict
    print(f"\n{header}\n\n{markdown(rows)}\n\n{verdict_block}({time.time() - started:.0f} s)")
    given = mask_token_values(argv)
    result = dict(machine=header, argv=given, matmul_flops=matmul_rates, matmul_sizes=sizes, rows=rows, bars=verdicts)
    write_results(args.json, result, benchmark_secrets(argv))


def run_end_to_end(args, argv: list[str]) -> None:
    """Every recipe's rounds; prints the table and the verdicts and writes every sample to `args.json`."""
    started = time.time()
    rows = end_to_end(args)
    verdicts = end_to_end_bars(rows, args.max_end_to_end_ratio)
    header = end_to_end_header(args)
    verdict_block = "\n".join(verdicts) + "\n\n" if verdicts else ""
    print(f"\n{header}\n\n{end_to_end_markdown(rows)}\n\n{verdict_block}({time.time() - started:.0f} s)")
    secrets = benchmark_secrets(argv)
    write_results(args.json, dict(machine=header, argv=mask_token_values(argv), rows=rows, bars=verdicts), secrets)


if __name__ == "__main__":  # python -m modeling_vit_scratch.benchmark.command: as `vit-scratch benchmark` runs it
    from vit_scratch_command import run

    run("modeling_vit_scratch.benchmark.command")
