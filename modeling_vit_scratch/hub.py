"""Sharing on the Hugging Face Hub: a saved model folder -> a repo that loads anywhere with `trust_remote_code=True`.

A push is a gate: the folder is loaded with the package's classes and again through the Auto classes with its own
code (`trust_remote_code=True`), and both must give identical logits on a fixed input before anything is uploaded.
The token comes from where huggingface_hub looks (`HF_TOKEN` or the saved login); it is never printed or written.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from huggingface_hub import HfApi

from .image_processing_vit_scratch import ViTScratchImageProcessor
from .model_card import render_model_card
from .modeling_vit_scratch import ViTScratchForImageClassification

# Files of a training output that travel with the model, when present.
SHARED_FILES = ("all_results.json", "training_curves.png", "training_record.json")


@dataclass
class PushResult:
    repo_url: str
    commit_id: str
    commit_url: str
    pull_request_url: str | None = None


def fixed_input(config, batch: int = 2) -> torch.Tensor:
    """The same pixel values every time: (batch, channels, height, width)."""
    generator = torch.Generator().manual_seed(0)
    height, width = config.image_size if isinstance(config.image_size, (list, tuple)) else (config.image_size,) * 2
    return torch.randn(batch, config.num_channels, height, width, generator=generator)


RELOAD_WITHOUT_PACKAGE = """
import sys
sys.modules["modeling_vit_scratch"] = None  # as on a machine without the package: only the folder's own code
import torch
from transformers import AutoModelForImageClassification
folder, inputs, outputs = sys.argv[1:4]
model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True).eval()
with torch.no_grad():
    torch.save(model(torch.load(inputs)).logits, outputs)
"""


def logits_without_package(folder: Path, pixel_values: torch.Tensor) -> torch.Tensor:
    """Logits of the folder loaded through `AutoModelForImageClassification` with `trust_remote_code=True`, in a
    new process where this package cannot be imported, so the folder's own code is what runs."""
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        torch.save(pixel_values, scratch / "inputs.pt")
        env = {**os.environ, "HF_MODULES_CACHE": str(scratch / "modules"), "HF_HUB_OFFLINE": "1"}
        result = subprocess.run(
            [sys.executable, "-c", RELOAD_WITHOUT_PACKAGE, str(folder), str(scratch / "inputs.pt"),
             str(scratch / "logits.pt")],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"{folder} does not load through AutoModelForImageClassification with its own code; "
                               f"refusing to push it:\n{result.stderr[-2000:]}")  # fmt: skip
        return torch.load(scratch / "logits.pt")


def load_verified(folder: str | Path) -> tuple[ViTScratchForImageClassification, ViTScratchImageProcessor]:
    """The folder's model and image processor, once its own code (through the Auto class) reproduces the model."""
    folder = Path(folder)
    for name in ("config.json", "preprocessor_config.json"):
        if not (folder / name).is_file():
            raise FileNotFoundError(f"{folder} has no {name}: push a folder written by save_pretrained, with the "
                                    "image processor saved beside the model (scripts/train.py writes both).")  # fmt: skip
    model = ViTScratchForImageClassification.from_pretrained(folder).eval()
    processor = ViTScratchImageProcessor.from_pretrained(folder)
    pixel_values = fixed_input(model.config)
    with torch.no_grad():
        expected = model(pixel_values).logits
    got = logits_without_package(folder.resolve(), pixel_values)
    if not torch.equal(expected, got):
        raise RuntimeError(f"{folder} does not reload identically through AutoModelForImageClassification with its "
                           f"own code (max difference {(expected - got).abs().max():.2e}); refusing to push it. "
                           "Save it again with save_pretrained.")  # fmt: skip
    return model, processor


def stage_repo(folder: Path, staging: Path, model, processor, repo_id: str, max_shard_size: str, revision=None) -> None:
    """Write the repo content: sharded safetensors, config with auto_map, code, processor, card, metrics, curves."""
    model.save_pretrained(staging, max_shard_size=max_shard_size)
    processor.save_pretrained(staging)
    for name in SHARED_FILES:
        if (folder / name).is_file():
            shutil.copy2(folder / name, staging / name)
    card = render_model_card(model.config, *read_training_files(folder), model_id=repo_id, revision=revision)
    card.save(staging / "README.md")


def push_to_hub(
    folder: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    max_shard_size: str = "2GB",
) -> PushResult:
    """Verify `folder`, then push it to `repo_id` (on branch `revision`, or as a pull request).

    Two commits: the model, then its card pinned to that model commit, so the card's loading example names a real
    revision. Returns the repo URL and the last commit.
    """
    folder = Path(folder)
    model, processor = load_verified(folder)
    api = HfApi(token=token)
    repo_url = str(api.create_repo(repo_id, private=private, exist_ok=True))
    if revision and revision != "main" and not create_pr:
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    with tempfile.TemporaryDirectory() as staging:
        staging = Path(staging)
        stage_repo(folder, staging, model, processor, repo_id, max_shard_size)
        commit = api.upload_folder(
            repo_id=repo_id, folder_path=staging, revision=revision, create_pr=create_pr,
            commit_message=commit_message or f"Upload {model.config.model_type} model from {folder.name}",
        )  # fmt: skip
        card = render_model_card(model.config, *read_training_files(folder), model_id=repo_id, revision=commit.oid)
        card_commit = api.upload_file(
            path_or_fileobj=str(card).encode(), path_in_repo="README.md", repo_id=repo_id,
            revision=commit.pr_revision if create_pr else revision,
            commit_message=f"Model card: pin the loading example to {commit.oid[:12]}",
        )  # fmt: skip
    return PushResult(repo_url, card_commit.oid, card_commit.commit_url, commit.pr_url)


def read_training_files(folder: Path) -> tuple[dict, dict]:
    """all_results.json and training_record.json of a training output ({} for each that is missing)."""
    return tuple(json.loads((folder / name).read_text()) if (folder / name).is_file() else {}
                 for name in ("all_results.json", "training_record.json"))  # fmt: skip
