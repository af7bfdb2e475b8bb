"""A model folder that a live training run holds (its `.vit-scratch.lock` locked by a living process: a run about to
save, or an `--overwrite_output_dir` run about to replace the model) is one line naming the run's process, before
anything is read, for every command that reads a model folder as its source (push, explain, convert). A lock that
no process holds (a finished or killed run's) is no obstacle. In this process: the lock is held on another open
file, as a run holds it."""

import fcntl
import os
from contextlib import contextmanager

import pytest
from entry_points import MODEL_ARGUMENT, Scenario, argv_reading, outcome

from modeling_vit_scratch.common.folders import LOCK_FILE, running_owner
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
