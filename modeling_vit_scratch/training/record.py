"""What a finished run writes beside its model: the metrics (`all_results.json`), the one training record
(`training_record.json`: how the model was trained, what the card says about it, read again by a later push), and the
two pictures (`training_curves.png`, `confusion_matrix.png`).

The record's keys are the ones the model card reads: the command, the data and its split sizes, the schedule, the
batch, the seed, the processes, the precision, the augmentation, how the model was selected, and the notes a run adds
(the initial weights, the teacher, the weight average, layer decay, the legs of a resumed run).
"""

import json
from pathlib import Path

from modeling_vit_scratch.sources import weights_sha256
from modeling_vit_scratch.training.curves import plot_confusion_matrix, plot_training_curves
from modeling_vit_scratch.training.precision import training_precision

RESULTS_FILE, RECORD_FILE = "all_results.json", "training_record.json"
CURVES_FILE, CONFUSION_FILE = "training_curves.png", "confusion_matrix.png"


def model_selection_text(training_args) -> str:
    """Which checkpoint the folder holds, in words: the best on validation or the last one trained."""
    if training_args.load_best_model_at_end:
        return f"the epoch with the best validation {training_args.metric_for_best_model or 'loss'}"
    return "the last epoch (validation is measured and reported, not used to pick an epoch)"


def training_record(
    command: str, dataset: str, splits: dict[str, int | None], training_args, metrics: dict, notes: dict
) -> dict:
    """The record of a run. `splits` holds each split's size (train None for a stream, whose size is not known: the
    images it read are in `metrics["streamed_train_images"]`); `notes` are added as they are."""
    asked, num_train = metrics.get("total_train_batch_size"), splits.get("train")
    used = min(asked, num_train) if asked and num_train else asked  # a split smaller than the batch: one batch
    streamed = metrics.get("streamed_train_images")
    return {
        "command": command,
        "dataset": dataset,
        "num_train": None if streamed is not None else num_train,
        "streamed_images": streamed,
        "steps": training_args.max_steps if streamed is not None else None,
        "num_validation": splits.get("validation"),
        "num_test": splits.get("test"),
        "epochs": float(metrics.get("epoch", training_args.num_train_epochs)),
        "learning_rate": training_args.learning_rate,
        "weight_decay": training_args.weight_decay,
        "scheduler": str(getattr(training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type)),
        "total_batch": used,
        "batch_asked": asked if used != asked else None,
        "seed": training_args.seed,
        "world_size": metrics.get("world_size", 1),
        "precision": training_precision(training_args),
        "model_selection": model_selection_text(training_args),
        **notes,
    }


def write_results(stage: Path, metrics: dict, record: dict, log_history: list[dict]) -> None:
    """The metrics, the record (with the digest of the weights it describes) and the pictures, into `stage`."""
    record["weights_sha256"] = weights_sha256(stage)  # the weights the metrics were measured on
    (stage / RESULTS_FILE).write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    (stage / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
    plot_training_curves(log_history, stage / CURVES_FILE)
    if "test_confusion_matrix" in metrics:
        plot_confusion_matrix(metrics["test_confusion_matrix"], stage / CONFUSION_FILE)
