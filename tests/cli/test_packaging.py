"""The package as users install it: a wheel outside the checkout, a base install that is the model alone."""

import json
import os
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from helpers import MODEL_FOLDER_FILES, PROCESS_TIMEOUT, REPO, made_once
from PIL import Image

BASE_REQUIREMENTS = {"torch", "transformers", "safetensors", "pillow", "numpy"}
TRAINING_ONLY = ("datasets", "accelerate", "sklearn", "matplotlib", "tensorboard", "jinja2")


# new processes, scripts or whole suites: `make test` runs them, `make test-fast` leaves them out
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel pip builds from the checkout, as `pip install .` would (built once per test run: `made_once`)."""

    def build(out: Path) -> None:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "--quiet",
                "--disable-pip-version-check",
                "-w",
                str(out),
                str(REPO),
            ],
            check=True,
            capture_output=True,
            cwd=out,
            timeout=PROCESS_TIMEOUT,
        )

    (path,) = made_once(tmp_path_factory, "test_packaging-wheel", build).glob("vit_scratch-*.whl")
    return path


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A folder the wheel is installed into (`pip install --target`), shared by the tests that only run from it
    (installed once per test run: `made_once`)."""

    def install(site: Path) -> None:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--disable-pip-version-check"]
            + ["--target", str(site), str(wheel)],
            check=True,
            capture_output=True,
            timeout=PROCESS_TIMEOUT,
        )

    return made_once(tmp_path_factory, "test_packaging-site", install)


def run_outside_checkout(code: str, site: Path, cwd: Path) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter whose `modeling_vit_scratch` is the installed one, run from `cwd`."""
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT
    )


def test_the_base_install_is_the_model_and_extras_bring_training(wheel):
    with zipfile.ZipFile(wheel) as archive:
        metadata = Parser().parsestr(archive.read(f"{wheel.name.split('-')[0]}-0.1.0.dist-info/METADATA").decode())
        assert archive.read("modeling_vit_scratch/sharing/model_card.md") == (REPO / "model_card.md").read_bytes()
        files = archive.namelist()
        entry_points = archive.read(f"{wheel.name.split('-')[0]}-0.1.0.dist-info/entry_points.txt").decode()
    # the command starts in a module outside the package: its signals are one line before torch is imported
    assert "vit-scratch = vit_scratch_command:main" in entry_points and "vit_scratch_command.py" in files
    for room in ("training", "sharing", "conversion", "explanation", "benchmark"):
        assert f"modeling_vit_scratch/{room}/__init__.py" in files, room
    assert not [name for name in files if name.startswith(("lab/", "scripts/", "tests/"))]  # the lab stays out
    # every recipe and architecture of configs/, so that the README's recipe commands work from an installed package
    shipped = sorted(str(path.relative_to(REPO)) for path in (REPO / "configs").rglob("*.json"))
    assert sorted(name.removeprefix("modeling_vit_scratch/") for name in files if "/configs/" in name) == shipped
    requirements = metadata.get_all("Requires-Dist")
    base = {line.split(";")[0].split("<")[0].split(">")[0].strip().lower() for line in requirements if ";" not in line}
    assert base == BASE_REQUIREMENTS
    train_extra = [line for line in requirements if 'extra == "train"' in line]
    for name in ("datasets", "accelerate", "scikit-learn", "matplotlib", "tensorboard", "jinja2"):
        assert any(line.lower().startswith(name) for line in train_extra), name


def test_the_model_runs_without_the_training_packages(tmp_path):
    """Import, build, save, reload through the Auto classes and classify with `pipeline`, with every training-only
    package made unimportable; and the package's pipeline class classifies a PNG named by its path in a process
    that has opened no image before (PIL registers its plugins on first use: its list of formats starts empty)."""
    Image.new("L", (9, 7), 128).save(tmp_path / "digit.png")  # written here: the new process has opened no image
    code = f"""
import sys
for name in {TRAINING_ONLY!r}:
    sys.modules[name] = None  # as if not installed
import torch
from PIL import Image
from transformers import AutoModelForImageClassification, pipeline
from modeling_vit_scratch import (
    ViTScratchConfig, ViTScratchForImageClassification, ViTScratchImageClassificationPipeline, ViTScratchImageProcessor
)
config = ViTScratchConfig(image_size=8, patch_size=4, hidden_size=12, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=16, num_channels=1, num_labels=3)
ViTScratchForImageClassification(config).save_pretrained("model")
ViTScratchImageProcessor.for_config(config).save_pretrained("model")
classify = pipeline("image-classification", model="model", pipeline_class=ViTScratchImageClassificationPipeline)
print("file:", len(classify("digit.png")))  # a local path, the first image this process opens
model = AutoModelForImageClassification.from_pretrained("model")
print("result:", type(model).__name__, len(pipeline("image-classification", model="model")(Image.new("L", (9, 7)))))
"""
    result = run_outside_checkout(code, REPO, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("file:")[-1].split()[0] == "3"
    assert result.stdout.split("result:")[-1].split() == ["ViTScratchForImageClassification", "3"]
    assert "custom code" not in result.stdout + result.stderr  # no consent prompt: the installed classes serve


TOOLING_ONLY = ("datasets", "matplotlib", "sklearn", "tensorboard", "peft", "timm", "accelerate", "jinja2")


def test_importing_the_package_and_building_a_model_loads_no_tooling(tmp_path):
    """The model room alone: importing `modeling_vit_scratch` and building and running a model loads no package that
    transformers' own ViT does not load as well."""
    report = f'print("loaded:", sorted({{name.split(".")[0] for name in sys.modules}} & set({TOOLING_ONLY!r})))'
    ours = """from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification
config = ViTScratchConfig(image_size=8, patch_size=4, hidden_size=12, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=16, num_labels=3)
ViTScratchForImageClassification(config)(torch.zeros(1, 3, 8, 8))"""
    theirs = """from transformers import ViTConfig, ViTForImageClassification
config = ViTConfig(image_size=8, patch_size=4, hidden_size=12, num_hidden_layers=1, num_attention_heads=2,
                   intermediate_size=16, num_labels=3)
ViTForImageClassification(config)(torch.zeros(1, 3, 8, 8))"""
    loaded = {}
    for name, build in (("ours", ours), ("theirs", theirs)):
        result = run_outside_checkout(f"import sys, torch\n{build}\n{report}\n", REPO, tmp_path)
        assert result.returncode == 0, result.stderr[-3000:]
        loaded[name] = set(eval(result.stdout.split("loaded:")[-1]))
    assert loaded["ours"] <= loaded["theirs"], loaded


@pytest.mark.slow
def test_the_installed_command_trains_the_digits_recipe_into_a_folder_that_loads_without_the_package(
    installed, tmp_path
):
    """`pip install` of the wheel gives `vit-scratch`; `vit-scratch train configs/train_digits.json`, the README's
    command, run outside the checkout with the installed copy (not the checkout), reads the recipe the wheel ships
    and writes a complete folder with its card, which loads through its own code where the package cannot be
    imported."""
    site = installed
    command = site / "bin" / "vit-scratch"
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    short = ["--num_train_epochs", "1", "--max_train_samples", "64", "--report_to", "none", "--disable_tqdm", "true"]
    trained = subprocess.run(
        [str(command), "train", "configs/train_digits.json", "--output_dir", "out", *short],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "Test accuracy" in trained.stdout
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (
        config["stem"] == json.loads((REPO / "configs" / "models" / "model_digits_convstem.json").read_text())["stem"]
    )
    out = tmp_path / "out"
    for name in MODEL_FOLDER_FILES:
        assert (out / name).is_file(), name
    card = (out / "README.md").read_text()
    assert card.startswith("---\n") and "{{" not in card
    code = """
import importlib.util, sys
print("package:", importlib.util.find_spec("modeling_vit_scratch").origin)  # what the command above imported
sys.modules["modeling_vit_scratch"] = None  # as if not installed
from PIL import Image
from transformers import pipeline
classify = pipeline("image-classification", model="out", trust_remote_code=True)
print("result:", type(classify.model).__module__.split(".")[0], len(classify(Image.new("L", (8, 8)), top_k=10)))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("package:")[-1].split()[0].startswith(str(site))  # the installed copy
    assert result.stdout.split("result:")[-1].split() == ["transformers_modules", "10"]
