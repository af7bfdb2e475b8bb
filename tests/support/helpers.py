"""Helpers shared by the tests: tiny models, tiny data sets, training arguments, the subprocesses a user's tools run.

Imported as `helpers` (likewise `hub_server`): tests/conftest.py puts tests/support/ on sys.path, and a test file run
as a script in a new process (the torchrun worker in tests/training/test_distributed.py) gets it through PYTHONPATH
(`SUPPORT`). conftest.py is for fixtures.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from filelock import FileLock
from PIL import Image
from transformers import TrainingArguments

from modeling_vit_scratch import ViTScratchConfig

REPO = Path(__file__).resolve().parents[2]
SUPPORT = Path(__file__).resolve().parent  # this folder, for the PYTHONPATH of test files run as scripts
# what a trained model folder holds: weights, config, the remote code, the processor, card, results, record, figures
MODEL_FOLDER_FILES = (
    "model.safetensors",
    "config.json",
    "modeling_vit_scratch.py",
    "configuration_vit_scratch.py",
    "preprocessor_config.json",
    "README.md",
    "all_results.json",
    "training_record.json",
    "training_curves.png",
    "confusion_matrix.png",
)
TINY_MODEL = dict(
    image_size=8, patch_size=4, hidden_size=24, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37
)


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


def tiny_model_file(tmp_path: Path, **overrides) -> str:
    """A JSON model file for `--model` (8x8 images, 2x2 patches of 4): the fastest model the scripts can train."""
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({**TINY_MODEL, **overrides}))
    return str(path)


def training_args(output_dir: Path, **overrides) -> TrainingArguments:
    fields = dict(
        output_dir=str(output_dir),
        num_train_epochs=4,
        per_device_train_batch_size=8,
        per_device_eval_batch_size=32,
        learning_rate=3e-3,
        eval_strategy="epoch",
        save_strategy="epoch",
        logging_strategy="epoch",
        load_best_model_at_end=True,
        metric_for_best_model="accuracy",
        report_to="none",
        disable_tqdm=True,
        seed=3,
    )
    return TrainingArguments(**{**fields, **overrides})


def write_imagefolder(root, classes=("cat", "dog", "fox"), per_class=6, size=(12, 10), mode="RGB"):
    """An imagefolder with one sub-folder per class; each class has its own brightness so it can be learned."""
    rng = np.random.default_rng(0)
    for index, name in enumerate(classes):
        (root / name).mkdir(parents=True)
        for k in range(per_class):
            base = 40 + 80 * index
            pixels = np.clip(base + rng.integers(-20, 20, (size[1], size[0], 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).convert(mode).save(root / name / f"{k}.png")
    return root


def in_process(main: Callable[[list[str]], object], *argv) -> int | str:
    """A command's `main(argv)` run in this process, ended as a user sees it end: 0, argparse's status, or the one
    `error: ...` line it exits with."""
    try:
        main([str(word) for word in argv])
    except SystemExit as stop:
        return stop.code
    return 0


def one_by_default(cases: list) -> list:
    """Parameters for a test that starts a new process per case: the first case runs by default, the others in the
    slow tier (`make test-slow`). For a rule a fast test already tries on every case, or one where one process shows
    what a user sees and the others repeat it."""
    return [cases[0], *(pytest.param(*_as_tuple(case), marks=pytest.mark.slow) for case in cases[1:])]


def _as_tuple(case) -> tuple:
    return case if isinstance(case, tuple) else (case,)


def made_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """The folder `name`, filled by `make(folder)` once per test run, for a module-scoped fixture whose set-up is
    costly (a training, a push, a pip install). pytest-xdist spreads a module's tests over its workers, and each
    worker would run the fixture again: the first worker to need the folder makes it under a lock, the others wait
    and read it. The tests only read it (a test that changes it would change it for the others)."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name  # the run's, not the worker's
    made = folder.with_name(f"{name}.made")  # beside the folder: the folder holds only what `make` wrote
    with FileLock(f"{folder}.lock"):
        if not made.exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed attempt left
            folder.mkdir()
            make(folder)
            made.touch()
    return folder


# How long a test waits for a process it started: long enough for a 2-core machine running other jobs (a timeout is
# there to catch a hang, never to judge speed), where 300 s was once too short for the remote-code suite.
PROCESS_TIMEOUT = 1800


def torchrun(nproc: int = 2) -> list[str]:
    """The command line that starts `nproc` processes on this machine: `--standalone` makes torchrun pick a free port
    (two tests starting torchrun at once on one fixed port, 29500 where a torch version defaults to it, would
    collide)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]


def run_script(
    *args: str, nproc: int = 1, timeout: int = PROCESS_TIMEOUT, env: dict | None = None
) -> subprocess.CompletedProcess:
    """scripts/train.py in a new process (under torchrun when `nproc` > 1), offline, from the repository root."""
    launcher = torchrun(nproc) if nproc > 1 else [sys.executable]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [*launcher, str(REPO / "scripts" / "train.py"), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


FRESH_PROCESS = textwrap.dedent(
    """
    import json, sys
    sys.modules["modeling_vit_scratch"] = None  # the package is absent: importing it would raise ImportError
    import numpy as np, torch
    from PIL import Image
    from transformers import AutoConfig, AutoImageProcessor, AutoModel, AutoModelForImageClassification, pipeline
    loads, inputs, outputs = json.loads(sys.argv[1]), *sys.argv[2:4]
    image = Image.fromarray(np.arange(30 * 40 * 3, dtype=np.uint8).reshape(30, 40, 3))
    loaded = []
    for (folder, revision), pixel_values in zip(loads, torch.load(inputs)):
        load = dict(trust_remote_code=True, revision=revision)
        model = AutoModelForImageClassification.from_pretrained(folder, **load).eval()
        assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
        base = AutoModel.from_pretrained(folder, **load).eval()
        config = AutoConfig.from_pretrained(folder, **load)
        processor = AutoImageProcessor.from_pretrained(folder, **load)
        classify = pipeline("image-classification", model=folder, **load)
        with torch.no_grad():
            loaded.append({
                "logits": model(pixel_values).logits,
                "tokens": base(pixel_values).last_hidden_state,
                "config_class": type(config).__name__,
                "processor_class": type(processor).__name__,
                "pipeline": classify(image),
            })
    torch.save(loaded, outputs)
    """
)


def run_fresh(folder, pixel_values, tmp_path, env: dict | None = None, revision: str | None = None) -> dict:
    """Load `folder` (or a repo id, with `env` pointing at a hub) in a new process where the package is absent:
    logits, base-model tokens, config and processor classes, and the pipeline's answer for a 40x30 RGB image."""
    return run_fresh_revisions(folder, pixel_values, tmp_path, env, [revision])[0]


def run_fresh_revisions(folder, pixel_values, tmp_path, env: dict | None, revisions: list[str | None]) -> list[dict]:
    """`run_fresh` for each revision of a repo (None: the default branch), in one new process."""
    return run_fresh_loads([(folder, revision, pixel_values) for revision in revisions], tmp_path, env)


def run_fresh_loads(loads: list[tuple], tmp_path, env: dict | None = None) -> list[dict]:
    """`run_fresh` for each (folder or repo id, revision, pixel_values) of `loads`, in one new process: tests that
    each load a folder of their own share one process start."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    script, inputs, outputs = tmp_path / "load.py", tmp_path / "inputs.pt", tmp_path / "outputs.pt"
    script.write_text(FRESH_PROCESS)
    torch.save([pixel_values for _, _, pixel_values in loads], inputs)
    # one thread, as this process computes (conftest): the same summation order, so logits compare bit for bit
    offline = {"HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1"}
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or offline)}
    folders = json.dumps([[str(folder), revision] for folder, revision, _ in loads])
    result = subprocess.run(
        [sys.executable, str(script), folders, str(inputs), str(outputs)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(outputs)
