"""`modeling_vit_scratch.sharing.card`: what the card and the training record say about how a model was trained."""

import pytest
from transformers import TrainingArguments

from modeling_vit_scratch import ViTScratchConfig
from modeling_vit_scratch.sharing.card import render_model_card, training_record

SPLITS = {"train": 90, "validation": 10, "test": 20}
METRICS = {"epoch": 3.0, "test_accuracy": 0.95, "total_train_batch_size": 8, "wall_time_seconds": 12.0}


@pytest.mark.parametrize(
    "load_best, kept",
    [
        (True, "The checkpoint kept is the epoch with the best validation selection_score."),
        (False, "The checkpoint kept is the last epoch (validation is measured and reported, not used to pick"),
    ],
)
def test_the_card_says_which_checkpoint_the_folder_holds(tmp_path, load_best, kept):
    args = TrainingArguments(
        output_dir=str(tmp_path),
        eval_strategy="epoch",
        save_strategy="epoch",
        load_best_model_at_end=load_best,
        metric_for_best_model="selection_score",
        report_to="none",
    )
    record = training_record("python scripts/train.py", "digits", SPLITS, args, METRICS, None)
    card = " ".join(str(render_model_card(ViTScratchConfig(num_labels=3), METRICS, record)).split())
    assert kept in card
    assert ("best validation" in card) == load_best


def test_a_record_written_before_selection_was_recorded_keeps_its_old_sentence():
    record = {
        **training_record("c", "digits", SPLITS, TrainingArguments(output_dir="x", report_to="none"), METRICS, None),
    }
    del record["model_selection"]
    card = " ".join(str(render_model_card(ViTScratchConfig(num_labels=3), METRICS, record)).split())
    assert "The checkpoint kept is the epoch with the best validation accuracy." in card
