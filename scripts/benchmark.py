"""Speed and memory of vit_scratch against transformers' ViT (SDPA and eager) and timm, on identical configs.

    python scripts/benchmark.py                       # digits and tiny224, 5 rounds, inference and training
    python scripts/benchmark.py --configs digits mnist28 tiny224 base224 --rounds 7 --json results.json
    python scripts/benchmark.py --configs base224 --modes inference --dtype bfloat16
    python scripts/benchmark.py --configs tiny224 --dtype float32 --implementations vit_scratch vit_scratch-compiled transformers-sdpa
    python scripts/benchmark.py --end_to_end configs/train_digits.json --rounds 3   # the data path's cost

Every measurement runs in its own subprocess (a fresh allocator, no warm caches shared between implementations). In
each round every implementation gets a fresh process; their timed chunks are interleaved (A B C D, D C B A, ...), so
a slow spell of the machine hits all of them. Each precision asked for (`--dtype`, float32 and bfloat16 by default)
is a variant of each implementation in the same rounds: float32; bf16 autocast (inference and training); and, for
inference, weights loaded in bf16 (`dtype=torch.bfloat16`). Reported: throughput (the fastest chunk of a round;
median and min-max over rounds); the median over rounds of each round's ratio to transformers' ViT with SDPA (its
default) in the same precision, for ours also to the fastest of transformers' eager ViT and timm, and of each bf16
variant to the same implementation in float32, where a round's ratio pairs each chunk with the reference's chunk
timed next to it; the model's matrix-multiply FLOP/s (`forward_flops`) as a fraction of what a large matrix product
reaches in the same dtype on the same machine, measured at the start of the run (`--matmul_size`; on a CPU that
emulates bf16, a warning line, its product at 1024 and no share for its rows); then, for the bars given
(--min_speedup_vs_sdpa, --min_speedup_vs_fastest, --max_memory_ratio; none by default), whether ours meets them.
`torch.compile`: an
implementation's name + `-compiled` (e.g. `vit_scratch-compiled`) is the same model compiled, measured beside the
others in the same rounds; `--compile` compiles every model (compiling is never timed). Needs timm and transformers
(`make install-timm` has both: run it with .venv-timm/bin/python). Memory: every variant of a round is alive at once
(base224 training: about 5 GB each in float32), so measure one --dtype at a time where memory is short. CPU figures
are noisy: compare ratios from one run, not numbers across runs.

`--end_to_end RECIPE ...` is another mode: scripts/train.py with each recipe, whole or for `--end_to_end_steps` steps (its
whole data path: decoding, augmentation, the image processor, evaluation and checkpoints as the recipe asks), and
the same steps of the same model alone (built from the run's saved config; forward, loss, backward, AdamW on random
inputs of the processor's shape, in a fresh process), in alternating order over `--rounds`. It reports the
Trainer's `train_runtime` plus the images processed once before it (the splits kept in memory), the model's time and
their ratio (median over rounds); `--max_end_to_end_ratio 1.25`
judges it, `--train_args ...` (last) passes arguments to scripts/train.py (e.g. `--bf16 true`). Threads as the
caller sets them (`make train` uses OMP_NUM_THREADS=1).
"""

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from modeling_vit_scratch.common.dtypes import dtype_name, parse_dtypes
from modeling_vit_scratch.training.precision import (
    cpu_bf16_flags,
    slow_bf16_warning,
    synchronize,
    training_steps_seconds,
)

ROOT = Path(__file__).resolve().parent.parent
# Same hyper-parameters for every implementation. Inference batch sizes are lists (base224: latency and batch 8).
# ViT-Ti/16 is tiny224, ViT-B/16 base224.
CONFIGS = {
    "digits": dict(
        image_size=8,
        patch_size=2,
        num_channels=1,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=128,
        batch=[256],
        train_batch=256,
    ),
    "mnist28": dict(
        image_size=28,
        patch_size=4,
        num_channels=1,
        hidden_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        intermediate_size=128,
        batch=[128],
        train_batch=128,
    ),
    "tiny224": dict(
        image_size=224,
        patch_size=16,
        num_channels=3,
        hidden_size=192,
        num_hidden_layers=12,
        num_attention_heads=3,
        intermediate_size=768,
        batch=[8],
        train_batch=16,
    ),
    "base224": dict(
        image_size=224,
        patch_size=16,
        num_channels=3,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        batch=[1, 8],
        train_batch=16,  # about 5 GB per training process in float32: --modes inference where memory is short
    ),
    # The paper's R26+S/32 hybrid (timm's vit_small_r26_s32_224): a ResNet-V2 stem, then 1x1 patches of its 7x7
    # map. transformers 5 has no ViT hybrid: measured against timm only.
    "r26s32_224": dict(
        image_size=224,
        patch_size=1,
        num_channels=3,
        hidden_size=384,
        num_hidden_layers=12,
        num_attention_heads=6,
        intermediate_size=1536,
        stem=dict(stem="resnetv2", stem_depths=[2, 2, 2, 2], timm_model="vit_small_r26_s32_224"),
        batch=[8],
        train_batch=8,
    ),
}
IMPLEMENTATIONS = ("vit_scratch", "transformers-sdpa", "transformers-eager", "timm")
COMPILED = "-compiled"  # an implementation's name + this: the same model under torch.compile (on request)
ALL_IMPLEMENTATIONS = (
    *IMPLEMENTATIONS,
    "vit_scratch-eager",  # ours with the explicit attention, on request
    *(name + COMPILED for name in (*IMPLEMENTATIONS, "vit_scratch-eager")),
)
OURS = "vit_scratch"
BASELINE = "transformers-sdpa"  # transformers' ViT as a user gets it by default
PEERS = ("transformers-eager", "timm")  # the fastest of these, round by round, is the other bar
MODES = ("inference", "train")
# How a step computes: in float32; under bf16 autocast (float32 weights, matrix products in bf16); with the weights
# loaded in bf16 (inference only: training needs float32 master weights)
PRECISIONS = ("float32", "bf16-autocast", "bf16-weights")
DTYPE_OF = {"float32": torch.float32, "bf16-autocast": torch.bfloat16, "bf16-weights": torch.bfloat16}
MATMUL_REPEATS = 5
# Where bf16 is emulated (a CPU without bf16 units, see `slow_bf16_warning`), a 4096^2 bf16 product takes minutes at
# about 1 GFLOP/s; the rate is the same at 1024^2 (1.0 GFLOP/s at 1024^2, 1.3 at 512^2 on an AVX2 machine).
EMULATED_BF16_MATMUL_SIZE = 1024
SETTLE_SECONDS = 0.2  # pause before each timed chunk
# With glibc malloc's dynamic thresholds, the same model measured in two fresh CPU processes differed by up to 2x
# here (README, Performance). Fixed thresholds, for every implementation alike, keep freed activations in the heap
# and narrow that spread; --glibc_malloc_defaults turns this off.
STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(2**31), "MALLOC_TRIM_THRESHOLD_": str(2**31)}
NUM_LABELS = 10
# Peak dense bf16 throughput (FLOP/s) of common GPUs, for the model FLOP utilisation of bf16 rows;
# --peak_tflops sets it for other devices.
PEAK_BF16_FLOPS = {"H100": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12, "RTX 4090": 165e12}


def build(implementation: str, config: dict, dtype: torch.dtype | None = None):
    """The model, built with random weights and the same hyper-parameters, as a user gets it by default; in `dtype`
    as `from_pretrained(dtype=...)` loads it (None: float32). A "-compiled" name builds the same model (the
    Measurement compiles it)."""
    implementation = implementation.removesuffix(COMPILED)
    dims = {
        key: config[key]
        for key in (
            "image_size",
            "patch_size",
            "num_channels",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
        )
    }
    stem = build_stem_fields(config)
    if implementation.startswith("vit_scratch"):
        from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification

        kernel = {"vit_scratch": None, "vit_scratch-eager": "eager"}[implementation]  # None: the default kernel
        model_config = ViTScratchConfig(**dims, **stem, num_labels=NUM_LABELS, attn_implementation=kernel)
        return ViTScratchForImageClassification._from_config(model_config, dtype=dtype)
    if not builds(implementation, config):
        raise ValueError(f"{implementation} has no hybrid ViT: measure {config['stem']['timm_model']} with timm.")
    if implementation == "timm" and stem:
        import timm

        return timm.create_model(
            config["stem"]["timm_model"],
            pretrained=False,
            img_size=dims["image_size"],
            in_chans=dims["num_channels"],
            num_classes=NUM_LABELS,
            embed_dim=dims["hidden_size"],
            depth=dims["num_hidden_layers"],
            num_heads=dims["num_attention_heads"],
            mlp_ratio=dims["intermediate_size"] / dims["hidden_size"],
        ).to(dtype)
    if implementation.startswith("transformers"):
        from transformers import ViTConfig, ViTForImageClassification

        kernel = implementation.split("-")[1]
        return ViTForImageClassification._from_config(
            ViTConfig(**dims, num_labels=NUM_LABELS), attn_implementation=kernel, dtype=dtype
        )
    if implementation == "timm":
        from timm.models.vision_transformer import VisionTransformer

        return VisionTransformer(
            img_size=dims["image_size"],
            patch_size=dims["patch_size"],
            in_chans=dims["num_channels"],
            num_classes=NUM_LABELS,
            embed_dim=dims["hidden_size"],
            depth=dims["num_hidden_layers"],
            num_heads=dims["num_attention_heads"],
            mlp_ratio=dims["intermediate_size"] / dims["hidden_size"],
        ).to(dtype)
    raise ValueError(f"Unknown implementation {implementation!r}: choose from {ALL_IMPLEMENTATIONS}.")


def builds(implementation: str, config: dict) -> bool:
    """Whether `implementation` has the architecture of `config`: a hybrid (a config with a stem) has no
    transformers counterpart."""
    return "stem" not in config or not implementation.startswith("transformers")


def stem_stride(config: dict) -> int:
    """Pixels per feature-map cell of a hybrid's stem (1 without one)."""
    from modeling_vit_scratch import ViTScratchConfig

    return ViTScratchConfig(patch_size=1, image_size=config["image_size"], **build_stem_fields(config)).stem_stride


def build_stem_fields(config: dict) -> dict:
    return {key: value for key, value in config.get("stem", {}).items() if key != "timm_model"}


def logits_of(output):
    return output if hasattr(output, "shape") else output.logits


def peak_memory_bytes(device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def forward_flops(config: dict) -> float:
    """Matrix-multiply FLOPs of one forward pass for one image (2 per multiply-add), of the transformer: a hybrid's
    stem convolutions are not counted, and its projection is counted as if it read image channels."""
    tokens = 1 + (config["image_size"] // (config["patch_size"] * stem_stride(config))) ** 2
    dim, mlp, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    patch_dim = config["num_channels"] * config["patch_size"] ** 2
    per_layer = 2 * tokens * (4 * dim * dim + 2 * dim * mlp) + 4 * tokens * tokens * dim
    return layers * per_layer + 2 * (tokens - 1) * patch_dim * dim


def make_step(model, images, labels, mode: str, precision: str = "float32"):
    """One step of `mode`: inference under torch.inference_mode, or forward, loss, backward and an AdamW step; under
    bf16 autocast for "bf16-autocast" (a "bf16-weights" model is in bf16 already, its images too)."""
    autocast = torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=precision == "bf16-autocast")
    if mode == "inference":
        model.eval()

        def step():
            with torch.inference_mode(), autocast:
                model(images)

        return step
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        with autocast:
            loss = torch.nn.functional.cross_entropy(logits_of(model(images)), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def inputs_for(config: dict, batch: int, device, dtype: torch.dtype | None = None):
    shape = (batch, config["num_channels"], config["image_size"], config["image_size"])
    images = torch.randn(shape, device=device, dtype=dtype)
    return images, torch.randint(0, NUM_LABELS, (batch,), device=device)


def weights_dtype(precision: str) -> torch.dtype | None:
    """The dtype the model is built in for `precision` (None: torch's default, float32)."""
    return torch.bfloat16 if precision == "bf16-weights" else None


def precisions_for(mode: str, dtypes: list[torch.dtype]) -> list[str]:
    """The precisions measured for `mode` and the dtypes asked for: bf16 weights for inference only."""
    wanted = [p for p in PRECISIONS if DTYPE_OF[p] in dtypes]
    return [p for p in wanted if not (mode == "train" and p == "bf16-weights")]


def matmul_flops(dtype: torch.dtype, device: torch.device, size: int, repeats: int = MATMUL_REPEATS) -> float:
    """FLOP/s of the fastest of `repeats` products of two random `size` x `size` matrices in `dtype`: about the most
    this machine's matrix units reach, the yardstick for a model's matrix-multiply FLOP/s."""
    left, right = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    fastest = math.inf
    for index in range(repeats + 1):  # the first is a warm-up
        synchronize(device)
        started = time.perf_counter()
        torch.mm(left, right)
        synchronize(device)
        if index:
            fastest = min(fastest, time.perf_counter() - started)
    return 2 * size**3 / fastest


class Measurement:
    """One implementation, config, mode, precision and batch, set up in this process and timed chunk by chunk.

    Memory on CPU is the peak resident size above a process that has already built and run the same implementation
    at a tiny size, so that library imports and lazy set-up do not count: what remains is the model, its inputs,
    activations, gradients and optimizer state. On CUDA it is the peak of allocated memory.
    """

    def __init__(
        self,
        implementation: str,
        config_name: str,
        mode: str,
        batch: int,
        precision: str = "float32",
        compile_model: bool = False,
    ):
        torch.manual_seed(0)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.config, self.mode, self.batch, self.precision = CONFIGS[config_name], mode, batch, precision
        dtype = weights_dtype(precision)
        tiny = {
            **self.config,
            "image_size": 2 * self.config["patch_size"] * stem_stride(self.config),
            "num_hidden_layers": 1,
            "hidden_size": 8 * self.config["num_attention_heads"],
            "intermediate_size": 8,
        }
        if compile_model:
            # inference on CPU: weights frozen into the compiled graph (constant folding, oneDNN weight prepacking)
            torch._inductor.config.freezing = mode == "inference" and self.device.type == "cpu"
        prepared = torch.compile if compile_model else lambda model: model
        # the tiny model is compiled too, so that the compiler's own memory is in the baseline, not in the peak
        tiny_model = prepared(build(implementation, tiny, dtype).to(self.device))
        make_step(tiny_model, *inputs_for(tiny, 2, self.device, dtype), mode, precision)()
        self.baseline = 0 if self.device.type == "cuda" else peak_memory_bytes(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.model = build(implementation, self.config, dtype).to(self.device)
        model = prepared(self.model)
        self.step = make_step(model, *inputs_for(self.config, batch, self.device, dtype), mode, precision)
        if compile_model:
            self.step()  # compiles: not part of any timed or warm-up step
        self.steps_per_chunk, self.compiled = 1, model is not self.model  # compiled: wrapped by torch.compile

    def timed(self, steps: int) -> float:
        """Seconds per step over `steps` steps."""
        synchronize(self.device)
        started = time.perf_counter()
        for _ in range(steps):
            self.step()
        synchronize(self.device)
        return (time.perf_counter() - started) / steps

    def warm_up(self, warmup: int, min_steps: int, chunk_seconds: float) -> None:
        """Untimed steps, which also size a chunk: at least `min_steps` steps and `chunk_seconds` seconds."""
        seconds = self.timed(max(warmup, 1))
        self.steps_per_chunk = max(min_steps, math.ceil(chunk_seconds / max(seconds, 1e-9)))

    def chunk(self) -> float:
        return self.timed(self.steps_per_chunk)

    def report(self, seconds_per_step: float, peak_tflops: float | None = None) -> dict:
        """Throughput of a step time, the model's matrix-multiply FLOP/s at it (a training step: 3 passes' worth), and
        the peak memory so far."""
        flops = forward_flops(self.config) * (1 if self.mode == "inference" else 3) * self.batch / seconds_per_step
        result = dict(
            images_per_second=self.batch / seconds_per_step,
            milliseconds_per_batch=1000 * seconds_per_step,
            peak_memory_mb=(peak_memory_bytes(self.device) - self.baseline) / 2**20,
            steps_per_chunk=self.steps_per_chunk,
            achieved_tflops=flops / 1e12,
            compiled=self.compiled,
        )
        if self.device.type == "cuda":
            name = torch.cuda.get_device_name(self.device)
            peak = (
                peak_tflops * 1e12 if peak_tflops else next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)
            )
            result.update(mfu=flops / peak if peak and self.precision != "float32" else None)
        return result


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


def worker_environment(args) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **({} if args.glibc_malloc_defaults else STEADY_MALLOC)}


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
        command = [sys.executable, __file__, "--matmul", name, str(size)]
        done = subprocess.run(command, check=False, capture_output=True, text=True, env=worker_environment(args))
        if done.returncode != 0:
            raise RuntimeError(f"The {name} matrix product failed:\n{done.stderr[-3000:]}")
        rates.update(json.loads(done.stdout.splitlines()[-1]))
    return rates


class Worker:
    """The parent's handle on a `serve` process."""

    def __init__(self, implementation: str, config_name: str, mode: str, precision: str, batch: int, args):
        command = [
            sys.executable,
            __file__,
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
        ]
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


def modes_for(config: dict, args) -> list[str]:
    """Inference for every config; training where the config has a training batch."""
    modes = ["inference"] + (["train"] if config["train_batch"] else [])
    return [mode for mode in modes if mode in args.modes]


def benchmark(args) -> list[dict]:
    """Every config, mode and batch: rounds of every implementation in every precision, summarised row by row; each
    row's model FLOP/s also as a fraction of `args.matmul_rates` (FLOP/s by dtype name) for its dtype."""
    rows = []
    for config_name in args.configs:
        config = CONFIGS[config_name]
        for mode in modes_for(config, args):
            precisions = precisions_for(mode, args.dtypes)
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
                    if rate:
                        summary["matmul_fraction"] = summary["achieved_tflops"] * 1e12 / rate
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
            f"{row['matmul_fraction']:.0%}" if "matmul_fraction" in row else "",
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


# End to end: scripts/train.py (the Trainer with the real data path: decoding, augmentation, the image processor,
# evaluation and checkpoints as the recipe asks) against the model's own training steps at the same batch.


def model_only_seconds(folder: str, steps: int, batch: int, bf16: bool) -> float:
    """Seconds for `steps` training steps (forward, loss, backward, AdamW) of a fresh model built from the config
    saved in `folder`, on random inputs of the shape its image processor makes: the work no data path can save."""
    from PIL import Image
    from transformers import AutoConfig, AutoImageProcessor, AutoModelForImageClassification

    import modeling_vit_scratch  # noqa: F401 (registers vit_scratch with the Auto classes)

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(folder)
    processor = AutoImageProcessor.from_pretrained(folder)
    shape = processor(Image.new("RGB", (32, 32)), return_tensors="pt")["pixel_values"].shape[1:]
    model = AutoModelForImageClassification.from_config(config).train()
    images, labels = torch.randn(batch, *shape), torch.randint(0, config.num_labels, (batch,))
    return training_steps_seconds(model, images, labels, steps, bf16)


def train_script_run(recipe: str, steps: int | None, extra: list[str], folder: Path, args) -> dict:
    """scripts/train.py with `recipe` into `folder`, for `steps` steps or (None) the whole recipe: the Trainer's
    `train_runtime` with the run's `data_preparation_seconds`, the global batch and the number of steps."""
    command = [sys.executable, str(ROOT / "scripts" / "train.py"), recipe, *extra]
    command += ["--max_steps", str(steps)] if steps else []
    command += ["--output_dir", str(folder), "--report_to", "none", "--disable_tqdm", "true"]
    done = subprocess.run(command, check=False, capture_output=True, text=True, env=worker_environment(args))
    if done.returncode != 0:
        raise RuntimeError(f"scripts/train.py {recipe} failed:\n{done.stderr[-3000:]}")
    metrics = json.loads((folder / "all_results.json").read_text())
    record = json.loads((folder / "training_record.json").read_text())
    batch = metrics["total_train_batch_size"]
    steps = steps or math.ceil(record["num_train"] / batch) * round(record["epochs"])  # one process, no accumulation
    bf16 = record["precision"] == "bf16 mixed precision"  # from the recipe or the command line, as the run recorded
    # the Trainer's clock, plus the images processed once before it started (splits kept in memory)
    seconds = metrics["train_runtime"] + metrics.get("data_preparation_seconds", 0.0)
    return dict(folder=folder, seconds=seconds, batch=batch, steps=steps, bf16=bf16)


def model_only_run(trained: dict, args) -> float:
    """`model_only_seconds` of a `train_script_run` (its folder, steps, batch and precision) in a fresh process set
    up as the workers."""
    command = [sys.executable, __file__, "--model_only", str(trained["folder"]), str(trained["steps"])]
    command += [str(trained["batch"]), "bf16" if trained["bf16"] else "float32"]
    done = subprocess.run(command, check=False, capture_output=True, text=True, env=worker_environment(args))
    if done.returncode != 0:
        raise RuntimeError(f"The model-only steps of {trained['folder']} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])["seconds"]


def end_to_end(args) -> list[dict]:
    """For each recipe, `args.rounds` rounds of: scripts/train.py for `args.end_to_end_steps` steps, and the same
    steps of the same model alone (`model_only_seconds`, in a fresh process), the model alone first every other
    round (built from the previous round's folder). A round's ratio is the two times' quotient; the row gives
    medians."""
    rows = []
    for recipe in args.end_to_end:
        samples = []
        with tempfile.TemporaryDirectory() as scratch:
            previous = None
            for round_index in range(args.rounds):
                folder = Path(scratch) / f"round-{round_index}"
                alone = model_only_run(previous, args) if round_index % 2 else None
                trained = train_script_run(recipe, args.end_to_end_steps, args.train_args, folder, args)
                if alone is None:
                    alone = model_only_run(trained, args)
                previous = trained
                samples.append(dict(end_to_end_seconds=trained["seconds"], model_only_seconds=alone))
                print(f"  {recipe}: round {round_index + 1}/{args.rounds}", file=sys.stderr)
        rows.append(
            dict(
                recipe=recipe,
                train_args=" ".join(args.train_args),
                steps=previous["steps"],
                batch=previous["batch"],
                precision="bf16" if previous["bf16"] else "float32",
                end_to_end_seconds=statistics.median(s["end_to_end_seconds"] for s in samples),
                model_only_seconds=statistics.median(s["model_only_seconds"] for s in samples),
                ratio=statistics.median(s["end_to_end_seconds"] / s["model_only_seconds"] for s in samples),
                samples=samples,
            )
        )
    return rows


def end_to_end_markdown(rows: list[dict]) -> str:
    lines = [
        "| recipe | extra arguments | steps | batch | scripts/train.py train_runtime + data preparation s | model alone s | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row['recipe']} | {row['train_args']} | {row['steps']} | {row['batch']} | "
            f"{row['end_to_end_seconds']:.1f} | {row['model_only_seconds']:.1f} | {row['ratio']:.2f}x |"
        )
    return "\n".join(lines)


def end_to_end_bars(rows: list[dict], max_overhead: float | None) -> list[str]:
    """The verdict per recipe on `--max_end_to_end_ratio` (None: no verdict)."""
    if max_overhead is None:
        return []
    return [
        f"{row['recipe']} {row['train_args']}".strip()
        + f": end to end {row['ratio']:.3f}x the model alone (bar <= {bar_text(max_overhead)}): "
        + ("met" if row["ratio"] <= max_overhead else "NOT met")
        for row in rows
    ]


def main_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--worker", nargs=5, metavar=("IMPL", "CONFIG", "MODE", "PRECISION", "BATCH"), help=argparse.SUPPRESS
    )
    parser.add_argument("--matmul", nargs=2, metavar=("DTYPES", "SIZE"), help=argparse.SUPPRESS)
    parser.add_argument("--model_only", nargs=4, metavar=("FOLDER", "STEPS", "BATCH", "DTYPE"), help=argparse.SUPPRESS)
    end = parser.add_argument_group(
        "end to end",
        "scripts/train.py with a recipe (its whole data path, evaluation and checkpoints) against the same steps "
        "of its model alone; e.g. --end_to_end configs/train_digits.json --rounds 3",
    )
    end.add_argument("--end_to_end", nargs="+", metavar="RECIPE", help="recipes to run end to end (this mode only)")
    end.add_argument(
        "--end_to_end_steps",
        type=int,
        help="train only this many steps (default: the whole recipe; eval/save steps given as shares scale with it)",
    )
    end.add_argument(
        "--train_args",
        nargs=argparse.REMAINDER,
        default=[],
        help="last: arguments for scripts/train.py, e.g. --bf16 true",
    )
    end.add_argument(
        "--max_end_to_end_ratio", type=float, metavar="RATIO", help="bar: most train_runtime / model alone, e.g. 1.25"
    )
    parser.add_argument("--configs", nargs="+", default=["digits", "tiny224"], choices=list(CONFIGS))
    parser.add_argument(
        "--implementations",
        nargs="+",
        default=list(IMPLEMENTATIONS),
        choices=ALL_IMPLEMENTATIONS,
        help="any name + '-compiled' is that model under torch.compile, measured in the same rounds as the others",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before timing")
    parser.add_argument(
        "--chunks",
        type=int,
        default=5,
        help="timed chunks per implementation and round (throughput: the fastest; ratios: all, paired)",
    )
    parser.add_argument(
        "--chunk_seconds", "--chunk-seconds", type=float, default=1.0, help="least duration of a timed chunk"
    )
    parser.add_argument("--steps", type=int, default=3, help="least number of steps in a timed chunk")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--batch", type=int, nargs="+", help="inference batch sizes (default: each config's own)")
    parser.add_argument(
        "--dtype",
        default="float32,bfloat16",
        help="comma-separated: float32 measures float32; bfloat16 bf16 autocast and (inference) bf16 weights",
    )
    parser.add_argument(
        "--matmul_size",
        type=int,
        default=4096,
        help="side of the square matrix product that measures each dtype's matmul rate at the start",
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
    parser.add_argument("--peak_tflops", "--peak-tflops", type=float, help="the GPU's peak dense bf16 TFLOP/s, for MFU")
    judged = parser.add_argument_group(
        "bars",
        "judge our model against these (a verdict line per config, mode, precision and batch); none given: no verdict",
    )
    judged.add_argument(
        "--min_speedup_vs_sdpa",
        type=float,
        metavar="RATIO",
        help="least speed ratio of ours to transformers' ViT with SDPA, e.g. 1.0",
    )
    judged.add_argument(
        "--min_speedup_vs_fastest",
        type=float,
        metavar="RATIO",
        help="least speed ratio of ours to the fastest of transformers eager and timm, e.g. 0.95",
    )
    judged.add_argument(
        "--max_memory_ratio",
        type=float,
        metavar="RATIO",
        help="most peak memory of ours relative to transformers' ViT with SDPA, e.g. 1.05",
    )
    judged.add_argument(
        "--min_bf16_matmul_fraction",
        type=float,
        metavar="FRACTION",
        help="least share of the bf16 matmul rate that ours reaches in bf16 rows (model FLOP/s), e.g. 0.85",
    )
    judged.add_argument(
        "--min_bf16_speedup",
        type=float,
        metavar="RATIO",
        help="least speed ratio of ours in bf16 to ours in float32 (with --dtype float32,bfloat16), e.g. 2.5",
    )
    parser.add_argument("--json", default="benchmark_results.json", help="where to write every sample")
    return parser


def main(argv: list[str]) -> None:
    parser = main_parser()
    args = parser.parse_args(argv)
    if args.worker:
        implementation, config_name, mode, precision, batch = args.worker
        serve(implementation, config_name, mode, precision, int(batch), args)
        return
    if args.matmul:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        dtypes, size = parse_dtypes(args.matmul[0]), int(args.matmul[1])
        print(json.dumps({dtype_name(dtype): matmul_flops(dtype, device, size) for dtype in dtypes}))
        return
    if args.model_only:
        folder, steps, batch, precision = args.model_only
        print(json.dumps(dict(seconds=model_only_seconds(folder, int(steps), int(batch), precision == "bf16"))))
        return
    if args.end_to_end:
        started = time.time()
        rows = end_to_end(args)
        verdicts = end_to_end_bars(rows, args.max_end_to_end_ratio)
        header = (
            f"{machine_name()}, {os.cpu_count()} cores, torch {torch.__version__}, end to end, {args.rounds} rounds"
        )
        verdict_block = "\n".join(verdicts) + "\n\n" if verdicts else ""
        print(f"\n{header}\n\n{end_to_end_markdown(rows)}\n\n{verdict_block}({time.time() - started:.0f} s)")
        Path(args.json).write_text(
            json.dumps(dict(machine=header, argv=argv, rows=rows, bars=verdicts), indent=2) + "\n"
        )
        return
    if BASELINE not in args.implementations:
        parser.error(f"--implementations must include the baseline {BASELINE}.")
    try:
        args.dtypes = parse_dtypes(args.dtype)
    except ValueError as error:
        sys.exit(f"error: --dtype: {error}")

    on_cuda = torch.cuda.is_available()
    slow_bf16 = slow_bf16_warning("cuda" if on_cuda else "cpu", "Give --dtype float32")
    if slow_bf16 and torch.bfloat16 in args.dtypes:
        print(f"warning: {slow_bf16} The bf16 rows will take long here.", file=sys.stderr)

    started = time.time()
    sizes = matmul_sizes(args.dtypes, args.matmul_size, bf16_emulated=slow_bf16 is not None)
    matmul_rates = measure_matmul_rates(sizes, args)
    # Emulated bf16 has no ceiling to share: its rate depends on the shapes (a ViT's small products measured up to
    # 10x the 1024^2 product's rate), so its rows get no fraction.
    args.matmul_rates = {name: rate for name, rate in matmul_rates.items() if not (slow_bf16 and name == "bfloat16")}
    rows = benchmark(args)
    rates = ", ".join(
        f"{name} {rate / 1e9:.1f} GFLOP/s ({sizes[name]}x{sizes[name]}"
        + (", emulated: no share of it is shown" if name not in args.matmul_rates else "")
        + ")"
        for name, rate in matmul_rates.items()
    )
    header = (
        f"{machine_name()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"{'CUDA ' + torch.cuda.get_device_name() if on_cuda else 'CPU'}"
        f"{'' if on_cuda else ' (bf16 units: ' + (', '.join(cpu_bf16_flags()) or 'none') + ')'}, "
        f"matmul {rates}, "
        f"{'torch.compile (not timed), ' if args.compile else ''}"
        f"{args.rounds} rounds of {args.chunks} interleaved chunks of >= {args.chunk_seconds} s, "
        f"throughput from the fastest chunk of each round, ratios paired chunk by chunk; malloc "
        f"{'glibc defaults' if args.glibc_malloc_defaults else 'thresholds fixed (STEADY_MALLOC)'}"
    )
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
    result = dict(machine=header, argv=argv, matmul_flops=matmul_rates, matmul_sizes=sizes, rows=rows, bars=verdicts)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
