"""The output folder: one object for every command that writes (train, convert, explain).

A command writes only into a folder that is new, empty, or carries the package's marker (`MARKER`: "ours"). While it
writes it holds the folder's lock (a second command into the same folder is one line, never a race), and what it
writes is staged in a private folder inside and renamed into place file by file, the files that describe a model
(its record and card) last: a reader sees the old file or the new one, never half of one. It removes only names the
package writes (`ours`), never a file of the user's.

    with OutputFolder(path, "--output_dir", replace=overwrite) as folder:
        with folder.staging() as stage:
            model.save_pretrained(stage)
            folder.publish(stage)

Training glue, never imported by the model files.
"""

import fcntl
import fnmatch
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import UserError
from .secrets import files_with_secrets, shown

MARKER = ".vit-scratch-output"  # in every folder the package creates or claims for its output
LOCK = ".vit-scratch.lock"
STAGING_PREFIX = ".saving-"
# What a model folder holds: the names the package writes and so may replace or remove in a folder that is its own.
MODEL_NAMES = (
    "config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "model-*-of-*.safetensors",
    "preprocessor_config.json",
    "*_vit_scratch.py",
    "README.md",
    "all_results.json",
    "train_results.json",
    "eval_results.json",
    "test_results.json",
    "trainer_state.json",
    "training_args.bin",
    "training_record.json",
    "conversion_record.json",
    "training_curves.png",
    "confusion_matrix.png",
    "reconstruction.png",
    "runs",
    "checkpoint-*",
    f"{STAGING_PREFIX}*",
)
DESCRIBING = ("training_record.json", "conversion_record.json", "all_results.json", "README.md")  # published last


def ours(name: str, names: tuple[str, ...] = MODEL_NAMES) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in names)


def holds_model(folder: Path) -> bool:
    return any((folder / name).exists() for name in ("model.safetensors", "model.safetensors.index.json"))


class OutputFolder:
    """A folder a command writes, held for the length of a `with` block.

    On entry: a path that is not a folder, or a folder of someone else's files (non-empty, no marker), is refused; a
    folder of ours that holds a model is refused unless `replace`, and one holding a model's files that the command
    does not write (names of `MODEL_NAMES` outside `writes`: explain's figures beside a model would read as that
    model's) always; then the folder is made (with its parents), marked and locked. `argument` names the option that
    gave the path, for the refusal's line; `fix` says how to replace a model (`--overwrite`). A folder that is, holds
    or lies inside one of `inputs` is refused."""

    def __init__(
        self,
        path: str | os.PathLike,
        argument: str,
        *,
        replace: bool = False,
        fix: str = "--overwrite",
        inputs: tuple[str | os.PathLike | None, ...] = (),
        writes: tuple[str, ...] = MODEL_NAMES,
    ):
        if not str(path).strip():
            raise UserError(f"{argument} is empty: give the folder to write to")
        self.path, self.argument, self.replace, self.fix = Path(path), argument, replace, fix
        self.writes = writes
        self.inputs = [Path(source).resolve() for source in inputs if source and Path(source).exists()]
        self._lock = None

    def check(self) -> None:
        """The refusals of `__enter__`, without making or locking anything."""
        path, named = self.path, f"{self.argument} {shown(self.path)}"
        if path.exists() and not path.is_dir():
            raise UserError(f"{named} is a file, not a folder: choose a new folder")
        real = path.resolve()
        for source in self.inputs:
            if real == source or source in real.parents or real in source.parents:
                raise UserError(f"{named} is, holds or lies inside an input of this command: choose another folder")
        entries = [entry.name for entry in path.iterdir()] if path.is_dir() else []
        if entries and MARKER not in entries:
            raise UserError(
                f"{named} holds files vit-scratch did not write ({shown(', '.join(sorted(entries)[:3]))}...): "
                "choose a new or empty folder"
            )
        if held := sorted(
            name for name in entries if ours(name) and not ours(name, (*self.writes, STAGING_PREFIX + "*"))
        ):
            raise UserError(
                f"{named} holds a model ({shown(', '.join(held[:3]))}): what this command writes would read as that "
                f"model's; give {self.argument} a folder of its own"
            )
        if holds_model(path) and not self.replace:
            raise UserError(f"{named} already holds a model: pass {self.fix} to replace it, or choose a new folder")

    def __enter__(self) -> "OutputFolder":  # noqa: PYI034
        self.check()
        self._made = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        lock = os.fdopen(descriptor, "r+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = lock.read().strip() or "unknown"
            lock.close()
            raise UserError(
                f"{self.argument} {shown(self.path)} is in use by another command (process {owner}): wait for it to "
                "end, or choose another folder"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        self._lock = lock
        (self.path / MARKER).touch()
        self.check()  # again, holding the lock: another command may have written in between
        for stale in self.path.glob(f"{STAGING_PREFIX}*"):  # what a killed command left half-written
            shutil.rmtree(stale, ignore_errors=True)
        return self

    def __exit__(self, kind, *exc) -> None:
        if self._lock is None:
            return
        if kind is not None and {entry.name for entry in self.path.iterdir()} <= {MARKER, LOCK}:
            (self.path / MARKER).unlink(missing_ok=True)  # a command stopped before writing anything leaves no trace
            (self.path / LOCK).unlink(missing_ok=True)
            if self._made:
                self.path.rmdir()
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        self._lock.close()
        self._lock = None

    @contextmanager
    def staging(self) -> Iterator[Path]:
        """A private folder inside the output folder (the same file system: a rename moves its files into place),
        removed afterwards whatever happens."""
        with tempfile.TemporaryDirectory(dir=self.path, prefix=STAGING_PREFIX) as stage:
            yield Path(stage)

    def publish(self, stage: Path, remove: tuple[str, ...] = ()) -> list[str]:
        """Move every entry of `stage` into the folder, replacing entries of the same name, the describing files last.
        Names matching `remove` (package names only) that the stage does not hold are removed first: what the new
        output no longer has. Refuses a stage holding a secret. Returns the names published."""
        if leaks := files_with_secrets([stage]):
            raise UserError(
                f"{shown(leaks[0].name)} holds a Hub token: nothing was written; remove the token from the input "
                "that put it there"
            )
        staged = sorted(stage.iterdir(), key=lambda entry: (entry.name in DESCRIBING, entry.name))
        names = {entry.name for entry in staged}
        for entry in self.path.iterdir():
            if entry.name not in names and ours(entry.name, remove) and not entry.name.startswith(STAGING_PREFIX):
                remove_entry(entry)
        for entry in staged:
            if entry.is_file():
                entry.chmod(0o644)  # staged files may be private (mkstemp); the folder is meant to be shared
            target = self.path / entry.name
            if entry.is_dir() and (target.is_dir() or target.is_symlink()):
                remove_entry(target)  # a folder cannot replace a non-empty folder or a link in one rename
            os.replace(entry, target)
        return sorted(names)


def remove_entry(entry: Path) -> None:
    """Remove a file, a link (never what it points to) or a folder."""
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink(missing_ok=True)
