"""Per-class results on the test split: the accuracy of each class and the confusion matrix, computed by
scikit-learn from the predictions the Trainer gathered from every process.

A class's accuracy is the share of its test images predicted as it (scikit-learn's recall of that class). A class
with no test image has no accuracy: it is None in `all_results.json` and "n/a" in the card and the picture, never
a division by zero.
"""

import math

import numpy as np
from sklearn.metrics import confusion_matrix, recall_score


def class_metrics(logits, labels, id2label: dict, prefix: str = "test") -> dict:
    """`{prefix}_per_class_accuracy` ({label: accuracy or None}) and `{prefix}_confusion_matrix` ({"labels": [...],
    "matrix": [[...]]}: row = true class, column = predicted class, counts of images) of `logits` (images, classes)
    or a tuple whose first item they are (a model with a distillation head), against `labels` (images,)."""
    logits = logits[0] if isinstance(logits, tuple) else logits
    predictions, labels = np.asarray(logits).argmax(-1), np.asarray(labels)
    ids = sorted(int(key) for key in id2label)
    names = [str(id2label[key] if key in id2label else id2label[str(key)]) for key in ids]
    matrix = confusion_matrix(labels, predictions, labels=ids)
    accuracy = recall_score(labels, predictions, labels=ids, average=None, zero_division=np.nan)
    return {
        f"{prefix}_per_class_accuracy": {
            name: None if math.isnan(value) else float(value) for name, value in zip(names, accuracy, strict=True)
        },
        f"{prefix}_confusion_matrix": {"labels": names, "matrix": matrix.tolist()},
    }
