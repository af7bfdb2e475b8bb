"""A model folder that a live training run holds (its `.vit-scratch.lock` locked by a living process: a run about to
save, or an `--overwrite_output_dir` run about to replace the model) is one line naming the run's process, before
anything is read, for every command that reads a model folder as its source (push, explain, convert). A lock that
no process holds (a finished or killed run's) is no obstacle to a finished run's folder; a run that started and
never published its model (killed, stopped: its run marker is left) is named with its last checkpoint and the command
that resumes it, by every reader (train --model / --teacher too); a push refuses it unless given the checkpoint. A
checkpoint of a live run is refused as its folder is. In this process: the lock is held on another open file, as a run
holds it."""

import fcntl
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest
from entry_points import MODEL_ARGUMENT, MODEL_FOLDER_READERS, Scenario, argv_reading, outcome

from modeling_vit_scratch.common.folders import LOCK_FILE, running_owner
from modeling_vit_scratch.common.run_state import finish_run, start_run
from modeling_vit_scratch.sharing import push

SOURCE_READERS = {name: argument for name, argument in MODEL_ARGUMENT.items() if name != "train"}
SHOWN = {"push": "FOLDER", "explain": "--model", "convert": "--input"}


@contextmanager
def held_lock(folder, pid: str):
    """`folder`'s lock held, with `pid` written in it, as a live training run holds it."""
    with open(folder / LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write(f"{pid}\n")
        lock.flush()
        yield


def fail_if_reached(*args, **kwargs):
    raise AssertionError("the command read the folder a live run holds")


@pytest.mark.parametrize("name", list(SOURCE_READERS))
def test_a_folder_a_live_run_holds_is_one_line_naming_the_run(name, tmp_path, monkeypatch):
    monkeypatch.setattr(push, "check_hub_arguments", fail_if_reached)
    monkeypatch.setattr(push, "load_verified", fail_if_reached)
    scenario = Scenario(tmp_path)
    model = scenario.model()
    argv = argv_reading(scenario, name, SOURCE_READERS[name], model)
    with held_lock(model, "4242"):
        result = outcome(name, argv)
    assert result.error == (
        f"error: {SHOWN[name]} {str(model)!r} is in use by a training run (process 4242), which may replace its "
        "model while it is read: wait for that run to end, then run this again."
    )
    assert not (tmp_path / f"out-{name}").exists()


def test_only_a_held_lock_counts(tmp_path):
    assert running_owner(tmp_path) is None  # no lock
    with held_lock(tmp_path, "424242"):  # another run's process
        assert running_owner(tmp_path) == "424242"
    with held_lock(tmp_path, str(os.getpid())):  # this run's own folder (train --push_to_hub pushes it)
        assert running_owner(tmp_path) is None
    assert (tmp_path / LOCK_FILE).exists() and running_owner(tmp_path) is None  # a run's leftover lock
    (tmp_path / "elsewhere").write_text("1\n")
    os.replace(tmp_path / LOCK_FILE, tmp_path / "old.lock")
    (tmp_path / LOCK_FILE).symlink_to(tmp_path / "elsewhere")
    with open(tmp_path / "elsewhere") as target:
        fcntl.flock(target, fcntl.LOCK_EX)
        assert running_owner(tmp_path) is None  # never read through a link


def run_folder(scenario: Scenario, steps: tuple[int, ...], model: bool) -> Path:
    """A training run's folder: checkpoints at `steps` (complete), its lock left, and with `model` a final model."""
    folder = scenario.root / "run"
    for step in steps:
        checkpoint = folder / f"checkpoint-{step}"
        shutil.copytree(scenario.model(), checkpoint)
        (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    if model:
        shutil.copytree(scenario.model(), folder, dirs_exist_ok=True)
    (folder / LOCK_FILE).write_text("4343\n")
    return folder


@pytest.mark.parametrize(("name", "argument"), MODEL_FOLDER_READERS)
def test_a_checkpoint_of_a_live_run_is_one_line_naming_the_run(name, argument, tmp_path, monkeypatch):
    monkeypatch.setattr(push, "load_verified", fail_if_reached)
    scenario = Scenario(tmp_path)
    folder = run_folder(scenario, (2,), model=False)
    with held_lock(folder, "4242"):
        result = outcome(name, argv_reading(scenario, name, argument, folder / "checkpoint-2"))
    shown = SHOWN.get(name, argument)
    assert result.error == (
        f"error: {shown} {str(folder / 'checkpoint-2')!r} is a checkpoint of the training run writing "
        f"{str(folder)!r} (process 4242), which may replace its model while it is read: wait for that run to end, "
        "then run this again."
    )


@pytest.mark.parametrize(("name", "argument"), MODEL_FOLDER_READERS)
def test_an_interrupted_run_without_a_model_names_its_last_checkpoint_and_the_resume_command(
    name, argument, tmp_path, monkeypatch
):
    monkeypatch.setattr(push, "load_verified", fail_if_reached)
    scenario = Scenario(tmp_path)
    folder = run_folder(scenario, (2, 4), model=False)
    start_run(
        folder, "vit-scratch train --output_dir run", "vit-scratch train --output_dir run --resume_from_checkpoint true"
    )
    result = outcome(name, argv_reading(scenario, name, argument, folder))
    shown = SHOWN.get(name, argument)
    push_it = f", or push that checkpoint by naming it: vit-scratch push {folder / 'checkpoint-4'} REPO_ID" * (
        name == "push"
    )
    assert result.error == (
        f"error: {shown} {str(folder)!r} holds no model: the training run of process {os.getpid()} into "
        f"{str(folder)!r} was interrupted before it saved its model; its last checkpoint is {folder / 'checkpoint-4'}; "
        f"resume it with: vit-scratch train --output_dir run --resume_from_checkpoint true{push_it}."
    )


def test_a_push_of_an_interrupted_overwrite_refuses_the_earlier_model_and_takes_a_named_checkpoint(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(push, "check_hub_arguments", fail_if_reached)
    scenario = Scenario(tmp_path)
    folder = run_folder(scenario, (), model=True)  # an earlier run's model; the new run died before a checkpoint
    start_run(folder, "vit-scratch train --output_dir run --overwrite_output_dir true", "unused")
    result = outcome("push", argv_reading(scenario, "push", None, folder))
    assert result.error == (
        f"error: FOLDER {str(folder)!r} holds an earlier run's model, not that run's: the training run of process "
        f"{os.getpid()} into {str(folder)!r} was interrupted before its first checkpoint: run its command again, "
        "vit-scratch train --output_dir run --overwrite_output_dir true."
    )
    run_folder(scenario, (3,), model=True)
    result = outcome("push", argv_reading(scenario, "push", None, folder / "checkpoint-3"))
    assert isinstance(result.traceback, AssertionError)  # went on to the Hub arguments: the checkpoint is named
    finish_run(folder)  # the run published its model: a finished run's folder
    result = outcome("push", argv_reading(scenario, "push", None, folder))
    assert isinstance(result.traceback, AssertionError)
