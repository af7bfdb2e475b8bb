"""The push: a saved model folder -> one commit on the Hugging Face Hub, through a gate.

Nothing is sent unless every step passes, in this order:
1. `sources.check_model_folder`: a config, safetensors weights, an `auto_map` naming only the package's code;
2. the code is the package's own: a `*_vit_scratch.py` in the folder that differs from the installed package's is
   refused (it would not be what runs); a folder without code, or with transformers' `ViTImageProcessor`, is
   pushable: the stage gets the package's model files, `auto_map` and its own processor;
3. a stage (a temporary folder) gets the allow-list only: config, weights (resharded), processor, code, card, results,
   records and figures; nothing else of the folder is sent;
4. the stage reloads, in a new process that can reach no token, through `AutoModelForImageClassification` (a masked
   autoencoder's folder: `AutoModelForPreTraining`, with the same patches hidden) with `trust_remote_code=True`, to
   the same logits as the folder loaded here;
5. no staged file holds a token (`secrets.files_with_secrets`);
6. one commit (`HfApi.create_commit`); files the Hub holds already are skipped by huggingface_hub, so running the same
   command again finishes a push cut short, or changes nothing.

The card is the folder's (`card.card_text`) with the repo id in its loading example; it cannot name the commit that
holds it, so it is not pinned. A README.md on the repo that no push wrote is kept unless `overwrite_card`.

Training glue, never imported by the model files.
"""

import fnmatch
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, constants, get_token
from huggingface_hub.utils import validate_repo_id
from transformers import AutoImageProcessor

from .. import configuration_vit_scratch
from ..configuration_vit_scratch import MODEL_FILES, is_masked_autoencoder
from ..errors import UserError, on_interrupt
from ..image_processing_vit_scratch import ViTScratchImageProcessor
from ..secrets import credential_free_env, files_with_secrets, redact, remember, shown
from ..sources import check_model_folder, read_json
from .card import (
    CONVERSION_FILE,
    FIGURES,
    RECORD_FILE,
    RESULTS_FILE,
    auto_class,
    card_text,
    marked,
    measured,
    public_record,
    unedited,
)

PACKAGE = Path(configuration_vit_scratch.__file__).parent  # the installed package: its model files are the code sent
DESCRIBING = (RESULTS_FILE, RECORD_FILE, CONVERSION_FILE, *FIGURES)  # sent as they are, when the folder has them
# An earlier model's files that this push's commit removes when it does not bring them: a stale shard or index, weights
# of another format a loader would read instead, an adapter or processor config a loader would follow, old results.
REPLACED = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json", "*.pt", "*.pth", "*.ckpt",
            "*.h5", "*.msgpack", "*.onnx", "*.gguf", "adapter_config.json", "adapter_model.*", "processor_config.json",
            "*_results.json", *DESCRIBING, *MODEL_FILES)  # fmt: skip
PROCESSOR_SETTINGS = (
    "image_mean",
    "image_std",
    "do_resize",
    "do_rescale",
    "do_normalize",
    "rescale_factor",
    "resample",
)
RELOAD = """
import sys
sys.modules["modeling_vit_scratch"] = None  # as on a machine without the package: only the repo's own code runs
import torch
import transformers
stage, inputs, outputs, threads, auto_class = sys.argv[1:6]
torch.set_num_threads(int(threads))  # the same summation order as this process: the same logits, bit for bit
model = getattr(transformers, auto_class).from_pretrained(stage, trust_remote_code=True, use_safetensors=True).eval()
with torch.no_grad():
    torch.save(model(**torch.load(inputs)).logits, outputs)
"""


@dataclass
class PushResult:
    url: str  # the repo's page
    commit: str  # the commit that holds the model (the head when the Hub held it already)
    pull_request: str | None = None
    notes: list[str] = field(default_factory=list)


def check_code(folder: Path) -> None:
    """Refuse model files that differ from the installed package's: the stage sends the package's, which would not be
    the code the folder's model ran with. Missing ones are fine (the package supplies them)."""
    for name in MODEL_FILES:
        if (folder / name).is_file() and (folder / name).read_bytes() != (PACKAGE / name).read_bytes():
            raise UserError(
                f"{shown(folder / name)} differs from the installed vit-scratch's {name} (edited, or saved by another "
                "version): the push sends the package's own code; delete the folder's *_vit_scratch.py files to push "
                "with it (the push checks the model reloads to the same outputs), or push with the version that saved it"
            )


def processor_for(folder: Path, config) -> object | None:
    """The processor to send: a vit_scratch model gets the package's own, keeping the folder's normalisation (a folder
    may hold transformers' ViTImageProcessor, or none); another model type its own, if it has one."""
    settings = folder / "preprocessor_config.json"
    if config.model_type != "vit_scratch":
        return AutoImageProcessor.from_pretrained(folder) if settings.is_file() else None
    saved = read_json(settings, shown(settings)) if settings.is_file() else {}
    if saved.get("image_processor_type", "").startswith("ViTScratch"):
        return ViTScratchImageProcessor.from_pretrained(folder)
    return ViTScratchImageProcessor.for_config(
        config, **{key: saved[key] for key in PROCESSOR_SETTINGS if key in saved}
    )


def fixed_input(config) -> dict[str, torch.Tensor]:
    """The same two images every time, shaped for the model (and for a masked autoencoder, the patches it hides)."""
    size = config.image_size if isinstance(config.image_size, (list, tuple)) else (config.image_size,) * 2
    generator = torch.Generator().manual_seed(0)
    inputs = {"pixel_values": torch.randn(2, config.num_channels, *size, generator=generator)}
    if is_masked_autoencoder(config):
        inputs["noise"] = torch.rand(2, config.grid_size[0] * config.grid_size[1], generator=generator)
    return inputs


def check_reload(model, stage: Path, scratch: Path) -> None:
    """The stage, loaded in a new process with no token in reach and with the repo's own code, gives the logits of
    `model` (the folder as loaded here), bit for bit."""
    inputs = fixed_input(model.config)
    inputs["pixel_values"] = inputs["pixel_values"].to(model.dtype)
    with torch.no_grad():
        expected = model(**inputs).logits
    torch.save(inputs, scratch / "inputs.pt")
    (scratch / "home").mkdir()
    env = {**credential_free_env(scratch / "home"), "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(scratch / "code")}
    arguments = [
        stage,
        scratch / "inputs.pt",
        scratch / "logits.pt",
        torch.get_num_threads(),
        auto_class(model.config.to_dict()),
    ]
    ran = subprocess.run(
        [sys.executable, "-c", RELOAD, *map(str, arguments)],
        env=env,
        cwd=scratch,
        capture_output=True,
        text=True,
        check=False,
    )
    if ran.returncode != 0:
        last = (ran.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"the model does not load from the staged repo with its own code ({shown(last)}): save it again"
        )
    got = torch.load(scratch / "logits.pt")
    if got.shape != expected.shape or not torch.equal(got, expected):
        raise UserError("the staged repo does not reload to the same outputs as the folder: save the model again")


def stage_folder(folder: Path, stage: Path, max_shard_size, allow_unmeasured_weights: bool) -> object:
    """Write the allow-list of `folder` into `stage` (steps 1-3); returns the model as loaded here."""
    config = check_model_folder(folder, argument="the folder", trust_option=None)
    own = config.get("model_type") == "vit_scratch"
    if own:
        check_code(folder)
    vouched = measured(folder)
    if not vouched and not allow_unmeasured_weights:
        raise UserError(
            f"the weights in {shown(folder)} are not the ones its training_record.json names, so its "
            "metrics were not measured on them: retrain, or pass --allow_unmeasured_weights to push them with "
            "a card that reports no metrics"
        )
    model = getattr(transformers, auto_class(config)).from_pretrained(folder, use_safetensors=True).eval()
    model.save_pretrained(stage, max_shard_size=max_shard_size or "5GB")  # vit_scratch: its code and auto_map too
    if (processor := processor_for(folder, model.config)) is not None:
        processor.save_pretrained(stage)
    for name in MODEL_FILES if own else ():
        shutil.copyfile(PACKAGE / name, stage / name)  # every file, also those of a class this model does not use
    # regular files only (a link would send whatever it points to); the results and the figures drawn from them only
    # with the weights they were measured on
    for name in DESCRIBING:
        if (
            (folder / name).is_file()
            and not (folder / name).is_symlink()
            and (vouched or name not in (RESULTS_FILE, *FIGURES))
        ):
            if name in (RECORD_FILE, CONVERSION_FILE):  # the card's cut paths, not the disk they lay on
                record = public_record(read_json(folder / name, name))
                (stage / name).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            else:
                shutil.copyfile(folder / name, stage / name)
    return model


def check_target(
    repo_id: str | None, token: str | None, revision: str | None = None, commit_message: str | None = None
) -> None:
    """What a push needs that is known before any work (a training run pushes after it trained): a valid repo id, no
    token typed into a field that is sent, and a token to push with."""
    remember(token)
    if not repo_id:
        raise UserError("the push needs a repo id: give --hub_model_id owner/name")
    validate_repo_id(repo_id)
    for name, value in (("the repo id", repo_id), ("--revision", revision), ("--commit_message", commit_message)):
        if value and redact(value) != value:
            raise UserError(f"{name} holds a Hub token: nothing was sent; give it without the token")
    if not (token or get_token()):
        raise UserError("pushing needs a Hub token: run `hf auth login` or set HF_TOKEN, then run again")


def push_folder(
    folder,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    token: str | None = None,
    max_shard_size: str | int | None = None,
    overwrite_card: bool = False,
    allow_unmeasured_weights: bool = False,
    say=print,
) -> PushResult:
    """Push `folder` to `repo_id` (on branch `revision`, created if missing, or as a pull request) through the gate
    above. `say` is told where the push sends before the work starts, and what it left on the repo."""
    check_target(repo_id, token, revision, commit_message)
    if "/" not in repo_id:  # a bare name is in the token owner's namespace: the card and the lines name it in full
        repo_id = f"{HfApi(token=token).whoami()['name']}/{repo_id}"
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{shown(folder)} is not a folder: give the folder save_pretrained or train wrote")
    where = f"{constants.ENDPOINT}/{repo_id}" + (f" (revision {revision})" if revision else "")
    say(f"Pushing {shown(folder)} to {shown(where)}{' as a pull request' if create_pr else ''}.")
    with tempfile.TemporaryDirectory(prefix="vit-scratch-push-") as scratch:
        stage, scratch = Path(scratch, "repo"), Path(scratch)
        model = stage_folder(folder, stage, max_shard_size, allow_unmeasured_weights)
        own = folder / "README.md"
        if own.is_file() and not unedited(own.read_bytes()):  # the user's own words: sent as they are
            shutil.copyfile(own, stage / "README.md")
            say("Sending the folder's README.md as it is (it is not the card vit-scratch wrote, or was edited).")
        else:
            (stage / "README.md").write_text(marked(card_text(stage, repo_id=repo_id)), encoding="utf-8")
        check_reload(model, stage, scratch)
        if leaks := files_with_secrets([stage]):
            raise UserError(
                f"{shown(leaks[0].name)} (as staged from the folder) holds a Hub token: nothing was sent; remove the "
                "token from the folder's files and push again"
            )
        result = commit_stage(
            stage, folder, repo_id, private, revision, create_pr, commit_message, token, overwrite_card
        )
        left = sorted({entry.name for entry in folder.iterdir()} - {entry.name for entry in stage.iterdir()})
        if left := [name for name in left if not name.endswith(".safetensors") and name != "README.md"]:
            result.notes.append(f"Not sent (not part of the model): {shown(', '.join(left))}.")
        return result


def commit_stage(stage, folder, repo_id, private, revision, create_pr, message, token, overwrite_card) -> PushResult:
    """The staged repo as one commit on `repo_id` (step 6)."""
    api = HfApi(token=token)
    on_interrupt("Interrupted before the commit: nothing was committed; run the same command again to push.")
    url = api.create_repo(repo_id, private=private, exist_ok=True)
    if revision and not create_pr and not revision.startswith("refs/"):
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    base = revision if revision and not create_pr else None
    remote = [entry.path for entry in api.list_repo_tree(repo_id, revision=base, recursive=True)]
    notes = []
    kept = "README.md" in remote and not overwrite_card
    if kept and not unedited(Path(api.hf_hub_download(repo_id, "README.md", revision=base)).read_bytes()):
        (stage / "README.md").unlink()
        notes.append("Kept the repo's README.md (no push wrote it): pass --overwrite_card to replace it.")
    sent = {path.name for path in stage.iterdir()}
    gone = [name for name in remote if name not in sent and any(fnmatch.fnmatch(name, p) for p in REPLACED)]
    if gone:
        notes.append(f"Removed an earlier model's {', '.join(map(shown, gone))} (the repo's history keeps them).")
    operations = [CommitOperationDelete(name) for name in gone]
    operations += [CommitOperationAdd(path.name, str(path)) for path in sorted(stage.iterdir())]
    on_interrupt("Interrupted while committing: the commit is all or nothing; run the same command again to finish.")
    title, _, description = (message or f"Upload {shown(Path(folder).resolve().name)} with vit-scratch").partition("\n")
    commit = api.create_commit(
        repo_id,
        operations,
        commit_message=title,
        commit_description=description.strip() or None,
        revision=base,
        create_pr=create_pr,
    )
    on_interrupt(None)
    return PushResult(str(url), commit.oid, commit.pr_url, notes)
