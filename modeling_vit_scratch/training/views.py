"""Evaluation views: each validation image scored on the averaged probabilities of itself and `--validation_views`
- 1 seeded shifts and rotations, and with `--eval_flip` of its mirror image too (test-time augmentation).

`EvaluationViews` holds the images, then each further view of them in the same order, so the Trainer's predictions
come as (views * images, classes), view after view (evaluation reads in order and gathers processes in order): the
trainer averages each image's probabilities over its views. Training glue, never imported by the model files.
"""

import torch


class EvaluationViews(torch.utils.data.Dataset):
    """`rows` (items {"pixel_values", "labels"}) followed by `shifted - 1` seeded shifted copies, the whole doubled by
    mirror images when `flips` is 2: `views` = shifted x flips."""

    def __init__(self, rows, shifted: int, flips: int, augmentation, seed: int = 0):
        self.rows, self.shifted, self.augmentation, self.seed = rows, shifted, augmentation, seed
        self.views = shifted * flips

    def __len__(self) -> int:
        return len(self.rows) * self.views

    def __getitem__(self, index: int) -> dict:
        view, row = divmod(index, len(self.rows))
        item = self.rows[row]
        shift, flip = view % self.shifted, view >= self.shifted
        pixel_values = item["pixel_values"]
        if shift:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + shift * len(self.rows) + row)
            pixel_values = self.augmentation(pixel_values[None], generator=generator)[0]
        if flip:
            pixel_values = pixel_values.flip(-1)
        return {"pixel_values": pixel_values, "labels": item["labels"]}
