"""Fixtures only (helpers live in tests/support/helpers.py): tiny odd-sized configs (37 and friends catch shape bugs), CPU,
offline."""

import os
import sys
from pathlib import Path

import pytest
import torch

# tests/support holds what the tests share (`helpers`, `hub_server`): importable by name from every room's tests
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)

from helpers import tiny_config
from hypothesis import HealthCheck, settings

# Generated inputs (tests/safety): the same examples on every run and machine, no time limit per example (a loaded
# machine is slow, not wrong), nothing remembered between runs
settings.register_profile(
    "vit-scratch", derandomize=True, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("vit-scratch")

from modeling_vit_scratch import ViTScratchConfig


@pytest.fixture
def config() -> ViTScratchConfig:
    return tiny_config()


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
