"""What a push says about the folder it sends: the lines `push_to_hub` returns as notes, checked in this process
on a folder and its staged copy."""

from pathlib import Path

import pytest

from modeling_vit_scratch.sharing.push import MAX_NAMES_SHOWN, left_out_note


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
