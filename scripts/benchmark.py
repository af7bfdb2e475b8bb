"""Speed and memory of vit_scratch against transformers' ViT (SDPA and eager) and timm, on identical configs; or,
with `--end_to_end RECIPE`, a training run against its model alone. `python scripts/benchmark.py --help` tells how;
the code is `modeling_vit_scratch.benchmark`, the figures it measured are in docs/performance.md.

    python scripts/benchmark.py --configs digits tiny224 --rounds 5 --json results.json
    python scripts/benchmark.py --end_to_end configs/train_digits.json --rounds 3
"""

# imported first, before the command's package (torch, transformers): Ctrl-C meanwhile is one line too
from vit_scratch_command import run

if __name__ == "__main__":
    run("modeling_vit_scratch.benchmark.command")
