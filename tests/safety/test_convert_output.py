"""A conversion's output: it replaces anything only once it is complete and checked, only a model folder through and
through, and a source or an output it cannot use is one line before any conversion. The source weights, the output
folder, the staging names beside it, the optional timm and the hub cache are each tried here."""

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
from entry_points import Scenario, outcome
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file
from test_writes import snapshot

from modeling_vit_scratch.common.folders import (
    NAME_MAX,
    file_sha256,
    mark_as_ours,
    not_a_model_folder,
    sibling,
)
from modeling_vit_scratch.common.processes import this_host
from modeling_vit_scratch.conversion import command


def convert(*argv) -> list[str]:
    return [str(part) for part in argv]


def good_export(scenario: Scenario, name: str = "hf1") -> Path:
    """A good earlier `--to transformers` export of the scenario's model."""
    folder = scenario.root / name
    assert (
        outcome("convert", convert("--to", "transformers", "--input", scenario.model(), "--output", folder)).code == 0
    )
    return folder


def with_value(folder: Path, tensor: str, value: float) -> Path:
    """`folder`'s model.safetensors with one entry of `tensor` set to `value`."""
    weights = load_file(folder / "model.safetensors")
    weights[tensor] = weights[tensor].clone()
    weights[tensor].view(-1)[0] = value
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def leftovers(parent: Path) -> list[str]:
    return sorted(path.name for path in parent.iterdir() if path.name.startswith("."))


@pytest.mark.parametrize("existing", [False, True])
def test_a_failed_parity_check_leaves_the_output_as_it_was(tmp_path, monkeypatch, existing):
    scenario = Scenario(tmp_path)
    output = good_export(scenario) if existing else tmp_path / "hf1"
    if existing:  # an earlier export, told apart from the one that fails, and still one vit-scratch vouches for
        config = json.loads((output / "config.json").read_text())
        (output / "config.json").write_text(json.dumps({**config, "earlier": True}))
        mark_as_ours(output, {"config.json": file_sha256(output / "config.json")})
    before = snapshot(output) if existing else None

    def fails(*args):
        raise ValueError("The written folder does not compute what its source computes (max |difference| nan)")

    monkeypatch.setattr(command, "check_parity", fails)
    argv = convert("--to", "transformers", "--input", scenario.model(), "--output", output, "--overwrite")
    result = outcome("convert", argv)
    assert result.one_line and "does not compute what its source computes" in result.error
    assert (snapshot(output) == before) if existing else not output.exists()
    assert leftovers(tmp_path) == []  # nothing half-written beside it either


@settings(max_examples=6)
@given(
    direction=st.sampled_from(["--to", "--from"]),
    value=st.sampled_from([float("nan"), float("inf"), float("-inf")]),
    tensor=st.sampled_from(["layernorm.weight", "classifier.bias"]),
)
def test_source_weights_that_are_not_finite_are_one_line_before_converting(tmp_path_factory, direction, value, tensor):
    scenario = Scenario(tmp_path_factory.mktemp("nonfinite"))
    if direction == "--to":
        source = with_value(scenario.model(), f"vit.{tensor}" if tensor.startswith("layer") else tensor, value)
        argv = convert("--to", "transformers", "--input", source, "--output", scenario.root / "out")
    else:  # a transformers ViT folder
        source = with_value(
            good_export(scenario, "vit"), f"vit.{tensor}" if tensor.startswith("layer") else tensor, value
        )
        argv = convert("--from", "transformers", "--input", source, "--output", scenario.root / "out")
    result = outcome("convert", argv)
    assert result.one_line, result
    assert f"{source / 'model.safetensors'} holds non-finite values" in result.error and tensor in result.error
    assert "use a checkpoint saved before training diverged" in result.error
    assert not (scenario.root / "out").exists() and leftovers(scenario.root) == []


USERS_FOLDERS = {
    "an empty config and a thesis": {"config.json": "{}", "thesis.txt": "years of work", "photos/a.jpg": "jpeg"},
    "a model and a thesis": {
        "config.json": json.dumps({"model_type": "vit"}),
        "model.safetensors": "weights",
        "thesis.txt": "years of work",
    },
    "a config with no weights": {"config.json": json.dumps({"model_type": "vit"}), "notes.md": "mine"},
    "a training output with notes in a checkpoint": {
        "config.json": json.dumps({"model_type": "vit_scratch"}),
        "model.safetensors": "weights",
        "checkpoint-8/model.safetensors": "weights",
        "checkpoint-8/optimizer.pt": "state",
        "checkpoint-8/notes.txt": "my precious notes",
    },
}


@pytest.mark.parametrize("case", sorted(USERS_FOLDERS))
def test_overwrite_replaces_only_a_model_folder_through_and_through(tmp_path, case):
    scenario = Scenario(tmp_path)
    mine = tmp_path / "mine"
    for name, text in USERS_FOLDERS[case].items():
        (mine / name).parent.mkdir(parents=True, exist_ok=True)
        (mine / name).write_text(text)
    before = snapshot(mine)
    argv = convert("--to", "transformers", "--input", scenario.model(), "--output", mine, "--overwrite")
    result = outcome("convert", argv)
    assert result.one_line and f"error: {mine} is not a model folder (" in result.error
    assert "refusing to replace it even with --overwrite" in result.error
    trainer_files = ("config.json", "model.safetensors", "checkpoint-8/model.safetensors", "checkpoint-8/optimizer.pt")
    for name in USERS_FOLDERS[case]:
        if name not in trainer_files:  # every file that is not a model's or a run's is named, in a checkpoint too
            shown = name if name.startswith("checkpoint-") else name.split("/")[0] + ("/" if "/" in name else "")
            assert shown in result.error
    assert snapshot(mine) == before and leftovers(tmp_path) == []


def test_a_training_output_and_a_hub_download_are_model_folders(tmp_path):
    for folder, names in {
        tmp_path / "trained": ["all_results.json", "training_record.json", "README.md", "modeling_vit_scratch.py"],
        tmp_path / "downloaded": [".gitattributes", "model-00001-of-00002.safetensors", "preprocessor_config.json"],
    }.items():
        (folder / "checkpoint-10").mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"model_type": "vit_scratch"}))
        for name in ["model.safetensors", *names]:
            (folder / name).write_text("x")
        assert not_a_model_folder(folder) == []  # a model folder; --overwrite asks too that vit-scratch wrote it


@settings(max_examples=10)
@given(length=st.integers(1, NAME_MAX), wide=st.booleans())
def test_staging_names_beside_an_output_stay_within_a_file_name(length, wide):
    name = ("é" if wide else "a") * length
    for tag in ("partial", "old"):
        staged = sibling(Path("/work") / name, tag)
        assert len(os.fsencode(staged.name)) <= NAME_MAX and re.fullmatch(
            rf"\.a*é*\.{tag}-{os.getpid()}-{this_host()}-[0-9a-f]{{8}}", staged.name
        )
        assert staged.parent == Path("/work")


def test_a_long_output_name_converts_and_a_too_long_one_is_one_line_before_work(tmp_path, monkeypatch):
    scenario = Scenario(tmp_path)
    longest = tmp_path / ("a" * 250)
    result = outcome("convert", convert("--to", "transformers", "--input", scenario.model(), "--output", longest))
    assert result.code == 0, result
    assert (longest / "model.safetensors").is_file() and leftovers(tmp_path) == []

    monkeypatch.setattr(command, "read_source", lambda args: pytest.fail("read the source"))
    too_long = tmp_path / ("b" * 256)
    result = outcome("convert", convert("--to", "transformers", "--input", scenario.model(), "--output", too_long))
    assert result.one_line and "is 256 bytes, more than the 255 its file system can hold" in result.error
    assert "choose a shorter name" in result.error and leftovers(tmp_path) == []


def test_from_timm_without_timm_names_the_extra_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # as if not installed
    weights = tmp_path / "weights.safetensors"
    save_file({"cls_token": torch.zeros(1, 1, 8)}, weights)
    argv = convert("--from", "timm", "--timm_model", "vit_tiny_patch16_224", "--input", weights, "--output", "out")
    result = outcome("convert", argv)
    assert result.one_line and "--from timm needs the timm package" in result.error
    assert "pip install 'vit-scratch[timm]'" in result.error and not (tmp_path / "out").exists()


def test_a_hub_repo_with_an_inconsistent_cache_is_one_line_naming_it(tmp_path, monkeypatch):
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    repo = cache / "models--someone--vit"
    snapshot_folder = repo / "snapshots" / ("0" * 40)
    snapshot_folder.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    (snapshot_folder / "config.json").symlink_to("../../blobs/gone")  # its blob removed from under it
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    argv = convert("--from", "transformers", "--input", "someone/vit", "--output", tmp_path / "out")
    result = outcome("convert", argv)
    assert result.one_line, result
    assert result.error.startswith("error: Reading --input 'someone/vit' failed (No such file or directory: ")
    assert f"its copy in the Hugging Face cache is incomplete; remove {repo} and run again" in result.error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_an_empty_output_is_one_line_and_the_working_folder_stays_as_it_was(tmp_path, monkeypatch, overwrite):
    """`--output ''` would be the working folder: refused before anything is read or written there."""
    scenario, here = Scenario(tmp_path), tmp_path / "here"
    here.mkdir()
    (here / "config.json").write_text(json.dumps({"model_type": "vit"}))
    before = snapshot(here)
    monkeypatch.chdir(here)
    result = outcome(
        "convert", convert("--to", "transformers", "--input", scenario.model(), "--output", "", *overwrite)
    )
    assert result.one_line and result.error.startswith(
        "error: --output is empty (''): give it a value (folder to write"
    ), result
    assert snapshot(here) == before


def trained_folder(scenario: Scenario, name: str = "run") -> Path:
    """A training run's folder as the package leaves it: the model, its card and record, a checkpoint, and the
    marker with the digest of each file it wrote."""
    folder = scenario.root / name
    shutil.copytree(scenario.model(), folder)
    (folder / "README.md").write_text("the card the run wrote")
    (folder / "training_record.json").write_text(json.dumps({"command": "vit-scratch train"}))
    (folder / "checkpoint-3").mkdir()
    (folder / "checkpoint-3" / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    mark_as_ours(folder, {path.name: file_sha256(path) for path in folder.iterdir() if path.is_file()})
    return folder


@pytest.mark.parametrize("command_name", ["train", "convert"])
@pytest.mark.parametrize("change", ["README.md edited", "marker removed"])
def test_replacing_a_model_folder_refuses_files_vit_scratch_cannot_vouch_for(
    tmp_path, monkeypatch, command_name, change
):
    """Train's --overwrite_output_dir and convert's --overwrite follow one rule: a file is replaced only when the
    package can show it wrote it unchanged; else one line naming it, and nothing changes."""
    import modeling_vit_scratch.training.trainer as trainer_module

    monkeypatch.setattr(trainer_module, "load_image_dataset", lambda *a, **k: pytest.fail("read the data"))
    scenario = Scenario(tmp_path)
    folder = trained_folder(scenario)
    if change == "README.md edited":
        (folder / "README.md").write_text("my own notes on this model")
    else:
        (folder / ".vit-scratch-output").unlink()
    before = snapshot(folder)
    if command_name == "train":
        argv = [*scenario.argv("train", folder), "--overwrite_output_dir", "true"]
    else:
        argv = convert("--to", "transformers", "--input", scenario.model(), "--output", folder, "--overwrite")
    result = outcome(command_name, argv)
    assert result.one_line, result
    assert "README.md" in result.error and "nothing was changed" in result.error
    assert ("changed since vit-scratch wrote it" in result.error) == (change == "README.md edited")
    assert snapshot(folder) == before and leftovers(tmp_path) == []


def test_convert_overwrite_names_what_goes_with_a_training_runs_folder(tmp_path, capsys):
    scenario = Scenario(tmp_path)
    folder = trained_folder(scenario)
    argv = convert("--to", "transformers", "--input", scenario.model(), "--output", folder, "--overwrite")
    assert outcome("convert", argv).code == 0
    replaced = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Replaced"))
    assert replaced.startswith(  # then the model code files, which a transformers folder does not hold
        f"Replaced the model folder {folder}; these went with it (the new one has none): checkpoint-3/, README.md, "
        "training_record.json, "
    )
    assert not (folder / "checkpoint-3").exists() and (folder / "conversion_record.json").is_file()
    assert outcome("convert", argv).code == 0  # the converted folder is vouched for in turn
