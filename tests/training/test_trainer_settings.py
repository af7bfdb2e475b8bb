"""`modeling_vit_scratch.training.trainer_settings`: the Trainer's mapping and word arguments, checked as data by
`parse_arguments` before any work, each found by introspection so that a new field is covered by the rule."""

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from modeling_vit_scratch.training.arguments import argument_actions, parse_arguments
from modeling_vit_scratch.training.trainer_settings import file_arguments, mapping_arguments, read_mapping

# what each file argument needs beside it to take effect (`APPLIES_ONLY_WITH`)
COMPANIONS = {"fsdp_config": ["--fsdp", "full_shard"]}


def refusal(argv: list[str]) -> str:
    with pytest.raises(ValueError) as refused:
        parse_arguments(argv)
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_the_rule_finds_the_file_valued_arguments():
    assert {"accelerator_config", "fsdp_config", "deepspeed"} <= set(file_arguments())
    assert {"lr_scheduler_kwargs", "gradient_checkpointing_kwargs"} <= set(mapping_arguments()) - set(file_arguments())


@pytest.mark.parametrize("name", mapping_arguments())
def test_json_text_that_does_not_parse_names_the_argument(tmp_path, name):
    message = refusal(["--output_dir", str(tmp_path / "out"), *COMPANIONS.get(name, []), f"--{name}", "{x"])
    assert f"--{name}" in message


@pytest.mark.parametrize("name", file_arguments())
@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("some notes\n", "is not JSON (line 1 column 1"),
        ("[1, 2]", "holds a JSON list, not an object"),
        (None, "does not exist"),
        ("folder", "is not a file"),
        ("[" * 100_000, "is nested too deep"),
        (b"\xff\xfe{}", "is not UTF-8 text"),
    ],
)
def test_a_settings_file_that_is_no_json_object_is_one_line_naming_argument_and_file(tmp_path, name, content, said):
    path = tmp_path / "settings.json"
    if content == "folder":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    message = refusal(["--output_dir", str(tmp_path / "out"), *COMPANIONS.get(name, []), f"--{name}", str(path)])
    assert message.startswith(f"--{name} {path} {said}")


@pytest.mark.parametrize("name", file_arguments())
@pytest.mark.parametrize("linked", [False, True])
def test_a_settings_file_inside_the_output_folder_is_refused(tmp_path, name, linked):
    """The output folder is replaced by a run (--overwrite_output_dir): a file read from it could vanish or be
    rewritten; given through a link, what counts is where the link leads."""
    (tmp_path / "out").mkdir()
    inside = tmp_path / "out" / "settings.json"
    inside.write_text("{}")
    given = inside
    if linked:
        given = tmp_path / "link.json"
        os.symlink(inside, given)
    message = refusal(["--output_dir", str(tmp_path / "out"), *COMPANIONS.get(name, []), f"--{name}", str(given)])
    assert message.startswith(f"--{name} {given} is inside --output_dir")


def test_a_mapping_argument_that_reads_no_file_refuses_a_path(tmp_path):
    message = refusal(["--output_dir", str(tmp_path / "out"), "--lr_scheduler_kwargs", "./notes.txt"])
    assert message.startswith("--lr_scheduler_kwargs takes a JSON object")


def test_fsdp_config_without_fsdp_is_refused_naming_fsdp(tmp_path):
    (tmp_path / "fsdp.json").write_text("{}")
    message = refusal(["--output_dir", str(tmp_path / "out"), "--fsdp_config", str(tmp_path / "fsdp.json")])
    assert message.startswith("--fsdp_config is used only with --fsdp full_shard, which is not given")


def word_arguments() -> list[str]:
    """Every argument that takes one word of a set: argparse's choices, or an enum converter."""
    names = []
    for name, action in argument_actions().items():
        if "-" not in name and (action.choices or hasattr(action.type, "enum")):
            names.append(name)
    return sorted(set(names))


def test_the_words_transformers_checks_late_are_among_them():
    assert {"torch_compile_backend", "torch_compile_mode", "debug", "optim", "lr_scheduler_type"} <= set(
        word_arguments()
    )


@pytest.mark.parametrize("name", word_arguments())
def test_an_unknown_word_names_the_argument_the_word_as_typed_and_the_choices(tmp_path, name):
    action = argument_actions()[name]
    message = refusal(["--output_dir", str(tmp_path / "out"), f"--{name}", "EvilMod"])
    assert f"--{name}" in message and "'EvilMod'" in message
    choices = action.choices or [member.value for member in action.type.enum]
    assert all(repr(str(choice)) in message for choice in choices)


def test_a_recipe_word_of_none_of_the_choices_names_the_file_and_the_choices(tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"output_dir: {tmp_path / 'out'}\ntorch_compile_backend: evilmod\n")
    message = refusal([str(recipe)])
    assert message.startswith(f"Key 'torch_compile_backend' in the recipe {recipe} line 2 is evilmod")
    assert "inductor" in message


@given(st.text(max_size=40))
def test_any_text_is_a_mapping_or_one_line_naming_the_argument(text):
    try:
        content = read_mapping("--lr_scheduler_kwargs", text)
    except ValueError as refused:
        assert str(refused).startswith("--lr_scheduler_kwargs ") and "\n" not in str(refused)
    else:
        assert content == json.loads(text)


@pytest.mark.parametrize("name", file_arguments())
def test_a_settings_file_by_a_token_bearing_path_is_refused_without_echoing_it(tmp_path, monkeypatch, name):
    secret = "team-token-0f1e2d3c4b5a"
    monkeypatch.setenv("HF_TOKEN", secret)
    (tmp_path / secret).mkdir()
    (tmp_path / secret / "settings.json").write_text("{}")
    given = str(tmp_path / secret / "settings.json")
    message = refusal(["--output_dir", str(tmp_path / "out"), *COMPANIONS.get(name, []), f"--{name}", given])
    assert f"--{name}" in message and "token" in message and secret not in message
