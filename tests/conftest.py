"""Fixtures only (helpers live in tests/helpers.py): tiny odd-sized configs (37 and friends catch shape bugs), CPU,
offline."""

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)

from helpers import tiny_config

from modeling_vit_scratch import ViTScratchConfig


@pytest.fixture
def config() -> ViTScratchConfig:
    return tiny_config()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
