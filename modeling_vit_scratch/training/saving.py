"""What a training run writes while it trains and at its end, and how a failed write stops it: in one line, into the
folder it claimed only, never leaving a half-written checkpoint where a resume looks.

- A run writes only into the output folder it claimed (`common/folders.py` `ClaimedFolder`): before each checkpoint
  and before the model folder, the folder at its path must still be that one; a folder moved or removed while the
  run trains is never made again under its old name, and the run stops (`RunStopped`, saying where the folder is).
- A write the system refuses (a full disk, a quota, a file size limit, an I/O error) stops the run with one line
  naming what was being written and the cause (`RunStopped`); an unfinished checkpoint is removed, so the last
  complete one is what `--resume_from_checkpoint true` finds. The package's own records in a checkpoint (its data
  record, `resumed_data.py`: any callback's `keep_in_checkpoint`) are written inside the same save, so a checkpoint
  is never left looking complete without them. SIGXFSZ is ignored by every command
  (`common/commands.py` `take_signals`), so a file size limit is such an error, not a silent death.

`training/command.py` turns `RunStopped` into the line, with the last checkpoint and the command that resumes.
Training glue, never imported by the model files.
"""

import os
import shlex
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from transformers import Trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from modeling_vit_scratch.common.folders import LOCK_FILE, ClaimedFolder, not_a_runs_checkpoint
from modeling_vit_scratch.common.write_errors import refused_write


class RunStopped(Exception):
    """The run stopped before its end for a reason outside it: `why` (a sentence) and `folder`, where its
    checkpoints are now (None: removed with the folder); `back`, how to make --output_dir lead to them again, where
    it does not (None: move the folder back)."""

    def __init__(self, why: str, folder: Path | None, back: str | None = None):
        super().__init__(why)
        self.why, self.folder, self.back = why, folder, back


def check_held(claimed: ClaimedFolder | None) -> None:
    """`RunStopped` unless the claimed folder is still at its path, holding the run's lock (None: another process of
    the run, which does not hold the folder, checks nothing). The line says what happened: the lock removed (the
    folder is where it was, but no longer guarded against a second run), the path re-pointed to another folder (a
    link), the folder moved, or removed."""
    if claimed is None or claimed.held():
        return
    now = claimed.where_now()
    if now is not None and os.path.exists(claimed.path) and os.path.samefile(now, claimed.path):
        raise RunStopped(
            f"the lock {claimed.path / LOCK_FILE} was removed or replaced while training, so another command could "
            "take the folder: the run stopped rather than write into it unguarded",
            now,
        )
    if now is not None and os.path.islink(claimed.path):
        raise RunStopped(
            f"the output folder {claimed.path} now leads to another folder (the link was re-pointed) while training; "
            f"the run's folder is {now}, so the run stopped rather than write elsewhere",
            now,
            f"point the link back (ln -sfn {shlex.quote(str(now))} {shlex.quote(str(claimed.path))}) or give "
            f"--output_dir {shlex.quote(str(now))}, then ",
        )
    where = f"to {now}" if now else "or removed"
    raise RunStopped(
        f"the output folder {claimed.path} was moved {where} while training, so the run stopped rather than make it "
        "again",
        now,
    )


@contextmanager
def written_whole(path: Path, folder: Path, remove: bool = False) -> Iterator[None]:
    """Writing `path` inside the output `folder`: a write the system refuses is `RunStopped` naming `path` and the
    cause; with `remove`, `path` (a folder this write made) is removed first, so nothing half-written stays."""
    try:
        yield
    except Exception as error:
        cause = refused_write(error, folder)
        if cause is None:
            raise
        if remove:
            shutil.rmtree(path, ignore_errors=True)
        left = f", and the unfinished {path.name} was removed" if remove else ""
        raise RunStopped(
            f"writing {path} failed ({cause}; free space, or raise the file size limit, first){left}: the run stopped",
            folder,
        ) from None


class SavingIntoClaimedFolder(Trainer):
    """The Trainer whose checkpoints go only into the folder the run claimed (`claimed`, set after it is built),
    whose failed save removes the checkpoint it left unfinished, as one `RunStopped`, and which never writes into the
    files of a checkpoint it saves again (a run resumed from an earlier checkpoint): the Trainer would rewrite them
    in place, and a file hard-linked into another folder (`cp -al RUN COPY`) would change there too. The earlier
    checkpoint is moved aside, saved anew as new files, then removed (put back if the save fails)."""

    claimed: ClaimedFolder | None = None

    def _save_checkpoint(self, model, trial):
        check_held(self.claimed)
        folder = Path(self._get_output_dir(trial=trial))
        path = folder / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        foreign = not_a_runs_checkpoint(path)  # put there while the run trained (the claim refuses those before)
        if foreign:
            raise RunStopped(
                f"{path} is in the way of the run's next checkpoint and was not written by vit-scratch ("
                f"{', '.join(foreign[:4])}), and a run never moves or replaces what it did not write: the run stopped; "
                "move it out of the output folder",
                folder,
            )
        existed = path.exists()
        self.accelerator.wait_for_everyone()  # every process has looked before the folder is moved
        aside = path.with_name(f".replaced-{path.name}-{os.getpid()}") if existed and self.args.should_save else None
        if aside is not None:
            os.replace(path, aside)
        self.accelerator.wait_for_everyone()
        try:
            with written_whole(path, folder, remove=self.args.should_save):
                super()._save_checkpoint(model, trial)
                for callback in self.callback_handler.callbacks:  # the package's records, inside the same save
                    keep = getattr(callback, "keep_in_checkpoint", None)
                    if keep is not None:
                        keep(self.args, self.state)
        except BaseException:
            if aside is not None and not path.exists():
                os.replace(aside, path)
            raise
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
