"""Model folders on disk: claimed before any long work, never replaced silently, written all or nothing.

- `claim_output_folder` checks that the folder is writable, takes a lock (a second run into the same folder is
  refused while the first lives; the lock dies with its process, so a killed run leaves none behind), removes the
  staging leftovers of a killed run, and refuses a folder that already holds a model unless the user asked to
  overwrite it or to resume it.
- `resolve_checkpoint` turns `--resume_from_checkpoint` (`true` or a path) into a complete checkpoint, naming the
  incomplete ones a killed run left.
- `staging_inside` + `publish` write a training run's model files in a private folder inside its output folder
  (which also holds checkpoints and the lock) and move them into place only once they are complete and checked.
- `replaced_folder` writes a whole folder beside its destination (a conversion) and swaps it in when complete;
  an existing folder is replaced only when asked, and only if it is a model folder.

Training glue, never imported by the model files.
"""

import fcntl
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = ".vit-scratch.lock"
# What a training run writes beside the model, read again by the push.
RESULTS_FILE, RECORD_FILE, CURVES_FILE = "all_results.json", "training_record.json", "training_curves.png"
STAGING_PREFIX = ".saving-"
MODEL_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json")
RESUME_OFF = (None, False, "", "false", "False")  # values of --resume_from_checkpoint that mean "start afresh"
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
# Moved last into the output folder: weights first, then what describes them, so a kill between two moves never
# leaves a record or card that describes weights which are not there (the digest in the record would not match).
DESCRIBING_FILES = (RECORD_FILE, RESULTS_FILE, "README.md")


def checkpoints(folder: Path) -> list[Path]:
    """`checkpoint-N` sub-folders, by step."""
    found = (
        [path for path in folder.iterdir() if path.is_dir() and CHECKPOINT.match(path.name)] if folder.is_dir() else []
    )
    return sorted(found, key=lambda path: int(CHECKPOINT.match(path.name).group(1)))


def is_complete_checkpoint(path: Path) -> bool:
    """The Trainer writes `trainer_state.json` last: a checkpoint without a readable one was cut off mid-save."""
    try:
        json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return any((path / name).is_file() for name in ("model.safetensors", "model.safetensors.index.json"))


def model_contents(folder: Path) -> list[str]:
    """Names of what makes `folder` hold a model: weights, config, checkpoints."""
    return [name for name in MODEL_FILES if (folder / name).exists()] + [path.name for path in checkpoints(folder)]


def check_writable(folder: Path) -> None:
    """Create `folder` if needed and write a probe file, or one line naming the folder and the fix."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as error:
        raise ValueError(
            f"Cannot write to the output folder {str(folder)!r} ({error.strerror or error}): choose a writable "
            "--output_dir."
        ) from None


def refuse_a_model(folder: Path, overwrite: bool, resume: bool) -> None:
    """A ValueError when `folder` holds a model that neither `overwrite` nor `resume` allows to touch."""
    found = model_contents(folder)
    if found and not (overwrite or resume):
        raise ValueError(
            f"The output folder {str(folder)!r} already holds a model ({', '.join(found[:4])}): pass "
            "--overwrite_output_dir true to replace it, --resume_from_checkpoint true to continue its last "
            "checkpoint, or choose another --output_dir."
        )


@contextmanager
def claim_output_folder(folder: str | Path, overwrite: bool, resume: bool) -> Iterator[list[str]]:
    """Hold `folder` for one training run; yields the names of leftovers it removed. Raises ValueError when the
    folder is not writable, is in use by another run, or holds a model that neither `overwrite` nor `resume`
    allows to touch."""
    if not str(folder).strip():  # Path("") is the working directory: never claim it by accident
        raise ValueError(
            "--output_dir is empty: give the folder to write the model to, e.g. --output_dir outputs/vit-digits."
        )
    folder = Path(folder)
    check_writable(folder)
    with open(folder / LOCK_FILE, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            owner = lock.read().strip() or "unknown"
            raise ValueError(
                f"The output folder {str(folder)!r} is in use by another training run (process {owner}): wait for "
                "it to end, or choose another --output_dir."
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"{os.getpid()}\n")
        lock.flush()
        refuse_a_model(folder, overwrite, resume)
        leftovers = [path for path in folder.iterdir() if path.name.startswith(STAGING_PREFIX)]
        if overwrite and not resume:  # the old checkpoints would mix with the new run's; the old model stays until
            leftovers += checkpoints(folder)  # the new one replaces it
        for path in leftovers:
            shutil.rmtree(path, ignore_errors=True)
        try:
            yield [path.name for path in leftovers]
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def resolve_checkpoint(folder: str | Path, requested: str | bool | None) -> str | None:
    """`--resume_from_checkpoint`: None, `true` (the last complete checkpoint in `folder`) or a checkpoint path."""
    if requested in RESUME_OFF:
        return None
    last = requested in (True, "true", "True")
    folder = Path(folder) if last else Path(requested).parent  # a named checkpoint: the run it belongs to
    complete = [path for path in checkpoints(folder) if is_complete_checkpoint(path)]
    incomplete = [path.name for path in checkpoints(folder) if not is_complete_checkpoint(path)]
    if last:
        if not complete:
            named = f" (incomplete, cut off mid-save: {', '.join(incomplete)})" if incomplete else ""
            raise ValueError(
                f"--resume_from_checkpoint true: {str(folder)!r} has no complete checkpoint{named}; start a new run "
                "with --overwrite_output_dir true, or give a checkpoint folder."
            )
        return str(complete[-1])
    path = Path(requested)
    if not path.is_dir():
        raise ValueError(f"--resume_from_checkpoint {requested!r} is not a folder: give a checkpoint-N folder or true.")
    if not is_complete_checkpoint(path):
        way_on = (
            f"the last complete one is {complete[-1]}: resume with --resume_from_checkpoint {complete[-1]}"
            if complete
            else f"{str(folder)!r} has no complete checkpoint: start a new run with --overwrite_output_dir true"
        )
        raise ValueError(
            f"Checkpoint {requested!r} is incomplete (no readable trainer_state.json or weights: the run was stopped "
            f"while saving it); {way_on}."
        )
    return str(path)


@contextmanager
def staging_inside(destination: str | Path) -> Iterator[Path]:
    """A private folder beside `destination` (same file system) to write into; removed afterwards, whatever
    happens. Move its contents into place with `publish`."""
    destination = Path(destination)
    destination.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=destination, prefix=STAGING_PREFIX) as staging:
        yield Path(staging)


def publish(staging: Path, destination: Path) -> None:
    """Move every file of `staging` into `destination`, replacing files of the same name; weights first, the
    files that describe them last."""
    order = {name: index for index, name in enumerate(DESCRIBING_FILES, start=1)}
    for path in sorted(staging.iterdir(), key=lambda path: order.get(path.name, 0)):
        if path.is_file():
            path.chmod(0o644)  # staged files may be private (mkstemp); the folder is meant to be shared
        os.replace(path, destination / path.name)


def check_replaceable(output_dir: str | Path, overwrite: bool = False) -> Path:
    """`output_dir` as an absolute path, if a conversion may write it: new, empty, or (with `overwrite`) a model
    folder; else a FileExistsError naming it and the fix. Run it before a long conversion to fail early."""
    output_dir = Path(os.path.abspath(output_dir))  # "." has no parent to stage beside; symlinks stay links
    if output_dir.exists() and not output_dir.is_dir():
        raise FileExistsError(f"{output_dir} is a file, not a folder: choose another output folder.")
    if output_dir.is_dir() and any(output_dir.iterdir()):
        if not overwrite:
            raise FileExistsError(
                f"{output_dir} already holds files: choose another output folder or pass "
                "--overwrite (overwrite=True) to replace it."
            )
        if not (output_dir / "config.json").is_file():  # --overwrite replaces a model, not a home directory
            raise FileExistsError(
                f"{output_dir} holds files but no config.json, so it is not a model folder: refusing "
                "to replace it even with --overwrite; choose another output folder."
            )
    return output_dir


@contextmanager
def replaced_folder(output_dir: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """A temporary folder beside `output_dir` (same filesystem) to write into, moved into place only when the block
    completes: a failure or a refusal leaves `output_dir` as it was. An existing non-empty `output_dir` is refused
    unless `overwrite`; then it is replaced only once the new one is complete (moved aside, new moved in, deleted)."""
    output_dir = check_replaceable(output_dir, overwrite)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = sibling(output_dir, "partial")
    staging.mkdir()
    try:
        yield staging
        if not output_dir.exists():
            staging.rename(output_dir)
            return
        check_replaceable(output_dir, overwrite)  # again: the folder may have been filled meanwhile
        aside = sibling(output_dir, "old")
        output_dir.rename(aside)
        try:
            staging.rename(output_dir)
        except OSError:
            aside.rename(output_dir)  # put the old folder back
            raise
        shutil.rmtree(aside)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # a no-op once moved into place


def sibling(folder: Path, tag: str) -> Path:
    """A fresh hidden name beside `folder` (same filesystem, so renames are atomic): `.NAME.TAG-1a2b3c4d`."""
    return folder.parent / f".{folder.name}.{tag}-{uuid.uuid4().hex[:8]}"
