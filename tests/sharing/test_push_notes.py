"""What a push says about the folder it sends: the lines `push_to_hub` returns as notes, checked in this process
on a folder and its staged copy."""

from pathlib import Path

import pytest

from modeling_vit_scratch import ViTScratchConfig
from modeling_vit_scratch.sharing.push import MAX_NAMES_SHOWN, left_out_note, model_card_text, sent_files


def entries(root: Path, *names: str) -> Path:
    """`root` holding each of `names` (a folder when it ends in `/`)."""
    root.mkdir()
    for name in names:
        (root / name).mkdir() if name.endswith("/") else (root / name).write_text("x")
    return root


@pytest.mark.parametrize("extra", [0, 3])
def test_a_push_names_what_it_leaves_out_at_most_a_few_and_counts_the_rest(tmp_path, extra):
    """notes.txt, .env, a checkpoint are not part of the model: not sent, and named in one line (a few, the rest
    counted); the weights (sent, resharded) and README.md (its own line) are not named."""
    others = [f"note{index}.txt" for index in range(extra)]
    folder = entries(
        tmp_path / "m1", "config.json", "model.safetensors", "README.md", "notes.txt", ".env", "checkpoint-2/", *others
    )
    staging = entries(tmp_path / "staged", "config.json", "model-00001-of-00002.safetensors", "README.md")
    left = sorted([".env", "checkpoint-2/", "notes.txt", *others])
    shown = ", ".join(left[:MAX_NAMES_SHOWN]) + (f" and {len(left) - MAX_NAMES_SHOWN} more" if extra else "")
    assert left_out_note(folder, staging) == [f"Not sent (not part of the model): {shown}, in {folder.resolve()}."]
    assert left_out_note(entries(tmp_path / "clean", "config.json", "README.md"), staging) == []


@pytest.mark.parametrize(
    "deleted", [["training_curves.png"], ["confusion_matrix.png"], ["training_curves.png", "confusion_matrix.png"]]
)
def test_the_pushed_card_names_no_describing_file_the_push_does_not_send(tmp_path, deleted):
    """A folder whose pictures were deleted: the card the push sends speaks only of the files it sends."""
    held = [name for name in ("all_results.json", "training_curves.png", "confusion_matrix.png") if name not in deleted]
    folder = entries(tmp_path / "m1", "config.json", *held)
    sent = sent_files(folder, True, None)
    assert sorted(sent) == sorted(held)
    metrics = {"test_accuracy": 0.5, "test_confusion_matrix": {"labels": ["a", "b"], "matrix": [[1, 0], [0, 1]]}}
    metrics["test_per_class_accuracy"] = {"a": 1.0, "b": 1.0}
    card = model_card_text(ViTScratchConfig(num_labels=2), metrics, {}, True, "me/m", None, None, sent)
    assert [name for name in deleted if name in card] == []
    assert [name for name in held if name not in card] == []
