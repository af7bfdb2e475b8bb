"""Sharing on the Hugging Face Hub: a saved model folder -> a repo that loads anywhere with `trust_remote_code=True`.

A push is a gate; nothing is created or uploaded unless every check passes:
- what the push sends is what the user meant: no entry of the folder is a symbolic link (it would upload whatever it
  points to), only regular files are staged, and no token is in the repo id, the revision or the commit message
  (refused, never echoed); the folder's name in the commit title is redacted;
- the folder's code is the package's own: every `.py` file byte-identical to the package's copy, and the `auto_map`
  of config.json / preprocessor_config.json naming only those modules and classes (no other code ever runs);
- the folder reloads identically through `AutoModelForImageClassification` with its own (now known) code, in a
  process that can reach no Hub credential;
- the folder is a vit_scratch model whose processor fits it (`check_processor_fits`: size and channels);
- the model is the one the metrics were measured on: its weights (`weights_sha256` in training_record.json) and
  its config.json and preprocessor_config.json (`files_sha256`; a record written before it existed names only the
  weights), unless the caller accepts a card that says they were not; the metrics are the ones the run wrote
  (`results_sha256`: an edited all_results.json is refused);
- no known token value is in any file about to be uploaded.

Then two commits: the model with a complete card (its loading example unpinned, which is true), then the card pinned
to that model commit. A failure leaves no new commit, or a complete loadable repo whose card only lacks the pin;
re-running the same push finishes it without a second model commit. The token comes from where huggingface_hub looks
(`HF_TOKEN` or the saved login) or `token=`; it is never printed or written.
"""

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import torch
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi
from huggingface_hub.hf_api import RepoFile

from modeling_vit_scratch.common.children import scratch_folder
from modeling_vit_scratch.common.folders import (
    CONFUSION_FILE,
    CONVERSION_FILE,
    CURVES_FILE,
    RECORD_FILE,
    RESULTS_FILE,
)
from modeling_vit_scratch.common.model_folder import (
    check_buildable,
    check_processor_fits,
    check_settings_files,
    check_vit_scratch_type,
    content_sha256,
    described_sha256,
)
from modeling_vit_scratch.common.names import shown_name
from modeling_vit_scratch.common.provenance import checkpoint_origin
from modeling_vit_scratch.common.remote_code import OWN_AUTO_MAP, foreign_code
from modeling_vit_scratch.common.secrets import (
    find_secrets,
    known_secrets,
    redact,
    refuse_secrets_in_settings,
    weights_sha256,
)
from modeling_vit_scratch.common.sources import check_folder_path
from modeling_vit_scratch.common.weights import check_finite_files, weight_files
from modeling_vit_scratch.common.write_errors import TEMPORARY_FIX, refused_write, refused_writes_named
from modeling_vit_scratch.configuration_vit_scratch import MODEL_FILES
from modeling_vit_scratch.image_processing_vit_scratch import ViTScratchImageProcessor
from modeling_vit_scratch.modeling_vit_scratch import (
    ViTScratchForImageClassification,
)
from modeling_vit_scratch.sharing.card import (
    METRIC_FIELDS,
    RECORD_FIELDS,
    REQUIRED_RECORD_FIELDS,
    check_card_fields,
    render_model_card,
)
from modeling_vit_scratch.sharing.hub_arguments import HUB_ERRORS, check_hub_arguments, describe
from modeling_vit_scratch.sharing.reload_check import FolderReloadError, check_reloads_to

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # where the model files are
# Files of a training output that travel with the model, when present.
SHARED_FILES = (RESULTS_FILE, CURVES_FILE, CONFUSION_FILE, RECORD_FILE)
# Files of an earlier model that this push replaces: deleted from the repo (in the model commit, so git history keeps
# them) when this push does not bring them, so no stale shard, weights of another format (which a loader asked for
# that format would read instead) or metric of another model stays beside the new one.
OTHER_WEIGHTS = ["*.bin", "*.bin.index.json", "*.pt", "*.pth", "*.ckpt", "*.ckpt.*", "*.h5", "*.msgpack", "*.onnx"]
# Files that change what a loader reads from the repo: a PEFT adapter (`from_pretrained` loads the adapter's base
# model instead of the repo's own weights), a processor config (AutoProcessor reads it before the image processor's),
# weights of another runtime.
LOADER_FILES = ["adapter_config.json", "adapter_model.*", "processor_config.json", "*.gguf"]
REPLACED_PATTERNS = [
    "*.safetensors",
    "*.safetensors.index.json",
    *OTHER_WEIGHTS,
    *LOADER_FILES,
    *SHARED_FILES,
    CONVERSION_FILE,
    "*_results.json",
]
# The most names a line about the folder's files lists; the rest are counted
MAX_NAMES_SHOWN = 5
# The last line of a card a push writes: a card whose text no longer has this digest was edited, and is kept.
CARD_MARK = "<!-- written by vit-scratch push; sha256 of the text above: {digest} -->"


class PushError(RuntimeError):
    """A push that failed on the Hub: what failed, what was left, how to retry (one line, no token)."""


@dataclass
class PushResult:
    repo_url: str
    commit_id: str
    commit_url: str
    pull_request_url: str | None = None
    notes: list[str] = field(default_factory=list)  # what happened to files already on the repo, one line each


def fixed_input(config, batch: int = 2) -> torch.Tensor:
    """The same pixel values every time: (batch, channels, height, width)."""
    generator = torch.Generator().manual_seed(0)
    height, width = config.image_size if isinstance(config.image_size, (list, tuple)) else (config.image_size,) * 2
    return torch.randn(batch, config.num_channels, height, width, generator=generator)


def check_own_code(folder: Path) -> None:
    """Refuse a folder whose code is not the package's own: a `.py` file that is not one of MODEL_FILES or not
    byte-identical to the package's copy, an `auto_map` entry naming another class, or any `custom_pipelines`."""
    fix = "save the model again with save_pretrained from vit-scratch, which writes only the package's own code"
    for path in sorted(folder.glob("*.py")):
        if path.name not in MODEL_FILES:
            raise ValueError(
                f"{path} is not part of vit-scratch's model code; refusing to run or push it: remove it, or {fix}."
            )
        if path.read_bytes() != (PACKAGE_DIR / path.name).read_bytes():
            raise ValueError(
                f"{path} differs from vit-scratch's own {path.name} (edited, or saved by another "
                f"version); refusing to run or push it: {fix}."
            )
    found = foreign_code(folder)  # the auto_map test every command shares
    if found:
        raise ValueError(f"{found}; refusing to run or push it: {fix}.")
    for name in OWN_AUTO_MAP:
        if "custom_pipelines" in json.loads((folder / name).read_text()):  # code vit-scratch never writes
            raise ValueError(f"{folder / name} declares custom_pipelines; refusing to run or push it: {fix}.")


def check_code_files(folder: Path) -> None:
    """Refuse a vit_scratch folder that lacks one of MODEL_FILES, which the repo's users (and the push's reload
    check) load the model with: one line naming every missing file and how to restore it."""
    missing = [name for name in MODEL_FILES if not (folder / name).is_file()]
    if missing:
        many = len(missing) > 1
        raise FileNotFoundError(
            f"{folder} lacks the model code file{'s' * many} {', '.join(missing)}, which the model loads with "
            f"(trust_remote_code): restore {'them' if many else 'it'} (copy {'them' if many else 'it'} from the "
            f"package, {PACKAGE_DIR}, or save the model again with save_pretrained from vit-scratch)."
        )


def check_no_links(folder: Path) -> None:
    """Refuse a folder with an entry that is a symbolic link: reading or uploading it would follow the link to
    whatever it points to (a private file elsewhere), which the user never meant to publish."""
    links = sorted(path.name for path in folder.iterdir() if path.is_symlink())
    if links:
        raise ValueError(
            f"{folder / links[0]} is a symbolic link{f' (and {len(links) - 1} more)' if len(links) > 1 else ''}; "
            "a push never follows links, so it would not send what you meant: replace the link by the file "
            "itself, or remove it."
        )


def check_vit_scratch_folder(folder: Path) -> None:
    """Refuse a folder of another model type (a transformers ViT, say): only vit_scratch folders are pushed."""
    check_vit_scratch_type(folder, str(folder), "push", "push a folder that vit-scratch saved")


def check_folder(folder: Path) -> None:
    """Everything a push checks of the folder without loading its model: its files, links, code, model type,
    processor and weights' headers."""
    check_settings_files(folder, str(folder))
    check_no_links(folder)  # before anything reads the folder: a link would be followed
    check_own_code(folder)  # before anything loads the folder: no code but the package's own may run
    check_vit_scratch_folder(folder)
    check_buildable(folder)  # before the reload check builds the model
    check_code_files(folder)  # a vit_scratch folder's users load it with its own code
    refuse_secrets_in_settings(folder)  # its labels go into the card and the Hub's config.json
    check_finite_files(folder)  # NaN weights would be published as a model
    check_processor_fits(folder)  # before the model is built: a processor for other images fails only later
    weight_files(folder)  # safetensors only, each header fitting its file


def load_verified(folder: Path) -> tuple[ViTScratchForImageClassification, ViTScratchImageProcessor]:
    """The folder's model and image processor (a folder `check_folder` passed), once its code (through the Auto class,
    without credentials) reproduces the model."""
    model = ViTScratchForImageClassification.from_pretrained(
        folder, trust_remote_code=False, use_safetensors=True
    ).eval()
    processor = ViTScratchImageProcessor.from_pretrained(folder)
    try:  # bit for bit: the same weights through the same code
        check_reloads_to(model, folder, fixed_input(model.config), own_code=True)
    except FolderReloadError as error:
        if refused_write(error) is not None:  # the check's own copy could not be written: not the folder's fault
            raise
        raise RuntimeError(f"{error}; refusing to push it. Save it again with save_pretrained.") from None
    return model, processor


def read_training_files(folder: Path) -> tuple[dict, dict]:
    """all_results.json and training_record.json of a training output ({} for each that is missing)."""
    return tuple(
        json.loads((folder / name).read_text()) if (folder / name).is_file() else {}
        for name in (RESULTS_FILE, RECORD_FILE)
    )


def conversion_record(folder: Path, digest: str) -> dict | None:
    """What the folder's weights were converted from (`CONVERSION_FILE`, written by convert), while they are the
    weights converted (`digest`); None otherwise, and the card then claims no origin."""
    path = folder / CONVERSION_FILE
    try:
        record = json.loads(path.read_text()) if path.is_file() else None
    except ValueError:
        return None
    return record if isinstance(record, dict) and record.get("weights_sha256") == digest else None


def conversion_vouches(origin: dict | None) -> bool:
    """Whether a card's origin (`card_sources`) is a conversion record that names the folder's weights."""
    return bool(origin) and "weights_sha256" in origin


def unmeasured_reason(folder: Path, record: dict, digest: str) -> str | None:
    """Why the folder's model is not the one its record describes (None: it is): other weights than `digest` on
    record, or a config.json / preprocessor_config.json edited since (their content as loaded, or as written for a
    record written before that rule: a config a push saved again is the same config). A record without
    `files_sha256` (written by an earlier version) vouches for the weights only."""
    recorded = record.get("weights_sha256")
    if not recorded:
        return "it has no weights digest on record"
    if recorded != digest:
        return "its training_record.json names other weights"
    loaded, written = described_sha256(folder), described_sha256(folder, as_written=True)
    recorded_files = (record.get("files_sha256") or {}).items()
    edited = [name for name, value in recorded_files if value not in (loaded.get(name), written.get(name))]
    if edited:
        return f"its {' and '.join(edited)} changed after training"
    return None


def check_results_vouched(folder: Path, metrics: dict, record: dict) -> None:
    """Refuse metrics that are not the ones the run wrote: all_results.json whose content differs from the digest its
    training record holds (`results_sha256`; a record written before it existed vouches for the weights only)."""
    recorded = record.get("results_sha256")
    if metrics and recorded and content_sha256(metrics) != recorded:
        raise ValueError(
            f"{folder / RESULTS_FILE} changed since the run wrote it: restore it, or push with its metrics left out "
            "by deleting it."
        )


def restore_or_retrain(name: str) -> str:
    """The advice for a training file lost from a folder: the smallest fix that works first (its copy in a backup,
    or in the repo a push sent it to), retraining last."""
    return f"restore {name} (from a backup, or the repo it was pushed to), or retrain"


def measured_training_files(folder: Path, digest: str, allow_unmeasured_weights: bool) -> tuple[dict, dict, bool]:
    """(metrics, record, measured) for the card: the training files when the folder's model (weights `digest`,
    config, processor) is the one they were measured on; without the metrics (measured=False) when it is not and the
    caller accepts it."""
    metrics, record = read_training_files(folder)
    if not metrics and not record:
        return {}, {}, True  # no training files: nothing claimed, nothing to check
    check_card_fields(folder / RESULTS_FILE, metrics, METRIC_FIELDS)
    check_card_fields(folder / RECORD_FILE, record, RECORD_FIELDS, REQUIRED_RECORD_FIELDS if record else ())
    check_results_vouched(folder, metrics, record)
    why = unmeasured_reason(folder, record, digest)
    if why is None:
        return metrics, record, True
    if not allow_unmeasured_weights and not record:  # the metrics are there, the record that vouches for them lost
        raise ValueError(
            f"{folder / RECORD_FILE} is missing, and only it shows that the metrics in {RESULTS_FILE} were measured "
            f"on this model: {restore_or_retrain(RECORD_FILE)}, or pass --allow_unmeasured_weights (Python: "
            "allow_unmeasured_weights=True) to push it with a card that says the metrics were not measured on it."
        )
    if not allow_unmeasured_weights:
        raise ValueError(
            f"The model in {folder} is not the one the metrics in {RESULTS_FILE} were measured on "
            f"({why}): retrain, or pass --allow_unmeasured_weights (Python: "
            "allow_unmeasured_weights=True) to push it with a card that says the metrics were not "
            "measured on this model."
        )
    return {}, record, False


def card_sources(folder: Path, digest: str, allow_unmeasured_weights: bool) -> tuple[dict, dict, bool, dict | None]:
    """(metrics, record, measured, origin) of the card of `folder` (weights `digest`): the training files
    (`measured_training_files`); without a training record, the conversion record, or for a run's `checkpoint-N`
    which step of which run it is, with the metrics logged at that step (`checkpoint_origin`)."""
    metrics, record, measured = measured_training_files(folder, digest, allow_unmeasured_weights)
    if record:  # a trained folder's record says it all
        return metrics, record, measured, None
    conversion = conversion_record(folder, digest)
    if conversion:
        return metrics, record, measured, conversion
    checkpoint = checkpoint_origin(folder)
    if checkpoint:
        return checkpoint["metrics"], record, measured, checkpoint
    return metrics, record, measured, None


def metrics_note(folder: Path, metrics: dict, record: dict, measured: bool) -> list[str]:
    """A line when the folder was trained (it has a record) but its metrics are lost (no all_results.json): the card
    says they are not known, and the push says so."""
    if not record or metrics or not measured:
        return []
    line = (
        f"{folder / RESULTS_FILE} is missing: the metrics of this model are not known, and its card says so (no "
        f"results section); to publish them, {restore_or_retrain(RESULTS_FILE)}."
    )
    return [line]


def local_card_note(folder: Path, config) -> list[str]:
    """A line when the folder's README.md is not the card its training wrote (edited by hand, or the user's own):
    the push sends the generated card, whose metrics the record vouches for and whose loading example it pins, so
    the local text is not sent, and the line says so and how to publish it."""
    readme = folder / "README.md"
    if not readme.is_file():
        return []
    metrics, record = read_training_files(folder)
    text = readme.read_text(encoding="utf-8", errors="replace")
    if record and str(render_model_card(config, metrics, record)).strip() == text.strip():
        return []  # the card training wrote: the generated card says the same, and more
    line = (
        f"{readme} differs from the card training wrote (edited by hand): it was not sent; the Hub gets the "
        "generated card (metrics from the training record, loading example pinned to the pushed commit). To "
        "publish your text, edit README.md on the Hub: later pushes keep a card edited there unless --overwrite_card."
    )
    return [line]


def model_card_text(
    config,
    metrics: dict,
    record: dict,
    measured: bool,
    repo_id: str,
    revision: str | None,
    conversion: dict | None,
    files: list[str],
) -> str:
    """The card (loading example pinned to `revision` if given); for unmeasured weights, without metrics and with
    a note that says why; for a converted folder (`conversion`), what it was converted from. It speaks only of the
    describing files the push sends (`files`, `sent_files`). Its last line marks it as the push's own
    (`written_by_push`)."""
    text = str(
        render_model_card(
            config,
            metrics,
            record,
            model_id=repo_id,
            revision=revision,
            unmeasured=not measured,
            conversion=conversion,
            files=files,
        )
    )
    text = text if text.endswith("\n") else text + "\n"
    return f"{text}{CARD_MARK.format(digest=hashlib.sha256(text.encode()).hexdigest())}\n"


def written_by_push(card: bytes) -> bool:
    """Whether a README.md is a card a push wrote and nobody edited since: its last line is `CARD_MARK` with the
    digest of the text above it."""
    text = card.decode("utf-8", errors="replace")
    body, _, last = text.rstrip("\n").rpartition("\n")
    found = re.fullmatch(CARD_MARK.format(digest="([0-9a-f]{64})"), last)
    return bool(found) and hashlib.sha256(f"{body}\n".encode()).hexdigest() == found.group(1)


def stage_repo(
    folder: Path,
    staging: Path,
    model,
    processor,
    card: str,
    measured: bool,
    max_shard_size: int,
    conversion: dict | None = None,
) -> None:
    """Write the repo content: sharded safetensors, config with auto_map, code, processor, card, and the training
    files (only the record when the metrics were not measured on these weights); the conversion record while it
    vouches for these weights (`conversion` holds its digest), so a conversion from the repo keeps the history."""
    model.save_pretrained(staging, max_shard_size=max_shard_size)
    processor.save_pretrained(staging)
    for name in sent_files(folder, measured, conversion):
        shutil.copy2(folder / name, staging / name, follow_symlinks=False)
    (staging / "README.md").write_text(card)


def sent_files(folder: Path, measured: bool, conversion: dict | None) -> list[str]:
    """The training and conversion files of `folder` a push sends, those that are there: the metrics, pictures and
    record (only the record when the metrics were not measured on these weights), and the conversion record while
    it vouches for these weights. The card names no other (`model_card_text`)."""
    names = [
        *(SHARED_FILES if measured else (RECORD_FILE,)),
        *([CONVERSION_FILE] if conversion_vouches(conversion) else []),
    ]
    return [name for name in names if (folder / name).is_file()]


def title_and_description(message: str) -> tuple[str, str]:
    """A commit message as git reads it: the first line is the title, the rest (blank lines around it dropped) the
    description."""
    title, _, rest = message.strip().partition("\n")
    return title.strip(), rest.strip()


def check_staged(folder: Path, staging: Path, digest: str, secrets: list[str]) -> None:
    """The staged repo holds only regular files, the package's own code, the folder's weights and no token, or
    nothing is uploaded."""
    irregular = [path.name for path in staging.iterdir() if path.is_symlink() or not path.is_file()]
    if irregular:
        raise RuntimeError(
            f"{irregular[0]} staged from {folder} is not a regular file; refusing to push it. Save the folder "
            "again with save_pretrained."
        )
    check_own_code(staging)
    check_code_files(staging)
    if weights_sha256(staging) != digest:
        raise RuntimeError(
            f"The weights staged for upload differ from those in {folder}; refusing to push them. "
            "Save the folder again with save_pretrained."
        )
    leaks = find_secrets(staging, secrets)
    if leaks:
        names = ", ".join(
            "the model card README.md" if path.name == "README.md" else str(folder / path.name) for path in leaks
        )
        raise ValueError(
            f"A Hub token is in {names} (as staged for upload from {folder}); refusing to push: remove "
            "the token from the folder's files (an old training_record.json: retrain, or delete the "
            "line holding it) and push again."
        )


def file_hashes(content: Path | bytes) -> tuple[str, str]:
    """(git blob oid, sha256) of a file (read in chunks) or of bytes: how the Hub identifies a regular and an LFS
    file."""
    size = len(content) if isinstance(content, bytes) else content.stat().st_size
    git, sha256 = hashlib.sha1(b"blob %d\0" % size), hashlib.sha256()
    for chunk in chunks_of(content):
        git.update(chunk)
        sha256.update(chunk)
    return git.hexdigest(), sha256.hexdigest()


def chunks_of(content: Path | bytes):
    if isinstance(content, bytes):
        yield content
        return
    with content.open("rb") as stream:
        yield from iter(lambda: stream.read(1 << 20), b"")


def same_file(remote: RepoFile | None, content: Path | bytes) -> bool:
    """Whether a file on the Hub (a `RepoFile` of `list_repo_tree` / `get_paths_info`) has this content."""
    if remote is None:
        return False
    git_oid, sha256 = file_hashes(content)
    return remote.lfs.sha256 == sha256 if remote.lfs is not None else remote.blob_id == git_oid


def remote_files(api: HfApi, repo_id: str, commit: str) -> dict[str, RepoFile]:
    """{path: RepoFile} of every file at `commit`."""
    tree = api.list_repo_tree(repo_id, revision=commit, recursive=True)
    return {entry.path: entry for entry in tree if isinstance(entry, RepoFile)}


def replaced_files(remote: dict[str, RepoFile], staging: Path) -> list[str]:
    """Files of an earlier push (weights, training files) that this push does not bring: to delete."""
    return sorted(
        name
        for name in remote
        if not (staging / name).exists() and any(fnmatch(name, pattern) for pattern in REPLACED_PATTERNS)
    )


def holds_model(remote: dict[str, RepoFile], staging: Path) -> bool:
    """Whether a commit's files (`remote`) are every staged file but the card, and nothing this push would delete."""
    staged = [path for path in staging.iterdir() if path.name != "README.md"]
    return not replaced_files(remote, staging) and all(same_file(remote.get(path.name), path) for path in staged)


def foreign_card(api: HfApi, repo_id: str, head: str, remote: dict[str, RepoFile]) -> bool:
    """Whether the repo at `head` has a README.md that no push wrote, or that was edited since (`written_by_push`)."""
    if "README.md" not in remote:
        return False
    path = api.hf_hub_download(repo_id, "README.md", revision=head)
    return not written_by_push(Path(path).read_bytes())


def left_out_note(folder: Path, staging: Path) -> list[str]:
    """A line naming the entries of `folder` the push does not send (notes, `.env`, a run's checkpoints: anything
    that is not part of the model), so the user knows what stayed behind: names only, `MAX_NAMES_SHOWN` at most, the
    rest counted. README.md has its own line (`local_card_note`); the weights are sent, though sharded anew."""
    sent = {path.name for path in staging.iterdir()} | {"README.md"}
    left = sorted(
        shown_name(entry.name) + ("/" if entry.is_dir() and not entry.is_symlink() else "")
        for entry in folder.iterdir()
        if entry.name not in sent and not any(fnmatch(entry.name, p) for p in ("*.safetensors", "*.safetensors.*"))
    )
    if not left:
        return []
    more = f" and {len(left) - MAX_NAMES_SHOWN} more" if len(left) > MAX_NAMES_SHOWN else ""
    return [f"Not sent (not part of the model): {', '.join(left[:MAX_NAMES_SHOWN])}{more}, in {folder.resolve()}."]


def files_notes(repo_id: str, remote: dict[str, RepoFile], staging: Path, keep_card: bool) -> list[str]:
    """One line for each kind of file already on the repo that this push does not bring: removed (files a loader
    would follow instead of the pushed model's; an earlier model's weights and results), kept (the user's other files), and the user's card kept."""
    removed = replaced_files(remote, staging)
    kept = sorted(
        set(remote) - set(removed) - {path.name for path in staging.iterdir()} - {"README.md", ".gitattributes"}
    )
    notes = []
    followed = [name for name in removed if any(fnmatch(name, pattern) for pattern in LOADER_FILES)]
    removed = [name for name in removed if name not in followed]
    if followed:
        notes.append(
            f"Removed from {repo_id} in the model commit (its history keeps them): {', '.join(followed)}, which "
            "would make from_pretrained load another model (an adapter's base, another processor) instead of the "
            "pushed one."
        )
    if removed:
        notes.append(
            f"Removed from {repo_id} in the model commit (its history keeps them): {', '.join(removed)}, an earlier "
            "model's weights or results, which would be read instead of, or beside, the new ones."
        )
    if kept:
        notes.append(f"Kept on {repo_id}, not written by vit-scratch: {', '.join(kept)}.")
    if keep_card:
        notes.append(
            f"Kept README.md on {repo_id}: a card vit-scratch did not write, or edited since; its loading example is "
            "not pinned to the new weights. Pass --overwrite_card (Python: overwrite_card=True) to replace it with "
            "the generated card."
        )
    return notes


def card_pinned_already(api: HfApi, repo_id: str, head: str, staging: Path, card_for) -> bool:
    """Whether `head` (which holds the staged model) has this push's card pinned to `head` itself or to its parent
    commit holding the same model: a push already completed. `card_for(commit)` is the card pinned to `commit`."""
    readme = next(iter(api.get_paths_info(repo_id, ["README.md"], revision=head)), None)
    for entry in api.list_repo_commits(repo_id, revision=head)[:2]:
        pinned = entry.commit_id
        if same_file(readme, card_for(pinned)) and (
            pinned == head or holds_model(remote_files(api, repo_id, pinned), staging)
        ):
            return True
    return False


def open_pull_request_holding(api: HfApi, repo_id: str, staging: Path):
    """The first open pull request of `repo_id` (newest first) whose head holds the staged model (`holds_model`: the
    same files), with that head commit: a second `--create_pr` of the same model names it instead of opening
    another. None where no open pull request holds it."""
    for pull in api.get_repo_discussions(repo_id, discussion_type="pull_request", discussion_status="open"):
        head = api.repo_info(repo_id, revision=pull.git_reference).sha
        if holds_model(remote_files(api, repo_id, head), staging):
            return pull, head
    return None


def push_to_hub(
    folder: str | Path,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    max_shard_size: str | int = "2GB",
    allow_unmeasured_weights: bool = False,
    overwrite_card: bool = False,
    reached: Callable[..., None] = lambda stage, commit=None: None,
) -> PushResult:
    """Verify `folder`, then push it to `repo_id` (on branch `revision`, or as a pull request against main).

    Two commits: the model with its card, then the card pinned to that model commit, so the loading example names
    a real revision. If the repo already holds these model files (a push that was interrupted, or repeated), no
    model commit is made again: only the pin (or nothing). `revision` may be a pull request ref (`refs/pr/1`), to
    finish an interrupted pull request. A pull request is opened only where neither main nor an open pull request
    holds these files already: one that does is named in a note (and its card pinned if that was cut short). A README.md on the repo that no push wrote (or that was edited since) is kept
    unless `overwrite_card`. Returns the repo URL, the last commit and a line for each file already on the repo that
    the push removed or kept.

    Every check of the folder and of the Hub arguments (`check_hub_arguments`) comes before the model is loaded.
    `reached(stage, commit)` is told where the push is, for a command to say what was done if it is stopped:
    "preparing" (the repo is made or read: nothing committed), "sending" (the model's files and commit), "committed"
    (with the model commit's id; the card's pin follows).
    """
    check_folder_path(os.fspath(folder), "FOLDER", "push")  # as typed: ./x, x/
    if not os.path.isdir(folder):  # a push reads a local folder only, whatever its name looks like
        raise FileNotFoundError(f"FOLDER {os.fspath(folder)!r} does not exist: give the saved model folder to push.")
    folder = Path(folder)
    check_folder(folder)
    digest = weights_sha256(folder)
    metrics, record, measured, conversion = card_sources(folder, digest, allow_unmeasured_weights)
    checked = check_hub_arguments(
        repo_id,
        revision=revision,
        create_pr=create_pr,
        commit_message=commit_message,
        max_shard_size=max_shard_size,
        token=token,
        private=private,
    )
    # from here on the full repo id (a bare name is in the token owner's namespace) and the branch's plain name
    repo_id, revision, max_shard_size = checked.repo_id, checked.revision, checked.max_shard_size
    secrets = known_secrets(token)
    copies = f"the push's temporary copies of {folder} (in {tempfile.gettempdir()})"
    kept = f"nothing was uploaded and {folder} is as it was (the copies were removed)"
    with refused_writes_named(copies, kept, TEMPORARY_FIX):
        model, processor = load_verified(folder)  # its reload check copies the folder's code
    api = HfApi(token=token)
    target = None if create_pr else revision or "main"
    sent = sent_files(folder, measured, conversion)
    with ExitStack() as scratch:
        card = model_card_text(model.config, metrics, record, measured, repo_id, None, conversion, sent)
        with refused_writes_named(copies, kept, TEMPORARY_FIX):  # making the folder is a write too
            staging = scratch.enter_context(scratch_folder("push"))  # a kill leaves it to the next command
            stage_repo(folder, staging, model, processor, card, measured, max_shard_size, conversion)
        check_staged(folder, staging, digest, secrets)

        reached("preparing")
        try:
            created = not api.repo_exists(repo_id)
            repo_url = str(api.create_repo(repo_id, private=private, exist_ok=True))
            if target not in (None, "main") and not target.startswith("refs/pr/"):
                api.create_branch(repo_id, branch=target, exist_ok=True)
            head = api.repo_info(repo_id, revision=target or "main").sha  # a pull request starts from main
            remote = remote_files(api, repo_id, head)
            keep_card = not overwrite_card and foreign_card(api, repo_id, head, remote)
            if keep_card:  # the user's card stays: nothing of this push's card is sent
                (staging / "README.md").unlink()
            model_commit = head if holds_model(remote, staging) else None
            open_pull = open_pull_request_holding(api, repo_id, staging) if create_pr and not model_commit else None
        except HUB_ERRORS as error:
            raise PushError(
                f"Preparing {repo_id} on the Hub failed ({describe(error, secrets)}): nothing was "
                "committed; check the repo id, your token and the network, then re-run the same "
                "command."
            ) from None

        pull_request_url, card_revision = None, target
        notes = (
            left_out_note(folder, staging)
            + local_card_note(folder, model.config)
            + metrics_note(folder, metrics, record, measured)
            + files_notes(repo_id, remote, staging, keep_card)
        )
        if create_pr and model_commit is not None:  # a pull request would change nothing
            notes.append(f"{repo_id}'s main already holds this model (the same files): no pull request was opened.")
            return PushResult(repo_url, model_commit, f"{repo_url}/commit/{model_commit}", notes=notes)
        if open_pull is not None:  # as main: named, no other opened; its card pinned below if that was cut short
            pull, model_commit = open_pull
            pull_request_url, card_revision = pull.url, pull.git_reference
            notes.append(
                f"{repo_id}'s open pull request #{pull.num} ({pull.url}) already holds this model (the same files): "
                "no new pull request was opened."
            )
        if model_commit is None:
            try:
                # One commit, all or nothing (upload_folder may split a large folder into several commits).
                operations = [CommitOperationDelete(name) for name in replaced_files(remote, staging)] + [
                    CommitOperationAdd(path.name, str(path)) for path in sorted(staging.iterdir())
                ]
                reached("sending")
                title, description = title_and_description(
                    commit_message
                    or f"Upload {model.config.model_type} model from {redact(folder.resolve().name, secrets)}"
                )
                commit = api.create_commit(
                    repo_id,
                    operations,
                    revision=target,
                    create_pr=create_pr,
                    parent_commit=None if create_pr else head,
                    commit_message=title,
                    commit_description=description or None,
                )
            except HUB_ERRORS as error:
                left = (
                    f"the repo {repo_id}, created by this push, is still empty"
                    if created
                    else f"{repo_id} is unchanged"
                )
                raise PushError(
                    f"Uploading the model to {repo_id} failed ({describe(error, secrets)}): nothing was "
                    f"committed and {left}; re-run the same command to push it."
                ) from None
            model_commit, pull_request_url = commit.oid, commit.pr_url
            reached("committed", model_commit)
            card_revision = commit.pr_revision if create_pr else target
        else:
            if keep_card:
                return PushResult(repo_url, model_commit, f"{repo_url}/commit/{model_commit}", pull_request_url, notes)
            try:  # the model is there: its card may already be pinned, to this commit or to the model commit before

                def card_for(commit: str) -> bytes:
                    return model_card_text(
                        model.config, metrics, record, measured, repo_id, commit, conversion, sent
                    ).encode()

                done = card_pinned_already(api, repo_id, model_commit, staging, card_for)
            except HUB_ERRORS as error:
                raise PushError(
                    f"Reading {repo_id} on the Hub failed ({describe(error, secrets)}): nothing was "
                    "committed; re-run the same command."
                ) from None
            if done:
                return PushResult(repo_url, model_commit, f"{repo_url}/commit/{model_commit}", pull_request_url, notes)
        if keep_card:
            return PushResult(repo_url, model_commit, commit.commit_url, pull_request_url, notes)

        pinned_card = model_card_text(model.config, metrics, record, measured, repo_id, model_commit, conversion, sent)
        if any(secret in pinned_card for secret in secrets):
            raise ValueError(f"The model card of {folder} would hold a Hub token; refusing to push it.")
        try:
            card_commit = api.upload_file(
                path_or_fileobj=pinned_card.encode(),
                path_in_repo="README.md",
                repo_id=repo_id,
                revision=card_revision,
                parent_commit=model_commit,
                commit_message=f"Model card: pin the loading example to {model_commit}",
            )
        except HUB_ERRORS as error:
            retry = (
                f"re-run the same command with --revision {card_revision} (Python: revision={card_revision!r}) "
                "instead of --create_pr"
                if create_pr
                else "re-run the same command"
            )
            raise PushError(
                f"The model is on {repo_id} at commit {model_commit} (complete and loadable, its card "
                f"unpinned), but pinning the card's loading example to that commit failed "
                f"({describe(error, secrets)}); {retry} to pin it."
            ) from None
    notes.append(f"README.md: the generated model card, its loading example pinned to {model_commit}.")
    return PushResult(repo_url, card_commit.oid, card_commit.commit_url, pull_request_url, notes)
