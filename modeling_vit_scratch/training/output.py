"""The output folder of a run: weights, config, code, image processor, metrics, the pictures (training curves, the
test split's confusion matrix), the training record and the model card (with the notes on how the model learned: augmentation, distillation), checked
and moved into place whole; then, with `--push_to_hub`, the push through the same gate as `vit-scratch push`, whose
repo id and credentials `check_push_ready` checks before training starts.

A file that only describes the model (metrics, pictures, record, card) that cannot be written never costs the trained
weights: the model is written without it and the error line names what is missing and how to write it again.
"""

import json
import os
from collections.abc import Callable
from pathlib import Path

from accelerate.utils import extract_model_from_parallel
from transformers import AutoConfig, Trainer, TrainingArguments

from modeling_vit_scratch.common.folders import (
    CONFUSION_FILE,
    CURVES_FILE,
    RECORD_FILE,
    RESULTS_FILE,
    publish,
    staging_inside,
)
from modeling_vit_scratch.common.model_folder import content_sha256, described_sha256
from modeling_vit_scratch.common.run_state import finish_run
from modeling_vit_scratch.common.secrets import find_secrets, weights_sha256
from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig
from modeling_vit_scratch.sharing.reload_check import FolderReloadError, check_reloads_to, model_logits
from modeling_vit_scratch.training.arguments import DataArguments, ModelArguments, plain_command, printed_python
from modeling_vit_scratch.training.data import ImageTransform, PreparedData, collate_images, transformed
from modeling_vit_scratch.training.distributed import full_state_dict, is_sharded, sharded_runner, unsharded_copy
from modeling_vit_scratch.training.policies import augmentation_policy, describe_policy


def augmentation_text(data_args: DataArguments) -> str | None:
    """How training images were augmented, in words for the model card and the record (None: not at all)."""
    return describe_policy(augmentation_policy(data_args), data_args)


def distillation_text(model_args: ModelArguments) -> str | None:
    """How the model learned from a teacher, in words for the model card and the record (None without one)."""
    if not model_args.teacher:
        return None
    how = (
        "its top class (hard distillation)"
        if model_args.distillation == "hard"
        else f"its probabilities at temperature {model_args.distillation_temperature:g} (soft distillation)"
    )
    at = f" (commit {model_args.teacher_revision})" if model_args.teacher_revision else ""  # a hub teacher's, pinned
    return (
        f"the distillation head learned from the teacher {model_args.teacher}{at} {how}, with weight "
        f"{model_args.distillation_alpha:g} (the labels {1 - model_args.distillation_alpha:g})"
    )


class ModelNotDescribed(ValueError):
    """The model is saved, but some of the files that describe it could not be written (one line: which, why, and
    how to write them again)."""


def model_card(config, metrics: dict, record: dict):
    """The card of a trained model: vit-scratch's own for a vit_scratch model, a short one for another model."""
    from modeling_vit_scratch.sharing.card import render_model_card, render_other_model_card

    if isinstance(config, ViTScratchConfig):
        return render_model_card(config, metrics, record)
    return render_other_model_card(config, metrics, record)  # a transformers model, e.g. a teacher


def write_model_card(folder: str | Path) -> None:
    """(Re)write README.md of a training output from its config.json, all_results.json and training_record.json."""
    folder = Path(folder)
    metrics, record = (json.loads((folder / name).read_text()) for name in (RESULTS_FILE, RECORD_FILE))
    config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    model_card(config, metrics, record).save(folder / "README.md")


def draw_confusion_matrix(folder: str | Path) -> None:
    """(Re)draw confusion_matrix.png of a training output from the numbers in its all_results.json."""
    from modeling_vit_scratch.training.curves import plot_confusion_matrix

    folder = Path(folder)
    confusion = json.loads((folder / RESULTS_FILE).read_text()).get("test_confusion_matrix")
    if not confusion:
        raise ValueError(f"{folder / RESULTS_FILE} holds no test_confusion_matrix: train again to measure it.")
    partial = folder / f".{CONFUSION_FILE}.partial"  # drawn whole, then moved into place
    try:
        plot_confusion_matrix(confusion, partial)
        os.replace(partial, folder / CONFUSION_FILE)
    finally:
        partial.unlink(missing_ok=True)


# The describing files that can be written again from the folder: what to do, and the function that does it.
WRITTEN_AGAIN = {
    "README.md": ("write the card", "write_model_card"),
    CONFUSION_FILE: ("draw it", "draw_confusion_matrix"),
}


def write_describing_files(staging: Path, writers: dict[str, Callable[[Path], None]]) -> list[str]:
    """Run each writer on staging/NAME; a writer that fails leaves no file. Returns 'NAME (why)' for each failure."""
    failed = []
    for name, write in writers.items():
        try:
            write(staging / name)
        except Exception as error:  # noqa: BLE001 (whatever fails, a describing file must not cost the weights)
            (staging / name).unlink(missing_ok=True)
            failed.append(f"{name} ({type(error).__name__}: {' '.join(str(error).split())})")
    return failed


def not_described(output_dir: Path, failed: list[str]) -> ModelNotDescribed:
    """The error line for a model saved without some of its describing files."""
    names = [item.split(" ", 1)[0] for item in failed]
    how = (
        "once the cause is fixed, "
        + " and ".join(
            f'{WRITTEN_AGAIN[name][0]} with python -c "from modeling_vit_scratch.training.output '
            f"import {WRITTEN_AGAIN[name][1]}; {WRITTEN_AGAIN[name][1]}('{output_dir}')\""
            for name in names
        )
        if all(name in WRITTEN_AGAIN for name in names)
        else "train again to write them (vit-scratch push renders the card it uploads itself)"
    )
    return ModelNotDescribed(
        f"The model is saved in {output_dir} (weights, config, image processor) and loads, but "
        f"{', '.join(failed)} could not be written: {how}."
    )


def write_model_folder(
    trainer: Trainer,
    processor,
    data: PreparedData,
    data_args: DataArguments,
    metrics: dict,
    secrets: list[str],
    notes: dict | None = None,
) -> None:
    """Weights, config, code, processor, metrics, pictures (curves, confusion matrix), record and card, written
    beside the output folder, checked (it reloads to the trained model and holds no secret), then moved into place.
    Call it on every process: process 0 writes, and a sharded model (FSDP) first gathers its whole weights and
    computes the logits the reload is checked against with every process taking part.
    `notes` go into the record and the card: how the model learned from a teacher (`distillation`), why it trained
    in its precision (`precision_choice`). A describing file (metrics, a picture, record, card) that fails is left
    out: the model is written all the same, then `ModelNotDescribed` says which file is missing and how to write
    it."""
    from modeling_vit_scratch.sharing.card import training_record
    from modeling_vit_scratch.training.curves import plot_confusion_matrix, plot_training_curves

    output_dir = Path(trainer.args.output_dir)
    # without the autocast that --bf16 wraps around forward: the reload check compares float32 with float32
    model = extract_model_from_parallel(trainer.model, keep_fp32_wrapper=False)
    test_images = transformed(data.splits["test"], ImageTransform(processor))
    batch = collate_images([test_images[i] for i in range(min(8, len(test_images)))])
    logits = None  # computed from the model by process 0 alone, unless sharded
    if is_sharded(trainer.model_wrapped):  # every process takes part: each holds a shard of the weights
        weights = full_state_dict(trainer.model_wrapped)
        logits = model_logits(sharded_runner(trainer.model_wrapped, model), batch["pixel_values"])
        model = unsharded_copy(model, weights) if trainer.is_world_process_zero() else None
    if not trainer.is_world_process_zero():
        return
    with staging_inside(output_dir) as staging:
        model.save_pretrained(staging)
        processor.save_pretrained(staging)
        splits = {name: len(split) for name, split in data.splits.items()}
        splits.setdefault("train", None)  # a stream: its size is not known (the record says what was read)
        record = training_record(
            plain_command(), data_args.dataset, splits, trainer.args, metrics, augmentation_text(data_args)
        )
        record["finished_at_step"] = trainer.state.global_step  # the step training reached, whatever is kept
        record["validation_views"] = data_args.validation_views  # selection scored this many views of each image
        record.update(notes or {})
        record["weights_sha256"] = weights_sha256(staging)  # the weights the metrics above were measured on
        record["files_sha256"] = described_sha256(staging)  # and the config and processor they were measured through
        record["results_sha256"] = content_sha256(json.loads(json.dumps(metrics)))  # all_results.json as read back
        writers = {
            RESULTS_FILE: lambda path: path.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n"),
            CURVES_FILE: lambda path: plot_training_curves(trainer.state.log_history, path),
            RECORD_FILE: lambda path: path.write_text(json.dumps(record, indent=2) + "\n"),
            "README.md": lambda path: model_card(model.config, metrics, record).save(path),
        }
        if "test_confusion_matrix" in metrics:  # metrics made without the test predictions have none
            writers[CONFUSION_FILE] = lambda path: plot_confusion_matrix(metrics["test_confusion_matrix"], path)
        failed = write_describing_files(staging, writers)
        try:  # float32 both sides, one code path: only another order of summation may differ
            check_reloads_to(model, staging, batch["pixel_values"], tolerance=1e-3, expected=logits)
        except FolderReloadError as error:
            raise RuntimeError(f"{error}; nothing was written. Please report this as a bug.") from None
        leaked = find_secrets(staging, secrets)
        if leaked:
            raise RuntimeError(
                f"A token value was found in {', '.join(p.name for p in leaked)}; the model folder was "
                "not written. Please report this as a bug."
            )
        publish(staging, output_dir)
    finish_run(output_dir)  # the run's model is in place: the folder is a finished run's
    if failed:
        for item in failed:  # an earlier model's file would describe other weights
            (output_dir / item.split(" ", 1)[0]).unlink(missing_ok=True)
        raise not_described(output_dir, failed)


def push_repo_id(training_args: TrainingArguments) -> str:
    """The repo `--push_to_hub` pushes to: --hub_model_id, else the output folder's name (in the user's namespace;
    `check_push_ready` writes the full `owner/name` back into --hub_model_id)."""
    return training_args.hub_model_id or Path(training_args.output_dir).name


def check_push_ready(training_args: TrainingArguments, hub_token: str | None) -> None:
    """`--push_to_hub`: before any training, a ValueError unless every Hub argument is good (`check_hub_arguments`,
    the check `vit-scratch push` makes: repo id, --hub_revision, a token the Hub accepts), so a run never trains for
    hours to fail at the push. The full repo id and the branch it resolves are kept in the arguments, so the push
    and every line printed after name them."""
    from modeling_vit_scratch.sharing.hub_arguments import TRAIN, check_hub_arguments

    checked = check_hub_arguments(
        push_repo_id(training_args),
        revision=training_args.hub_revision,
        token=hub_token,
        private=bool(training_args.hub_private_repo),
        names=TRAIN,
    )
    training_args.hub_model_id, training_args.hub_revision = checked.repo_id, checked.revision


def push_trained_folder(training_args: TrainingArguments, hub_token: str | None) -> None:
    """`--push_to_hub`: the saved folder through the same gate as `vit-scratch push` (scripts/push_to_hub.py). A
    failure says the model is saved and how to push it again, without training again."""
    from modeling_vit_scratch.common.commands import printed_command, when_interrupted
    from modeling_vit_scratch.sharing.command import STOPPED_AT
    from modeling_vit_scratch.sharing.push import PushError, push_to_hub

    folder, repo_id = training_args.output_dir, push_repo_id(training_args)
    push = ["vit-scratch", "push", str(folder), repo_id]
    push += ["--revision", training_args.hub_revision] if training_args.hub_revision else []
    push += ["--private"] if training_args.hub_private_repo else []

    def stopped(stage: str, commit: str | None = None) -> None:
        """Ctrl-C from here on: training is done, so the line says what the push did and the push that finishes."""
        where = STOPPED_AT[stage].format(repo=repo_id, commit=commit)
        when_interrupted(
            f"Training is done and the model is saved in {folder} (nothing is left to train). "
            + where.replace("run the same command again", f"finish with: {printed_command('', push)}")
        )

    stopped("preparing")
    try:
        result = push_to_hub(
            folder,
            repo_id,
            private=bool(training_args.hub_private_repo),
            token=hub_token,
            revision=training_args.hub_revision,
            reached=stopped,
        )
    except (PushError, ValueError, FileNotFoundError) as error:
        raise PushError(
            f"The trained model is saved in {folder}, but pushing it failed: {error} (to push it again without "
            f"training: {printed_command('', push)} (or {printed_python()} scripts/push_to_hub.py with the same "
            "arguments, from a clone))"
        ) from None
    print(f"Pushed to {result.repo_url} (commit {result.commit_id})")
    for note in result.notes:
        print(note)
