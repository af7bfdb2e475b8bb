"""Scoring `--validation_views`: each validation image is scored once, on its views' averaged probabilities
(test-time augmentation), not once per copy.

The validation set of `AugmentedViews` holds the images, then `views - 1` seeded copies of them in the same order,
so the Trainer's predictions come as (views * images, classes), view after view (its evaluation reads in order and
gathers every process's batches in order). The views' softmax probabilities are averaged per image; accuracy,
top-5 and the selection score are then those of `accuracy_metrics`, one per image.
"""

import numpy as np
import torch
from transformers import EvalPrediction


def average_views(logits, labels, views: int) -> tuple[np.ndarray, np.ndarray]:
    """(views * images, classes) logits and their labels -> (images, classes) log-probabilities, the views'
    probabilities averaged, and the images' (images,) labels. A ValueError when the rows are no views of the
    same images (a count not a multiple of `views`, or labels that differ between views)."""
    logits = logits[0] if isinstance(logits, tuple) else logits  # a model with a distillation head: the class head
    logits, labels = np.asarray(logits), np.asarray(labels)
    if len(logits) % views or (labels.reshape(views, -1) != labels[: len(labels) // views]).any():
        raise ValueError(
            f"The {len(logits)} predictions are not {views} views of the same images in order: score them "
            "without views."
        )
    probabilities = torch.from_numpy(logits).float().softmax(-1).reshape(views, len(logits) // views, -1)
    return probabilities.mean(0).log().numpy(), labels[: len(labels) // views]


def view_averaged(metrics, views: int):
    """`metrics` (a `compute_metrics` function) scoring each image once on its `views` views' averaged
    probabilities."""

    def compute_metrics(eval_prediction: EvalPrediction) -> dict[str, float]:
        log_probabilities, labels = average_views(eval_prediction.predictions, eval_prediction.label_ids, views)
        return metrics(EvalPrediction(predictions=log_probabilities, label_ids=labels))

    return compute_metrics
