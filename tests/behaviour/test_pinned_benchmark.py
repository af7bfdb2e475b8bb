"""The benchmark through scripts/benchmark.py: its help, and (slow tier: each implementation is timed in a process
of its own) one tiny run that writes its results file."""

import json

import pytest
from pinned import run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
]  # the pins, end to end: `make test-slow`; the rooms' own tests keep each rule in `make test`


def test_help_exits_0_and_names_the_results_file_argument(tmp_path):
    ran = run("benchmark", "--help", home=tmp_path / "home")
    assert ran.code == 0, ran
    assert "--json" in ran.stdout


@pytest.mark.slow
def test_a_tiny_run_writes_its_results(tmp_path):
    results = tmp_path / "results.json"
    argv = ["--configs", "digits-plain", "--modes", "inference", "--implementations", "vit_scratch"]
    argv += ["transformers-sdpa", "--dtype", "float32", "--rounds", "1", "--chunks", "1", "--chunk_seconds", "0"]
    argv += ["--warmup", "0", "--steps", "1", "--matmul_size", "1024", "--batch", "1", "--json", results]
    ran = run("benchmark", *argv, home=tmp_path / "home")
    assert ran.code == 0, ran
    assert json.loads(results.read_text())  # a results file, in JSON
