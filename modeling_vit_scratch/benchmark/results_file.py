"""The benchmark's one output file (`--json`), under the package's write rules: checked before anything is measured,
written whole.

A file that is there already is replaced only if the benchmark wrote it (a JSON object with the keys every result
holds: a user's own file never is); never through a symbolic link; and by a staged file moved into place, so an
interrupted or failed run leaves the earlier file as it was. Where it goes follows every writer's rule
(`common/folders.py` `check_place`): not into a live training run's folder, nor among another model's files.
"""

import json
import os
import tempfile
from pathlib import Path

from modeling_vit_scratch.common.folders import check_output_file, check_place, read_regular
from modeling_vit_scratch.common.secrets import redact

RESULT_KEYS = {"machine", "argv", "rows", "bars"}  # in every result `run_measurements` and `run_end_to_end` write


def written_by_benchmark(path: Path) -> bool:
    """Whether `path` holds a benchmark result: a JSON object with every key of `RESULT_KEYS`."""
    try:
        data = json.loads(read_regular(path))  # never waits on a fifo
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and RESULT_KEYS <= data.keys()


def check_results_path(value: str) -> Path:
    """`--json` as a path the result may be written to, else a ValueError naming it and the fix: a name, not a link,
    not a folder (nor a name ending in '/'), in a folder that exists and can be written, and either new or a result the benchmark wrote."""
    if not value.strip():
        raise ValueError("--json is empty: give the file to write the results to, e.g. --json results.json.")
    if os.path.basename(value) in ("", ".", ".."):  # `out/`, `.`: Path would drop the '/' and write a file `out`
        raise ValueError(
            f"--json {value!r} names a folder (its last part is {os.path.basename(value) or 'empty: it ends with /'}): "
            f"give a file, e.g. --json {os.path.join(value.rstrip('/') or '/', 'results.json')} in a folder that exists."
        )
    path = Path(value)
    if path.is_symlink():
        raise ValueError(
            f"--json {value!r} is a symbolic link: the benchmark never writes through one; remove the link or give "
            "another file."
        )
    if path.is_dir():
        raise ValueError(
            f"--json {value!r} is a folder: give a file, e.g. --json {os.path.join(value, 'results.json')}."
        )
    check_output_file(value, "--json")  # a fifo, device or socket: never opened
    folder = path.parent
    if not folder.is_dir():
        raise ValueError(f"--json {value!r}: the folder {str(folder)!r} does not exist: make it, or give another file.")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"--json {value!r}: the folder {str(folder)!r} cannot be written: give a file elsewhere.")
    check_place(os.path.join(os.path.realpath(folder), path.name), "--json", value)  # no live run's, no model's
    if path.exists() and not written_by_benchmark(path):
        raise ValueError(
            f"--json {value!r} is a file the benchmark did not write (no JSON object with "
            f"{', '.join(sorted(RESULT_KEYS))}): it would be replaced; give a new file name, or move that file away."
        )
    return path


def write_results(path: Path, result: dict, secrets: list[str]) -> None:
    """`result` as JSON at `path` with every secret masked (`redact`, the one redaction path), written beside it and
    moved into place (a link at `path` is replaced, never followed)."""
    descriptor, staged = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(redact(json.dumps(result, indent=2), secrets) + "\n")
        os.chmod(staged, 0o644)  # mkstemp's file is private; a result is meant to be shared
        os.replace(staged, path)
    finally:
        if os.path.lexists(staged):
            os.unlink(staged)
