"""The benchmark: vit_scratch's speed and memory against transformers' ViT and timm on identical configs, and a
training run's cost beside its model's own steps. `scripts/benchmark.py` and `python -m
modeling_vit_scratch.benchmark.command` run it; the figures it measured live in docs/performance.md.

- `models`: the configurations, how each implementation builds them, modes, precisions, FLOPs
- `timing`: one measurement inside a process (a step, its chunks, memory, FLOP/s) and the matmul rate
- `measure`: the worker processes and the interleaved rounds
- `report`: summaries and paired ratios, the markdown table, the verdicts on the bars
- `end_to_end`: the training command against its model alone
- `command`: the arguments and `main(argv)`
"""
