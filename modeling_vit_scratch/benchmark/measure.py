"""The measurements and their rounds. Each measurement runs in a process of its own (`Worker`: this module with `-m`),
for the reasons docs/performance.md gives: peak memory on a CPU is a process's peak resident size, and a fresh
allocator (malloc's thresholds fixed) keeps one implementation's heap from slowing the next. A round's timed chunks
are interleaved, so that a slow spell of the machine hits every variant."""

import json
import math
import os
import resource
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import torch
from PIL import Image
from torch.nn.functional import cross_entropy
from transformers import AutoConfig, AutoImageProcessor, AutoModelForImageClassification

from ..errors import UserError
from ..training.precision import cpu_flags, synchronize, training_steps_seconds
from . import models
from .report import summarise

ROOT = Path(__file__).resolve().parents[2]  # the folder holding this copy of the package: every worker imports it
STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(2**31), "MALLOC_TRIM_THRESHOLD_": str(2**31)}
SETTLE_SECONDS = 0.2  # pause before each timed chunk: the previous worker's idle threads stop spinning
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# Peak dense bf16 FLOP/s of common GPUs, as their makers give it, for the MFU of bf16 rows (--peak_tflops: others)
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12, "RTX 4090": 165e12}


def bf16_emulated() -> bool:
    """Whether bf16 products run in a generic loop, dozens of times slower than float32: a CPU without bf16 units
    whose torch has no oneDNN bf16 kernel for it (docs/performance.md); False where torch cannot say."""
    flags = cpu_flags()
    if DEVICE.type != "cpu" or flags is None or {"avx512_bf16", "amx_bf16", "bf16"} & set(flags):
        return False
    return not getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)()


def peak_memory_bytes() -> int:
    if DEVICE.type == "cuda":
        return torch.cuda.max_memory_allocated(DEVICE)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def timed(step, steps: int) -> float:
    """Seconds per step over `steps` calls of `step`."""
    synchronize(DEVICE)
    started = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(DEVICE)
    return (time.perf_counter() - started) / steps


def matmul_flops(sizes: dict[str, int]) -> dict[str, float]:
    """FLOP/s of the fastest of 5 square products per dtype name, of side `sizes[name]`: the yardstick of a model's."""
    rates = {}
    for name, size in sizes.items():
        product = partial(torch.mm, *(torch.randn(size, size, device=DEVICE, dtype=getattr(torch, name)),) * 2)
        rates[name] = 2 * size**3 / min([timed(product, 1) for _ in range(6)][1:])  # the first warms up
    return rates


def model_only_seconds(folder: str, steps: int, batch: int, bf16: bool) -> float:
    """Seconds of `steps` training steps of a new model from `folder`'s config on inputs of its processor's shape."""
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(folder)
    pixels = AutoImageProcessor.from_pretrained(folder)(Image.new("RGB", (32, 32)), return_tensors="pt")
    images = torch.randn(batch, *pixels["pixel_values"].shape[1:])
    model = AutoModelForImageClassification.from_config(config).train()
    return training_steps_seconds(model, images, torch.randint(0, config.num_labels, (batch,)), steps, bf16)


def make_step(implementation: str, config: dict, mode: str, precision: str, batch: int, compiled: bool):
    """One step at `config`: inference, or forward, loss, backward and AdamW (`pretrain`: the masked autoencoder's
    own loss); under bf16 autocast where asked."""
    weights = torch.bfloat16 if precision == "bf16-weights" else None
    model = models.build(implementation, config, weights, mode)
    model = (models.to_int8(model) if precision == models.INT8 else model).to(DEVICE).train(mode != "inference")
    run = torch.compile(model) if compiled else model
    images = torch.randn(batch, config["num_channels"], config["image_size"], config["image_size"], dtype=weights)
    images, labels = images.to(DEVICE), torch.randint(0, models.NUM_LABELS, (batch,), device=DEVICE)
    autocast = torch.autocast(DEVICE.type, torch.bfloat16, enabled=precision == "bf16-autocast")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4) if mode != "inference" else None

    def step():
        if optimizer is None:
            with torch.inference_mode(), autocast:
                return run(images)
        with autocast:
            output = run(images)
            loss = output.loss if mode == "pretrain" else cross_entropy(getattr(output, "logits", output), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def serve(kind: str, *spec) -> None:
    """A worker process: "matmul" and "model_only" answer once; "measure" sets up one implementation, config, mode,
    precision and batch, then answers each request on stdin ("warm", "chunk", "report"); one JSON line per answer on
    the process's own stdout. On a CPU, memory is the peak resident size above that of one step of a tiny model of
    the same kind (compiled where this one is): library imports and lazy set-up do not count."""
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # whatever a library prints cannot garble the answers
    answer = lambda value: channel.write(json.dumps(value) + "\n")
    if kind != "measure":
        return answer(matmul_flops(*spec) if kind == "matmul" else model_only_seconds(*spec))
    torch.manual_seed(0)
    implementation, config_name, mode, precision, batch, compile_all = spec
    config, compiled = models.CONFIGS[config_name], compile_all or implementation.endswith(models.COMPILED)
    if compiled:  # CPU inference: weights frozen into the graph (constant folding, oneDNN prepacking)
        torch._inductor.config.freezing = mode == "inference" and DEVICE.type == "cpu"
    tiny = dict(config, image_size=2 * config["patch_size"] * models.stem_stride(config), num_hidden_layers=1)
    width = 8 * config["num_attention_heads"]  # the MLP as wide: a whole ratio, which Dinov2 needs
    make_step(implementation, dict(tiny, hidden_size=width, intermediate_size=width), mode, precision, 2, compiled)()
    baseline = peak_memory_bytes() if DEVICE.type == "cpu" else torch.cuda.reset_peak_memory_stats(DEVICE) or 0
    step, steps_per_chunk = make_step(implementation, config, mode, precision, batch, compiled), 1
    if compiled:
        step()  # compiles: never timed
    answer({})  # ready
    for request, *values in map(json.loads, sys.stdin):
        if request == "warm":  # untimed steps, which size a chunk: at least `steps` steps and `seconds` seconds
            warmup, steps, seconds = values
            steps_per_chunk = max(steps, math.ceil(seconds / max(timed(step, max(warmup, 1)), 1e-9)))
            answer(steps_per_chunk)
        elif request == "chunk":
            answer(timed(step, steps_per_chunk))
        else:  # throughput at the fastest chunk, model FLOP/s (a training step: 3 passes' worth), peak memory
            seconds, peak_tflops = values
            flops = models.forward_flops(config, mode) * (1 if mode == "inference" else 3) * batch / seconds
            result = dict(images_per_second=batch / seconds, milliseconds_per_batch=1000 * seconds)
            result.update(peak_memory_mb=(peak_memory_bytes() - baseline) / 2**20, steps_per_chunk=steps_per_chunk)
            if DEVICE.type == "cuda":
                name = torch.cuda.get_device_name(DEVICE)
                peak = 1e12 * (peak_tflops or 0) or next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), 0)
                result.update(mfu=flops / peak if peak and precision != "float32" else None)
            answer(dict(result, achieved_tflops=flops / 1e12, compiled=compiled))


def environment(args) -> dict[str, str]:
    """Of every process the benchmark starts: this copy of the package first; malloc's thresholds fixed (or not)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **({} if args.glibc_malloc_defaults else STEADY_MALLOC)}


class Worker:
    """The parent's handle on a `serve` process, in a session of its own: Ctrl-C reaches the benchmark alone, which
    ends it (`close`); a worker whose parent is gone ends at its next request. Its own lines go to stderr."""

    def __init__(self, name: str, request: tuple, args):
        command = [sys.executable, "-m", __spec__.name, json.dumps(request)]
        pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.name, self.process = name, subprocess.Popen(command, env=environment(args), **pipes)

    def ask(self, *request):
        try:
            self.process.stdin.write(json.dumps(request) + "\n" if request else "")
            self.process.stdin.flush()
        except BrokenPipeError:  # it has ended: its lines say why
            pass
        if line := self.process.stdout.readline():
            return json.loads(line)
        raise UserError(
            f"measuring {self.name} failed (exit code {self.process.wait()}; its lines are above): a negative code is "
            "a signal (-9: killed, most often for memory): measure fewer implementations or one --dtype at a time"
        )

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


def once(name: str, request: tuple, args):
    """The answer of a worker that answers once."""
    worker = Worker(name, request, args)
    try:
        return worker.ask()
    finally:
        worker.close()


def measure_round(variants: list[tuple[str, str]], config_name: str, mode: str, batch: int, args) -> dict:
    """One round: a fresh process per variant (implementation, precision), all set up first; then timed chunks
    interleaved A B C D, D C B A, ...: every chunk's seconds per step, and the throughput of the fastest."""
    workers = {}
    try:
        for name, precision in variants:
            spec = ("measure", name, config_name, mode, precision, batch, args.compile)
            workers[(name, precision)] = Worker(f"{name} {config_name} {mode} {precision} batch {batch}", spec, args)
        for worker in workers.values():
            worker.ask()  # ready
        for worker in workers.values():
            time.sleep(SETTLE_SECONDS)
            worker.ask("warm", args.warmup, args.steps, args.chunk_seconds)
        chunks = {variant: [] for variant in workers}
        for index in range(args.chunks):
            for variant in list(workers) if index % 2 == 0 else reversed(workers):
                time.sleep(SETTLE_SECONDS)
                chunks[variant].append(workers[variant].ask("chunk"))
        return {
            variant: dict(worker.ask("report", min(chunks[variant]), args.peak_tflops), chunk_seconds=chunks[variant])
            for variant, worker in workers.items()
        }
    finally:
        for worker in workers.values():
            worker.close()


def benchmark(args) -> list[dict]:
    """Every config, mode and batch: rounds of every variant, a row each, its FLOP/s a share of its dtype's rate."""
    rows = []
    for config_name, mode in ((config_name, mode) for config_name in args.configs for mode in args.modes):
        config = models.CONFIGS[config_name]
        implementations = [name for name in args.implementations if models.builds(name, config, mode)]
        precisions = models.precisions_for(mode, args.dtype, args.int8)
        variants = [(name, precision) for precision in precisions for name in implementations]
        for batch in (args.batch or config["batch"]) if mode == "inference" else [config["train_batch"]]:
            samples = {variant: [] for variant in variants}
            for index in range(args.rounds):
                for variant, result in measure_round(variants, config_name, mode, batch, args).items():
                    samples[variant].append(result)
                print(f"  {config_name} {mode} batch {batch}: round {index + 1}/{args.rounds}", file=sys.stderr)
            for name, precision in variants:
                uncompiled = (name.removesuffix(models.COMPILED), precision) if name.endswith(models.COMPILED) else 0
                references = dict(ratio_to_float32=samples.get((name, "float32")) if precision != "float32" else None)
                references.update(ratio_to_uncompiled=samples.get(uncompiled))
                same_precision = {other: samples[(other, precision)] for other in implementations}
                summary = summarise(samples[(name, precision)], same_precision, references)
                rate = args.matmul_rates.get(models.DTYPE_OF[precision])
                if rate:  # above 1: the product measured no peak (a small --matmul_size)
                    summary["matmul_fraction"] = summary["achieved_tflops"] * 1e12 / rate
                row = dict(config=config_name, mode=mode, precision=precision, batch=batch, implementation=name)
                rows.append(dict(row, **summary, samples=samples[(name, precision)]))
    return rows


if __name__ == "__main__":  # a Worker's process
    serve(*json.loads(sys.argv[1]))
