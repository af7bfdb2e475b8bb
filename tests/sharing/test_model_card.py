"""`modeling_vit_scratch.sharing.card`: what the card and the training record say about how a model was trained."""

import re

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


def class_results(names: list[str], matrix: list[list[int]]) -> dict:
    """The per-class results of the test split as all_results.json holds them."""
    accuracy = {name: (row[i] / sum(row) if sum(row) else None) for i, (name, row) in enumerate(zip(names, matrix))}
    return {"test_per_class_accuracy": accuracy, "test_confusion_matrix": {"labels": names, "matrix": matrix}}


def table_lines(card: str) -> list[str]:
    """The lines of the card's per-class table, header first."""
    lines = card.split("### Per class (test split)")[1].split("## How to use")[0].splitlines()
    return [line for line in lines if line.startswith("|")]


def test_the_card_lists_each_class_its_accuracy_and_what_it_is_taken_for_n_a_without_images():
    names = ["{{ cat }}", "dog | wolf", "fox\nred"]  # user text: data, never template syntax or table syntax
    metrics = {**METRICS, **class_results(names, [[3, 1, 0], [0, 1, 1], [0, 0, 0]])}
    card = str(render_model_card(ViTScratchConfig(num_labels=3, id2label=dict(enumerate(names))), metrics, {}))
    assert table_lines(card) == [
        "| class | test images | accuracy | most often taken for (images) |",
        "| --- | --- | --- | --- |",
        "| {{ cat }} | 4 | 0.7500 | dog \\| wolf (1) |",
        "| dog \\| wolf | 2 | 0.5000 | fox red (1) |",
        "| fox red | 0 | n/a | - |",
    ]
    assert "Every class;" in card and "confusion_matrix.png" in card


def test_with_many_classes_the_card_lists_the_ten_worst_and_says_so():
    names = [f"class {index}" for index in range(30)]
    matrix = [[10 if column == row else 0 for column in range(30)] for row in range(30)]
    for row in (4, 17, 25):  # the three worst: 6, 7 and 7 of 10 right, the others taken for class 0
        matrix[row][row], matrix[row][0] = 6 + row % 4, 4 - row % 4
    matrix[29] = [0] * 30  # no test images: after every measured class, so not among the ten
    metrics = {**METRICS, **class_results(names, matrix)}
    card = str(render_model_card(ViTScratchConfig(num_labels=30, id2label=dict(enumerate(names))), metrics, {}))
    rows = table_lines(card)[2:]
    assert len(rows) == 10
    assert rows[:3] == [
        "| class 4 | 10 | 0.6000 | class 0 (4) |",
        "| class 17 | 10 | 0.7000 | class 0 (3) |",  # a tie keeps the label order
        "| class 25 | 10 | 0.7000 | class 0 (3) |",
    ]
    assert [row.split(" | ")[0] for row in rows[3:]] == [f"| class {index}" for index in (0, 1, 2, 3, 5, 6, 7)]
    assert " ".join(card.split()).count("The 10 classes with the lowest test accuracy, of 30;") == 1


DESCRIBING = ("all_results.json", "training_curves.png", "confusion_matrix.png")


@pytest.mark.parametrize("num_labels", [3, 30])  # every class listed, or the ten worst
@pytest.mark.parametrize("held", [DESCRIBING, (), *[(name,) for name in DESCRIBING], DESCRIBING[:2], DESCRIBING[1:]])
def test_the_card_names_only_the_describing_files_its_folder_holds(num_labels, held):
    """A folder whose training_curves.png or confusion_matrix.png were deleted (or all_results.json, as for a
    checkpoint whose metrics come from its run) gets a card that never points at them: each file is named exactly
    where it is held; the card's sentences stay whole."""
    names = [f"class {index}" for index in range(num_labels)]
    matrix = [[1 if column == row else 0 for column in range(num_labels)] for row in range(num_labels)]
    metrics = {**METRICS, **class_results(names, matrix)}
    config = ViTScratchConfig(num_labels=num_labels, id2label=dict(enumerate(names)))
    card = str(render_model_card(config, metrics, {}, files=held))
    assert {name for name in DESCRIBING if name in card} == set(held)
    assert "Every class." in card or "Every class;" in card or f"of {num_labels}" in card
    assert "; ." not in card and " in ." not in card and "\n.\n" not in card


def test_without_per_class_results_the_card_has_no_per_class_table():
    card = str(render_model_card(ViTScratchConfig(num_labels=3), METRICS, {}))
    assert "Per class" not in card and "| test | accuracy | 0.9500 |" in card


# A card says what happened to the weights as far as the folder can show it, and claims nothing more.
SMALL = dict(
    hidden_size=24, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24, image_size=8, patch_size=4
)


def card_words(**kwargs) -> str:
    return " ".join(str(render_model_card(ViTScratchConfig(num_labels=3, **SMALL), **kwargs)).split())


def test_a_folder_without_a_record_gets_a_card_that_claims_no_training():
    card = card_words()
    assert "of unknown origin: its folder holds no training or conversion record, so this card claims neither" in card
    assert not re.search(r"\btrained\b", card)  # (from_pretrained is no claim)
    assert "classes of its training data" not in card and "## Results" not in card


def test_a_converted_folder_s_card_names_what_it_was_converted_from_never_training():
    card = card_words(conversion={"input": "google/vit-base-patch16-224", "from": "transformers"})
    assert (
        "converted by vit-scratch from `google/vit-base-patch16-224` (a transformers model): its weights are that "
        "model's, unchanged (vit-scratch did not train them)"
    ) in card
    assert "trained with" not in card and "trained from scratch" not in card
    timm = card_words(conversion={"input": "w.safetensors", "from": "timm", "timm_model": "vit_tiny_patch16_224"})
    assert "converted by vit-scratch from `w.safetensors` (timm's `vit_tiny_patch16_224`)" in timm


@pytest.mark.parametrize(
    "start, said, unsaid",
    [
        ({"initial_weights": None}, "a small model trained from scratch on a small data set", "starting from"),
        ({"initial_weights": "google/vit-base"}, "starting from the weights of `google/vit-base`", "trained from"),
        ({}, "trained with vit-scratch, a ViT", "trained from"),  # a record written before it was kept: no claim
    ],
)
def test_a_trained_folder_s_card_says_from_scratch_only_where_its_record_does(start, said, unsaid):
    record = training_record("c", "digits", SPLITS, TrainingArguments(output_dir="x", report_to="none"), METRICS, None)
    card = card_words(metrics=METRICS, record={**record, **start})
    assert said in card and unsaid not in card


@pytest.mark.parametrize("num_train, used, asked", [(30, 30, 64), (64, 64, None), (200, 64, None)])
def test_the_card_states_the_batch_each_step_used_never_more_than_the_training_split(num_train, used, asked):
    args = TrainingArguments(output_dir="x", report_to="none")
    metrics = {**METRICS, "total_train_batch_size": 64}
    record = training_record("c", "digits", {**SPLITS, "train": num_train}, args, metrics, None)
    assert (record["total_batch"], record["batch_asked"]) == (used, asked)
    card = " ".join(str(render_model_card(ViTScratchConfig(num_labels=3), metrics, record)).split())
    assert f"global batch size {used}" in card
    said = f"(the whole training split in each step: it holds fewer images than the {asked} asked for)"
    assert (said in card) == (asked is not None)


def test_a_resumed_run_s_card_gives_its_whole_wall_time_and_every_leg_s_command():
    args = TrainingArguments(output_dir="x", report_to="none")
    record = training_record("c --resume_from_checkpoint true", "digits", SPLITS, args, METRICS, None)
    record["legs"] = [
        {"command": None, "wall_time_seconds": None},  # its checkpoint was written before legs were kept
        {"command": "vit-scratch train --seed 3", "wall_time_seconds": 65.0},
        {"command": "vit-scratch train --seed 3 --resume_from_checkpoint true", "wall_time_seconds": 12.0},
    ]
    record["wall_time_seconds"] = 77.0
    card = str(render_model_card(ViTScratchConfig(num_labels=3), METRICS, record))
    text = " ".join(card.split())
    assert "Training took 1 min 17 s of wall time in 3 legs, each after the first resumed from a checkpoint." in text
    assert "stopped" not in text  # legs kept before resumes said from where: nothing is known of how they ended
    assert (
        "The first command (time not recorded): ```bash (not recorded: its checkpoint was written before commands "
        "were kept) ``` resumed with (1 min 5 s): ```bash vit-scratch train --seed 3 ``` resumed with (0 min 12 s): "
        "```bash vit-scratch train --seed 3 --resume_from_checkpoint true ```"
    ) in text
    one = {**record, "legs": record["legs"][2:]}  # one leg: the exact command, as before
    text = " ".join(str(render_model_card(ViTScratchConfig(num_labels=3), METRICS, one)).split())
    assert "of wall time. The exact command: ```bash c --resume_from_checkpoint true ```" in text


@pytest.mark.parametrize(
    "leg, said",
    [
        ({"resumed_from_step": 3}, "the run stopped, then resumed from step 3 with (0 min 5 s)"),
        (
            {"resumed_from_step": 6, "finished_at_step": 6},
            "the run finished at step 6, then trained on from there with",
        ),
        (
            {"resumed_from_step": 3, "finished_at_step": 6},
            "the run finished at step 6, then trained again from its checkpoint at step 3 with",
        ),
    ],
)
def test_a_leg_that_resumed_a_finished_run_never_says_the_run_stopped(leg, said):
    args = TrainingArguments(output_dir="x", report_to="none")
    record = training_record("c", "digits", SPLITS, args, METRICS, None)
    record["legs"] = [
        {"command": "vit-scratch train", "wall_time_seconds": 7.0},
        {"command": "vit-scratch train --resume_from_checkpoint true", "wall_time_seconds": 5.0, **leg},
    ]
    text = " ".join(str(render_model_card(ViTScratchConfig(num_labels=3), METRICS, record)).split())
    assert said in text
    assert ("stopped" in text) == ("finished_at_step" not in leg)
