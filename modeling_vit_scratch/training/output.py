"""The output folder of a run: weights, config, code, image processor, metrics, a training-curve picture, the
training record and the model card (with the notes on how the model learned: augmentation, distillation), checked
and moved into place whole; then, with `--push_to_hub`, the push through the same gate as `vit-scratch push`."""

import json
from pathlib import Path

from transformers import Trainer, TrainingArguments

from modeling_vit_scratch.common.folders import CURVES_FILE, RECORD_FILE, RESULTS_FILE, publish, staging_inside
from modeling_vit_scratch.common.secrets import find_secrets, weights_sha256
from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig
from modeling_vit_scratch.sharing.reload_check import FolderReloadError, check_reloads_to
from modeling_vit_scratch.training.arguments import DataArguments, ModelArguments, plain_command
from modeling_vit_scratch.training.data import ImageTransform, PreparedData, collate_images


def augmentation_text(data_args: DataArguments) -> str | None:
    """How training images were augmented, in words for the model card."""
    if not data_args.augment:
        return None
    return (
        f"random shifts of up to {data_args.max_shift:.0%} of the image side and rotations of up to "
        f"{data_args.max_degrees:g} degrees (bilinear, sub-pixel, batched on the training device), no flips"
    )


def distillation_text(model_args: ModelArguments) -> str | None:
    """How the model learned from a teacher, in words for the model card and the record (None without one)."""
    if not model_args.teacher:
        return None
    how = (
        "its top class (hard distillation)"
        if model_args.distillation == "hard"
        else f"its probabilities at temperature {model_args.distillation_temperature:g} (soft distillation)"
    )
    return (
        f"the distillation head learned from the teacher {model_args.teacher} {how}, with weight "
        f"{model_args.distillation_alpha:g} (the labels {1 - model_args.distillation_alpha:g})"
    )


def write_model_folder(
    trainer: Trainer,
    processor,
    data: PreparedData,
    data_args: DataArguments,
    metrics: dict,
    secrets: list[str],
    notes: dict[str, str | None] | None = None,
) -> None:
    """Weights, config, code, processor, metrics, curves, record and card, written beside the output folder, checked
    (it reloads to the trained model and holds no secret), then moved into place. `notes` go into the record and
    the card: how the model learned from a teacher (`distillation`), why it trained in its precision
    (`precision_choice`)."""
    from modeling_vit_scratch.sharing.card import render_model_card, render_other_model_card, training_record
    from modeling_vit_scratch.training.curves import plot_training_curves

    output_dir = Path(trainer.args.output_dir)
    # without the autocast that --bf16 wraps around forward: the reload check compares float32 with float32
    model = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
    with staging_inside(output_dir) as staging:
        model.save_pretrained(staging)
        processor.save_pretrained(staging)
        (staging / RESULTS_FILE).write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        plot_training_curves(trainer.state.log_history, staging / CURVES_FILE)
        splits = {name: len(split) for name, split in data.splits.items()}
        record = training_record(
            plain_command(), data_args.dataset, splits, trainer.args, metrics, augmentation_text(data_args)
        )
        record["validation_views"] = data_args.validation_views  # selection scored this many views of each image
        record.update(notes or {})
        record["weights_sha256"] = weights_sha256(staging)  # the weights the metrics above were measured on
        (staging / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
        if isinstance(model.config, ViTScratchConfig):
            card = render_model_card(model.config, metrics, record)
        else:  # a transformers model, e.g. a teacher
            card = render_other_model_card(model.config, metrics, record)
        card.save(staging / "README.md")
        test_images = data.splits["test"].with_transform(ImageTransform(processor))
        batch = collate_images([test_images[i] for i in range(min(8, len(test_images)))])
        try:  # float32 both sides, one code path: only another order of summation may differ
            check_reloads_to(model, staging, batch["pixel_values"], tolerance=1e-3)
        except FolderReloadError as error:
            raise RuntimeError(f"{error}; nothing was written. Please report this as a bug.") from None
        leaked = find_secrets(staging, secrets)
        if leaked:
            raise RuntimeError(
                f"A token value was found in {', '.join(p.name for p in leaked)}; the model folder was "
                "not written. Please report this as a bug."
            )
        publish(staging, output_dir)


def push_trained_folder(training_args: TrainingArguments, hub_token: str | None) -> None:
    """`--push_to_hub`: the saved folder through the same gate as `vit-scratch push` (scripts/push_to_hub.py). A
    failure says the model is saved and how to push it again, without training again."""
    from modeling_vit_scratch.sharing.push import PushError, push_to_hub

    folder, repo_id = training_args.output_dir, training_args.hub_model_id or Path(training_args.output_dir).name
    try:
        result = push_to_hub(
            folder,
            repo_id,
            private=bool(training_args.hub_private_repo),
            token=hub_token,
            revision=training_args.hub_revision,
        )
    except (PushError, ValueError, FileNotFoundError) as error:
        raise PushError(
            f"The trained model is saved in {folder}, but pushing it failed: {error} (to push it again without "
            f"training: vit-scratch push {folder} {repo_id} (or python scripts/push_to_hub.py {folder} {repo_id} "
            "from a clone))"
        ) from None
    print(f"Pushed to {result.repo_url} (commit {result.commit_id})")
