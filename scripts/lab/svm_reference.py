"""The classical reference: scikit-learn's RBF support-vector machine on the pixels of an imagefolder.

A ViT recipe worth using beats it. The pixels are those the ViT reference reads (`lab.reference.image_tensors`:
the set's own side and channels), flattened and scaled to [0, 1]. The SVM has one knob that matters at this size,
C: it is chosen on a stratified validation part of the training images (`VALIDATION_FRACTION`, drawn from `seed`),
the SVM is then fit on every training image with that C and tested once on test/. `gamma="scale"` (scikit-learn's
default: 1 / (features x pixel variance)) adapts the kernel's width to the set. Deterministic for a seed.

A yardstick for benchmarks, never imported by the model files.
"""

import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from lab.reference import train_test_tensors

C_GRID = (1.0, 3.0, 10.0, 30.0, 100.0)  # the C values tried, each 3x the last
VALIDATION_FRACTION = 0.1  # of the training images, to choose C; the chosen SVM is refit on all of them


def pixel_features(images: torch.Tensor, labels: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (N, C, H, W) and labels (N,) -> (features (N, C * H * W) float32 in [0, 1], labels (N,))."""
    return images.reshape(len(images), -1).numpy().astype(np.float32) / 255, labels.numpy()


def choose_c(features: np.ndarray, labels: np.ndarray, seed: int) -> tuple[float, dict[float, float]]:
    """The C of C_GRID with the best accuracy on a stratified VALIDATION_FRACTION of (features, labels), fit on
    the rest (the smaller C on a tie); returns it and each C's validation accuracy."""
    from sklearn.model_selection import train_test_split
    from sklearn.svm import SVC

    validation_size, classes = math.ceil(len(labels) * VALIDATION_FRACTION), len(np.unique(labels))
    if validation_size < classes:
        raise ValueError(
            f"{VALIDATION_FRACTION} of {len(labels)} training images makes a validation part of {validation_size}, "
            f"fewer than the {classes} classes, too few to choose C: give at least "
            f"{math.ceil(classes / VALIDATION_FRACTION)} training images."
        )
    fit_x, val_x, fit_y, val_y = train_test_split(
        features, labels, test_size=VALIDATION_FRACTION, stratify=labels, random_state=seed
    )
    scores = {c: float(SVC(C=c, kernel="rbf", gamma="scale").fit(fit_x, fit_y).score(val_x, val_y)) for c in C_GRID}
    return max(C_GRID, key=lambda c: (scores[c], -c)), scores


def train_svm(dataset: str, output_dir: str | Path, seed: int = 0) -> dict:
    """Choose C on a validation part of `dataset`'s train split, fit on all of it, test on its test split.

    Returns test accuracy, the chosen C, each C's validation accuracy and the wall time; they are also written to
    `output_dir/svm_results.json`.
    """
    from sklearn.svm import SVC

    started = time.time()
    train, test, (size, channels) = train_test_tensors(dataset)
    (train_x, train_y), (test_x, test_y) = pixel_features(*train), pixel_features(*test)
    c, validation = choose_c(train_x, train_y, seed)
    test_accuracy = float(SVC(C=c, kernel="rbf", gamma="scale").fit(train_x, train_y).score(test_x, test_y))
    results = {
        "model_kind": "svm",
        "dataset": str(dataset),
        "seed": seed,
        "test_accuracy": test_accuracy,
        "C": c,
        "validation_accuracy_by_C": {str(key): value for key, value in validation.items()},
        "validation_fraction": VALIDATION_FRACTION,
        "num_train": len(train_y),
        "num_test": len(test_y),
        "image_size": size,
        "num_channels": channels,
        "wall_time_seconds": round(time.time() - started, 1),
    }
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    (Path(output_dir) / "svm_results.json").write_text(json.dumps(results, indent=2) + "\n")
    return results
