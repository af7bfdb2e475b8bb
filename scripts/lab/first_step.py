"""Time and memory before the first training step, per process: the measurement behind docs/training.md's "Data
prepared once per machine".

    python scripts/lab/first_step.py --make_png_set DIR 20000       # the set: digits upscaled to 28x28, with noise
    torchrun --nproc_per_node 2 scripts/lab/first_step.py TRAIN_ARGUMENTS...

Runs `vit-scratch train`'s `main` with `Trainer.train` replaced: at the first step each process prints one line
`FIRST_STEP {...}` (seconds since it started, peak resident memory and CPU seconds from `resource.getrusage`, and the
PSS from /proc/self/smaps_rollup: shared pages divided among the processes that map them), then exits. Linux only.
"""

import json
import os
import resource
import sys
import time

STARTED = time.time()


def proportional_set_size_mb() -> float:
    """This process's PSS in MB (/proc/self/smaps_rollup)."""
    with open("/proc/self/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def report_and_exit(*args, **kwargs) -> None:
    """Stands in for `Trainer.train`: print this process's figures and end it."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    report = dict(
        rank=int(os.environ.get("RANK", "0")),
        seconds_to_first_step=round(time.time() - STARTED, 1),
        peak_rss_mb=round(usage.ru_maxrss / 1024),
        pss_mb=round(proportional_set_size_mb()),
        cpu_seconds=round(usage.ru_utime + usage.ru_stime, 1),
    )
    print("FIRST_STEP " + json.dumps(report), flush=True)
    os._exit(0)  # no teardown: the other processes stop the same way


def make_png_set(root: str, total: int) -> None:
    """`total` 28x28 gray PNGs in ten class folders under `root`: scikit-learn's digits, upscaled, with noise."""
    from pathlib import Path

    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits, rng = load_digits(), np.random.default_rng(0)
    for index in range(total):
        digit = index % len(digits.images)
        image = Image.fromarray(np.uint8(digits.images[digit] * 15)).resize((28, 28), Image.BILINEAR)
        noisy = np.asarray(image, dtype=np.int16) + rng.integers(-20, 21, (28, 28))
        folder = Path(root) / str(digits.target[digit])
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8), mode="L").save(folder / f"{index:05d}.png")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--make_png_set"]:
        make_png_set(sys.argv[2], int(sys.argv[3]))
    else:
        import transformers

        from modeling_vit_scratch.training.command import main

        transformers.Trainer.train = report_and_exit
        main(sys.argv[1:])
