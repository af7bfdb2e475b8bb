"""The measurements' processes and rounds: every measurement runs in a worker process of its own (a fresh allocator,
no warm caches shared between implementations), started through the package (`python -m
modeling_vit_scratch.benchmark.command --worker ...`), so that it runs from an installed package as from a checkout.
In each round every variant (implementation and precision) gets a fresh process; their timed chunks are interleaved,
so that a slow spell of the machine hits all of them."""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from modeling_vit_scratch.common.children import child_env, module_command
from modeling_vit_scratch.common.dtypes import dtype_name

from .models import COMPILED, CONFIGS, DTYPE_OF, builds, modes_for, precisions_for
from .report import summarise
from .timing import Measurement

COMMAND_MODULE = "modeling_vit_scratch.benchmark.command"  # what the worker processes run, with a hidden flag
# The folder that holds this copy of the package: every process the benchmark starts imports the same copy.
IMPORT_ROOT = Path(__file__).resolve().parents[2]
# Where bf16 is emulated (a CPU without bf16 units, see `slow_bf16_warning`), a large bf16 product takes minutes, and
# the rate of a 1024^2 product is already that of larger ones (docs/performance.md).
EMULATED_BF16_MATMUL_SIZE = 1024
SETTLE_SECONDS = 0.2  # pause before each timed chunk
# With glibc malloc's dynamic thresholds, the same model measured in two fresh CPU processes can differ widely
# (docs/performance.md). Fixed thresholds, for every implementation alike, keep freed activations in the heap and
# narrow that spread; --glibc_malloc_defaults turns this off.
STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(2**31), "MALLOC_TRIM_THRESHOLD_": str(2**31)}


def package_command(*arguments: str) -> list[str]:
    """The command line of a process that runs the benchmark's command with `arguments`, through the package."""
    return module_command(COMMAND_MODULE, *arguments)  # dies with the benchmark, however it ends


def worker_environment(args) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(IMPORT_ROOT), **({} if args.glibc_malloc_defaults else STEADY_MALLOC)}
    return child_env(env)


def serve(implementation: str, config_name: str, mode: str, precision: str, batch: int, args) -> None:
    """Worker process: set up one Measurement, then answer the parent's requests on stdin, one JSON line each:
    "warm" (warm up and size the chunks), "chunk" (seconds per step of one timed chunk), "report" (memory)."""
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # whatever a library prints cannot garble the answers
    measurement = Measurement(
        implementation, config_name, mode, batch, precision, args.compile or implementation.endswith(COMPILED)
    )
    channel.write(json.dumps(dict(ready=True)) + "\n")
    for request in sys.stdin:
        request = request.strip()
        if request == "warm":
            measurement.warm_up(args.warmup, args.steps, args.chunk_seconds)
            answer = dict(steps_per_chunk=measurement.steps_per_chunk)
        elif request == "chunk":
            answer = dict(seconds_per_step=measurement.chunk())
        else:
            answer = measurement.report(float(request.split()[1]), args.peak_tflops)
        channel.write(json.dumps(answer) + "\n")


def matmul_sizes(dtypes: list[torch.dtype], size: int, bf16_emulated: bool) -> dict[str, int]:
    """The side of the square matrix product that measures each dtype's rate, by dtype name: `size`, but at most
    EMULATED_BF16_MATMUL_SIZE for bf16 where it is emulated."""
    return {
        dtype_name(dtype): min(size, EMULATED_BF16_MATMUL_SIZE) if bf16_emulated and dtype == torch.bfloat16 else size
        for dtype in dtypes
    }


def measure_matmul_rates(sizes: dict[str, int], args) -> dict[str, float]:
    """FLOP/s of a square matrix product of each dtype (by name) at its side in `sizes`, each in a fresh process
    set up as the workers."""
    rates = {}
    for name, size in sizes.items():
        command = package_command("--matmul", name, str(size))
        done = subprocess.run(command, check=False, capture_output=True, text=True, env=worker_environment(args))
        if done.returncode != 0:
            raise RuntimeError(f"The {name} matrix product failed:\n{done.stderr[-3000:]}")
        rates.update(json.loads(done.stdout.splitlines()[-1]))
    return rates


class Worker:
    """The parent's handle on a `serve` process."""

    def __init__(self, implementation: str, config_name: str, mode: str, precision: str, batch: int, args):
        command = package_command(
            "--worker",
            implementation,
            config_name,
            mode,
            precision,
            str(batch),
            "--steps",
            str(args.steps),
            "--warmup",
            str(args.warmup),
            "--chunk_seconds",
            str(args.chunk_seconds),
        )
        command += ["--peak_tflops", str(args.peak_tflops)] if args.peak_tflops else []
        command += ["--compile"] if args.compile else []
        self.name = f"{implementation} {config_name} {mode} {precision} batch {batch}"
        self.log = tempfile.TemporaryFile("w+")  # noqa: SIM115 (open for the worker's life; close() closes it)
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=worker_environment(args),
        )

    def ask(self, request: str | None = None) -> dict:
        if request is not None:
            self.process.stdin.write(request + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            self.process.wait()
            self.log.seek(0)
            raise RuntimeError(f"{self.name} failed (exit code {self.process.returncode}):\n{self.log.read()[-3000:]}")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()
        self.log.close()


def measure_round(
    variants: list[tuple[str, str]], config_name: str, mode: str, batch: int, args
) -> dict[tuple[str, str], dict]:
    """One round: a fresh process per variant (implementation, precision), all set up first; then timed chunks
    interleaved A B C D, D C B A, A B C D ..., each while the others wait, so that a slow spell of the machine hits
    all of them and no variant always goes first. Each result has every chunk's seconds per step, for ratios paired
    chunk by chunk, and its throughput is that of its fastest chunk (as timeit: other work only ever slows a chunk
    down)."""
    workers = {
        (implementation, precision): Worker(implementation, config_name, mode, precision, batch, args)
        for implementation, precision in variants
    }
    try:
        for worker in workers.values():
            worker.ask()  # ready
        for worker in workers.values():
            time.sleep(SETTLE_SECONDS)
            worker.ask("warm")
        chunks = {name: [] for name in workers}
        for chunk_index in range(args.chunks):
            order = list(workers) if chunk_index % 2 == 0 else list(reversed(workers))
            for name in order:
                time.sleep(SETTLE_SECONDS)  # the previous worker's idle threads stop spinning
                chunks[name].append(workers[name].ask("chunk")["seconds_per_step"])
        return {
            name: dict(worker.ask(f"report {min(chunks[name])}"), chunk_seconds=chunks[name])
            for name, worker in workers.items()
        }
    finally:
        for worker in workers.values():
            worker.close()


def benchmark(args) -> list[dict]:
    """Every config, mode and batch: rounds of every implementation in every precision, summarised row by row; each
    row's model FLOP/s also as a fraction of `args.matmul_rates` (FLOP/s by dtype name) for its dtype."""
    rows = []
    for config_name in args.configs:
        config = CONFIGS[config_name]
        for mode in modes_for(config, args):
            precisions = precisions_for(mode, args.dtypes, args.int8)
            implementations = [name for name in args.implementations if builds(name, config)]
            variants = [(name, precision) for precision in precisions for name in implementations]
            for batch in (args.batch or config["batch"]) if mode == "inference" else [config["train_batch"]]:
                samples = {variant: [] for variant in variants}
                for round_index in range(args.rounds):
                    for variant, result in measure_round(variants, config_name, mode, batch, args).items():
                        samples[variant].append(result)
                    print(
                        f"  {config_name} {mode} batch {batch}: round {round_index + 1}/{args.rounds}", file=sys.stderr
                    )
                for implementation, precision in variants:
                    same_precision = {name: samples[(name, precision)] for name in implementations}
                    # the same model in float32, and without torch.compile
                    float32 = samples.get((implementation, "float32")) if precision != "float32" else None
                    uncompiled = samples.get((implementation.removesuffix(COMPILED), precision))
                    references = dict(
                        ratio_to_float32=float32,
                        ratio_to_uncompiled=uncompiled if implementation.endswith(COMPILED) else None,
                    )
                    summary = summarise(samples[(implementation, precision)], same_precision, references)
                    rate = args.matmul_rates.get(dtype_name(DTYPE_OF[precision]))
                    if rate:  # above 1 the product measured no peak: the share is not shown (report: unmeasured)
                        fraction = summary["achieved_tflops"] * 1e12 / rate
                        summary["matmul_fraction" if fraction <= 1 else "matmul_fraction_over_peak"] = fraction
                    rows.append(
                        dict(
                            config=config_name,
                            mode=mode,
                            precision=precision,
                            batch=batch,
                            implementation=implementation,
                            **summary,
                            samples=samples[(implementation, precision)],
                        )
                    )
    return rows
