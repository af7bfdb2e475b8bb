"""An option given twice on one command line is one line before any work, on every entry point: never "the last one
wins" (`--config_overrides a=1 --config_overrides b=2` trained without a=1 while the card showed it)."""

import pytest
from entry_points import ENTRY_POINTS, Scenario, outcome

from modeling_vit_scratch.common.repeated import repeated_option
from modeling_vit_scratch.training.arguments import parse_arguments


def first_option(argv: list[str]) -> tuple[str, str]:
    """The first `--option value` pair of a working command line (push's has none: its commit message)."""
    pairs = [(arg, argv[i + 1]) for i, arg in enumerate(argv[:-1]) if arg.startswith("--") and argv[i + 1][:2] != "--"]
    return pairs[0] if pairs else ("--commit_message", "a message")


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
@pytest.mark.parametrize("spelling", ["same", "equals"])
def test_an_option_given_twice_is_one_line_naming_it_without_its_values(name, spelling, tmp_path):
    argv = Scenario(tmp_path).argv(name)
    option, value = first_option(argv)
    argv = argv if option in argv else [*argv, option, value]
    again = [f"{option}=other-{value}"] if spelling == "equals" else [option, f"other-{value}"]
    on_disk = sorted(tmp_path.rglob("*"))
    done = outcome(name, [*argv, *again])
    assert done.one_line, done
    assert f"{option} is given twice on the command line" in done.error
    assert "other-" not in done.error  # the values are never shown: one may be a secret
    assert sorted(tmp_path.rglob("*")) == on_disk  # refused before anything was made


def test_two_config_overrides_say_that_one_takes_several_keys(tmp_path):
    argv = [*Scenario(tmp_path).argv("train"), "--config_overrides", "hidden_size=32"]
    with pytest.raises(ValueError, match="one --config_overrides takes several keys"):
        parse_arguments([*argv, "--config_overrides", "num_hidden_layers=1"])


def test_two_spellings_of_one_option_are_one_option_and_a_recipe_value_is_not_a_repeat(tmp_path):
    with pytest.raises(ValueError, match=r"\(--num_train_epochs and --num-train-epochs\)"):
        parse_arguments(["--num_train_epochs", "1", "--num-train-epochs", "2", "--output_dir", str(tmp_path / "o")])
    recipe = tmp_path / "r.json"
    recipe.write_text('{"num_train_epochs": 1}')
    parsed = parse_arguments([str(recipe), "--num_train_epochs", "2", "--output_dir", str(tmp_path / "o")])
    assert parsed[3].num_train_epochs == 2  # the command line replaces the recipe's value, as documented


def test_what_follows_an_option_that_hands_the_line_on_is_not_read():
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--name")
    parser.add_argument("--rest", nargs=argparse.REMAINDER)
    assert repeated_option(parser, ["--name", "a", "--rest", "--name", "b"]) is None
    assert repeated_option(parser, ["--name", "a", "--", "--name", "b"]) is None
    assert "--name is given twice" in repeated_option(parser, ["--name", "a", "--name=b"])
