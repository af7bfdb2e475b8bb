"""Numbers: a non-finite or out-of-range argument is refused in one line naming it and what is allowed, on the
command line and in a recipe alike, before any work (no data read, no model loaded, no output folder made); an
architecture too large to build is one line before the data is read."""

import argparse
import json
import math

import pytest
from entry_points import Scenario, outcome, run_command
from hypothesis import given, settings
from hypothesis import strategies as st

from modeling_vit_scratch.benchmark.command import BENCHMARK_LIMITS, main_parser
from modeling_vit_scratch.explanation.command import EXPLAIN_LIMITS
from modeling_vit_scratch.training.arguments import argument_names
from modeling_vit_scratch.training.limits import LIMITS

# entry point -> its table of number arguments (a new command with numbers is covered by adding it here); push's one
# number, --max_shard_size, is a size with a unit, checked with the Hub arguments (tests/safety/test_hub_arguments.py)
NUMBER_LIMITS = {"train": LIMITS, "explain": EXPLAIN_LIMITS, "benchmark": BENCHMARK_LIMITS}
# what each entry point does first once its arguments are accepted: reaching it means work started
FIRST_WORK = {
    "train": "modeling_vit_scratch.training.trainer.load_image_dataset",
    "explain": "modeling_vit_scratch.explanation.prediction.load_model",
    "benchmark": "modeling_vit_scratch.benchmark.command.run_measurements",
}


def bad_values(allowed) -> list:
    """Values `allowed` refuses: non-finite floats, and each side just past (or far past) its bounds."""
    step = 1 if allowed.integer else 0.5
    values = [] if allowed.integer else [math.nan, math.inf, -math.inf]
    if allowed.low is not None:
        values += [allowed.low - step, -(10**30)] + ([allowed.low] if allowed.open_low else [])
    if allowed.high is not None:
        values += [allowed.high + step, 10**30] + ([allowed.high] if allowed.open_high else [])
    values = [float(value) if not allowed.integer else int(value) for value in values]
    return [value for value in values if not allowed.admits(value)]


CASES = sorted(
    (name, argument, value)
    for name, limits in NUMBER_LIMITS.items()
    for argument, allowed in limits.items()
    for value in bad_values(allowed)
)


def without(argv: list[str], flag: str) -> list[str]:
    """`argv` less `flag` and the value after it."""
    if flag not in argv:
        return argv
    index = argv.index(flag)
    return argv[:index] + argv[index + 2 :]


def fail_if_reached(*args, **kwargs):
    raise AssertionError("the command started work on a refused number")


def refused_before_work(monkeypatch, name: str, argv: list[str], argument: str, output):
    monkeypatch.setattr(FIRST_WORK[name], fail_if_reached)
    result = outcome(name, argv)
    assert result.one_line, result
    # checked after parsing ("--x 0 is ..."), or by the parser, which names the argument its own way
    named = (f"error: {argument} ", f"error: argument {argument}: ", f"error: argument {argument}/")  # /: an alias
    assert result.error.startswith(named), result.error
    assert "give " in result.error  # what is allowed
    assert not output.exists()


def test_every_limit_names_a_real_argument():
    assert set(LIMITS) <= set(argument_names())


def test_every_number_argument_of_the_benchmark_is_range_checked_by_its_parser():
    """By construction: no number argument is read with a bare int or float, and the ranges the parser checks are
    BENCHMARK_LIMITS (which the test above tries value by value)."""
    shown = [action for action in main_parser()._actions if action.help != argparse.SUPPRESS]
    assert [action.dest for action in shown if action.type in (int, float)] == []
    checked = {action.dest: action.type.allowed for action in shown if hasattr(action.type, "allowed")}
    assert checked == BENCHMARK_LIMITS


@pytest.mark.integration
def test_a_benchmark_of_zero_rounds_is_one_line_and_measures_nothing(tmp_path):
    results = tmp_path / "results.json"
    done = run_command("benchmark", ["--configs", "digits", "--rounds", "0", "--json", str(results)])
    assert done.returncode != 0 and done.stdout == "", done.stderr[-2000:]
    said = "error: argument --rounds: 0 is out of range: give an integer >= 1, e.g. 5; `vit-scratch benchmark --help`"
    assert done.stderr.strip().splitlines() == [f"{said} lists the arguments."]
    assert not results.exists()


@settings(max_examples=40)
@given(case=st.sampled_from(CASES), in_recipe=st.booleans())
def test_a_bad_number_is_one_line_before_any_work(tmp_path_factory, case, in_recipe):
    name, argument, value = case
    root = tmp_path_factory.mktemp(name)
    output = root / "out"
    argv = Scenario(root).argv(name, output)
    if in_recipe and name == "train":  # a recipe is train's only
        recipe = root / "recipe.json"
        recipe.write_text(json.dumps({argument: value}))  # nan and inf as JSON's NaN and Infinity
        argv = [str(recipe), *without(argv, f"--{argument}")]  # the command line would override the recipe
    else:
        argv = [*argv, f"--{argument}={value}"]  # `=`: argparse reads a lone -inf as an option
    with pytest.MonkeyPatch.context() as patch:  # fresh for each example
        refused_before_work(patch, name, argv, f"--{argument}", output)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ("image_size=1048576", "image_size 1048576"),
        ("hidden_size=96000,num_attention_heads=3,intermediate_size=96000", "hidden_size 96000"),
        ("drop_path_rate=NaN", "drop_path_rate=NaN"),
        ("layer_norm_eps=-Infinity", "layer_norm_eps=-Infinity"),
    ],
)
def test_an_architecture_that_cannot_be_built_is_one_line_before_the_data(tmp_path, monkeypatch, overrides, named):
    monkeypatch.setattr(FIRST_WORK["train"], fail_if_reached)
    argv = [*Scenario(tmp_path).argv("train"), "--config_overrides", overrides]
    result = outcome("train", argv)
    assert result.one_line, result
    assert named in result.error and ("lower" in result.error or "give" in result.error), result.error
