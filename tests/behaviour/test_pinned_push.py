"""Pushing through scripts/push_to_hub.py to a local Hub (a new process that finds it through HF_ENDPOINT, as a
user's would): a trained folder lands on the repo with its weights, config and card, and is only read; a folder
written by plain save_pretrained (the model's, and transformers' image processor's) pushes too."""

import pytest
from helpers import TINY_MODEL
from hub_server import local_hub  # noqa: F401  (the fixture)
from pinned import PUSHED_FILES, TRAINED_REPO, assert_no_secret, run
from safetensors.torch import load
from safetensors.torch import load_file as load_tensors
from transformers import ViTImageProcessor

from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
]  # the pins, end to end: `make test-slow`; the rooms' own tests keep each rule in `make test`


def test_a_trained_folder_pushes_its_model_and_is_left_as_it_was(pushed, trained):
    assert pushed.ran.code == 0, pushed.ran
    files = pushed.hub.files(TRAINED_REPO)
    assert PUSHED_FILES <= set(files), sorted(files)
    weights, local = load(files["model.safetensors"]), load_tensors(trained.model / "model.safetensors")
    assert weights.keys() == local.keys() and all(weights[name].equal(local[name]) for name in local)
    assert pushed.model["after"] == pushed.model["before"]
    assert_no_secret(pushed.ran)


def test_a_folder_written_by_save_pretrained_pushes(local_hub, tmp_path):  # noqa: F811
    folder = tmp_path / "saved"
    ViTScratchForImageClassification(ViTScratchConfig(**TINY_MODEL, num_labels=3)).save_pretrained(folder)
    ViTImageProcessor(size={"height": 8, "width": 8}).save_pretrained(folder)
    repo = "local-user/saved-pretrained"
    ran = run("push", folder, repo, home=tmp_path / "home", env=local_hub.env(tmp_path / "home"))
    assert ran.code == 0, ran
    assert PUSHED_FILES <= set(local_hub.files(repo))
