"""Explaining a prediction through scripts/explain.py: the figures the README names, written into --out, which is
new, empty or one explain wrote (never a model's folder); the model folder is only read."""

import shutil

import pytest
from pinned import assert_no_secret, contents

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
]  # the pins, end to end: `make test-slow`; the rooms' own tests keep each rule in `make test`

# the figures the README names (gradient_rollout_class_<label>.png: one, for the top class)
FIGURES = ("patch_grid.png", "attention_rollout.png", "attention_per_layer.png", "token_norms.png")
LABELS = ("cat", "dog", "fox")  # the trained model's classes


def figures_in(out) -> set[str]:
    names = {path.name for path in out.iterdir()}
    assert set(FIGURES) <= names, names
    assert [name for name in names if name.startswith("fig7_") and name.endswith(".png")], names
    assert {name for name in names if name.startswith("gradient_rollout_class_")} & {
        f"gradient_rollout_class_{label}.png" for label in LABELS
    }, names
    return names


def test_explain_writes_its_figures_into_a_new_out_and_leaves_the_model_as_it_was(explained):
    assert explained.ran.code == 0, explained.ran
    figures_in(explained.out)
    assert all(path.read_bytes().startswith(b"\x89PNG") for path in explained.out.glob("*.png"))
    assert explained.model["after"] == explained.model["before"]
    assert_no_secret(explained.ran, folders=[explained.out])


def test_a_second_explain_into_the_same_out_works(cli, explained, trained, tmp_path):
    assert explained.ran.code == 0, explained.ran
    out = tmp_path / "out"
    shutil.copytree(explained.out, out)
    ran = cli("explain", "--model", trained.model, "--image", trained.images / "cat" / "1.png", "--out", out)
    assert ran.code == 0, ran
    figures_in(out)


def test_out_naming_a_model_folder_is_refused_and_the_folder_left_as_it_was(cli, trained, tmp_path):
    assert trained.ran.code == 0, trained.ran
    folder = tmp_path / "model"
    shutil.copytree(trained.model, folder, symlinks=True)
    before = contents(folder)
    ran = cli("explain", "--model", trained.model, "--image", trained.images / "cat" / "0.png", "--out", folder)
    assert ran.code != 0, ran
    assert "--out" in ran.stderr
    assert contents(folder) == before
