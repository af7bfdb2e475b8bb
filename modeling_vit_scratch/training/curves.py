"""Training curves: loss and accuracy per epoch, from the Trainer's log history, as a PNG a person can look at."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no screen
import matplotlib.pyplot as plt


def epoch_series(log_history: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(epochs, values) of every log entry that has `key`; the final summary entry (train_loss) is not one of them."""
    entries = [entry for entry in log_history if key in entry and "epoch" in entry]
    return [entry["epoch"] for entry in entries], [entry[key] for entry in entries]


def plot_training_curves(log_history: list[dict], path: str | Path) -> Path:
    """Left: training and validation loss; right: validation accuracy (and top-5 when logged)."""
    figure, (loss_axis, accuracy_axis) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    for key, label in (("loss", "training loss"), ("eval_loss", "validation loss")):
        epochs, values = epoch_series(log_history, key)
        if values:
            loss_axis.plot(epochs, values, label=label)
    loss_axis.set(xlabel="epoch", ylabel="cross-entropy loss", title="Loss", yscale="log")
    for key, label in (("eval_accuracy", "validation accuracy"), ("eval_top5_accuracy", "validation top-5")):
        epochs, values = epoch_series(log_history, key)
        if values:
            accuracy_axis.plot(epochs, values, label=label)
    accuracy_axis.set(xlabel="epoch", ylabel="accuracy", title="Accuracy")
    for axis in (loss_axis, accuracy_axis):
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return Path(path)
