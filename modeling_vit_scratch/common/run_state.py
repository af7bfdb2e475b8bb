"""The state of the training run behind a model folder, read once by every command that reads a folder (push,
explain, convert --input, train --model / --teacher) before anything is loaded.

- live: a training run holds the folder's lock (`running_owner`), or the lock of the run folder a `checkpoint-N`
  belongs to, or (its lock removed by hand) its run marker names a process that lives and is the one that wrote it
  (`live_owner`: the same PID and start time): its model, or the checkpoint itself (`--save_total_limit`), may be
  replaced or removed while it is read. Every reader refuses, naming the run's process; every writer too
  (`common/folders.py` `check_place`).
- interrupted: a run started writing (`RUN_FILE`, written once every check has passed and removed when the run has
  published its model) and its process is gone: killed, stopped, crashed. Whatever model the folder holds is not
  that run's: none, or an earlier run's that an `--overwrite_output_dir` run was about to replace. A folder of a
  run from before the marker counts as interrupted when its lock is left and it holds checkpoints but no model nor
  record. The line names the run, its last complete checkpoint and the command that resumes it, naming the folder
  where it is now (moved since: `here`).
- finished without weights: a finished run's folder (its record, no marker) whose weights were removed is said as
  such, never called interrupted. A push refuses (what
  would it publish?) unless the user names the checkpoint; the other readers refuse a folder without a model and
  read an earlier run's model with a note.
"""

import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from modeling_vit_scratch.common.folders import (
    CHECKPOINT,
    LOCK_FILE,
    RECORD_FILE,
    RUN_FILE,
    check_regular_files,
    checkpoints,
    folder_identity,
    is_complete_checkpoint,
    live_owner,
    marker_damage,
    run_marker,
)
from modeling_vit_scratch.common.processes import process_start

WEIGHTS = ("model.safetensors", "model.safetensors.index.json")


def start_run(folder: str | Path, command: str, resume: str) -> None:
    """Mark `folder` as written by a run that has started: its process, the command that started it and the one
    that resumes it (token values already masked by the caller)."""
    record = {
        "pid": os.getpid(),
        "process_start": process_start(os.getpid()),  # with the PID, this process and no later one given its PID
        "output_dir": os.path.abspath(folder),  # where the commands name it: a reader of a moved folder says so
        "folder_id": folder_identity(folder),  # the folder it was written in: a copy of the marker is not its run
        "command": command,
        "resume": resume,
    }
    path = Path(folder, RUN_FILE)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(record) + "\n")
    os.replace(partial, path)


def finish_run(folder: str | Path) -> None:
    """The run that marked `folder` has published its model: the folder is a finished run's."""
    Path(folder, RUN_FILE).unlink(missing_ok=True)


@dataclass
class RunState:
    """A run folder whose run is `live` (its process is `pid`) or `interrupted`, or whose run marker is `damaged`."""

    kind: str
    folder: Path
    pid: str
    command: str | None = None
    resume: str | None = None
    damage: str | None = None  # a `damaged` marker's fault (`marker_damage`)

    def damaged_words(self) -> str:
        """What is wrong with a damaged run marker, and the fix."""
        return (
            f"its run marker {str(self.folder / RUN_FILE)!r} is damaged ({self.damage}), so it cannot show whether "
            f"its run is alive: if no training run is writing {str(self.folder)!r}, remove that file, then run this "
            "again"
        )

    def last_checkpoint(self) -> Path | None:
        complete = [path for path in checkpoints(self.folder) if is_complete_checkpoint(path)]
        return complete[-1] if complete else None

    def interrupted_words(self) -> str:
        """What the interrupted run left and how to go on, in words."""
        last = self.last_checkpoint()
        who = f"the training run of process {self.pid}" if self.pid != "unknown" else "a training run"
        if last is None:
            again = f": run its command again, {self.command}" if self.command else ": run its command again"
            return f"{who} into {str(self.folder)!r} was interrupted before its first checkpoint{again}"
        resume = f"resume it with: {self.resume}" if self.resume else "resume it with --resume_from_checkpoint true"
        return (
            f"{who} into {str(self.folder)!r} was interrupted before it saved its model; its last checkpoint is "
            f"{last}; {resume}"
        )


def run_folder(folder: Path) -> Path:
    """The folder a run writes: `folder` itself, or the run folder a `checkpoint-N` belongs to."""
    return folder.parent if CHECKPOINT.match(folder.name) else folder


def here(command: str | None, named: str | None, folder: Path) -> str | None:
    """`command` (a run's, naming its output folder `named` as an absolute path) with `--output_dir` naming `folder`,
    where the folder is now, when it was moved since (`mv OUT OUT2`): the command printed resumes the folder read."""
    if not command or not named or os.path.abspath(folder) == named:
        return command
    folder_of, and_then, rest = command.partition(" && ") if command.startswith("cd ") else ("", "", command)
    if and_then:  # run from the folder it names (`printed_command`): the moved folder named absolutely
        folder = Path(os.path.abspath(folder))
    try:
        words = shlex.split(rest)
    except ValueError:
        return command
    named_at = [index for index, word in enumerate(words) if word.partition("=")[0] in ("--output_dir", "--output-dir")]
    for index in named_at:
        name, equals, _ = words[index].partition("=")
        if equals:
            words[index] = f"{name}={folder}"
        elif index + 1 < len(words):
            words[index + 1] = str(folder)
    return (
        folder_of + and_then + shlex.join(words if named_at else [*words, "--output_dir", str(folder)])
    )  # or a recipe


def finished_at(folder: str | Path) -> int | None:
    """The step at which the run of `folder` (a run folder or one of its checkpoints) finished, or None: a run
    finished when it published its model (its record is there, its run marker gone). Its record says at which step
    (`finished_at_step`, the final state's global step), never a checkpoint's name: checkpoints may have been moved
    out since. Only a record written before it kept that step falls back to the last complete checkpoint. A run that
    was stopped, or one of before checkpoints, is not finished at any step."""
    run = run_folder(Path(folder))
    if not (run / RECORD_FILE).is_file() or run_marker(run) is not None or live_owner(run):
        return None
    try:
        step = json.loads((run / RECORD_FILE).read_text()).get("finished_at_step")
    except (OSError, ValueError, AttributeError):
        step = None
    if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
        return step
    complete = [path for path in checkpoints(run) if is_complete_checkpoint(path)]
    return checkpoint_steps(complete[-1])[0] if complete else None


def checkpoint_steps(checkpoint: str | Path) -> tuple[int, int | None]:
    """(the steps `checkpoint` has trained, the steps its run planned: None where its state does not say)."""
    state = json.loads(Path(checkpoint, "trainer_state.json").read_text())
    return int(state.get("global_step") or 0), state.get("max_steps") or None


def run_state(folder: str | Path) -> RunState | None:
    """The live or interrupted run behind `folder` (a run folder or one of its checkpoints), or None: no run, or
    a finished one."""
    run = run_folder(Path(folder))
    owner = live_owner(run)
    if owner:
        return RunState("live", run, owner)
    started = run_marker(run)
    if started is not None and marker_damage(started, run):  # a copied marker too: never this folder's run
        return RunState("damaged", run, "unknown", damage=marker_damage(started, run))
    if started is not None:
        return RunState(
            "interrupted",
            run,
            str(started.get("pid", "unknown")),
            here(started.get("command"), started.get("output_dir"), run),
            here(started.get("resume"), started.get("output_dir"), run),
        )
    has_model = any((run / name).is_file() for name in WEIGHTS)
    finished = (run / RECORD_FILE).is_file()  # a run from before the marker that published its model
    if (run / LOCK_FILE).is_file() and checkpoints(run) and not has_model and not finished:
        pid = (run / LOCK_FILE).read_text(errors="replace").strip() or "unknown"
        return RunState("interrupted", run, "unknown" if pid == str(os.getpid()) else pid)  # never this process
    return None


def check_run_state(source: str, argument: str, command: str) -> None:
    """Refuse, before anything is read, a local model folder (`source` as given to `argument`) of a live run, or of
    an interrupted run where `command` (push, explain, convert, train) has no model of its own to read there, in
    one line: the run, its last checkpoint and the command that resumes it. An interrupted run's earlier model is
    read with a note on stderr, except by push, which publishes only what the user names: the checkpoint."""
    if not os.path.isdir(source):
        return
    check_regular_files(Path(source), argument)  # a marker, record or lock that is a folder or fifo: one line
    state = run_state(source)
    if state is None:
        weights_gone = Path(source, RECORD_FILE).is_file() and not any(Path(source, name).is_file() for name in WEIGHTS)
        if weights_gone:  # a finished run's folder: its record says so, whatever the reader would guess
            raise ValueError(
                f"{argument} {source!r} is the folder of a finished training run, but its weights "
                "(model.safetensors) are missing: restore them, or train again."
            )
        return
    named_checkpoint = run_folder(Path(source)) != Path(source)
    if state.kind == "damaged":
        raise ValueError(f"{argument} {source!r}: {state.damaged_words()}.")
    if state.kind == "live":
        what = (
            f"is a checkpoint of the training run writing {str(state.folder)!r}"
            if named_checkpoint
            else "is in use by a training run"
        )
        raise ValueError(
            f"{argument} {source!r} {what} (process {state.pid}), which may replace its model while it is read: "
            "wait for that run to end, then run this again."
        )
    if named_checkpoint:  # the user chose that checkpoint: it is what it says (its card says which step)
        return
    has_model = any(Path(source, name).is_file() for name in WEIGHTS)
    last = state.last_checkpoint()
    if command == "push" or not has_model:
        held = "an earlier run's model, not that run's" if has_model else "no model"
        named = (
            f", or push that checkpoint by naming it: vit-scratch push {last} REPO_ID"
            if command == "push" and last
            else ""
        )
        raise ValueError(f"{argument} {source!r} holds {held}: {state.interrupted_words()}{named}.")
    print(
        f"note: {argument} {source!r} holds an earlier run's model; {state.interrupted_words()}.",
        file=sys.stderr,
    )
