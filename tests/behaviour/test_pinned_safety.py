"""What never happens, whatever the command: the token (in HF_TOKEN, and given to train with --hub_token) is in no
output, no written file and no pushed file; code that a model folder names runs only when trusted; pickled weights
are never read."""

import json
import shutil
import subprocess
import sys

import hub_server
import pytest
import torch
from helpers import PROCESS_TIMEOUT
from hub_server import LocalHub
from pinned import PUSHED_FILES, SECRET, TRAINED_REPO, assert_no_secret, files_holding, forms, run, train_args, user_env
from safetensors.torch import load_file

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
]  # the pins, end to end: `make test-slow`; the rooms' own tests keep each rule in `make test`


def test_the_token_is_in_no_output_no_written_file_and_no_pushed_file(trained, explained, converted, pushed):
    """Train, explain, convert both ways and push, each with the token in HF_TOKEN: every file under their folders
    (outputs, the Hugging Face home, the local Hub's store) and every line they printed."""
    runs = [trained.ran, explained.ran, converted.to, converted.back_ran, pushed.ran]
    assert [ran.code for ran in runs] == [0] * len(runs), "\n".join(map(str, runs))
    assert_no_secret(*runs, folders=[trained.root, explained.root, converted.root, pushed.root])
    for name, data in pushed.hub.files(TRAINED_REPO).items():
        assert not any(form in data for form in forms()), name


def test_training_given_the_token_pushes_and_shows_it_nowhere(trained, tmp_path, monkeypatch):
    """--hub_token SECRET (and SECRET in HF_TOKEN), pushing at the end of training: the output folder, the pushed
    repo and everything printed are free of it."""
    monkeypatch.setattr(hub_server, "TOKEN", SECRET)  # the token the local Hub's whoami accepts
    repo, output = "local-user/trained-and-pushed", tmp_path / "out"
    argv = train_args(trained.root, output, "--push_to_hub", "true", "--hub_model_id", repo, "--hub_token", SECRET)
    with LocalHub(tmp_path / "hub") as hub:
        ran = run("train", *argv, home=tmp_path / "home", env=hub.env(tmp_path / "home"))
    assert ran.code == 0, ran
    assert PUSHED_FILES <= set(hub.files(repo)), sorted(hub.files(repo))
    assert_no_secret(ran, folders=[output, tmp_path / "hub", tmp_path / "home"])


def test_the_scan_finds_the_token_where_it_is(tmp_path):
    """The scan above can fail: the token written in UTF-16 is found."""
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / ".hidden").write_bytes(b"\xff\xfe" + SECRET.encode("utf-16-le"))
    assert files_holding(tmp_path) == [str(tmp_path / "deep" / ".hidden")]


EVIL = "from pathlib import Path\nPath({marker!r}).write_text('ran')\n"


def model_copy(trained, folder):
    """The trained model's files (no checkpoints, no run files), as a folder from elsewhere."""
    assert trained.ran.code == 0, trained.ran
    shutil.copytree(trained.model, folder, ignore=shutil.ignore_patterns("checkpoint-*", ".vit-scratch*"))
    return folder


def evil_folder(trained, folder, marker):
    """The trained model, with config.json's auto_map naming evil.py, which writes `marker` when imported."""
    model_copy(trained, folder)
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker)))
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {**config["auto_map"], "AutoModelForImageClassification": "evil.Evil"}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def reading(command: str, trained, folder, tmp_path) -> list:
    """A command line of `command` that reads the model folder `folder` (train: --model, to fine-tune)."""
    output = tmp_path / "out"
    if command == "explain":
        return ["--model", folder, "--image", trained.images / "cat" / "0.png", "--out", output]
    if command == "convert":
        return ["--to", "transformers", "--input", folder, "--output", output]
    argv = train_args(trained.root, output)
    argv[argv.index("--model") + 1] = str(folder)
    return argv


def test_the_foreign_code_runs_when_a_loader_trusts_it(trained, tmp_path):
    """The folder below is a working attack: transformers told to trust it runs evil.py."""
    marker = tmp_path / "marker"
    folder = evil_folder(trained, tmp_path / "evil", marker)
    load = f"from transformers import AutoModelForImageClassification as A\nA.from_pretrained({str(folder)!r}, "
    load += "trust_remote_code=True)"
    env = user_env(tmp_path / "home")
    subprocess.run([sys.executable, "-c", load], env=env, capture_output=True, timeout=PROCESS_TIMEOUT)
    assert marker.exists()


@pytest.mark.parametrize("command", ["explain", "convert", "train"])
def test_a_folder_naming_foreign_code_is_refused_and_the_code_never_runs(cli, trained, tmp_path, command):
    marker = tmp_path / "marker"
    folder = evil_folder(trained, tmp_path / "evil", marker)
    ran = cli(command, *reading(command, trained, folder, tmp_path))
    assert ran.code != 0, ran
    assert not marker.exists()


@pytest.mark.parametrize("command", ["explain", "convert", "train"])
def test_a_folder_with_pickled_weights_only_is_refused(cli, trained, tmp_path, command):
    """A folder as transformers' save_pretrained(safe_serialization=False) leaves it: config, processor and the
    weights as a pickle (torch.save of the state dict)."""
    assert trained.ran.code == 0, trained.ran
    folder = tmp_path / "pickled"
    folder.mkdir()
    for name in ("config.json", "preprocessor_config.json"):
        shutil.copy(trained.model / name, folder / name)
    torch.save(load_file(trained.model / "model.safetensors"), folder / "pytorch_model.bin")
    ran = cli(command, *reading(command, trained, folder, tmp_path))
    assert ran.code != 0, ran
    assert not (tmp_path / "out" / "model.safetensors").exists()
