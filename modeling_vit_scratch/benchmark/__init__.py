"""The benchmark: vit_scratch's speed and memory against transformers' ViT and timm on identical configs, and a
training run's cost beside its model's own steps (`command`: arguments and `main`; `models`: what is built;
`measure`: the measuring processes and rounds; `report`: ratios, tables, verdicts; `end_to_end`: the training
command against its model alone)."""
