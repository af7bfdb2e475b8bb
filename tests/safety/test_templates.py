"""User text is data, never template syntax: label names, run names, data set names, commands and repo ids reach the
model card as they were given, and a card that cannot be written never costs the trained weights."""

import json
from pathlib import Path

import pytest
from entry_points import Scenario, outcome, run_command, with_arguments
from helpers import tiny_config, write_imagefolder
from huggingface_hub import ModelCard
from hypothesis import given, settings
from hypothesis import strategies as st

from modeling_vit_scratch.sharing.card import render_model_card, render_template
from modeling_vit_scratch.training.output import write_model_card

# Template syntax, quotes, newlines, unicode: what a careless or hostile name may hold (no surrogates: no file
# system or UTF-8 text can hold them)
SYNTAX = st.sampled_from(["{{", "}}", "{%", "%}", "{#", "#}", "{{ x }}", "{% if %}", "'", '"', "\n", "\\", "é", "数"])
USER_TEXT = st.lists(
    st.one_of(SYNTAX, st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=8)), min_size=1, max_size=12
).map("".join)
RECORD = dict(
    num_train=10,
    num_validation=2,
    num_test=3,
    epochs=1.0,
    learning_rate=1e-3,
    weight_decay=0.05,
    scheduler="cosine",
    total_batch=8,
    seed=0,
    world_size=1,
    precision=None,
    augmentation=None,
    wall_time_seconds=3.0,
)


@settings(max_examples=25)
@given(
    labels=st.lists(USER_TEXT.filter(str.strip), min_size=2, max_size=3, unique=True),
    # a command's absolute paths are published as their last part (tests/safety/test_push_card.py): none here
    command=USER_TEXT.filter(lambda text: "/" not in text and "~" not in text),
    dataset=USER_TEXT,
    repo_name=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,40}", fullmatch=True),
)
def test_user_text_is_rendered_literally_in_the_card(labels, command, dataset, repo_name):
    config = tiny_config(num_labels=len(labels), id2label=dict(enumerate(labels)))
    record = dict(RECORD, command=f"python scripts/train.py --run_name {command}", dataset=dataset)
    card = str(render_model_card(config, {"test_accuracy": 0.5}, record, model_id=f"me/{repo_name}"))
    assert f"({', '.join(labels)})" in card  # the label preview, each name as given
    assert f"python scripts/train.py --run_name {command}" in card
    assert f"# {repo_name}\n" in card and f'model="me/{repo_name}"' in card
    assert ModelCard(card).data.license == "apache-2.0"  # the front matter still parses


def test_a_placeholder_the_template_itself_leaves_is_still_refused():
    with pytest.raises(ValueError, match="still holds a template placeholder: fix card.md"):
        render_template("{% raw %}{{ forgotten }}{% endraw %} {{ name }}", {"name": "ok"}, name="card.md")
    assert render_template("# {{ name }} {{ name }}", {"name": "{{ x }}"}) == "# {{ x }} {{ x }}"


def train_argv(tmp_path: Path, dataset: Path, *extra: str) -> list[str]:
    """The scenario's training command over `dataset` (2 classes of 10 images), writing tmp_path/out."""
    argv = Scenario(tmp_path).argv("train", output=tmp_path / "out")
    argv[argv.index("--dataset") + 1] = str(dataset)
    return with_arguments(argv, list(extra))


@pytest.mark.integration
def test_template_syntax_in_class_and_run_names_trains_and_writes_the_card_literally(tmp_path):
    classes = ("{{ x }}", "{% if %}")
    dataset = write_imagefolder(tmp_path / "data", classes=classes, per_class=10)
    done = run_command("train", train_argv(tmp_path, dataset, "--run_name", "exp{{1}}"))
    assert done.returncode == 0, done.stderr[-3000:]
    card = (tmp_path / "out" / "README.md").read_text()
    assert "({{ x }}, {% if %})" in card or "({% if %}, {{ x }})" in card
    assert "--run_name 'exp{{1}}'" in card  # the command, as it was run
    labels = json.loads((tmp_path / "out" / "config.json").read_text())["id2label"].values()
    assert set(labels) == set(classes)


@pytest.mark.integration
def test_a_card_that_cannot_be_written_keeps_the_weights_and_says_how_to_write_it(tmp_path, monkeypatch):
    def broken_card(*args, **kwargs):
        raise RuntimeError("the template broke")

    monkeypatch.setattr("modeling_vit_scratch.training.output.model_card", broken_card)
    done = outcome("train", Scenario(tmp_path).argv("train", output=tmp_path / "out"))
    out = tmp_path / "out"
    assert done.one_line, done
    assert done.error.startswith(
        f"error: The model is saved in {out} (weights, config, image processor) and loads, but README.md "
        "(RuntimeError: the template broke) could not be written: once the cause is fixed, write the card with"
    )
    assert f"write_model_card('{out}')" in done.error
    assert {"model.safetensors", "config.json", "preprocessor_config.json", "training_record.json"} <= {
        path.name for path in out.iterdir()
    }
    assert not (out / "README.md").exists()
    monkeypatch.undo()
    write_model_card(out)  # what the line says to run
    assert "## Training procedure" in (out / "README.md").read_text()
