"""Recipes: every error in a recipe file is one line naming the file and, where the text has one, the line: a
syntax error at any line, an unknown key, a key given twice (never the last value kept without a word), a YAML tag that would build
a Python object; an empty recipe or one that is not a mapping is one line too. Only `train` takes a recipe."""

import json

import pytest
from entry_points import outcome
from hypothesis import given, settings
from hypothesis import strategies as st

# plain arguments and values a recipe may hold
POOL = {
    "seed": 3,
    "learning_rate": 0.001,
    "weight_decay": 0.05,
    "max_shift": 0.1,
    "max_degrees": 10,
    "num_train_epochs": 2,
    "report_to": "none",
    "split_seed": 1,
    "augment": True,
}
SUFFIXES = (".json", ".yaml")
# a broken line in each syntax, which its parser reports at that very line
BROKEN = {".json": '  "{key}" 1,', ".yaml": "{key}: 1: 2"}


def recipe_lines(pairs: list[tuple[str, object]], suffix: str) -> list[str]:
    """One key per line: JSON's braces on lines of their own, YAML's `key: value`."""
    if suffix == ".yaml":
        return [f"{key}: {json.dumps(value)}" for key, value in pairs]
    body = [f"  {json.dumps(key)}: {json.dumps(value)}," for key, value in pairs]
    body[-1] = body[-1].rstrip(",")
    return ["{", *body, "}"]


def refusal(tmp_path, suffix: str, lines: list[str]) -> str:
    """The one line `train` prints for the recipe `lines`, which must also name the file."""
    path = tmp_path / f"recipe{suffix}"
    path.write_text("\n".join(lines) + "\n")
    result = outcome("train", [str(path)])
    assert result.one_line, result
    assert f"Recipe {path}" in result.error or f"the recipe {path}" in result.error, result.error
    return result.error


keys = st.lists(st.sampled_from(sorted(POOL)), min_size=1, max_size=len(POOL), unique=True)


@settings(max_examples=25)
@given(names=keys, data=st.data(), suffix=st.sampled_from(SUFFIXES))
def test_a_key_given_twice_is_refused_naming_the_file_line_and_key(tmp_path_factory, names, data, suffix):
    tmp_path = tmp_path_factory.mktemp("recipe")
    twice = data.draw(st.sampled_from(names))
    where = data.draw(st.integers(names.index(twice) + 1, len(names)))  # after its first place
    pairs = [(key, POOL[key]) for key in names]
    pairs.insert(where, (twice, POOL[twice]))
    lines = recipe_lines(pairs, suffix)
    line = where + 1 + (suffix == ".json")  # JSON's first line is the brace
    error = refusal(tmp_path, suffix, lines)
    assert f"line {line}: key {twice!r} is given twice" in error, error
    assert "keep one" in error


@settings(max_examples=25)
@given(names=keys, data=st.data(), suffix=st.sampled_from(SUFFIXES))
def test_a_broken_line_is_named_by_its_number(tmp_path_factory, names, data, suffix):
    tmp_path = tmp_path_factory.mktemp("recipe")
    lines = recipe_lines([(key, POOL[key]) for key in names], suffix)
    first = 1 if suffix == ".json" else 0
    index = data.draw(st.integers(first, first + len(names) - 1))
    lines[index] = BROKEN[suffix].format(key=names[index - first])
    error = refusal(tmp_path, suffix, lines)
    assert f"line {index + 1}: " in error and f"fix the {suffix[1:].upper()} there" in error, error


@pytest.mark.parametrize(
    ("suffix", "text", "says"),
    [
        (".json", "", "line 1"),
        (".yaml", "", "is empty"),
        (".yml", "# nothing but a comment\n", "is empty"),
        (".json", "{}", "is empty"),
        (".json", "[1, 2]", "holds a list, not a mapping"),
        (".yaml", "- seed\n- 3\n", "holds a list, not a mapping"),
        (".yaml", "just words\n", "holds a str, not a mapping"),
        (".yaml", 'seed: 1\nx: !!python/object/apply:os.system ["true"]\n', "line 2"),
        (".yaml", "seed: 1\ny: !!python/name:os.system\n", "would build a Python object"),
    ],
)
def test_a_recipe_that_is_no_mapping_of_arguments_is_one_line(tmp_path, suffix, text, says):
    path = tmp_path / f"recipe{suffix}"
    path.write_text(text)
    result = outcome("train", [str(path)])
    assert result.one_line, result
    assert f"Recipe {path}" in result.error and says in result.error, result.error


def test_a_recipe_that_is_not_text_is_one_line(tmp_path):
    path = tmp_path / "recipe.json"
    path.write_bytes(b"\xff\xfe\x00{")
    result = outcome("train", [str(path)])
    assert result.one_line and "UTF-8" in result.error, result


@settings(max_examples=25)
@given(names=keys, data=st.data(), suffix=st.sampled_from(SUFFIXES))
def test_an_unknown_key_is_named_with_its_line(tmp_path_factory, names, data, suffix):
    tmp_path = tmp_path_factory.mktemp("recipe")
    where = data.draw(st.integers(0, len(names)))
    pairs = [(key, POOL[key]) for key in names]
    pairs.insert(where, ("learnig_rate", 0.1))
    error = refusal(tmp_path, suffix, recipe_lines(pairs, suffix))
    line = where + 1 + (suffix == ".json")
    assert "Unknown key 'learnig_rate' in the recipe " in error, error
    assert f"line {line} (did you mean 'learning_rate'?)" in error, error
