"""The model card: written from what the folder holds, claiming nothing it does not, and user text (labels, names,
paths, commands) never read as Markdown or HTML and never holding a token."""

import json

import pytest
from helpers import tiny_config
from huggingface_hub import ModelCard
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from modeling_vit_scratch import ViTScratchForImageClassification
from modeling_vit_scratch.secrets import remember
from modeling_vit_scratch.sharing.card import card_text, public_command, write_card
from modeling_vit_scratch.sources import weights_sha256

SECRET = "sk-card-test-secret-value-1234"  # remembered: a token the card must never show
RECORD = dict(
    command="python /home/someone/work/scripts/train.py --output_dir /home/someone/runs/pets",
    dataset="/home/someone/data/pets",
    num_train=10,
    num_validation=2,
    num_test=3,
    epochs=4.0,
    learning_rate=3e-3,
    weight_decay=0.05,
    scheduler="cosine",
    total_batch=8,
    seed=3,
    world_size=1,
    wall_time_seconds=65.0,
)
METRICS = {"test_accuracy": 0.625, "eval_accuracy": 0.5, "test_per_class_accuracy": {"cat": 0.5, "dog": None}}
MARKUP = ("html_inline", "html_block", "link_open", "image")


def model_folder(path, labels=("cat", "dog", "fox", "owl", "yak"), record=True, metrics=True):
    config = tiny_config(id2label=dict(enumerate(labels)), label2id={label: i for i, label in enumerate(labels)})
    ViTScratchForImageClassification(config).save_pretrained(path)
    if record:
        (path / "training_record.json").write_text(json.dumps({**RECORD, "weights_sha256": weights_sha256(path)}))
    if metrics:
        (path / "all_results.json").write_text(json.dumps(METRICS))
    return path


def markup(text: str) -> list[str]:
    """The HTML and links a Hub renderer would make of the card's body (its code blocks hold text only)."""
    tokens = MarkdownIt("commonmark").enable("table").parse(ModelCard(text).text)
    found = [token for token in tokens if token.type in MARKUP]
    return [token.type for token in found] + [
        child.type for token in tokens for child in token.children or [] if child.type in MARKUP
    ]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return model_folder(tmp_path_factory.mktemp("card"))


def test_a_trained_folder_gets_a_card_with_its_metadata_and_metrics_and_no_local_path(folder):
    write_card(folder)
    card = ModelCard.load(folder / "README.md")
    assert card.data.library_name == "transformers"
    assert card.data.pipeline_tag == "image-classification"
    assert card.data.eval_results[0].metric_value == 0.625
    assert "0.6250" in card.text and "trust_remote_code=True" in card.text
    assert "/home/someone" not in card.content and "train.py" in card.content


def test_a_command_is_shown_as_typed_or_says_that_its_absolute_paths_were_cut(tmp_path):
    """A card names no local folder: it shows an absolute path by its last part, and says so; a command without one is
    shown as typed."""
    folder = model_folder(tmp_path)
    heads = {}
    for command in (RECORD["command"], "python scripts/train.py --output_dir runs/pets"):
        (folder / "training_record.json").write_text(
            json.dumps({**RECORD, "command": command, "weights_sha256": weights_sha256(folder)})
        )
        lines = ModelCard(card_text(folder)).text.splitlines()
        block = lines.index("```bash")
        heads[command] = lines[block - 2]
        assert lines[block + 1] == public_command(command)
    assert public_command(RECORD["command"]).endswith("--output_dir pets")
    assert "training_record.json" in heads[RECORD["command"]]
    assert "training_record.json" not in heads["python scripts/train.py --output_dir runs/pets"]


def test_weights_other_than_the_record_names_get_no_metrics(tmp_path):
    folder = model_folder(tmp_path)
    record = json.loads((folder / "training_record.json").read_text())
    (folder / "training_record.json").write_text(json.dumps({**record, "weights_sha256": "0" * 64}))
    card = ModelCard(card_text(folder))
    assert card.data.eval_results is None and "0.6250" not in card.text and "weights_sha256" in card.text


def test_a_folder_without_records_claims_no_training(tmp_path):
    card = ModelCard(card_text(model_folder(tmp_path, record=False, metrics=False)))
    assert card.data.eval_results is None and "## Training" not in card.text and "## Results" not in card.text
    assert "register tokens" not in card.text and "layer scale" not in card.text  # a plain ViT has neither


def test_registers_and_layer_scale_are_in_the_architecture_table_where_the_model_has_them(tmp_path):
    ViTScratchForImageClassification(tiny_config(num_register_tokens=4, layerscale_value=1e-5)).save_pretrained(
        tmp_path
    )
    text = card_text(tmp_path)
    assert "| register tokens | 4 |" in text and "| layer scale (initial value) | 1e-05 |" in text


def test_a_converted_folder_names_its_source_and_its_loading_example_the_repo(tmp_path):
    folder = model_folder(tmp_path, record=False, metrics=False)
    source = {"input": "google/vit-base-patch16-224", "from": "transformers", "weights_sha256": weights_sha256(folder)}
    (folder / "conversion_record.json").write_text(json.dumps(source))
    text = card_text(folder, repo_id="someone/vit", revision="abc123")
    assert "google/vit-base-patch16-224" in text and 'model="someone/vit"' in text and 'revision="abc123"' in text


def test_a_transformers_model_gets_a_card_without_our_code(tmp_path):
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=8, patch_size=4, hidden_size=12, num_hidden_layers=1, num_attention_heads=2)
    ViTForImageClassification(config).save_pretrained(tmp_path)
    text = card_text(tmp_path)
    assert "trust_remote_code" not in text and ModelCard(text).data.library_name == "transformers"


LABEL = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=30)
MALICIOUS = ["<img src=x onerror=alert(1)>", "<script>alert(1)</script>", "[click](https://evil)", "![x](y.png)",
             "a|b", "`code`", "**bold**", "<!-- c -->", "&lt;b&gt;", "{{ card_data }}", "{% raw %}", "\\", f"x{SECRET}"]  # fmt: skip


@settings(max_examples=40)
@given(labels=st.lists(st.one_of(LABEL, st.sampled_from(MALICIOUS)), min_size=2, max_size=6, unique=True))
def test_any_labels_render_as_text_never_markup_or_a_token(folder, labels):
    remember(SECRET)
    config = json.loads((folder / "config.json").read_text())
    config.update(id2label=dict(enumerate(labels)), label2id={label: i for i, label in enumerate(labels)})
    (folder / "config.json").write_text(json.dumps(config))
    text = card_text(folder)
    assert markup(text) == []
    assert SECRET not in text


def test_record_text_renders_as_text_never_markup_or_a_token(tmp_path):
    remember(SECRET)
    folder = model_folder(tmp_path)
    record = json.loads((folder / "training_record.json").read_text())
    hostile = "<img src=x onerror=alert(1)> [x](https://evil) ```"
    record.update(dataset=hostile, augmentation=hostile, command=f"train.py --hub_token {SECRET} ``` <b>x</b>")
    (folder / "training_record.json").write_text(json.dumps(record))
    text = card_text(folder)
    assert markup(text) == [] and SECRET not in text
