"""Shared fixtures: tiny odd-sized configs (37 and friends catch shape bugs), CPU, offline."""

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)

from modeling_vit_scratch import ViTScratchConfig  # noqa: E402


def tiny_config(**overrides) -> ViTScratchConfig:
    """A small model with odd sizes: 3 heads of width 12, MLP 37, a 5x5 grid of 4x4 patches, 5 labels."""
    fields = dict(
        image_size=20,
        patch_size=4,
        num_channels=3,
        hidden_size=36,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=37,
        num_labels=5,
    )
    return ViTScratchConfig(**{**fields, **overrides})


@pytest.fixture
def config() -> ViTScratchConfig:
    return tiny_config()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
