"""A value named empty is one line naming the argument, never its default (`common/blank.py`): `--dataset ""` would
read the working folder, `--teacher "$T"` with T unset would train with no teacher, a recipe's `dataset:` left null
would train on the digits; every text argument of every command is checked the same way, before any work."""

import json

import pytest
from entry_points import Scenario, outcome, with_argument

import modeling_vit_scratch.training.trainer as trainer_module
from modeling_vit_scratch.training.arguments import NAMED_ARGUMENTS

BLANKS = ["", "  \n "]


@pytest.fixture
def never_trains(monkeypatch):
    """A refusal comes before the data set is read: reading it fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("the data set was read")

    monkeypatch.setattr(trainer_module, "load_image_dataset", refuse)


@pytest.mark.parametrize("blank", BLANKS)
@pytest.mark.parametrize("name", sorted(NAMED_ARGUMENTS))
def test_a_train_argument_given_empty_is_one_line_naming_it(tmp_path, name, blank, never_trains):
    result = outcome("train", with_argument(Scenario(tmp_path).argv("train"), f"--{name}", blank))
    assert result.code == 1 and result.one_line, result
    assert result.error == (
        f"error: --{name} is empty ({' '.join(repr(blank).split())}): give {NAMED_ARGUMENTS[name]}, or leave out "
        f"--{name} for its default."
    )
    assert not (tmp_path / "out-train").exists()


@pytest.mark.parametrize("value", [None, "", " "])
@pytest.mark.parametrize("key", ["dataset", "model", "teacher"])
@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_recipe_key_left_empty_is_one_line_naming_the_file_and_line(tmp_path, suffix, key, value, never_trains):
    recipe = tmp_path / f"r{suffix}"
    if suffix == ".json":
        recipe.write_text(json.dumps({"seed": 1, key: value}, indent=1))  # the key on line 3
    else:
        recipe.write_text(f"seed: 1\n\n{key}:{'' if value is None else ' ' + json.dumps(value)}\n")
    argv = [a for a in Scenario(tmp_path).argv("train") if a not in ("--model", "--dataset")]
    argv = [str(recipe), "--output_dir", str(tmp_path / "o"), *argv[argv.index("--num_train_epochs") :]]
    result = outcome("train", argv)
    assert result.code == 1 and result.one_line, result
    shown = "null" if value is None else repr(value)
    assert result.error == (
        f"error: Key {key!r} in the recipe {recipe} line 3 is empty ({shown}): give it {NAMED_ARGUMENTS[key]}, or "
        "remove the key for the default."
    )


def test_a_recipe_key_left_empty_but_given_on_the_command_line_is_the_command_lines(tmp_path, never_trains):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("dataset:\n")
    result = outcome("train", [str(recipe), *Scenario(tmp_path).argv("train")])  # --dataset given: the data is read
    assert isinstance(result.traceback, AssertionError) and "the data set was read" in str(result.traceback)


# (command, argument: None is push's folder, its first value) -> how the line names it
ARGPARSE_ARGUMENTS = [
    ("explain", "--model"),
    ("explain", "--image"),
    ("explain", "--out"),
    ("convert", "--input"),
    ("convert", "--output"),
    ("push", None),
    ("push", "--revision"),
    ("benchmark", "--json"),
]


@pytest.mark.parametrize("blank", BLANKS)
@pytest.mark.parametrize(("name", "argument"), ARGPARSE_ARGUMENTS)
def test_an_argument_of_every_other_command_given_empty_is_one_line_naming_it(tmp_path, name, argument, blank):
    argv = Scenario(tmp_path).argv(name)
    argv = [blank, *argv[1:]] if argument is None else with_argument(argv, argument, blank)
    result = outcome(name, argv)
    assert result.code == 1 and result.one_line, result
    assert result.error.startswith(f"error: {argument or 'FOLDER'} is empty ({' '.join(repr(blank).split())}): give")
    assert sorted(path.name for path in tmp_path.iterdir() if path.name.startswith("out-")) == []


@pytest.mark.integration
def test_a_yaml_recipe_whose_dataset_is_left_empty_is_one_line_in_a_new_process(tmp_path):
    """What a user sees: `dataset:` with nothing after it (or `$DATA` unset by envsubst) is named, never the digits."""
    from entry_points import run_command

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"output_dir: {tmp_path / 'out'}\ndataset:\n")
    result = run_command("train", [str(recipe)], cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: Key 'dataset' in the recipe {recipe} line 2 is empty (null): give it {NAMED_ARGUMENTS['dataset']}, "
        "or remove the key for the default."
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["r.yaml"]
