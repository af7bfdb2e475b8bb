"""One measurement inside one process: the step of a mode and precision, its timing chunk by chunk, its peak memory
and its FLOP/s; and the matrix-product rate that a model's FLOP/s is set against. The worker processes of
`measure` run these."""

import math
import resource
import time

import torch

from modeling_vit_scratch.training.precision import synchronize

from .models import CONFIGS, INT8, NUM_LABELS, build, forward_flops, stem_stride, to_int8, weights_dtype

MATMUL_REPEATS = 5
# Peak dense bf16 throughput (FLOP/s) of common GPUs, as their makers give it, for the model FLOP utilisation of
# bf16 rows; --peak_tflops sets it for other devices.
PEAK_BF16_FLOPS = {"H100": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12, "RTX 4090": 165e12}


def logits_of(output):
    return output if hasattr(output, "shape") else output.logits


def peak_memory_bytes(device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


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


def build_for(implementation: str, config: dict, precision: str, device: torch.device):
    """The model of `implementation` at `config` on `device` as `precision` wants it: in bf16 for bf16 weights,
    with int8 linear layers for int8 (`to_int8`), else in float32."""
    model = build(implementation, config, weights_dtype(precision))
    return (to_int8(model) if precision == INT8 else model).to(device)


def inputs_for(config: dict, batch: int, device, dtype: torch.dtype | None = None):
    shape = (batch, config["num_channels"], config["image_size"], config["image_size"])
    images = torch.randn(shape, device=device, dtype=dtype)
    return images, torch.randint(0, NUM_LABELS, (batch,), device=device)


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
        tiny_model = prepared(build_for(implementation, tiny, precision, self.device))
        make_step(tiny_model, *inputs_for(tiny, 2, self.device, dtype), mode, precision)()
        self.baseline = 0 if self.device.type == "cuda" else peak_memory_bytes(self.device)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.model = build_for(implementation, self.config, precision, self.device)
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
