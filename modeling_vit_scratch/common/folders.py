"""Model folders on disk: claimed before any long work, never replaced silently, written all or nothing.

- `check_output_folder` is the rule every command that writes applies to the folder it was given, before any work:
  no token in its name (`refuse_token_in_path`); not `/`, the home folder, a checkout's root or its `.git`, nor
  inside a run's checkpoint or staging folder; not equal to, inside or holding one of the command's inputs; no
  symbolic link inside (the package never writes or deletes through one); not a live training run's folder nor
  inside one, nor inside another model's folder (`check_place`, which the benchmark's `--json` follows too); and,
  unless the folder is replaced as a whole, not a folder of someone else's files (ours: it carries `MARKER_FILE`, or a
  model, record, checkpoints or lock that the package wrote, or a conversion's record). The folder given may itself be
  a link: that is the user's explicit choice.
- `live_owner` says whether a training run lives in a folder: its lock held, or its run marker naming the living
  process that wrote it (PID and start time), so a lock removed by hand does not free the folder.
- `not_vouched_for`: a run replaces only files the package can show it wrote unchanged (the marker's digests, else
  those its record keeps of the files written with it, `keep_digests_in_records`).
- `claim_output_folder` checks that the folder is writable, takes a lock (a second run into the same folder is
  refused while the first lives; the lock dies with its process, so a killed run leaves none behind; the
  `ClaimedFolder` it yields says whether the folder is still the one claimed, never made again if moved), and refuses a
  folder that already holds a model unless the user asked to overwrite it or to resume it. It removes nothing
  itself: the staging leftovers of a killed run (and, when overwriting, the old checkpoints) go only when the
  run calls the function it yields, once every check has passed, and only what a run wrote: a checkpoint or staging
  folder holding anything else is refused before anything is removed (`not_written_by_a_run`, the same test as
  `--overwrite`'s for a conversion); a run refused before that leaves no trace (the lock and the folders the claim
  made are taken back).
- `running_owner` says whether a live training run holds a folder's lock (and its PID): a command that reads a model
  folder refuses one a run is writing, whose model it may replace at any moment (`common/sources.py`).
- `resolve_checkpoint` turns `--resume_from_checkpoint` (`true` or a path) into a complete checkpoint, naming the
  incomplete ones a killed run left, or saying that the folder does not exist or holds no checkpoint.
- `staging_inside` + `publish` write a training run's model files in a private folder inside its output folder
  (which also holds checkpoints and the lock) and move them into place only once they are complete and checked.
- `replaced_folder` writes a whole folder beside its destination (a conversion) and swaps it in when complete;
  an existing folder is replaced only when asked, and only if it is a model folder.

Training glue, never imported by the model files.
"""

import errno
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import stat
import tempfile
import unicodedata
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from modeling_vit_scratch.common.children import stale_of_dead_process
from modeling_vit_scratch.common.processes import is_python, process_alive, process_start, this_host
from modeling_vit_scratch.common.secrets import find_secrets, known_secrets, refuse_token_in_path
from modeling_vit_scratch.common.write_errors import refused_writes_named

LOCK_FILE = ".vit-scratch.lock"
RUN_FILE = ".vit-scratch-run.json"  # a started run's process and commands, until its model is published
MARKER_FILE = ".vit-scratch-output"  # in every folder the package creates or claims for its output: "ours"
# What a training run writes beside the model, read again by the push.
RESULTS_FILE, RECORD_FILE, CURVES_FILE = "all_results.json", "training_record.json", "training_curves.png"
CONVERSION_FILE = "conversion_record.json"  # a converted folder's: what its weights were converted from
VOUCHING_RECORDS = (RECORD_FILE, CONVERSION_FILE)  # records that keep the digests of the files written with them
CONFUSION_FILE = "confusion_matrix.png"  # the test split's confusion matrix
STAGING_PREFIX = ".saving-"
PROBE_PREFIX = ".probe-"  # the write test's file: another process of the same run may see it for a moment
MODEL_FILES = ("config.json", "model.safetensors", "model.safetensors.index.json")
RESUME_OFF = (None, False, "", "false", "False")  # values of --resume_from_checkpoint that mean "start afresh"
READ_FROM_INSIDE = ("--resume_from_checkpoint",)  # inputs that may lie inside the output: a run's own checkpoints
CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
# The names of the figures explain writes (`explanation/prediction.py`): in an output folder, explain's own; they
# describe the model explained, so no training run's model may sit beside them
FIGURES = ("patch_grid.png", "attention_rollout.png", "gradient_rollout_class_*.png", "attention_per_layer.png")
FIGURES += ("fig7_*.png",)
HELD_LOCKS: set[tuple[int, int]] = set()  # (device, inode) of the locks this process holds (`claim_output_folder`)
# Moved last into the output folder: weights first, then what describes them, so a kill between two moves never
# leaves a record or card that describes weights which are not there (the digest in the record would not match).
DESCRIBING_FILES = (RECORD_FILE, RESULTS_FILE, "README.md")
# Every argument of every command that names a FILE the command writes (the others write folders): `check_output_file`
OUTPUT_FILE_ARGUMENTS = {"benchmark": ("--json",)}


def read_regular(path: Path) -> str:
    """The text of the regular file at `path`, never through a link nor waiting on a fifo: an OSError for anything
    else (a folder, a fifo, a device), which the readers of markers and records take as no such file."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as stream:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return stream.read().decode()


def check_output_file(value: str, argument: str) -> None:
    """One line when the file an argument names for a command to write (`OUTPUT_FILE_ARGUMENTS`) is already there as
    something other than a regular file: a folder, a fifo, a device or a socket, which no write can replace (and a
    fifo would hold the command for ever when opened). Checked before any work; never opens the path."""
    if os.path.lexists(value) and not os.path.islink(value) and not stat.S_ISREG(os.lstat(value).st_mode):
        kind = "a folder" if os.path.isdir(value) else "not a regular file (a device, fifo or socket)"
        raise ValueError(
            f"{argument} {value!r} is {kind}, and {argument} names a file to write: nothing was read or changed; give "
            "a new file name, or a file this command wrote."
        )


def not_regular_files(folder: Path) -> list[str]:
    """The names in `folder` where the package keeps a file (its marker, run marker, lock, records, a model's
    files: `MODEL_FOLDER_FILES`, `MODEL_CODE`) that hold something else: a folder, a fifo, a device (a link is
    refused as a link). Reading or replacing one would fail half-way, or wait for ever."""
    names = sorted(MODEL_FOLDER_FILES | MODEL_CODE)
    return [
        name
        for name in names
        if os.path.lexists(folder / name)
        and not os.path.islink(folder / name)
        and not stat.S_ISREG(os.lstat(folder / name).st_mode)
    ]


def check_regular_files(folder: Path, argument: str) -> None:
    """One line when `folder` holds something other than a file where the package keeps one (`not_regular_files`),
    before any work."""
    found = not_regular_files(folder) if folder.is_dir() else []
    if found:
        shown = ", ".join(str(folder / name) for name in found[:4])
        raise ValueError(
            f"{argument} {str(folder)!r}: {shown} {'is' if len(found) == 1 else 'are'} not a regular file (a folder, "
            f"fifo or device), where vit-scratch keeps a file of that name: nothing was changed; remove or rename "
            f"{them(found)}, or choose another {argument}."
        )


def checkpoints(folder: Path) -> list[Path]:
    """`checkpoint-N` sub-folders, by step."""
    found = (
        [path for path in folder.iterdir() if path.is_dir() and CHECKPOINT.match(path.name)] if folder.is_dir() else []
    )
    return sorted(found, key=lambda path: int(CHECKPOINT.match(path.name).group(1)))


def is_checkpoint(path: Path) -> bool:
    """A Trainer checkpoint, by its content, whatever its name (`cp -r OUT/checkpoint-80 ck80`): its
    `trainer_state.json`, which no run folder holds, or by its `checkpoint-N` name (one cut off mid-save)."""
    return bool(CHECKPOINT.match(path.name)) or (path / "trainer_state.json").is_file()


def is_complete_checkpoint(path: Path) -> bool:
    """The Trainer writes `trainer_state.json` last: a checkpoint without a readable one was cut off mid-save."""
    try:
        json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return any((path / name).is_file() for name in ("model.safetensors", "model.safetensors.index.json"))


# what a checkpoint needs, besides its weights, to go on exactly as the run would have: the optimiser's moments, the
# schedule's position, the random state (globs: the Trainer names them by process or shard where there are many, and
# DeepSpeed keeps the optimiser and schedule in its own global_step folder)
RUN_STATES = {
    "optimizer.pt": ("optimizer*", "global_step*"),
    "scheduler.pt": ("scheduler*.pt", "global_step*"),
    "rng_state.pth": ("rng_state*.pth",),
}


def missing_run_states(path: Path) -> list[str]:
    """The Trainer states `path` lacks to continue its run exactly (`RUN_STATES`): all of them in a checkpoint
    written with --save_only_model true, which holds the weights only."""
    return [
        name
        for name, patterns in RUN_STATES.items()
        if not any(found for pattern in patterns for found in Path(path).glob(pattern))
    ]


def check_continuable(checkpoint: str | Path) -> None:
    """A checkpoint to resume holds every state its run needs to go on exactly (`missing_run_states`), or one line
    naming those it lacks and the fix: a resume from the weights alone would start a fresh optimiser and schedule,
    and end with other weights than the run it claims to continue."""
    missing = missing_run_states(Path(checkpoint))
    if missing:
        raise ValueError(
            f"--resume_from_checkpoint: {checkpoint} has no {', '.join(missing)} (it was written with "
            "--save_only_model true, or they were removed), so the run cannot go on as it would have: fine-tune from "
            f"its weights with --model {checkpoint} (without --resume_from_checkpoint) into another --output_dir, or "
            "start a new run."
        )


def model_contents(folder: Path) -> list[str]:
    """Names of what makes `folder` hold a model: weights, config, checkpoints."""
    return [name for name in MODEL_FILES if (folder / name).exists()] + [path.name for path in checkpoints(folder)]


def written_by_us(folder: Path) -> bool:
    """Whether `folder` is one a training run of the package wrote: its marker, or (from versions before the marker)
    a run's lock, record or checkpoints; or one that convert wrote (its record with the weights' digest). A model's files alone do not say who wrote the rest of the folder (a
    `save_pretrained` folder may hold the user's own README.md), so they do not make it ours."""
    ours = any((folder / name).is_file() for name in (MARKER_FILE, LOCK_FILE, RECORD_FILE)) or bool(checkpoints(folder))
    return ours or "weights_sha256" in record_of(folder, CONVERSION_FILE)  # a folder that convert wrote


def links_inside(folder: Path) -> list[Path]:
    """Symbolic links anywhere under `folder` (not followed)."""
    found = []
    for parent, folders, files in os.walk(folder):
        found += [Path(parent, name) for name in folders + files if os.path.islink(os.path.join(parent, name))]
    return sorted(found)


def unsafe_location(real: str) -> str | None:
    """Why the folder at real path `real` is no place for output: `/`, the home folder, a checkout's root or its
    `.git`, or a folder that a training run manages (a `checkpoint-N` or staging folder, and anything inside one)."""
    if real == os.path.realpath(os.sep):
        return "the root folder"
    if real == os.path.realpath(Path.home()):
        return "your home folder"
    if os.path.lexists(os.path.join(real, ".git")):
        return "the root of a git checkout (its own files would be replaced)"
    for part in (real, *map(str, Path(real).parents)):
        path = Path(part)
        if path.name == ".git":
            return f"inside the git folder {part} (the repository's own records)"
        if (CHECKPOINT.match(path.name) and written_by_us(path.parent)) or path.name.startswith(STAGING_PREFIX):
            return f"inside {part}, which the training run in {path.parent} writes and removes itself"
    return None


def read_from(source: str | None) -> str | None:
    """Where an input is read from on this machine: a local path as given; a Hub model id, its folder in the Hub
    cache (the snapshot a command loads links into it), when it is there; else None (nothing here to overwrite)."""
    if not source:
        return None
    if os.path.exists(source):
        return source
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(source)
    except HFValidationError:
        return None
    cached = os.path.join(constants.HF_HUB_CACHE, repo_folder_name(repo_id=source, repo_type="model"))
    return cached if os.path.isdir(cached) else None


def overlap(real: str, argument: str, source: str) -> str | None:
    """How the output at real path `real` overlaps the input `source` (given as `argument`), or None."""
    other = os.path.realpath(source)
    if real == other:
        return "is"
    if os.path.commonpath([real, other]) == other:
        return "is inside"
    if os.path.commonpath([real, other]) == real and argument not in READ_FROM_INSIDE:
        return "holds"
    return None


def file_above(folder: Path) -> Path | None:
    """The nearest existing folder above `folder` when it is not a folder (a file: nothing can be made inside it)."""
    existing = next((parent for parent in Path(os.path.abspath(folder)).parents if os.path.exists(parent)), None)
    return None if existing is None or existing.is_dir() else existing


def dangling_link(folder: Path) -> Path | None:
    """`folder`, or the folder above it, that is a symbolic link to a path that does not exist (nothing can be made
    through it, and the system says only "File exists"), or None."""
    absolute = Path(os.path.abspath(folder))
    return next((path for path in (absolute, *absolute.parents) if path.is_symlink() and not path.exists()), None)


def refuse_dangling_link(folder: Path, argument: str) -> None:
    """A ValueError when `folder` or a folder above it is a symbolic link to nothing (`dangling_link`)."""
    link = dangling_link(folder)
    if link:
        what = "" if link == Path(os.path.abspath(folder)) else f" cannot be made: {str(link)!r} above it"
        raise ValueError(
            f"{argument} {str(folder)!r}{what} is a symbolic link to {os.readlink(link)!r}, which does not exist: "
            f"give {argument} the real path, or make the folder the link points to."
        )


def check_output_folder(
    folder: str | Path,
    argument: str,
    inputs: dict[str, str | None] | None = None,
    foreign: bool = True,
    live: bool = True,
    runs: bool = True,
) -> Path:
    """The rule for every folder a command writes into, applied before any work (see the module's docstring).
    `live=False` leaves out `check_place`'s test of a live run: for the other processes of a run, whose first
    process holds the folder.
    `inputs` maps each argument the command reads from to its value (a local path, or a Hub model id: its folder in
    the Hub cache; None skipped);
    `foreign=False` leaves a folder of other files to the caller (a conversion replaces its folder as a whole);
    `runs=False` leaves an interrupted run's folder to the caller (train, which may resume or overwrite it).
    Returns the folder; raises ValueError naming it, what is wrong and the fix."""
    if not str(folder).strip():
        raise ValueError(f"{argument} is empty: give the folder to write to.")
    refuse_token_in_path(argument, folder)  # it would become a folder's name, printed in every line naming it
    check_name_lengths(Path(folder), argument)  # before any look at it: the system refuses such names
    folder, real = Path(folder), os.path.realpath(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{argument} {str(folder)!r} is a file, not a folder: give a folder to write into.")
    place = unsafe_location(real)
    if place:
        raise ValueError(
            f"{argument} {str(folder)!r} is {place}: give a folder of its own, e.g. {argument} outputs/NAME."
        )
    for name, source in (inputs or {}).items():
        place = read_from(source)
        how = overlap(real, name, place) if place else None
        if how:
            cached = f" (its Hub cache folder {place})" if place != source else ""
            raise ValueError(
                f"{argument} {str(folder)!r} {how} the input {name} {source!r}{cached}: writing there could replace "
                f"what is read; give {argument} a folder apart from every input."
            )
    check_regular_files(folder, argument)
    check_place(real, argument, folder, live)
    if runs:
        refuse_a_runs_folder(folder, argument)
    refuse_dangling_link(folder, argument)
    blocker = file_above(folder)
    if blocker:
        raise ValueError(
            f"{argument} {str(folder)!r} cannot be made: {str(blocker)!r} above it is a file, not a folder; give "
            f"{argument} a folder outside that file, e.g. beside it."
        )
    if not folder.is_dir():
        return folder
    links = links_inside(folder)
    if links:
        named = ", ".join(f"{path} -> {os.readlink(path)}" for path in links[:3])
        raise ValueError(
            f"{argument} {str(folder)!r} holds symbolic links ({named}): vit-scratch never writes or deletes "
            "through a link; remove them or give another folder."
        )
    others = sorted(path.name for path in folder.iterdir() if not path.name.startswith(PROBE_PREFIX))
    if foreign and others and not written_by_us(folder):
        raise ValueError(
            f"{argument} {str(folder)!r} holds files that vit-scratch did not write ({', '.join(others[:4])}): "
            "refusing to write among them; give a new or empty folder."
        )
    return folder


def refuse_a_runs_folder(folder: Path, argument: str) -> None:
    """A ValueError when `folder` is the folder of an interrupted training run, or holds a run marker that cannot
    show its run (`run_state`), in the words every reader of the folder uses: the run, its last checkpoint and the
    command that resumes it. A writer other than the run's own would replace or bury what the run left."""
    from modeling_vit_scratch.common.run_state import run_state  # it reads this module's names

    state = run_state(folder) if folder.is_dir() else None
    if state is not None and state.kind == "damaged":
        raise ValueError(f"{argument} {str(folder)!r}: {state.damaged_words()}.")
    if state is not None and state.kind == "interrupted":
        raise ValueError(
            f"{argument} {str(folder)!r}: {state.interrupted_words()}; or give {argument} another folder (to start "
            "afresh there, remove the run's folder first)."
        )


def write_file(path: Path, content: bytes) -> None:
    """Write `content` to `path` whole or not at all (staged beside it, then moved into place), never through a
    symbolic link (an OSError if `path` is one); a write the system refuses is one line naming `path`, and leaves
    the file as it was (`refused_writes_named`)."""
    if os.path.islink(path):
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), str(path))
    staged = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        with refused_writes_named(str(path), f"{path} is as it was"):
            descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with os.fdopen(descriptor, "wb") as stream:
                stream.write(content)
            os.replace(staged, path)
    finally:
        staged.unlink(missing_ok=True)


def mark_as_ours(folder: Path, written: dict[str, str] | None = None) -> None:
    """Create `folder` if needed and leave the marker that makes it one the package may write into again. The
    marker also keeps the SHA-256 of each file the package put there (`written`, added to those it holds), so a file
    changed since is known not to be the package's any more (`changed_since_written`)."""
    folder.mkdir(parents=True, exist_ok=True)
    marker = {"written_by": "vit-scratch", "files_sha256": {**written_files(folder), **(written or {})}}
    staged = folder / f"{PROBE_PREFIX}{MARKER_FILE}"  # moved into place whole: a cut write loses no digest
    try:
        write_file(staged, (json.dumps(marker, indent=2, sort_keys=True) + "\n").encode())
        os.replace(staged, folder / MARKER_FILE)
    finally:
        staged.unlink(missing_ok=True)  # a no-op once moved into place


def written_files(folder: Path) -> dict[str, str]:
    """The SHA-256 of each file the package put into `folder`, as its marker keeps them ({} for a marker written
    before they were kept, or none)."""
    try:
        marker = json.loads(read_regular(folder / MARKER_FILE))
    except (OSError, ValueError):
        return {}
    kept = marker.get("files_sha256") if isinstance(marker, dict) else None
    return kept if isinstance(kept, dict) else {}


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file at `path`, read in blocks."""
    with open(path, "rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


def changed_since_written(folder: Path) -> list[str]:
    """The files the package put into `folder` that were changed since (by hand: a card edited after the run): no
    longer the package's, so never replaced or removed by it. A file removed since is not listed."""
    return sorted(
        name
        for name, digest in written_files(folder).items()
        if (folder / name).is_file() and not (folder / name).is_symlink() and file_sha256(folder / name) != digest
    )


def check_writable(folder: Path) -> None:
    """Create `folder` if needed and write a probe file, or one line naming the folder and the fix."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=PROBE_PREFIX):
            pass
    except OSError as error:
        raise ValueError(
            f"Cannot write to the output folder {str(folder)!r} ({error.strerror or error}): choose a writable "
            "--output_dir."
        ) from None


def record_of(folder: Path, name: str) -> dict:
    """The record `name` (`RECORD_FILE`, `CONVERSION_FILE`) in `folder` as a dict, {} without a readable one."""
    try:
        record = json.loads(read_regular(folder / name))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def keep_digests_in_records(staging: Path) -> None:
    """Add to each record in `staging` (a training run's, a conversion's) the SHA-256 of every other file written
    with it (`written_sha256`), so the record vouches for them even where the folder's marker is lost."""
    for name in VOUCHING_RECORDS:
        record = record_of(staging, name)
        if record:
            others = sorted(path for path in staging.iterdir() if path.is_file() and path.name != name)
            record["written_sha256"] = {path.name: file_sha256(path) for path in others}
            write_file(staging / name, (json.dumps(record, indent=2) + "\n").encode())


def replaced_by_a_run(name: str) -> bool:
    """Whether a file of this name in its output folder is one a training run (or a conversion) writes, and so
    would replace: the model's files, its card, results, pictures and records; not the package's dot-files."""
    return not name.startswith(".") and (name in MODEL_FOLDER_FILES | MODEL_CODE or bool(SHARD_NAME.match(name)))


def not_vouched_for(folder: Path) -> tuple[list[str], list[str]]:
    """(changed, unknown): the files of `folder` a run would replace (`replaced_by_a_run`) that the package cannot
    show it wrote unchanged. A file is vouched for by its SHA-256 as the folder's marker keeps it, else as a record
    keeps it (`written_sha256`, written with the record); a record by being one; for a folder of an older version,
    the weights by a record's `weights_sha256` and a training record's config and processor by its `files_sha256`.
    `changed`: a digest is kept and the file differs (edited by hand); `unknown`: nothing vouches for it (the marker
    removed or damaged, a file copied in)."""
    from modeling_vit_scratch.common.model_folder import described_sha256
    from modeling_vit_scratch.common.secrets import weights_sha256

    kept = written_files(folder)
    records = {name: record_of(folder, name) for name in VOUCHING_RECORDS}
    for record in records.values():
        written = record.get("written_sha256")
        kept = {**(written if isinstance(written, dict) else {}), **kept}  # the marker's are the latest
    changed, unknown, older = [], [], {}
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if not replaced_by_a_run(path.name) or path.is_symlink() or not path.is_file():
            continue
        if path.name in kept:
            changed += [path.name] if file_sha256(path) != kept[path.name] else []
        elif not records.get(path.name):
            unknown.append(path.name)
    if unknown:  # an older version's records: the weights' digest, a training record's config and processor
        weights = [record["weights_sha256"] for record in records.values() if "weights_sha256" in record]
        if weights and any(name.endswith(".safetensors") for name in unknown):
            try:  # one digest of all the folder's safetensors files, whatever their sharding
                older.update({name: weights_sha256(folder) for name in unknown if name.endswith(".safetensors")})
            except (OSError, ValueError, RuntimeError):
                pass
        described = records[RECORD_FILE].get("files_sha256")
        now = described_sha256(folder) if isinstance(described, dict) else {}
        unknown = [
            name
            for name in unknown
            if not (older.get(name) in weights or (name in now and now[name] == described.get(name)))
        ]
    return changed, unknown


def them(names: list[str]) -> str:
    """'it' or 'them', as `names` counts."""
    return "it" if len(names) == 1 else "them"


def refuse_a_model(folder: Path, overwrite: bool, resume: bool) -> None:
    """A ValueError when `folder` holds a model that neither `overwrite` nor `resume` allows to touch (an interrupted
    run's folder is said as such, with how to resume it), or a file the run would replace that the package cannot
    show it wrote unchanged (`not_vouched_for`): a run replaces only its own files."""
    from modeling_vit_scratch.common.run_state import run_state  # it reads this module's names

    damaged = run_state(folder)
    if damaged is not None and damaged.kind == "damaged":
        raise ValueError(f"--output_dir {str(folder)!r}: {damaged.damaged_words()}.")
    refuse_unvouched_figures(folder, "--output_dir")
    figures = [path.name for path in explain_figures(folder)]
    if figures and not (overwrite and not resume):
        raise ValueError(
            f"--output_dir {str(folder)!r} holds the figures of explain ({', '.join(figures[:3])}"
            f"{' ...' if figures[3:] else ''}), which describe the model explained, and a model trained there would "
            "sit beside them as if they were its own: give a new --output_dir, or pass --overwrite_output_dir true "
            "to remove them."
        )
    found = model_contents(folder)
    if found and not (overwrite or resume):
        state = run_state(folder)
        if state is not None and state.kind == "interrupted":
            raise ValueError(
                f"--output_dir {str(folder)!r}: {state.interrupted_words()}; or start afresh with "
                "--overwrite_output_dir true."
            )
        raise ValueError(
            f"The output folder {str(folder)!r} already holds a model ({', '.join(found[:4])}): pass "
            "--overwrite_output_dir true to replace it, --resume_from_checkpoint true to continue its last "
            "checkpoint, or choose another --output_dir."
        )
    how = (
        "--overwrite_output_dir true"
        if overwrite
        else "--resume_from_checkpoint (its model folder, at the end)"
        if resume
        else "the run"
    )
    refuse_not_vouched_for(folder, "--output_dir", how)


def refuse_not_vouched_for(folder: Path, argument: str, how: str) -> None:
    """The one refusal of every command that replaces files in a model folder (train into its --output_dir,
    convert --overwrite): a ValueError naming the files of `folder` that `how` would replace and that the package
    cannot show it wrote unchanged (`not_vouched_for`): edited by hand, or of unknown origin."""
    changed, unknown = not_vouched_for(folder)
    if changed:
        raise ValueError(
            f"{argument} {str(folder)!r}: {', '.join(changed)} changed since vit-scratch wrote {them(changed)} "
            f"(edited by hand?), and {how} would replace {them(changed)}: nothing was changed; move {them(changed)} "
            "out of the folder to keep your version (or delete it to let vit-scratch write its own), then run again."
        )
    if unknown:
        raise ValueError(
            f"{argument} {str(folder)!r}: nothing shows that vit-scratch wrote {', '.join(unknown[:5])}"
            f"{' ...' if unknown[5:] else ''} as {'it is' if len(unknown) == 1 else 'they are'} now (its marker "
            f"{MARKER_FILE} is missing or damaged, and no record of the run holds {'its' if len(unknown) == 1 else 'their'} "
            f"digest), and {how} would replace {them(unknown)}: nothing was changed; move {them(unknown)} out of the "
            "folder (or delete what you do not need), then run again."
        )


class ClaimedFolder:
    """The output folder a run holds, as `claim_output_folder` yields it. `remove_leftovers()` runs once every check
    has passed, just before the run writes. A run writes only into the folder it claimed: `check_held` says whether
    the folder at its path is still that one (the same folder, by device and inode, holding the same lock), so a
    folder moved or removed while the run trains is never made again under its old name; `where_now` follows the
    claimed folder wherever it was moved (the system names an open folder by its path of the moment)."""

    def __init__(self, path: Path, lock: int, remove_leftovers: Callable[[], list[str]]):
        self.path, self.lock, self.remove_leftovers = path, lock, remove_leftovers
        self.descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)  # the folder itself, wherever it goes

    def close(self) -> None:
        os.close(self.descriptor)

    def held(self) -> bool:
        """Whether `path` is still the folder claimed, holding this run's lock."""
        try:
            here, lock = os.stat(self.path), os.stat(self.path / LOCK_FILE, follow_symlinks=False)
        except OSError:
            return False
        claimed, ours = os.fstat(self.descriptor), os.fstat(self.lock)
        return (here.st_dev, here.st_ino, lock.st_dev, lock.st_ino) == (
            claimed.st_dev,
            claimed.st_ino,
            ours.st_dev,
            ours.st_ino,
        )

    def where_now(self) -> Path | None:
        """Where the claimed folder is now, or None: removed, or the system does not say (no /proc)."""
        try:
            now = os.readlink(f"/proc/self/fd/{self.descriptor}")
        except OSError:
            return None
        return None if now.endswith(" (deleted)") or not os.path.isdir(now) else Path(now)


@contextmanager
def claim_output_folder(
    folder: str | Path,
    overwrite: bool,
    resume: bool,
    inputs: dict[str, str | None] | None = None,
    rotating: bool = False,
) -> Iterator[Callable[[], list[str]]]:
    """Hold `folder` for one training run. Raises ValueError when the folder breaks `check_output_folder`'s rule
    (against `inputs`), is not writable, is in use by another run, or holds a model that neither `overwrite` nor
    `resume` allows to touch. Yields the `ClaimedFolder`, whose `remove_leftovers()` is to be called once every check
    of the run has passed, just before it writes: it marks the folder as the package's and removes the leftovers of earlier runs (staging folders; the old
    checkpoints when overwriting), returning their names. A run that ends before calling it leaves no trace: the
    lock and the folders the claim made are removed again, so a refused run changes nothing on disk. What would be
    removed (with `rotating`, the Trainer's `--save_total_limit`: any checkpoint) must hold only what a run wrote
    (`not_written_by_a_run`), else a ValueError before anything is removed."""
    if not str(folder).strip():  # Path("") is the working directory: never claim it by accident
        raise ValueError(
            "--output_dir is empty: give the folder to write the model to, e.g. --output_dir outputs/vit-digits."
        )
    if overwrite and resume:
        raise ValueError(
            "--overwrite_output_dir true and --resume_from_checkpoint both given: the first starts the run afresh, "
            "the second continues its last checkpoint; pass only the one you mean."
        )
    folder = check_output_folder(folder, "--output_dir", inputs, runs=False)  # `refuse_a_model` names a run
    made = missing_folders(folder)
    check_writable(folder)
    new_lock = not os.path.lexists(folder / LOCK_FILE)
    started = False
    try:
        descriptor = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as error:
        raise ValueError(
            f"Cannot open the lock {str(folder / LOCK_FILE)!r} ({error.strerror or error}): remove it if it is a "
            "link, or choose another --output_dir."
        ) from None
    with os.fdopen(descriptor, "r+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = lock.read().strip() or "unknown"
            raise ValueError(
                f"The output folder {str(folder)!r} is in use by another training run (process {owner}): wait for "
                "it to end, or choose another --output_dir."
            ) from None
        previous = lock.read()  # put back if the run is refused: a refused run changes no file, its lock included
        held = os.fstat(lock.fileno())
        HELD_LOCKS.add((held.st_dev, held.st_ino))  # this process's own: never named as another run's
        try:
            # before this process names itself in the lock: what the folder's run left is read as it was
            refuse_a_model(folder, overwrite, resume)
            check_removals(folder, overwrite, resume, rotating)
            lock.seek(0)
            lock.truncate()
            lock.write(f"{os.getpid()}\n")
            lock.flush()

            def remove_leftovers() -> list[str]:
                nonlocal started
                found = leftovers(folder, overwrite, resume)  # checked again: files may have come while data was read
                check_removable(folder, found, removal_reason(overwrite, resume))
                started = True
                mark_as_ours(folder)
                for path in found:
                    if path.is_dir():
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        path.unlink(missing_ok=True)
                return [path.name for path in found]

            claimed = ClaimedFolder(folder, lock.fileno(), remove_leftovers)
            try:
                yield claimed
            finally:
                claimed.close()
        finally:
            if not started:  # refused or failed before writing: take back what the claim added or changed
                if new_lock:
                    (folder / LOCK_FILE).unlink(missing_ok=True)
                else:
                    lock.seek(0)
                    lock.truncate()
                    lock.write(previous)
                    lock.flush()
                remove_empty(made)
            HELD_LOCKS.discard((held.st_dev, held.st_ino))
            fcntl.flock(lock, fcntl.LOCK_UN)


def run_marker(folder: str | Path) -> dict | None:
    """The run marker (`RUN_FILE`) of `folder`: the process, start time and commands of a run that started and has
    not published its model; None without one (or one that cannot be read)."""
    try:
        marker = json.loads(read_regular(Path(folder, RUN_FILE)))
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def folder_identity(folder: str | Path) -> list[int]:
    """The device and inode of `folder`: what a run marker keeps of the folder it was written in. A folder moved
    (`mv`) keeps them; a copy (`cp -r`, a marker copied alone) has its own."""
    found = os.stat(folder)
    return [found.st_dev, found.st_ino]


def marker_damage(marker: dict, folder: str | Path | None = None) -> str | None:
    """Why a run marker cannot show whether a run of `folder` is alive, in words, or None: it names no process, or
    (where the system says when processes started) no start time of it, which every marker the package writes keeps;
    or it was written in another folder (the device and inode it keeps are not `folder`'s: copied here), so its run
    is not this folder's. A marker of a version before it kept them is taken as the folder's."""
    pid = marker.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return "it names no process"
    if os.path.isdir("/proc") and marker.get("process_start") is None:
        return f"it names process {pid} but not when that process started"
    kept = marker.get("folder_id")
    try:
        foreign = folder is not None and kept is not None and kept != folder_identity(folder)
    except OSError:
        foreign = False
    if foreign:
        where = marker.get("output_dir")
        return f"it was written in another folder{f', {where!r},' if isinstance(where, str) else ''} and copied here"
    return None


def marker_owner(folder: str | Path) -> str | None:
    """The process named by `folder`'s run marker while it lives and is the process that wrote it (its start time,
    kept in the marker, equals the living one's: a reused PID is another process; and it runs Python), else None: a
    marker that cannot show its run is alive (`marker_damage`) names no live run. This process's own is None, as
    `running_owner` says of its lock. Where the system does not say when processes started, a living PID is enough."""
    marker = run_marker(folder) or {}
    if marker_damage(marker, folder):
        return None
    pid = marker["pid"]
    if pid == os.getpid() or not process_alive(pid):
        return None
    if not os.path.isdir("/proc"):
        return str(pid)
    alive = str(marker["process_start"]) == process_start(pid) and is_python(pid) is not False
    return str(pid) if alive else None


def live_owner(folder: str | Path) -> str | None:
    """The process of a live training run writing `folder`: one that holds its lock (`running_owner`), or, its lock
    gone (removed by hand), the living process its run marker names (`marker_owner`); else None."""
    return running_owner(folder) or marker_owner(folder)


def holds_a_model(folder: Path) -> bool:
    """Whether `folder` holds a model, by its own files: weights, or checkpoints beside a run's own marker, lock or
    record. A `checkpoint-N` alone (a stray copy in the working folder) never makes its parent a model folder."""
    weights = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
    if any((folder / name).is_file() for name in weights):
        return True
    return bool(checkpoints(folder)) and any(
        (folder / name).is_file() for name in (MARKER_FILE, LOCK_FILE, RECORD_FILE)
    )


def check_place(real: str, argument: str, value: str | Path, live: bool = True) -> None:
    """The one rule of where any command writes (a folder, or the file `--json` names), at real path `real`: never
    into the folder of a live training run, nor anywhere inside one (`live_owner`: it may replace or remove what is
    written, and what it writes would be mixed with it), and never inside another model's folder, whose files it
    would sit among as if they were that model's. One line naming the run's process or the model's folder.
    `live=False` leaves out the live run (`check_output_folder`)."""
    path = Path(real)
    for folder in (path, *path.parents) if live else ():
        owner = live_owner(folder)
        if owner:
            inside = "" if folder == path else f" ({str(folder)!r}, which holds it)"
            raise ValueError(
                f"{argument} {str(value)!r} is in use by another training run{inside} (process {owner}): wait for "
                f"it to end, or choose another {argument}."
            )
    above = next((folder for folder in path.parents if holds_a_model(folder)), None)
    if above is not None:
        raise ValueError(
            f"{argument} {str(value)!r} is inside the model folder {str(above)!r} "
            f"({', '.join(model_contents(above)[:3])}), where it would read as part of that model: give {argument} "
            "a place outside it, e.g. beside it."
        )


def running_owner(folder: str | Path) -> str | None:
    """The process written in `folder`'s lock while a live training run other than this process holds it ("unknown"
    if it wrote none yet), else None: no lock, one a finished or killed run left (the lock dies with its process), or
    this process's own. Opened read-only and never through a link; the shared lock taken to ask is released at once."""
    try:
        descriptor = os.open(Path(folder, LOCK_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):  # a fifo or device is no lock: never waited on
        os.close(descriptor)
        return None
    with os.fdopen(descriptor) as lock:
        found = os.fstat(lock.fileno())
        if (found.st_dev, found.st_ino) in HELD_LOCKS:  # the lock this process holds: no other run's
            return None
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = lock.read().strip() or "unknown"
            # the run that holds it reading its own folder (train --push_to_hub pushes the folder it just wrote)
            return None if owner == str(os.getpid()) else owner
        fcntl.flock(lock, fcntl.LOCK_UN)
    return None


def missing_folders(folder: Path) -> list[Path]:
    """`folder` and those of its parents that do not exist yet, deepest first: what creating it would make."""
    missing, path = [], Path(os.path.abspath(folder))
    while not os.path.lexists(path):
        missing.append(path)
        path = path.parent
    return missing


def remove_empty(folders: list[Path]) -> None:
    """Remove each of `folders` (deepest first) that is empty; stop at the first that is not."""
    for path in folders:
        try:
            path.rmdir()
        except OSError:
            return


def resolve_checkpoint(
    folder: str | Path, requested: str | bool | None, new_run: Callable[[Path], str] | None = None
) -> str | None:
    """`--resume_from_checkpoint`: None, `true` (the last complete checkpoint in `folder`) or a checkpoint path.
    `new_run(model)` is the command that starts a new run from the weights of `model` in a new folder: the fix
    printed for a folder that holds a model but no checkpoint (a plain new run there would be refused)."""
    if requested in RESUME_OFF:
        return None
    last = requested in (True, "true", "True")
    output = Path(folder)  # where the resumed run writes its checkpoints
    folder = Path(folder) if last else Path(requested).parent  # a named checkpoint: the run it belongs to
    complete = [path for path in checkpoints(folder) if is_complete_checkpoint(path)]
    incomplete = [path.name for path in checkpoints(folder) if not is_complete_checkpoint(path)]
    if last and not folder.is_dir():
        raise ValueError(
            f"--resume_from_checkpoint true: the output folder {str(folder)!r} does not exist, so there is no run to "
            "resume: start a new run without --resume_from_checkpoint, or give --output_dir the folder of the run "
            "to resume."
        )
    if last:
        if not complete and not incomplete:
            way_on = (
                "start a new run without --resume_from_checkpoint"
                if not model_contents(folder)
                else f"it holds a model: start a new run from its weights, {new_run(folder)}"
                if new_run
                else "it holds a model: start a new run from its weights with --model and another --output_dir"
            )
            raise ValueError(
                f"--resume_from_checkpoint true: {str(folder)!r} holds no checkpoint, so there is no run to resume: "
                f"{way_on}; or give --output_dir the folder of the run to resume."
            )
        if not complete:
            named = f" (incomplete, cut off mid-save: {', '.join(incomplete)})" if incomplete else ""
            raise ValueError(
                f"--resume_from_checkpoint true: {str(folder)!r} has no complete checkpoint{named}; start the run "
                "anew with --overwrite_output_dir true in place of --resume_from_checkpoint true, or give a checkpoint "
                "folder."
            )
        return str(complete[-1])
    path = Path(requested)
    if not path.is_dir():
        missing_checkpoint(path, output)
    refuse_a_run_folder(path, new_run)
    if is_checkpoint(path) and (path / "pytorch_model.bin").is_file() and not is_complete_checkpoint(path):
        raise ValueError(
            f"--resume_from_checkpoint {requested!r} holds its weights as a pickle (pytorch_model.bin, no "
            "model.safetensors), and pickles are never read (they can run code): resume from a checkpoint this "
            "package wrote (safetensors), or start the run anew without --resume_from_checkpoint."
        )
    if not is_complete_checkpoint(path):
        way_on = (
            f"the last complete one is {complete[-1]}: resume with --resume_from_checkpoint {complete[-1]}"
            if complete
            else f"{shown_folder(folder)!r} has no complete checkpoint: start the run anew without "
            "--resume_from_checkpoint (with --overwrite_output_dir true where --output_dir is that run's folder)"
        )
        raise ValueError(
            f"Checkpoint {requested!r} is incomplete (no readable trainer_state.json or weights: the run was stopped "
            f"while saving it); {way_on}."
        )
    refuse_newer_checkpoints(path, output)
    return str(path)


def missing_checkpoint(path: Path, output: Path) -> None:
    """The ValueError for a `--resume_from_checkpoint` path that is no folder: a file is not a folder; a path that
    does not exist says so, and offers the checkpoint of that name in `output` (the resumed run's --output_dir)
    where there is one: a name given relative to the working folder, not to the run's."""
    if os.path.lexists(path):
        raise ValueError(f"--resume_from_checkpoint {str(path)!r} is not a folder: give a checkpoint-N folder or true.")
    inside = output / path
    offer = (
        f"resume with --resume_from_checkpoint {inside} (paths are read from the working folder, not --output_dir)"
        if not path.is_absolute() and inside.is_dir()
        else "give a checkpoint-N folder or true"
    )
    raise ValueError(f"--resume_from_checkpoint {str(path)!r} does not exist: {offer}.")


def refuse_newer_checkpoints(checkpoint: Path, output: Path) -> None:
    """A ValueError when `output` (the resumed run's --output_dir) holds complete checkpoints of later steps than
    `checkpoint`: the resumed run would save over them, one by one, without a word. The line names them and the two
    fixes: resume from the newest, or move the newer ones out of the folder first."""
    from modeling_vit_scratch.common.run_state import checkpoint_steps  # run_state reads this module's folders

    step = checkpoint_steps(checkpoint)[0]
    newer = [
        path
        for path in checkpoints(output)
        if is_complete_checkpoint(path)
        and int(CHECKPOINT.match(path.name).group(1)) > step
        and path.resolve() != checkpoint.resolve()
    ]
    if not newer:
        return
    raise ValueError(
        f"--resume_from_checkpoint {str(checkpoint)!r} is at step {step}, but {shown_folder(output)!r} holds newer "
        f"checkpoints ({', '.join(path.name for path in newer)}) that the resumed run would save over: resume from "
        f"the newest with --resume_from_checkpoint true, or move the newer ones out of {shown_folder(output)!r} first."
    )


def shown_folder(folder: Path) -> str:
    """`folder` as a line names it: the working folder by its absolute path, never '.'."""
    return os.path.abspath(folder) if str(folder) in ("", ".") else str(folder)


def refuse_a_run_folder(path: Path, new_run: Callable[[Path], str] | None) -> None:
    """A ValueError when `--resume_from_checkpoint` names a run's folder (one holding its model or its checkpoints),
    not one of its `checkpoint-N`: what that folder is, and a way on that runs as printed. A finished run (its model
    is there) is fine-tuned from with --model, or resumed from its newest complete checkpoint where that one stopped
    before the run's last step; an interrupted run is resumed from its newest complete checkpoint, or started anew
    where it has none."""
    from modeling_vit_scratch.common.run_state import checkpoint_steps  # run_state reads this module's folders

    below = checkpoints(path)
    finished = any((path / name).is_file() for name in MODEL_FILES)
    if is_checkpoint(path) or not (finished or below):
        return
    complete = [checkpoint for checkpoint in below if is_complete_checkpoint(checkpoint)]
    newest = complete[-1] if complete else None
    go_on = f"--resume_from_checkpoint {newest}, its newest complete checkpoint"
    if finished:
        step, planned = checkpoint_steps(newest) if newest else (0, None)
        fine_tune = new_run(path) if new_run else f"--model {path} without --resume_from_checkpoint"
        more = f"; to go on training it, give {go_on}" if newest and planned and step < planned else ""
        raise ValueError(
            f"--resume_from_checkpoint {str(path)!r} is the folder of a finished run (its model is there), not a "
            f"checkpoint: to train on from its model, start a new run from its weights (set --num_train_epochs or "
            f"--max_steps to the length you want): {fine_tune}{more}"
        )
    way_on = (
        f"resume it with {go_on}"
        if newest
        else f"it has no complete checkpoint (cut off mid-save: {', '.join(item.name for item in below)}): start "
        "the run anew without --resume_from_checkpoint"
    )
    raise ValueError(
        f"--resume_from_checkpoint {str(path)!r} is the folder of an interrupted run, not a checkpoint: {way_on}."
    )


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
    files that describe them last; then the marker keeps the SHA-256 of each (`mark_as_ours`), as the record does
    (`keep_digests_in_records`)."""
    keep_digests_in_records(staging)  # the record vouches for the files written with it, marker or not
    order = {name: index for index, name in enumerate(DESCRIBING_FILES, start=1)}
    written = {}
    for path in sorted(staging.iterdir(), key=lambda path: order.get(path.name, 0)):
        if path.is_file():
            path.chmod(0o644)  # staged files may be private (mkstemp); the folder is meant to be shared
            written[path.name] = file_sha256(path)
        os.replace(path, destination / path.name)
    mark_as_ours(destination, written)


# What a model folder holds, and nothing else: what `--overwrite` may replace as a whole. Config, weights (one file,
# shards and their index, transformers' pickle), processor, card, Hub attributes, the package's model code, a
# training run's outputs and checkpoints, and the package's own marker, lock and staging leftovers.
MODEL_FOLDER_FILES = {
    *MODEL_FILES,
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "preprocessor_config.json",
    "processor_config.json",
    "README.md",
    ".gitattributes",
    RESULTS_FILE,
    RECORD_FILE,
    CONVERSION_FILE,
    CURVES_FILE,
    CONFUSION_FILE,
    "train_results.json",
    "eval_results.json",
    "test_results.json",
    "trainer_state.json",
    "training_args.bin",
    MARKER_FILE,
    LOCK_FILE,
    RUN_FILE,
}
MODEL_FOLDER_PATTERN = re.compile(
    rf"^(model-\d+-of-\d+\.safetensors|pytorch_model-\d+-of-\d+\.bin|checkpoint-\d+"
    rf"|{re.escape(STAGING_PREFIX)}.*|{re.escape(PROBE_PREFIX)}.*)$"
)
# what the Trainer writes into a checkpoint beside the model's own files (FSDP: its optimizer and model files, or
# folders of shards), and what the package's callbacks add: the precision choice (training/precision.py), each
# process's stream position (training/streaming.py), the run's data and settings (training/resumed_data.py) and the
# weight average (training/ema.py), the staged copies of the first two, and the marker of a checkpoint the Trainer
# saves on SIGTERM (--enable_jit_checkpoint) while it is being written
TRAINER_STATE = re.compile(
    r"^(optimizer\.pt|scheduler\.pt|scaler\.pt|rng_state(_\d+)?\.pth|optimizer(_\d+)?\.bin"
    r"|pytorch_model_fsdp(_\d+)?\.bin|precision_choice\.json|stream_state_\d+\.json|vit_scratch_data\.json"
    r"|\.(precision_choice|vit_scratch_data)\.json\.partial|checkpoint-is-incomplete\.txt|ema\.safetensors)$"
)
SHARD_NAME = re.compile(r"^(model-\d+-of-\d+\.safetensors|pytorch_model-\d+-of-\d+\.bin)$")  # a model's weights
SHARD_FOLDER = re.compile(r"^(optimizer|pytorch_model_fsdp)_\d+$")  # FSDP's sharded states: a folder of shards
SHARD_FILE = re.compile(r"^(__\d+_\d+\.distcp|\.metadata)$")
MODEL_CODE = {path.name for path in Path(__file__).resolve().parents[1].glob("*_vit_scratch.py")}
NAME_MAX = 255  # bytes in one file name on common file systems; `os.pathconf` says where it can
PATH_MAX = 4096  # bytes in one path on common file systems, likewise
FILE_SYSTEM_LIMITS = (("PC_NAME_MAX", NAME_MAX), ("PC_PATH_MAX", PATH_MAX))
# Bytes a path inside an output folder adds to the folder's own: `checkpoint-N/.saving-XXXXXXXX/model.safetensors`,
# a staged conversion's sibling name, explain's figure names
ROOM_INSIDE = 128


def not_a_model_folder(folder: Path) -> list[str]:
    """Why `folder` is not a model folder through and through: a missing or model_type-less config.json, no
    weights, and every name in it that a model folder does not hold. Empty when it is one."""
    try:
        model_type = json.loads(read_regular(folder / "config.json")).get("model_type")
    except (OSError, ValueError, AttributeError):
        model_type = None
    reasons = [] if model_type else ["no config.json with a model_type"]
    weights = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
    if not any((folder / name).is_file() for name in weights):
        reasons.append("no weights")
    others = sorted(
        path.name + ("/" if path.is_dir() else "")
        for path in folder.iterdir()
        if path.name not in MODEL_FOLDER_FILES | MODEL_CODE and not MODEL_FOLDER_PATTERN.match(path.name)
    )
    for checkpoint in checkpoints(folder):  # a checkpoint is replaced whole: it holds only what a run wrote there
        others += not_written_by_a_run(checkpoint)
    if others:
        reasons.append(f"files a model folder does not hold: {', '.join(others[:5])}{' ...' if others[5:] else ''}")
    return reasons


def not_written_by_a_run(folder: Path) -> list[str]:
    """What in a run's `checkpoint-N` or staging folder the package (or the Trainer under it) did not write, as
    `FOLDER/NAME` (a sub-folder ends in `/`): the one test of whether removing such a folder would remove a user's
    files (an `--overwrite_output_dir` run's old checkpoints, a killed run's staging leftovers, a conversion's
    `--overwrite`). A run writes no sub-folder there, so any sub-folder is someone else's."""
    found = []
    for path in sorted(folder.iterdir()):
        if path.is_dir() and not path.is_symlink() and SHARD_FOLDER.match(path.name):
            found += [
                f"{folder.name}/{path.name}/{shard.name}"
                for shard in sorted(path.iterdir())
                if shard.is_dir() or not SHARD_FILE.match(shard.name)
            ]
        elif path.is_dir() or not (
            path.name in MODEL_FOLDER_FILES | MODEL_CODE
            or MODEL_FOLDER_PATTERN.match(path.name)
            or TRAINER_STATE.match(path.name)
        ):
            found.append(f"{folder.name}/{path.name}" + ("/" if path.is_dir() else ""))
    return found


def check_removable(folder: Path, removed: list[Path], why: str) -> None:
    """A ValueError naming the first files in `removed` (run folders: checkpoints, staging leftovers) that the
    package did not write, and the fix: a run removes only what it wrote, and refuses before removing anything."""
    foreign = [name for path in removed if path.is_dir() for name in not_written_by_a_run(path)]
    if foreign:
        shown = ", ".join(foreign[:4]) + (f" and {len(foreign) - 4} more" if foreign[4:] else "")
        raise ValueError(
            f"--output_dir {str(folder)!r}: {why} would remove files that vit-scratch did not write ({shown}): "
            "nothing was removed; move them out of the output folder, or choose another --output_dir."
        )


def named_as_figures(folder: Path) -> list[Path]:
    """The files of `folder` named as explain names its figures (`FIGURES`), whoever wrote them."""
    found = {path for pattern in FIGURES for path in folder.glob(pattern) if path.is_file()} if folder.is_dir() else ()
    return sorted(path for path in found if not path.is_symlink())


def explain_figures(folder: Path) -> list[Path]:
    """The figures of explain in `folder`: named as its figures and vouched for by the digest the folder's marker
    keeps of what explain wrote (`written_files`); they describe the model it explained, not one trained there. A
    name alone vouches for nothing: a user's `fig7_mine.png` is the user's."""
    kept = written_files(folder)
    return [path for path in named_as_figures(folder) if kept.get(path.name) == file_sha256(path)]


def refuse_unvouched_figures(folder: Path, argument: str) -> None:
    """A ValueError naming the files of `folder` that bear the name of an explain figure but that nothing shows
    explain wrote as they are now (no digest in the marker, or another one): the command would replace or remove
    them, and a file is replaced or removed only when the package can show it wrote it."""
    vouched = set(explain_figures(folder))
    unknown = [path.name for path in named_as_figures(folder) if path not in vouched]
    if not unknown:
        return
    one = len(unknown) == 1
    said = (
        f"{argument} {str(folder)!r}: nothing shows that vit-scratch wrote {', '.join(unknown[:5])}"
        f"{' ...' if unknown[5:] else ''} as {'it is' if one else 'they are'} now, and "
        f"{'it bears the name' if one else 'they bear the names'} of explain's figures, which this command replaces "
        "or removes: nothing was changed; "
    )
    if only_older_figures(folder, unknown):  # perhaps an older explain's folder (its marker kept no digests)
        files = " ".join(shlex.quote(str(folder / name)) for name in [*unknown, MARKER_FILE])
        raise ValueError(
            f"{said}the folder holds nothing else but its marker, which keeps no digest of {them(unknown)} (an older "
            f"explain kept none): if {'it is' if one else 'they are'} an older explain's, remove the folder with: "
            f"rm -- {files} && rmdir -- {shlex.quote(str(folder))}, then run this again; else move {them(unknown)} "
            f"out of the folder, or choose another {argument}."
        )
    raise ValueError(
        f"{said}move {them(unknown)} out of the folder (or rename {them(unknown)}), or choose another {argument}."
    )


def only_older_figures(folder: Path, unknown: list[str]) -> bool:
    """Whether `folder` holds nothing but files named as explain's figures, none with a digest in its marker (an
    older explain kept none), and that marker: a folder an older explain wrote, which the user may remove whole (the
    lock of the command asking is no content: it goes when the command ends)."""
    kept = written_files(folder)
    entries = {path.name for path in folder.iterdir()} - {LOCK_FILE}
    return (
        (folder / MARKER_FILE).is_file()
        and entries == {*unknown, MARKER_FILE}
        and not any(name in kept for name in unknown)
    )


def leftovers(folder: Path, overwrite: bool, resume: bool) -> list[Path]:
    """What a run into `folder` removes before its first step: a killed run's staging folders, and when it overwrites
    (not resumes) the old checkpoints, which would mix with the new run's (the old model stays until replaced), and
    explain's figures, which would read as the new model's."""
    found = [path for path in folder.iterdir() if path.name.startswith(STAGING_PREFIX)] if folder.is_dir() else []
    return found + (checkpoints(folder) + explain_figures(folder) if overwrite and not resume else [])


def removal_reason(overwrite: bool, resume: bool) -> str:
    """Why a run removes its `leftovers`, in the words of its refusal."""
    return "--overwrite_output_dir true" if overwrite and not resume else "removing an interrupted run's saves"


def not_a_runs_checkpoint(path: Path) -> list[str]:
    """What at `path`, named like a checkpoint a run writes (`checkpoint-N`), the package did not write: the entry
    itself when it is a file or a link, or the files of a folder without `trainer_state.json` (a checkpoint cut off
    mid-save holds only what the run writes, so its files are not named; an empty folder holds nothing to lose). A
    run saving its checkpoint there would move or replace them."""
    if not os.path.lexists(path):
        return []
    if path.is_symlink() or not path.is_dir():
        return [path.name]
    return [] if (path / "trainer_state.json").is_file() else not_written_by_a_run(path)


def check_checkpoint_names(folder: Path) -> None:
    """A ValueError naming each entry of `folder` named like a checkpoint that the package did not write
    (`not_a_runs_checkpoint`), and the fix: a run never moves or replaces a file it did not write, and a checkpoint
    it saves at that name would."""
    entries = sorted(folder.iterdir(), key=lambda path: path.name) if folder.is_dir() else []
    found = [name for path in entries if CHECKPOINT.match(path.name) for name in not_a_runs_checkpoint(path)]
    if found:
        shown = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if found[4:] else "")
        raise ValueError(
            f"--output_dir {str(folder)!r}: {shown} {'is' if len(found) == 1 else 'are'} named like a checkpoint the "
            "run saves but not written by vit-scratch, and a run never moves or replaces what it did not write: "
            f"nothing was changed; move {them(found)} out of the output folder, or choose another --output_dir."
        )


def check_removals(folder: Path, overwrite: bool, resume: bool, rotating: bool = False) -> None:
    """`check_removable` for all a run into `folder` may remove: its `leftovers`, and with `rotating` (the Trainer's
    `--save_total_limit`) any checkpoint; and `check_checkpoint_names`, for what a checkpoint it saves would replace.
    Every process of a run asks it, so all refuse together."""
    check_checkpoint_names(folder)
    check_removable(folder, leftovers(folder, overwrite, resume), removal_reason(overwrite, resume))
    if rotating:
        reason = "--save_total_limit (the Trainer removes the oldest checkpoints as it saves new ones)"
        check_removable(folder, checkpoints(folder), reason)


def check_name_characters(path: str | os.PathLike, argument: str) -> None:
    """A ValueError when an output path is not valid UTF-8 (bytes the file system takes but Python holds as
    surrogates: safetensors, JSON and every printed line need UTF-8, and would fail once the work is done) or holds a
    control character (a newline or escape would break the one-line messages and the resume command that name it)."""
    text = os.fspath(path)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(text).decode("ascii", "backslashreplace")
        raise ValueError(
            f"{argument} '{shown}' is not valid UTF-8 (the safetensors and JSON writers, and every line that names "
            f"it, need UTF-8): give {argument} a name in UTF-8."
        ) from None
    if any(unicodedata.category(character) == "Cc" for character in text):
        raise ValueError(
            f"{argument} {text!r} holds a control character (a newline, tab or escape): give {argument} a name "
            "without one."
        )


def check_name_lengths(folder: Path, argument: str = "--output") -> None:
    """A ValueError when `folder`'s path is no name the writers can use (`check_name_characters`), a part of it is
    longer than its file system can name (`NAME_MAX`), or the whole path leaves no room for the files written
    inside it (`PATH_MAX`): checked before any work, not met as `File name too long` once the work is done."""
    check_name_characters(folder, argument)
    folder = Path(os.path.abspath(folder))
    existing = next(parent for parent in (folder, *folder.parents) if os.path.exists(parent))  # its file system
    name_max, path_max = (file_system_limit(existing, name, default) for name, default in FILE_SYSTEM_LIMITS)
    for part in folder.parts:
        size = len(os.fsencode(part))
        if size > name_max:
            raise ValueError(
                f"{argument}: the name {part[:24]!r}... is {size} bytes, more than the {name_max} its file system "
                "can hold: choose a shorter name."
            )
    size = len(os.fsencode(str(folder)))
    if size + ROOM_INSIDE > path_max:
        raise ValueError(
            f"{argument}: the path {str(folder)[:32]!r}... is {size} bytes, and with the {ROOM_INSIDE} that the "
            f"files written inside take it passes the {path_max} its file system can hold: choose a shorter path."
        )


def file_system_limit(path: Path, name: str, default: int) -> int:
    """`os.pathconf(path, name)`, or `default` where the system does not say."""
    try:
        return os.pathconf(path, name)
    except (OSError, ValueError):
        return default


def check_replaceable(
    output_dir: str | Path, overwrite: bool = False, inputs: dict[str, str | None] | None = None
) -> Path:
    """`output_dir` as an absolute real path, if a conversion may write it: new, empty, or (with `overwrite`) a model
    folder through and through (`not_a_model_folder`: a user's files are never replaced with it), with names its
    file system can hold, and within `check_output_folder`'s rule (against `inputs`); else a FileExistsError or
    ValueError naming it and the fix. Run it before a long conversion to fail early."""
    if not str(output_dir).strip():  # Path("") is the working directory: never replace it by accident
        raise ValueError(
            "--output is empty: give the folder to write the converted model to, e.g. --output outputs/NAME."
        )
    check_name_lengths(Path(output_dir), "--output")  # before any look at it: the system refuses such names
    refuse_dangling_link(Path(output_dir), "--output")
    output_dir = Path(os.path.realpath(output_dir))  # a link to a folder: the folder it names is replaced
    if output_dir.exists() and not output_dir.is_dir():
        raise FileExistsError(f"{output_dir} is a file, not a folder: choose another output folder.")
    check_output_folder(output_dir, "--output", inputs, foreign=False)
    if output_dir.is_dir() and any(output_dir.iterdir()):
        if not overwrite:
            raise FileExistsError(
                f"{output_dir} already holds files: choose another output folder or pass "
                "--overwrite (overwrite=True) to replace it."
            )
        reasons = not_a_model_folder(output_dir)
        if reasons:  # --overwrite replaces a model, not a home directory or a folder of notes beside a config
            raise FileExistsError(
                f"{output_dir} is not a model folder ({'; '.join(reasons)}): refusing to replace it even with "
                "--overwrite; move those files away or choose another output folder."
            )
        refuse_not_vouched_for(output_dir, "--output", "--overwrite")  # a file edited by hand is the user's
    return output_dir


def gone_with(folder: Path, replacement: Path) -> list[str]:
    """What of `folder` its `replacement` does not hold, and so goes with it (a training run's checkpoints, record,
    card, curves): named in the line that says the folder was replaced, so nothing goes without a word. Not the
    package's dot-files. Checkpoints first, then the records and the card: what a user would miss most."""
    first = (RECORD_FILE, RESULTS_FILE, "README.md")
    gone = [
        path for path in folder.iterdir() if not path.name.startswith(".") and not (replacement / path.name).exists()
    ]
    gone.sort(key=lambda path: (not CHECKPOINT.match(path.name), path.name not in first, path.name))
    return [path.name + ("/" if path.is_dir() else "") for path in gone]


@contextmanager
def replaced_folder(
    output_dir: str | Path, overwrite: bool = False, inputs: dict[str, str | None] | None = None
) -> Iterator[Path]:
    """A temporary folder beside `output_dir` (same filesystem) to write into, moved into place only when the block
    completes: a failure or a refusal leaves `output_dir` as it was, so a check of the written folder belongs inside
    the block (a conversion's parity check runs on the staged folder, before it replaces anything). An existing non-empty `output_dir` is refused
    unless `overwrite`; then it is replaced only once the new one is complete (moved aside, new moved in, deleted)."""
    output_dir = check_replaceable(output_dir, overwrite, inputs)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    for name in remove_stale_staging(output_dir):
        print(f"Removed {name}, the unfinished folder that a stopped conversion to {output_dir} left beside it.")
    staging = sibling(output_dir, "partial")
    staging.mkdir()
    kept = f"nothing was written to {output_dir} (it is as it was) and the unfinished folder beside it was removed"
    try:
        with refused_writes_named(f"the new folder beside {output_dir}", kept):
            yield staging
            keep_digests_in_records(staging)  # a conversion's record vouches for the files written with it
            leaked = find_secrets(staging, known_secrets())
            if leaked:
                raise ValueError(
                    f"{', '.join(path.name for path in leaked)} as written for {output_dir} would hold or look like "
                    f"a Hub token; {kept}: remove the token from what was read (its config.json labels)."
                )
            mark_as_ours(staging, {path.name: file_sha256(path) for path in staging.iterdir() if path.is_file()})
        if not output_dir.exists():
            staging.rename(output_dir)
            return
        check_replaceable(output_dir, overwrite, inputs)  # again: the folder may have been filled meanwhile
        gone = gone_with(output_dir, staging)
        aside = sibling(output_dir, "old")
        output_dir.rename(aside)
        try:
            staging.rename(output_dir)
        except OSError:
            aside.rename(output_dir)  # put the old folder back
            raise
        shutil.rmtree(aside)
        if gone:
            shown = ", ".join(gone[:8]) + (f" and {len(gone) - 8} more" if gone[8:] else "")
            print(f"Replaced the model folder {output_dir}; these went with it (the new one has none): {shown}.")
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # a no-op once moved into place


SIBLING_SUFFIX = ".{tag}-{pid}-{host}-{unique}"  # the owner's process and machine: a stopped one's is removed next time


def sibling_name(folder: Path, tag: str) -> str:
    """NAME of `sibling`'s `.NAME.TAG-...`: `folder`'s name cut so that the whole stays within `NAME_MAX` bytes."""
    longest = SIBLING_SUFFIX.format(tag=tag, pid="0" * 10, host="0" * 6, unique="0" * 8)  # any PID
    room = NAME_MAX - 1 - len(longest.encode())
    name = folder.name
    while len(os.fsencode(name)) > room:  # whole characters only: a cut UTF-8 sequence is no valid name everywhere
        name = name[:-1]
    return name


def sibling(folder: Path, tag: str) -> Path:
    """A fresh hidden name beside `folder` (same filesystem, so renames are atomic): `.NAME.TAG-PID-HOST-1a2b3c4d`."""
    suffix = SIBLING_SUFFIX.format(tag=tag, pid=os.getpid(), host=this_host(), unique=uuid.uuid4().hex[:8])
    return folder.parent / f".{sibling_name(folder, tag)}{suffix}"


def remove_stale_staging(folder: Path) -> list[str]:
    """Remove the staging folders (`sibling(folder, "partial")`) that processes now gone left beside `folder`, and
    return their names: never a living process's, nor one holding a file that a conversion does not write."""
    name = re.escape(sibling_name(folder, "partial"))
    pattern = re.compile(rf"^\.{name}\.partial-(\d+)-([0-9a-f]{{6}})-[0-9a-f]{{8}}$")
    removed = []
    for path in sorted(folder.parent.iterdir()) if folder.parent.is_dir() else []:
        stale = path.is_dir() and not path.is_symlink() and stale_of_dead_process(path.name, pattern)
        if stale and not not_written_by_a_run(path):
            shutil.rmtree(path)
            removed.append(path.name)
    return removed
