"""The benchmark: speed and memory against transformers and timm; a training run against its model alone."""
