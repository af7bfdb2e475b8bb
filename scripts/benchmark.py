"""Speed and memory of vit_scratch against transformers' ViT (SDPA and eager) and timm, on identical configs.

    python scripts/benchmark.py                       # digits and tiny224, 5 rounds, inference and training
    python scripts/benchmark.py --configs digits mnist28 tiny224 base224 --rounds 7 --json results.json

Every measurement runs in its own subprocess (a fresh allocator, no warm caches shared between implementations);
implementations are interleaved round by round (A B C D A B C D ...) after warm-up, so a slow spell of the machine
hits all of them. Reported: the median and min-max over rounds, and the median of the per-round ratios to
transformers' ViT with SDPA (its default). Needs timm and transformers (`make install-timm` has both: run it with
.venv-timm/bin/python). CPU figures are noisy: compare ratios from one run, not numbers across runs.
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Same hyper-parameters for every implementation. Inference batch sizes are lists (base224: latency and batch 8).
CONFIGS = {
    "digits": dict(image_size=8, patch_size=2, num_channels=1, hidden_size=64, num_hidden_layers=4,
                   num_attention_heads=4, intermediate_size=128, batch=[256], train=True),
    "mnist28": dict(image_size=28, patch_size=4, num_channels=1, hidden_size=64, num_hidden_layers=6,
                    num_attention_heads=4, intermediate_size=128, batch=[128], train=True),
    "tiny224": dict(image_size=224, patch_size=16, num_channels=3, hidden_size=192, num_hidden_layers=12,
                    num_attention_heads=3, intermediate_size=768, batch=[8], train=True),
    "base224": dict(image_size=224, patch_size=16, num_channels=3, hidden_size=768, num_hidden_layers=12,
                    num_attention_heads=12, intermediate_size=3072, batch=[1, 8], train=False),
}  # fmt: skip
IMPLEMENTATIONS = ("vit_scratch", "transformers-sdpa", "transformers-eager", "timm")
BASELINE = "transformers-sdpa"
NUM_LABELS = 10
# Peak dense bf16 throughput (FLOP/s) of common GPUs, for model FLOP utilisation; --peak_flops overrides.
PEAK_BF16_FLOPS = {"H100": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12, "RTX 4090": 165e12}


def build(implementation: str, config: dict):
    """The model, built with random weights and the same hyper-parameters, as a user gets it by default."""
    dims = {key: config[key] for key in ("image_size", "patch_size", "num_channels", "hidden_size",
                                         "num_hidden_layers", "num_attention_heads", "intermediate_size")}  # fmt: skip
    if implementation == "vit_scratch":
        from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification

        return ViTScratchForImageClassification(ViTScratchConfig(**dims, num_labels=NUM_LABELS))
    if implementation.startswith("transformers"):
        from transformers import ViTConfig, ViTForImageClassification

        kernel = implementation.split("-")[1]
        return ViTForImageClassification._from_config(ViTConfig(**dims, num_labels=NUM_LABELS), attn_implementation=kernel)
    if implementation == "timm":
        from timm.models.vision_transformer import VisionTransformer

        return VisionTransformer(
            img_size=dims["image_size"], patch_size=dims["patch_size"], in_chans=dims["num_channels"],
            num_classes=NUM_LABELS, embed_dim=dims["hidden_size"], depth=dims["num_hidden_layers"],
            num_heads=dims["num_attention_heads"], mlp_ratio=dims["intermediate_size"] / dims["hidden_size"],
        )  # fmt: skip
    raise ValueError(f"Unknown implementation {implementation!r}: choose from {IMPLEMENTATIONS}.")


def logits_of(output):
    return output if hasattr(output, "shape") else output.logits


def peak_memory_bytes(device) -> int:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def forward_flops(config: dict) -> float:
    """Matrix-multiply FLOPs of one forward pass for one image (2 per multiply-add)."""
    tokens = 1 + (config["image_size"] // config["patch_size"]) ** 2
    dim, mlp, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    patch_dim = config["num_channels"] * config["patch_size"] ** 2
    per_layer = 2 * tokens * (4 * dim * dim + 2 * dim * mlp) + 4 * tokens * tokens * dim
    return layers * per_layer + 2 * (tokens - 1) * patch_dim * dim


def measure(implementation: str, config_name: str, mode: str, batch: int, steps: int, warmup: int, bf16: bool) -> dict:
    """One measurement, in this process: images per second and peak memory."""
    import torch

    import transformers  # noqa: F401  every library imported before the baseline, so memory is the model's own

    try:
        import timm  # noqa: F401
    except ImportError:
        pass
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    baseline = 0 if device.type == "cuda" else peak_memory_bytes(device)
    config = CONFIGS[config_name]
    model = build(implementation, config).to(device)
    images = torch.randn(batch, config["num_channels"], config["image_size"], config["image_size"], device=device)
    labels = torch.randint(0, NUM_LABELS, (batch,), device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)
    if mode == "inference":
        model.eval()

        def step():
            with torch.inference_mode(), autocast:
                model(images)
    else:
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step():
            with autocast:
                loss = torch.nn.functional.cross_entropy(logits_of(model(images)), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    # CPU: peak resident memory above the process after imports (model, inputs, activations, optimizer state)
    result = dict(images_per_second=batch * steps / seconds,
                  peak_memory_mb=(peak_memory_bytes(device) - baseline) / 2**20)  # fmt: skip
    if device.type == "cuda":
        flops = forward_flops(config) * (3 if mode == "train" else 1) * batch * steps / seconds
        name = torch.cuda.get_device_name(device)
        peak = next((value for key, value in PEAK_BF16_FLOPS.items() if key in name), None)
        result.update(achieved_tflops=flops / 1e12, mfu=flops / peak if peak else None)
    return result


def run_worker(implementation, config_name, mode, batch, args) -> dict:
    """`measure` in a fresh subprocess; its JSON answer."""
    command = [sys.executable, __file__, "--worker", implementation, config_name, mode, str(batch),
               "--steps", str(args.steps), "--warmup", str(args.warmup)] + (["--bf16"] if args.bf16 else [])  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if result.returncode != 0:
        raise RuntimeError(f"{implementation} {config_name} {mode} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def summarise(samples: list[dict], baseline: list[dict] | None, key: str = "images_per_second") -> dict:
    values = [sample[key] for sample in samples]
    summary = dict(median=statistics.median(values), min=min(values), max=max(values))
    if baseline is not None:
        summary["ratio"] = statistics.median(s[key] / b[key] for s, b in zip(samples, baseline))
    summary["peak_memory_mb"] = statistics.median(sample["peak_memory_mb"] for sample in samples)
    if baseline is not None:
        summary["memory_ratio"] = statistics.median(
            s["peak_memory_mb"] / b["peak_memory_mb"] for s, b in zip(samples, baseline)
        )
    for extra in ("achieved_tflops", "mfu"):
        if samples[0].get(extra) is not None:
            summary[extra] = statistics.median(sample[extra] for sample in samples)
    return summary


def benchmark(args) -> list[dict]:
    rows = []
    for config_name in args.configs:
        config = CONFIGS[config_name]
        modes = ["inference"] + (["train"] if config["train"] else [])
        for mode in modes:
            for batch in config["batch"] if mode == "inference" else config["batch"][-1:]:
                samples = {implementation: [] for implementation in args.implementations}
                for round_index in range(args.rounds):  # interleaved: A B C D, A B C D, ...
                    for implementation in args.implementations:
                        samples[implementation].append(run_worker(implementation, config_name, mode, batch, args))
                    print(f"  {config_name} {mode} batch {batch}: round {round_index + 1}/{args.rounds}", file=sys.stderr)
                baseline = samples.get(BASELINE)
                for implementation, runs in samples.items():
                    rows.append(dict(config=config_name, mode=mode, batch=batch, implementation=implementation,
                                     **summarise(runs, baseline), samples=runs))  # fmt: skip
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "| config | mode | batch | implementation | images/s (median) | min-max | vs transformers SDPA | peak memory MB | memory vs transformers |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row['config']} | {row['mode']} | {row['batch']} | {row['implementation']} | {row['median']:.0f} | "
            f"{row['min']:.0f}-{row['max']:.0f} | {row.get('ratio', float('nan')):.2f}x | {row['peak_memory_mb']:.0f} | "
            f"{row.get('memory_ratio', float('nan')):.2f}x |"
        )
    return "\n".join(lines)



def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker", nargs=4, metavar=("IMPL", "CONFIG", "MODE", "BATCH"), help=argparse.SUPPRESS)
    parser.add_argument("--configs", nargs="+", default=["digits", "tiny224"], choices=list(CONFIGS))
    parser.add_argument("--implementations", nargs="+", default=list(IMPLEMENTATIONS), choices=IMPLEMENTATIONS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per measurement")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps before timing")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (reported on CUDA machines)")
    parser.add_argument("--json", default="benchmark_results.json", help="where to write every sample")
    args = parser.parse_args(argv)
    if args.worker:
        implementation, config_name, mode, batch = args.worker
        print(json.dumps(measure(implementation, config_name, mode, int(batch), args.steps, args.warmup, args.bf16)))
        return
    if BASELINE not in args.implementations:
        parser.error(f"--implementations must include the baseline {BASELINE}.")
    import torch

    started = time.time()
    rows = benchmark(args)
    header = (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}, "
              f"{'CUDA ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU'}, "
              f"{args.rounds} rounds x {args.steps} steps, bf16={args.bf16}")  # fmt: skip
    table = markdown(rows)
    print(f"\n{header}\n\n{table}\n\n({time.time() - started:.0f} s)")
    Path(args.json).write_text(json.dumps(dict(machine=header, argv=argv, rows=rows), indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
