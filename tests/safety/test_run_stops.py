"""A training run writes only into the folder it claimed, and a write the system refuses stops it in one line.

- The output folder moved (`mv OUT OUT2`) or removed while the run trains (before: the run made OUT again, unlocked,
  and wrote its next checkpoints and its model there): the run stops at its next write, naming where the folder is
  now, its last checkpoint and how to resume (move it back, then the resume command); OUT is never made again.
- A full disk, a quota or a file size limit while a checkpoint is written (before: a traceback, and a half-written
  checkpoint that a resume tripped on, or one without its data record that a resume read as nothing to compare): one
  line naming the checkpoint, the cause and the command that resumes; the unfinished checkpoint is removed, so the
  last complete one is what a resume finds. SIGXFSZ is ignored, so a file
  over `ulimit -f` is such a write, not a silent death.
"""

import errno
import os
import signal
from pathlib import Path

import pytest
from entry_points import Scenario, outcome, with_argument
from safetensors import SafetensorError

from modeling_vit_scratch.common.commands import hand_back_signals, take_signals
from modeling_vit_scratch.common.folders import checkpoints, claim_output_folder, is_complete_checkpoint
from modeling_vit_scratch.common.write_errors import refused_write
from modeling_vit_scratch.training.resumed_data import KeepDataIdentity
from modeling_vit_scratch.training.saving import RunStopped, check_held, written_whole


@pytest.mark.parametrize("change", ["lock removed", "relinked"])
def test_a_run_whose_lock_was_removed_or_whose_link_was_re_pointed_says_what_happened(tmp_path, change):
    real, other = tmp_path / "r7a", tmp_path / "r7b"
    real.mkdir(), other.mkdir()
    folder = tmp_path / "o7"
    folder.symlink_to(real) if change == "relinked" else None
    with claim_output_folder(folder if change == "relinked" else real, overwrite=False, resume=False) as claimed:
        claimed.remove_leftovers()
        if change == "relinked":
            folder.unlink()
            folder.symlink_to(other)  # ln -sfn r7b o7
        else:
            (real / ".vit-scratch.lock").unlink()
        with pytest.raises(RunStopped) as stopped:
            check_held(claimed)
    if change == "relinked":
        assert stopped.value.why.startswith(
            f"the output folder {folder} now leads to another folder (the link was re-pointed) while training; the "
            f"run's folder is {real}"
        )
        assert stopped.value.back == f"point the link back (ln -sfn {real} {folder}) or give --output_dir {real}, then "
    else:
        assert stopped.value.why.startswith(f"the lock {real / '.vit-scratch.lock'} was removed or replaced")
        assert stopped.value.folder == real and stopped.value.back is None


@pytest.mark.parametrize("change", ["moved", "removed", "replaced", "kept"])
def test_a_claimed_folder_knows_whether_it_is_still_at_its_path_and_where_it_went(tmp_path, change):
    folder, elsewhere = tmp_path / "out", tmp_path / "moved"
    with claim_output_folder(folder, overwrite=False, resume=False) as claimed:
        claimed.remove_leftovers()
        if change in ("moved", "replaced"):
            folder.rename(elsewhere)
        if change == "replaced":  # another folder of the same name, even holding a lock file: not the one claimed
            folder.mkdir()
            (folder / ".vit-scratch.lock").write_text(f"{os.getpid()}\n")
        if change == "removed":
            for path in folder.iterdir():
                path.unlink()
            folder.rmdir()
        assert claimed.held() == (change == "kept")
        assert (
            claimed.where_now() == {"moved": elsewhere, "replaced": elsewhere, "removed": None, "kept": folder}[change]
        )
        if change == "kept":
            check_held(claimed)
            return
        with pytest.raises(RunStopped) as stopped:
            check_held(claimed)
        where = f"moved to {elsewhere}" if change != "removed" else "moved or removed"
        assert f"the output folder {folder} was {where} while training" in stopped.value.why
    assert not (folder.exists() and change == "moved")  # never made again under its old name


@pytest.mark.parametrize(
    "error, cause",
    [
        (OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), "Disk quota exceeded"),
        (SafetensorError("Error while serializing: I/O error: File too large (os error 27)"), "File too large"),
        (  # torch.save's writer names no cause; this file system has room, so it is not said to be full
            RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534"),
            "the write was cut short, by a full disk or a file size limit",
        ),
        (RuntimeError("wrapped"), None),  # a failure of the code, not a write the system refused: not ours to name
        (OSError(errno.EACCES, "Permission denied"), None),
    ],
)
def test_a_write_the_system_refuses_names_the_path_and_the_cause_and_removes_the_unfinished_folder(
    tmp_path, error, cause
):
    assert refused_write(error, tmp_path) == cause
    unfinished = tmp_path / "checkpoint-4"
    unfinished.mkdir()
    (unfinished / "model.safetensors").write_bytes(b"half")
    with pytest.raises(RunStopped if cause else type(error)) as stopped, written_whole(unfinished, tmp_path, True):
        raise error
    if cause:
        assert stopped.value.why == (
            f"writing {unfinished} failed ({cause}; free space, or raise the file size limit, first), and the "
            "unfinished checkpoint-4 was removed: the run stopped"
        )
        assert stopped.value.folder == tmp_path
    assert unfinished.exists() == (cause is None)


def test_a_file_size_limit_is_an_error_while_a_command_runs_not_a_silent_death():
    previous = take_signals()
    try:
        assert signal.getsignal(signal.SIGXFSZ) == signal.SIG_IGN
    finally:
        hand_back_signals(previous, stopped=False)
    assert signal.getsignal(signal.SIGXFSZ) == previous[signal.SIGXFSZ]


@pytest.mark.integration
@pytest.mark.parametrize("fault", ["moved", "disk full"])
def test_a_run_whose_folder_moved_or_whose_disk_filled_stops_in_one_line_with_its_last_checkpoint(
    tmp_path, monkeypatch, fault
):
    scenario = Scenario(tmp_path)
    out, moved = tmp_path / "out", tmp_path / "moved"
    argv = [*scenario.argv("train", out), "--save_strategy", "epoch", "--max_train_samples", "8"]
    argv = with_argument(argv, "--num_train_epochs", 2)  # one step an epoch: checkpoint-1, then checkpoint-2
    monkeypatch.setattr("sys.argv", ["vit-scratch train", *argv])
    saved = KeepDataIdentity.on_save

    def on_save(self, args, state, control, **kwargs):  # the fault comes once checkpoint-1 is complete
        saved(self, args, state, control, **kwargs)
        if fault == "moved" and state.global_step == 1:
            out.rename(moved)

    keep = KeepDataIdentity.keep_in_checkpoint

    def full_disk(self, args, state):  # the record, the checkpoint's last write (before: kept without it, and a
        if state.global_step == 2:  # resume from it compared nothing)
            raise OSError(errno.ENOSPC, "No space left on device")
        keep(self, args, state)

    monkeypatch.setattr(KeepDataIdentity, "on_save", on_save)
    if fault == "disk full":
        monkeypatch.setattr(KeepDataIdentity, "keep_in_checkpoint", full_disk)
    result = outcome("train", argv)
    assert result.code == 1 and result.one_line, result
    folder = moved if fault == "moved" else out
    assert [path.name for path in checkpoints(folder)] == ["checkpoint-1"]
    assert is_complete_checkpoint(folder / "checkpoint-1") and not (folder / "model.safetensors").exists()
    resume = f"resume with: vit-scratch train {' '.join(argv)} --resume_from_checkpoint true"
    if fault == "moved":
        assert not out.exists()  # never made again
        assert result.error == (
            f"error: the output folder {out} was moved to {moved} while training, so the run stopped rather than "
            f"make it again: everything in {moved} is kept; the last checkpoint is {moved}/checkpoint-1; move it "
            f"back (mv {moved} {out}), then {resume}"
        )
    else:
        assert result.error == (
            f"error: writing {out}/checkpoint-2 failed (No space left on device; free space, or raise the file size "
            f"limit, first), and the unfinished checkpoint-2 was removed: the run stopped: everything in {out} is "
            f"kept; the last checkpoint is {out}/checkpoint-1; {resume}"
        )
    assert Path(folder).is_dir()


def test_a_run_resumed_in_a_hard_linked_copy_never_writes_into_the_original(tmp_path):
    """`cp -al RUN COPY`, then a resume in COPY from an earlier checkpoint (its later one cut off mid-save) saves the
    later checkpoint again: as new files (the Trainer would rewrite them in place, through the links, into RUN)."""
    scenario = Scenario(tmp_path)
    run, copy = tmp_path / "run", tmp_path / "copy"
    argv = with_argument(scenario.argv("train", run), "--num_train_epochs", "2")
    assert outcome("train", [*argv, "--save_strategy", "epoch"]).code == 0
    first, last = checkpoints(run)[0], checkpoints(run)[-1]
    for path in run.rglob("*"):  # cp -al
        target = copy / path.relative_to(run)
        target.mkdir(parents=True) if path.is_dir() else (
            target.parent.mkdir(parents=True, exist_ok=True),
            os.link(path, target),
        )
    before = {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in last.iterdir()}
    resumed = with_argument(argv, "--output_dir", copy)
    done = outcome("train", [*resumed, "--save_strategy", "epoch", "--resume_from_checkpoint", str(copy / first.name)])
    assert done.code == 1 and f"holds newer checkpoints ({last.name})" in done.error, done  # never saved over
    (copy / last.name / "trainer_state.json").unlink()  # the copy's last checkpoint cut off mid-save: saved again
    done = outcome("train", [*resumed, "--save_strategy", "epoch", "--resume_from_checkpoint", "true"])
    assert done.code == 0, done
    assert {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in last.iterdir()} == before
    assert is_complete_checkpoint(copy / last.name)
    assert all((copy / last.name / name).stat().st_nlink == 1 for name in os.listdir(copy / last.name))
    assert not list(copy.glob(".replaced-*"))


def test_a_file_put_at_the_next_checkpoints_path_while_training_stops_the_run_and_stays(tmp_path):
    """A user's file at `checkpoint-N` made after the claim (before: moved to a hidden `.replaced-checkpoint-N-PID`
    with no word): the save stops the run in one line naming it, and the file stays where it was."""
    from types import SimpleNamespace

    from modeling_vit_scratch.training.saving import SavingIntoClaimedFolder

    (tmp_path / "checkpoint-150").write_text("notes\n")
    trainer = SimpleNamespace(
        claimed=None, state=SimpleNamespace(global_step=150), _get_output_dir=lambda trial: tmp_path
    )
    with pytest.raises(RunStopped) as stopped:
        SavingIntoClaimedFolder._save_checkpoint(trainer, None, None)
    assert stopped.value.why == (
        f"{tmp_path}/checkpoint-150 is in the way of the run's next checkpoint and was not written by vit-scratch "
        "(checkpoint-150), and a run never moves or replaces what it did not write: the run stopped; move it out of "
        "the output folder"
    )
    assert sorted(os.listdir(tmp_path)) == ["checkpoint-150"] and (tmp_path / "checkpoint-150").read_text() == "notes\n"
