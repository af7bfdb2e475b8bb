"""The pictures of a run a person looks at: the training curves (loss and accuracy per epoch, from the Trainer's log
history) and the test split's confusion matrix."""

from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only, no screen
import matplotlib.pyplot as plt

from modeling_vit_scratch.secrets import shown


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


MATRIX_NUMBERS = 20  # counts are written in the cells up to this many classes
MATRIX_TICKS = 50  # class names are written on the axes up to this many classes


def plain_text(label: str) -> str:
    """A class name as matplotlib shows it: its display form (`shown`: no token, a control character escaped, as no
    font has a glyph for one), never parsed (`$` would start mathtext, and a bad formula fails)."""
    return shown(" ".join(str(label).split())).replace("$", r"\$")[:40]


def plot_confusion_matrix(confusion: dict, path: str | Path) -> Path:
    """The confusion matrix ({"labels": [...], "matrix": [[...]]}, rows true, columns predicted) with each row
    normalised to the share of that class's images, so small classes show as clearly as large ones; the counts are
    written in the cells and the class names on the axes while there are few enough to read."""
    names, counts = confusion["labels"], np.asarray(confusion["matrix"], dtype=float)
    totals = counts.sum(axis=1, keepdims=True)
    shares = np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)
    side = min(4 + 0.35 * len(names), 16)
    figure, axis = plt.subplots(figsize=(side + 1.5, side), dpi=100)
    image = axis.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
    figure.colorbar(image, ax=axis, label="share of the true class's test images")
    if len(names) <= MATRIX_TICKS:
        ticks, texts = range(len(names)), [plain_text(name) for name in names]
        axis.set_xticks(ticks, texts, rotation=90)
        axis.set_yticks(ticks, texts)
    if len(names) <= MATRIX_NUMBERS:
        for row, column in np.ndindex(counts.shape):
            color = "white" if shares[row, column] > 0.5 else "black"
            axis.text(column, row, f"{counts[row, column]:.0f}", ha="center", va="center", color=color, fontsize=8)
    empty = [plain_text(name) for name, total in zip(names, totals[:, 0], strict=True) if total == 0]
    title = "Confusion matrix (test split)"
    if empty:
        title += f"\nno test images (n/a): {', '.join(empty[:5])}{', ...' if len(empty) > 5 else ''}"
    axis.set(xlabel="predicted class", ylabel="true class", title=title)
    figure.tight_layout()
    figure.savefig(path, format="png")
    plt.close(figure)
    return Path(path)
