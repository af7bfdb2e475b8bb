"""Who owns a folder, and whether a run is alive in it, as every command that writes or reads one sees it.

- Every writer (train --output_dir, explain --out, convert --output, benchmark --json) refuses the folder of a live
  training run, or a place inside it, in one line naming the run's process; a run is live while its lock is held or,
  its lock removed by hand, while its run marker names a living process that started when the marker says (a PID
  reused by another process is not the run). Every writer refuses a place inside another model's folder.
- A file is replaced only when the package can show it wrote it unchanged: by the folder's marker, else by the
  digests the training record or conversion record keep of the files written with them; a folder written by convert
  is the package's too.
- A reader says what the run behind a folder is: interrupted (and how to resume it, naming the folder where it is
  now), or finished with its weights removed; train into an interrupted run's folder says the same.
In this process: a living process for the marker is a `sleep` child.
"""

import fcntl
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from entry_points import MODEL_FOLDER_READERS, OUTPUT_ARGUMENT, Scenario, argv_reading, outcome, with_argument

from modeling_vit_scratch.common.folders import (
    CONVERSION_FILE,
    LOCK_FILE,
    MARKER_FILE,
    RECORD_FILE,
    RUN_FILE,
    claim_output_folder,
    live_owner,
    marker_owner,
    publish,
    refuse_a_model,
)
from modeling_vit_scratch.common.processes import process_start
from modeling_vit_scratch.common.run_state import run_state, start_run
from modeling_vit_scratch.sharing import push

WRITERS = {**OUTPUT_ARGUMENT, "benchmark": "--json"}


@contextmanager
def living_process():
    """A Python process of this user that lives for the block (as a run's process would: a run marker that names
    a process running another program is no run's)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait()


def marked_by(folder: Path, pid: int, started: str | None) -> None:
    """`folder`'s run marker as a run of process `pid`, started at `started`, leaves it; no lock held."""
    (folder / RUN_FILE).write_text(json.dumps({"pid": pid, "process_start": started, "command": "c", "resume": "r"}))


def writer_argv(scenario: Scenario, name: str, place: Path) -> list[str]:
    """A working command line of writer `name` whose output is `place` (benchmark: a file `place`/r.json)."""
    if name == "benchmark":
        return with_argument(scenario.argv(name), "--json", place / "r.json")
    argv = scenario.argv(name, place)
    return {"train": [*argv, "--overwrite_output_dir", "true"], "convert": [*argv, "--overwrite"]}.get(name, argv)


def snapshot(folder: Path) -> dict:
    return {path: path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize("inside", [False, True])
@pytest.mark.parametrize("name", list(WRITERS))
def test_every_writer_refuses_a_live_runs_folder_whose_lock_was_removed(name, inside, tmp_path):
    scenario = Scenario(tmp_path)
    run = tmp_path / "o5"
    shutil.copytree(scenario.model(), run)
    (run / MARKER_FILE).write_text("")
    place = run / "sub" if inside else run
    if name == "benchmark":
        place.mkdir(exist_ok=True)  # --json's folder exists: only where it is is wrong
    with living_process() as pid:
        marked_by(run, pid, process_start(pid))  # the lock is gone: the marker alone says the run lives
        before = snapshot(run)
        result = outcome(name, writer_argv(scenario, name, place))
    shown = place / "r.json" if name == "benchmark" else place
    holds = f" ({str(run)!r}, which holds it)" if inside or name == "benchmark" else ""
    assert result.error == (
        f"error: {WRITERS[name]} {str(shown)!r} is in use by another training run{holds} (process {pid}): wait for it "
        f"to end, or choose another {WRITERS[name]}."
    )
    assert snapshot(run) == before


def test_a_run_lives_while_its_lock_is_held_or_its_marker_names_the_living_process_that_wrote_it(tmp_path):
    with living_process() as pid:
        marked_by(tmp_path, pid, process_start(pid))
        assert marker_owner(tmp_path) == live_owner(tmp_path) == str(pid)
        assert run_state(tmp_path).kind == "live"
        marked_by(tmp_path, pid, "1")  # the PID now names a process started later: reused, not the run's
        assert marker_owner(tmp_path) is None
        marked_by(tmp_path, pid, None)  # a marker without its start, where the system keeps one: damaged
        assert marker_owner(tmp_path) is None and run_state(tmp_path).kind == "damaged"
        marked_by(tmp_path, pid, process_start(pid))
    assert marker_owner(tmp_path) is None  # the process ended
    assert run_state(tmp_path).kind == "interrupted"
    with open(tmp_path / LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lock.write("4242\n")
        lock.flush()
        assert live_owner(tmp_path) == "4242"


@pytest.mark.parametrize("name", list(WRITERS))
def test_every_writer_refuses_a_place_inside_another_models_folder(name, tmp_path):
    scenario = Scenario(tmp_path)
    model = tmp_path / "o3"
    shutil.copytree(scenario.model(), model)
    place = model / "conv"
    result = outcome(name, writer_argv(scenario, name, place))
    shown = place / "r.json" if name == "benchmark" else place
    holder = place if name == "benchmark" else model
    if name == "benchmark":  # the file's own folder o3/conv does not exist: refused as such, before its place
        place.mkdir()
        result = outcome(name, writer_argv(scenario, name, place))
        holder = model
    assert result.error.startswith(
        f"error: {WRITERS[name]} {str(shown)!r} is inside the model folder {str(holder)!r} (config.json, "
        "model.safetensors), where it would read as part of that model"
    ), result.error
    assert not (place / "r.json").exists() if name == "benchmark" else not place.exists()


def published_run(folder: Path) -> None:
    """A finished run's folder as `publish` leaves it: weights, config, card and the record with its digests."""
    staging = folder.parent / "staging"
    staging.mkdir()
    for name, content in {"model.safetensors": "weights", "config.json": "{}", "README.md": "card"}.items():
        (staging / name).write_text(content)
    (staging / RECORD_FILE).write_text(json.dumps({"command": "vit-scratch train"}))
    folder.mkdir()
    publish(staging, folder)


@pytest.mark.parametrize("marker", ["damaged", "deleted"])
def test_a_file_is_replaced_only_when_the_marker_or_the_record_vouches_for_it(marker, tmp_path):
    folder = tmp_path / "o1"
    published_run(folder)
    if marker == "damaged":
        (folder / MARKER_FILE).write_text("garbage{")
    else:
        (folder / MARKER_FILE).unlink()
    refuse_a_model(folder, overwrite=True, resume=False)  # the record vouches for every file
    (folder / "README.md").write_text("my own card")
    with pytest.raises(ValueError, match=r"README\.md changed since vit-scratch wrote it"):
        refuse_a_model(folder, overwrite=True, resume=False)
    (folder / "README.md").write_text("card")
    (folder / RECORD_FILE).unlink()  # nothing vouches for the files any more
    with pytest.raises(ValueError) as refused:
        refuse_a_model(folder, overwrite=True, resume=False)
    assert str(refused.value) == (
        f"--output_dir {str(folder)!r}: nothing shows that vit-scratch wrote README.md, config.json, "
        f"model.safetensors as they are now (its marker {MARKER_FILE} is missing or damaged, and no record of the "
        "run holds their digest), and --overwrite_output_dir true would replace them: nothing was changed; move them "
        "out of the folder (or delete what you do not need), then run again."
    )


def interrupted_run(scenario: Scenario, folder: Path) -> None:
    """A run killed after its checkpoint-3: its marker and lock left (its process gone), no model."""
    checkpoint = folder / "checkpoint-3"
    shutil.copytree(scenario.model(), checkpoint)
    for name in ("trainer_state.json", "optimizer.pt", "scheduler.pt", "rng_state.pth"):
        (checkpoint / name).write_text(json.dumps({"global_step": 3}))
    (folder / LOCK_FILE).write_text("4242\n")
    start_run(
        folder,
        f"vit-scratch train --output_dir {folder}",
        f"vit-scratch train --output_dir {folder} --resume_from_checkpoint true",
    )
    run = json.loads((folder / RUN_FILE).read_text())
    (folder / RUN_FILE).write_text(json.dumps({**run, "pid": 999999999}))  # its process, gone


def test_train_into_an_interrupted_runs_folder_says_so_and_how_to_resume(tmp_path):
    scenario = Scenario(tmp_path)
    folder = tmp_path / "o2"
    interrupted_run(scenario, folder)
    result = outcome("train", scenario.argv("train", folder))
    assert result.error == (
        f"error: --output_dir {str(folder)!r}: the training run of process 999999999 into {str(folder)!r} was "
        f"interrupted before it saved its model; its last checkpoint is {folder / 'checkpoint-3'}; resume it with: "
        f"vit-scratch train --output_dir {folder} --resume_from_checkpoint true; or start afresh with "
        "--overwrite_output_dir true."
    )


@pytest.mark.parametrize("name, extra", [("convert", ["--overwrite"]), ("convert", []), ("explain", [])])
def test_every_writer_names_an_interrupted_runs_folder_as_the_readers_do(tmp_path, name, extra):
    """convert --output / explain --out onto an interrupted run's folder: the run, its last checkpoint and the
    command that resumes it, as every reader says (before: convert said "not a model folder ... move those files
    away", explain "holds a model"); nothing changed."""
    scenario = Scenario(tmp_path)
    folder = tmp_path / "s4"
    interrupted_run(scenario, folder)
    before = snapshot(folder)
    argument = OUTPUT_ARGUMENT[name]
    result = outcome(name, [*with_argument(scenario.argv(name), argument, folder), *extra])
    assert result.error == (
        f"error: {argument} {str(folder)!r}: the training run of process 999999999 into {str(folder)!r} was "
        f"interrupted before it saved its model; its last checkpoint is {folder / 'checkpoint-3'}; resume it with: "
        f"vit-scratch train --output_dir {folder} --resume_from_checkpoint true; or give {argument} another folder "
        "(to start afresh there, remove the run's folder first)."
    )
    assert snapshot(folder) == before


@pytest.mark.parametrize(("name", "argument"), MODEL_FOLDER_READERS)
def test_a_moved_interrupted_run_is_resumed_where_it_is_now(name, argument, tmp_path, monkeypatch):
    monkeypatch.setattr(push, "load_verified", lambda *a, **k: pytest.fail("read the folder"))
    scenario = Scenario(tmp_path)
    interrupted_run(scenario, tmp_path / "o9")
    moved = tmp_path / "o9new"
    (tmp_path / "o9").rename(moved)
    result = outcome(name, argv_reading(scenario, name, argument, moved))
    assert f"resume it with: vit-scratch train --output_dir {moved} --resume_from_checkpoint true" in result.error
    assert f"{tmp_path / 'o9'} " not in result.error


@pytest.mark.parametrize(("name", "argument"), MODEL_FOLDER_READERS)
def test_a_finished_run_without_its_weights_is_said_as_such(name, argument, tmp_path, monkeypatch):
    monkeypatch.setattr(push, "load_verified", lambda *a, **k: pytest.fail("read the folder"))
    scenario = Scenario(tmp_path)
    folder = tmp_path / "o1"
    shutil.copytree(scenario.model(), folder)
    (folder / "checkpoint-3").mkdir()
    (folder / LOCK_FILE).write_text("4242\n")  # the lock a finished run leaves
    (folder / RECORD_FILE).write_text(json.dumps({"command": "vit-scratch train"}))
    (folder / "model.safetensors").unlink()
    result = outcome(name, argv_reading(scenario, name, argument, folder))
    shown = {"push": "FOLDER", "explain": "--model", "convert": "--input"}.get(name, argument)
    assert result.error == (
        f"error: {shown} {str(folder)!r} is the folder of a finished training run, but its weights "
        "(model.safetensors) are missing: restore them, or train again."
    )


def test_a_folder_that_convert_wrote_is_ours_to_overwrite(tmp_path):
    scenario = Scenario(tmp_path)
    folder = tmp_path / "vs1"
    assert outcome("convert", scenario.argv("convert", folder)).code == 0
    assert {CONVERSION_FILE, "model.safetensors"} <= {path.name for path in folder.iterdir()}
    with claim_output_folder(folder, overwrite=True, resume=False) as claimed:  # train --overwrite_output_dir true
        claimed.remove_leftovers()
    (folder / "config.json").write_text("{}")  # changed since convert wrote it: not ours to replace
    with pytest.raises(ValueError, match=r"config\.json changed since vit-scratch wrote it"):
        refuse_a_model(folder, overwrite=True, resume=False)


@pytest.mark.parametrize(
    "marker, kind",
    [
        ({"pid": 1}, "damaged"),  # no start time: it cannot show its run is alive (before: "in use" for ever)
        ({"pid": "1", "process_start": "5"}, "damaged"),  # no process named
        ({"pid": 1, "process_start": process_start(1)}, "interrupted"),  # alive and started then, but not Python
        ({"pid": os.getpid(), "process_start": "1"}, "interrupted"),  # this process's PID, another start
        ({"pid": 2**22 + 1, "process_start": "1"}, "interrupted"),  # no such process
    ],
)
def test_a_run_marker_that_cannot_show_its_run_is_alive_names_no_live_run(tmp_path, marker, kind):
    (tmp_path / RUN_FILE).write_text(json.dumps(marker))
    assert live_owner(tmp_path) is None
    assert run_state(tmp_path).kind == kind


def test_a_run_marker_is_its_folders_own_moved_with_it_and_foreign_when_copied(tmp_path):
    """A run marker keeps the folder it was written in (device and inode): the folder moved keeps its run (the
    resume command names where it is now); the marker copied into another folder is no run of that folder (before:
    the other folder's run was named as this one's, with its resume command), and names no live run."""
    (tmp_path / "s4").mkdir()
    start_run(tmp_path / "s4", "vit-scratch train --output_dir s4", "vit-scratch train --output_dir s4 --resume")
    (tmp_path / "s4").rename(tmp_path / "s5")
    assert run_state(tmp_path / "s5").kind == "interrupted"
    (tmp_path / "o16").mkdir()
    shutil.copy(tmp_path / "s5" / RUN_FILE, tmp_path / "o16" / RUN_FILE)
    state = run_state(tmp_path / "o16")
    assert state.kind == "damaged" and live_owner(tmp_path / "o16") is None
    assert state.damage == f"it was written in another folder, {str(tmp_path / 's4')!r}, and copied here"


@pytest.mark.parametrize("copied", [False, True])
@pytest.mark.parametrize("name, argument", [("train", "--output_dir"), *MODEL_FOLDER_READERS])
def test_a_damaged_run_marker_is_one_line_naming_it_and_the_fix_for_every_command(tmp_path, name, argument, copied):
    """A marker that names no start time, or one copied from another run's folder (`cp s4/.vit-scratch-run.json`:
    before, train --resume_from_checkpoint true said "Model saved" of a finished folder, and push named s4's run)."""
    scenario = Scenario(tmp_path)
    folder = tmp_path / "run"
    shutil.copytree(scenario.model(), folder)
    (folder / MARKER_FILE).write_text("{}")
    if copied:
        (tmp_path / "s4").mkdir()
        start_run(tmp_path / "s4", "vit-scratch train", "vit-scratch train --resume_from_checkpoint true")
        shutil.copy(tmp_path / "s4" / RUN_FILE, folder / RUN_FILE)
    else:
        (folder / RUN_FILE).write_text('{"pid": 1}')
    damage = (
        f"it was written in another folder, {str(tmp_path / 's4')!r}, and copied here"
        if copied
        else "it names process 1 but not when that process started"
    )
    if argument == "--output_dir":
        argv = with_argument(writer_argv(scenario, name, folder), argument, folder)
    else:
        argv = argv_reading(scenario, name, argument, folder)
    before = snapshot(folder)
    result = outcome(name, argv)
    assert result.one_line and result.error.endswith(
        f"its run marker {str(folder / RUN_FILE)!r} is damaged ({damage}), so it cannot show whether its run is alive: if no training run is writing {str(folder)!r}, "
        "remove that file, then run this again."
    ), result
    assert snapshot(folder) == before


@pytest.mark.parametrize("kept", [["checkpoint-5"], ["checkpoint-5", "checkpoint-10"], []])
def test_a_finished_run_s_step_is_the_one_its_record_states_never_its_newest_checkpoint(tmp_path, kept):
    """A run trained to step 20, its checkpoint-10 (and -15, -20) moved out since: a resume from checkpoint-5 says
    the run finished at 20, whichever checkpoints are left; a record from before it kept the step reads the last
    checkpoint, as before."""
    import json

    from modeling_vit_scratch.common.run_state import finished_at
    from modeling_vit_scratch.training.resumed_data import resumed_leg

    run = tmp_path / "run"
    for name in kept:
        (run / name).mkdir(parents=True)
        step = int(name.split("-")[1])
        (run / name / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": 20}))
        (run / name / "model.safetensors").write_bytes(b"")
    run.mkdir(exist_ok=True)
    (run / "training_record.json").write_text(json.dumps({"finished_at_step": 20}))
    assert finished_at(run) == 20
    if kept:
        assert resumed_leg(str(run / "checkpoint-5")) == {"resumed_from_step": 5, "finished_at_step": 20}
    (run / "training_record.json").write_text(json.dumps({}))  # written before the record kept the step
    assert finished_at(run) == (int(kept[-1].split("-")[1]) if kept else None)
