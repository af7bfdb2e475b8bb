"""`--validation_views`: each validation image scored once, on its views' averaged probabilities."""

import numpy as np
import pytest
import torch
from helpers import tiny_model_file, training_args
from transformers import AutoImageProcessor, AutoModelForImageClassification, EvalPrediction

from modeling_vit_scratch.training.arguments import DataArguments, ModelArguments
from modeling_vit_scratch.training.augmentation import AugmentedViews, RandomShiftRotate
from modeling_vit_scratch.training.data import ImageTransform, collate_images, digits_dataset, prepare_splits
from modeling_vit_scratch.training.trainer import accuracy_metrics, train
from modeling_vit_scratch.training.views import average_views, view_averaged


def test_the_views_probabilities_are_averaged_per_image():
    """Image 0: view 0 says class 1 (barely), view 1 says class 0 (surely); averaged, class 0, right. Scored per
    copy it would count half right; scored once, it is right."""
    labels = np.array([0, 2, 0, 2])  # two images, two views each, view after view
    logits = np.array([[0.0, 0.1, -9], [-9, -9, 5], [6.0, 0.0, -9], [-9, 3.0, 2.0]], dtype=np.float32)
    log_probabilities, image_labels = average_views(logits, labels, views=2)
    probabilities = torch.from_numpy(logits).softmax(-1).numpy()
    np.testing.assert_allclose(np.exp(log_probabilities), (probabilities[:2] + probabilities[2:]) / 2, rtol=1e-6)
    assert image_labels.tolist() == [0, 2]
    scored = view_averaged(accuracy_metrics, views=2)(EvalPrediction(predictions=logits, label_ids=labels))
    assert scored["accuracy"] == 1.0  # image 1: class 2 at 5 outweighs class 1 at 3 over 2
    assert accuracy_metrics(EvalPrediction(predictions=logits, label_ids=labels))["accuracy"] == 0.5  # per copy


def test_rows_that_are_not_views_of_the_same_images_are_refused():
    with pytest.raises(ValueError, match="are not 2 views of the same images in order"):
        average_views(np.zeros((4, 3), dtype=np.float32), np.array([0, 1, 1, 0]), views=2)
    with pytest.raises(ValueError, match="The 3 predictions are not 2 views"):
        average_views(np.zeros((3, 3), dtype=np.float32), np.array([0, 1, 0]), views=2)


@pytest.mark.integration
def test_training_reports_one_accuracy_per_validation_image(tmp_path):
    """The validation accuracy of a run with 3 views is that of the saved model on the averaged views, recomputed
    here, and not the accuracy over the copies."""
    data_args = DataArguments(max_train_samples=256, validation_views=3, validation_fraction=0.05)
    metrics = train(
        ModelArguments(model=tiny_model_file(tmp_path, num_channels=1)),
        data_args,
        training_args(tmp_path / "out", num_train_epochs=5, load_best_model_at_end=False),
    )
    model = AutoModelForImageClassification.from_pretrained(tmp_path / "out", trust_remote_code=True).eval()
    processor = AutoImageProcessor.from_pretrained(tmp_path / "out", trust_remote_code=True)
    split = prepare_splits(digits_dataset(), validation_fraction=0.05).splits["validation"]
    rows = split.with_transform(ImageTransform(processor))
    augmentation = RandomShiftRotate.for_processor(processor, data_args.max_shift, data_args.max_degrees)
    views = AugmentedViews(rows, 3, augmentation)
    batch = collate_images([views[index] for index in range(len(views))])
    with torch.no_grad():
        logits = model(pixel_values=batch["pixel_values"]).logits.numpy()
    labels = batch["labels"].numpy()
    averaged = view_averaged(accuracy_metrics, 3)(EvalPrediction(predictions=logits, label_ids=labels))
    per_copy = accuracy_metrics(EvalPrediction(predictions=logits, label_ids=labels))
    assert metrics["eval_accuracy"] == pytest.approx(averaged["accuracy"], abs=1e-9)
    assert averaged["accuracy"] != pytest.approx(per_copy["accuracy"], abs=1e-9)  # the two scorings differ here
    assert metrics["eval_accuracy"] * len(split) == pytest.approx(round(metrics["eval_accuracy"] * len(split)))
