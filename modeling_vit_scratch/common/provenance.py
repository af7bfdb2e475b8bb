"""Where a model folder's weights come from, as its own files show it, in the words a published card may carry.

- A card is published: it names a local folder or file by its last part only (`public_name`, `public_command`),
  never by the user's absolute path; a hub repo id is a public name already.
- A conversion carries the history of what it converted (`input_history`), wherever its input comes from: a local
  folder, a run's checkpoint or a hub repo (its records fetched with its weights, at the same revision). A folder
  trained by vit-scratch and exported to transformers, then imported back, is still "trained by vit-scratch", and
  its card says so. Each step counts only while the weights are those its record describes (their digest).
- A run's `checkpoint-N` folder says what it is (`checkpoint_origin`): the step and epoch of the run in its parent
  folder, and the validation metrics logged at that step, from the Trainer's `trainer_state.json`.
"""

import json
import os
import re
from pathlib import Path

from modeling_vit_scratch.common.folders import CHECKPOINT, CONVERSION_FILE, RECORD_FILE

ABSOLUTE = re.compile(r"(?:(?<=^)|(?<=[\s='\"]))(?:~|/)[^\s'\"]*")  # an absolute path within a command line


def public_name(text: str | None) -> str | None:
    """A local path as its last part (`/home/me/runs/vit` -> `vit`); a hub repo id or a name is kept as it is."""
    if text is None:
        return None
    text = str(text)
    local = text.startswith(("/", "~", ".")) or (os.sep in text and os.path.exists(text))
    return (Path(text.rstrip("/")).name or text) if local else text


def public_command(command: str) -> str:
    """A command line with each absolute path (`/...`, `~/...`) cut to its last part: what it did, not where."""
    if command.startswith("cd ") and " && " in command:  # the folder it ran from (`printed_command`): where, not what
        command = command.partition(" && ")[2]
    return ABSOLUTE.sub(lambda found: Path(found.group(0).rstrip("/")).name or found.group(0), command)


def read_record(path: Path) -> dict | None:
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def input_history(source: str, revision: str | None = None) -> list[dict]:
    """What a conversion's `--input` went through (`folder_history`), wherever it comes from: a local folder (a run's
    `checkpoint-N` too), or a hub repo whose training_record.json / conversion_record.json are fetched with its
    weights at `revision`, and vouch while those weights are the ones they name. Empty when nothing vouches, or the
    repo cannot be read (the conversion itself reads it, and says so)."""
    from modeling_vit_scratch.common.secrets import weights_sha256

    folder, name = Path(source), None
    if not folder.is_dir():
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError

        try:  # the weights and records of one commit, from the cache the conversion filled
            patterns = ["*.safetensors", RECORD_FILE, CONVERSION_FILE]
            folder, name = Path(snapshot_download(source, revision=revision, allow_patterns=patterns)), source
        except (OSError, ValueError, *HfHubHTTPError.__bases__):
            return []
    try:
        digest = weights_sha256(folder)
    except (OSError, ValueError):  # no safetensors weights: nothing the records could vouch for
        return []
    return folder_history(folder, digest, name, folder.name if name else None)  # a snapshot is named by its commit


def folder_history(
    folder: str | Path, digest: str | None, name: str | None = None, commit: str | None = None
) -> list[dict]:
    """What `folder`'s weights (SHA-256 `digest`, `common/secrets.py` `weights_sha256`) went through, oldest first, as
    its records vouch for them: `{"trained": RUN}` (a vit-scratch run: `name`, else its folder's name; with
    `"commit"`, the hub repo `name`'s commit that was read; `"from"` / `"from_commit"`, the weights the run started
    from, as its record names them; `"checkpoint": STEP` for a run's `checkpoint-N`, as its `trainer_state.json`
    says), then each conversion `{"converted": "to transformers" | "from transformers" | "from timm", "input": NAME}`
    (with the `"commit"` and `"revision"` of a hub input). Empty for a folder without records, or weights other than
    those recorded."""
    folder = Path(folder)
    if digest is None or not folder.is_dir():
        return []
    trained = read_record(folder / RECORD_FILE)
    if trained and trained.get("weights_sha256") == digest:
        step = {"trained": name or public_name(str(folder.resolve())), "commit": commit}
        step |= {
            "from": public_name(trained.get("initial_weights")),
            "from_commit": trained.get("initial_weights_commit"),
        }
        return [{key: value for key, value in step.items() if value}]
    converted = read_record(folder / CONVERSION_FILE)
    if converted and converted.get("weights_sha256") == digest:
        step = {"converted": conversion_direction(converted), "input": public_name(converted.get("input"))}
        step |= {key: converted[key] for key in ("commit", "revision") if converted.get(key)}
        return [*(converted.get("history") or []), step]
    checkpoint = None if name else checkpoint_origin(folder)
    if checkpoint:
        return [{"trained": checkpoint["run"], "checkpoint": checkpoint["checkpoint"]}]
    return []


def conversion_direction(record: dict) -> str:
    """'to transformers', 'from transformers' or 'from timm', from a conversion record."""
    return "to transformers" if record.get("to") == "transformers" else f"from {record.get('from', 'another library')}"


def checkpoint_origin(folder: str | Path) -> dict | None:
    """What a run's `checkpoint-N` folder is: `{"checkpoint": N, "epoch": E, "run": PARENT_NAME}` and the metrics its
    run logged at that step (`eval_*`, measured on these weights), from `trainer_state.json`; None for any other
    folder."""
    folder = Path(folder).resolve()
    found = CHECKPOINT.match(folder.name)
    state = read_record(folder / "trainer_state.json") if found else None
    if state is None:
        return None
    step = state.get("global_step", int(found.group(1)))
    logged = [
        entry for entry in state.get("log_history") or [] if isinstance(entry, dict) and entry.get("step") == step
    ]
    metrics = {key: value for entry in logged for key, value in entry.items() if key.startswith("eval_")}
    return {"checkpoint": step, "epoch": state.get("epoch"), "run": folder.parent.name, "metrics": metrics}
