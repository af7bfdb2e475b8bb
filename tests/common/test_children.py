"""A command killed with SIGKILL leaves no process and no temporary folder behind for good: the children the
package starts die with it, its scratch folders (named with its process id) are removed by the next command, and a
conversion's staging folder beside its output by the next conversion to that output (never a living process's)."""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from entry_points import Scenario, outcome
from helpers import REPO

from modeling_vit_scratch.common.children import (
    DIE_WITH_PARENT,
    SCRATCH_PREFIX,
    remove_stale_scratch,
    scratch_folder,
)
from modeling_vit_scratch.common.folders import sibling
from modeling_vit_scratch.common.processes import this_host


def gone_process_id() -> int:
    """The id of a process that has ended (and been reaped)."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_the_scratch_folders_of_a_gone_process_are_removed_and_a_living_ones_and_other_machines_ones_kept():
    root, gone = tempfile.gettempdir(), gone_process_id()
    dead = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}push-{gone}-{this_host()}-", dir=root)
    living = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}push-{os.getppid()}-{this_host()}-", dir=root)
    other_host = "0" * 6 if this_host() != "0" * 6 else "1" * 6  # a /tmp shared between machines: its id says nothing
    elsewhere = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}push-{gone}-{other_host}-", dir=root)
    try:
        with scratch_folder("reload") as mine:
            assert mine.name.startswith(f"{SCRATCH_PREFIX}reload-{os.getpid()}-{this_host()}-")
            removed = remove_stale_scratch()
            assert os.path.basename(dead) in removed and not os.path.exists(dead)
            assert os.path.isdir(living) and mine.is_dir() and os.path.isdir(elsewhere)
    finally:
        for path in (dead, living, elsewhere):
            if os.path.isdir(path):
                os.rmdir(path)


def test_a_conversion_removes_the_staging_folder_a_killed_conversion_left_and_names_it(tmp_path, capsys):
    scenario = Scenario(tmp_path)
    output = tmp_path / "exported"
    stale, living = (sibling(output, "partial") for _ in range(2))
    stale = stale.with_name(stale.name.replace(f"-{os.getpid()}-", f"-{gone_process_id()}-"))
    living = living.with_name(living.name.replace(f"-{os.getpid()}-", f"-{os.getppid()}-"))
    for folder in (stale, living):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": "vit"}))
    result = outcome("convert", ["--to", "transformers", "--input", str(scenario.model()), "--output", str(output)])
    assert result.code == 0, result
    assert f"Removed {stale.name}, the unfinished folder that a stopped conversion to {output} left beside it." in (
        capsys.readouterr().out
    )
    assert not stale.exists() and living.is_dir() and (output / "model.safetensors").is_file()


@pytest.mark.integration
def test_a_child_of_a_killed_process_ends_with_it(tmp_path):
    """A parent that starts a child as the reload check does, killed with SIGKILL: the child ends too."""
    child = DIE_WITH_PARENT + "import time\nprint('ready', flush=True)\ntime.sleep(120)\n"
    parent = (
        "import os, subprocess, sys\n"
        "from modeling_vit_scratch.common.children import child_env\n"
        "run = subprocess.Popen([sys.executable, '-c', sys.argv[1]], env=child_env(dict(os.environ)), "
        "stdout=subprocess.PIPE, text=True)\n"
        "run.stdout.readline()\n"
        "print(run.pid, flush=True)\n"
        "run.wait()\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    starter = subprocess.Popen([sys.executable, "-c", parent, child], stdout=subprocess.PIPE, text=True, env=env)
    try:
        pid = int(starter.stdout.readline())
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            stat = Path(f"/proc/{pid}/stat")
            if stat.is_file() and stat.read_text().split()[2] == "Z":  # ended, not yet reaped by init
                return
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the child outlived its killed parent")
    finally:
        if starter.poll() is None:
            starter.kill()


PACKAGE = Path(__file__).resolve().parents[2] / "modeling_vit_scratch"


def test_every_child_process_the_package_starts_dies_with_its_parent():
    """Every module that starts a process gives it `child_env`'s environment and a command that runs
    `DIE_WITH_PARENT` first (`module_command`, or the code after it): a killed command leaves no child running."""
    from modeling_vit_scratch.benchmark.end_to_end import TRAINING_COMMAND
    from modeling_vit_scratch.benchmark.measure import package_command, worker_environment
    from modeling_vit_scratch.common.children import PARENT_VARIABLE

    starting = [
        path.relative_to(PACKAGE).as_posix()
        for path in sorted(PACKAGE.rglob("*.py"))
        if "subprocess.run(" in path.read_text() or "subprocess.Popen(" in path.read_text()
    ]
    assert starting == ["benchmark/end_to_end.py", "benchmark/measure.py", "sharing/reload_check.py"]
    for path in starting:
        text = (PACKAGE / path).read_text()
        assert "worker_environment(args)" in text or "child_env(" in text, path
    for command in (package_command("--worker"), TRAINING_COMMAND):
        assert command[:2] == [sys.executable, "-c"] and command[2].startswith(DIE_WITH_PARENT)
    assert worker_environment(argparse.Namespace(glibc_malloc_defaults=True))[PARENT_VARIABLE] == str(os.getpid())
