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


# HTML, Markdown links, images, code and table syntax: what would render as a tag, a link or an image on the Hub
MARKUP = st.sampled_from(
    [
        "<",
        ">",
        "&",
        "&amp;",
        '"',
        "`",
        "``",
        "```",
        "[x](y)",
        "![x](y)",
        "<b onmouseover=alert(1)>x</b>",
        "<script>",
        "*",
        "_",
        "|",
        "~~",
        "#",
        "\\",
        "<http://x>",
    ]
)
USER_TEXT = st.lists(st.one_of(SYNTAX, MARKUP, USER_TEXT), min_size=1, max_size=6).map("".join)


def rendered(card: str) -> list:
    """The card's body parsed as CommonMark with tables and strikethrough (what the Hub renders): its tokens."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(ModelCard(card).text)


def shown(tokens: list) -> list[str]:
    """What a reader sees, one string per paragraph, heading, table cell or code block."""
    texts = []
    for token in tokens:
        if token.type == "inline":
            texts.append("".join(child.content if child.type != "softbreak" else " " for child in token.children))
        elif token.type == "fence":
            texts.append(token.content)
    return texts


@settings(max_examples=25, deadline=None)
@given(
    labels=st.lists(USER_TEXT.filter(str.strip), min_size=2, max_size=3, unique=True),
    # a command's absolute paths are published as their last part (tests/safety/test_push_card.py): none here
    command=USER_TEXT.filter(lambda text: "/" not in text and "~" not in text),
    dataset=USER_TEXT.filter(lambda text: "/" not in text and text.strip()),
    start=USER_TEXT.filter(lambda text: "/" not in text and text.strip()),
    repo_name=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,40}", fullmatch=True),
)
def test_user_text_is_rendered_as_text_in_the_card_never_as_markup(labels, command, dataset, start, repo_name):
    config = tiny_config(num_labels=len(labels), id2label=dict(enumerate(labels)))
    record = dict(
        RECORD, command=f"python scripts/train.py --run_name {command}", dataset=dataset, initial_weights=start
    )
    metrics = {
        "test_accuracy": 0.5,
        "test_confusion_matrix": {"labels": labels, "matrix": [[1] * len(labels)] * len(labels)},
        "test_per_class_accuracy": dict.fromkeys(labels, 0.5),
    }
    for model_id in (f"me/{repo_name}", None):  # without a repo the card is named after the data set
        card = str(render_model_card(config, metrics, record, model_id=model_id))
        tokens = rendered(card)
        every = [token for token in tokens for token in [token, *(token.children or [])]]
        assert not {"html_block", "html_inline", "link_open", "image"} & {token.type for token in every}
        texts, one_line = shown(tokens), lambda text: " ".join(text.split())
        assert f"({', '.join(map(one_line, labels))})." in " ".join(texts)  # the label preview, as given
        assert {one_line(label) for label in labels} <= set(texts)  # each a cell of the per-class table
        assert f"python scripts/train.py --run_name {command}\n" in texts  # the command's code block
        assert f"The image-classification data set {one_line(dataset)}. Splits:" in " ".join(texts)
        assert f"starting from the weights of {one_line(start)}," in " ".join(texts)
        assert (one_line(f"vit-scratch-{Path(dataset).name}") if model_id is None else repo_name) == texts[
            0
        ]  # the heading
        data = ModelCard(card).data  # the front matter still parses, and names the model exactly
        assert (data.license, data.model_name) == (
            "apache-2.0",
            model_id.split("/")[-1] if model_id else f"vit-scratch-{Path(dataset).name}",
        )


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
