"""Every command's argument errors are one `error:` line, never argparse's usage block: an unknown argument, an
argument without its value, and the benchmark's own argument checks, tried over every entry point (ENTRY_POINTS).
Each runs in this process and is refused before any work."""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from entry_points import ENTRY_POINTS, Scenario, outcome

from modeling_vit_scratch.benchmark import command as benchmark_command
from modeling_vit_scratch.benchmark.models import BASELINE


def fail_if_reached(*args, **kwargs):
    raise AssertionError("the command went on past its argument errors")


@pytest.fixture
def nothing_runs(monkeypatch):
    """Measuring, training or loading anything fails the test."""
    monkeypatch.setattr(benchmark_command, "run_measurements", fail_if_reached)
    monkeypatch.setattr(benchmark_command, "run_end_to_end", fail_if_reached)
    monkeypatch.setattr("modeling_vit_scratch.training.trainer.build_model", fail_if_reached)


# what is added to a working command line that argparse cannot read, and what the line must say
BROKEN = [
    (["--no_such_argument", "1"], "--no_such_argument"),
    (["--help_me"], "--help_me"),
    (["--seed", "3", "leftover-value"], "leftover-value"),  # a value after no argument is named
]


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.parametrize("name", list(ENTRY_POINTS))
@pytest.mark.parametrize("broken, said", BROKEN, ids=[broken[0] for broken, _ in BROKEN])
def test_an_argument_error_is_one_line_without_the_usage(name, broken, said, tmp_path, capsys):
    result = outcome(name, [*Scenario(tmp_path).argv(name), *broken])
    printed = capsys.readouterr()
    assert result.one_line, result
    assert said in result.error
    assert "usage:" not in printed.out + printed.err


@pytest.mark.usefixtures("nothing_runs")
def test_a_benchmark_without_its_baseline_is_one_line(tmp_path, capsys):
    argv = [*Scenario(tmp_path).argv("benchmark"), "--implementations", "vit_scratch"]
    result = outcome("benchmark", argv)
    printed = capsys.readouterr()
    assert result.one_line, result
    assert result.error.startswith(
        f"error: --implementations must include the baseline {BASELINE} (what every ratio is measured against)"
    )
    assert "usage:" not in printed.out + printed.err


def long_options(name: str, capsys) -> list[str]:
    """The long options `name --help` lists: what its parser takes."""
    assert outcome(name, ["--help"]).code in (0, None)
    return sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_]*", capsys.readouterr().out)))


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_a_prefix_of_a_long_option_is_refused_never_taken_for_it(name, tmp_path, capsys):
    """argparse takes a unique prefix of an option for it by default (`benchmark --model m1` ran as --model_only):
    every option of every command is matched exactly, and a prefix is argparse's one line naming it."""
    options = long_options(name, capsys)
    prefixes = [option[:-1] for option in options if option[:-1] not in options and len(option) > 4]
    assert prefixes, options
    argv = Scenario(tmp_path).argv(name)
    for prefix in prefixes:
        refused = outcome(name, [*argv, prefix, "1"])
        assert refused.one_line, (prefix, refused)
        assert prefix in refused.error and (
            "unrecognized arguments:" in refused.error or "not abbreviated" in refused.error
        ), refused.error


def options_benchmark_gives_train(monkeypatch, tmp_path) -> list[str]:
    """The options `training_run` adds to the training command after the user's --train_args."""
    from modeling_vit_scratch.benchmark import end_to_end

    commands = []

    def record(command, **kwargs):
        commands.append(command)
        raise RuntimeError("recorded")

    monkeypatch.setattr(end_to_end.subprocess, "run", record)
    with pytest.raises(RuntimeError, match="recorded"):
        end_to_end.training_run("digits", 2, ["--seed", "1"], tmp_path, SimpleNamespace(glibc_malloc_defaults=True))
    return [arg for arg in commands[0][commands[0].index("--seed") + 2 :] if arg.startswith("--")]


@pytest.mark.usefixtures("nothing_runs")
def test_an_option_the_benchmark_gives_train_itself_is_one_line_saying_so(tmp_path, monkeypatch):
    """`--train_args --output_dir X` (before: after measuring began, a traceback holding train's 'given twice'
    line, though the user gave it once): each option the benchmark sets is one line before any run, saying why."""
    from modeling_vit_scratch.benchmark.end_to_end import SET_BY_BENCHMARK

    own = options_benchmark_gives_train(monkeypatch, tmp_path)
    assert set(own) == set(SET_BY_BENCHMARK), own
    argv = ["--end_to_end", "configs/train_digits.json", "--json", str(tmp_path / "r.json"), "--train_args"]
    for option in own:
        for given in ([option, "1"], [f"{option}=1"]):
            refused = outcome("benchmark", [*argv, "--bf16", "true", *given])
            assert refused.one_line, refused
            assert refused.error == (
                f"error: --train_args {option}: {SET_BY_BENCHMARK[option]}: drop {option} from --train_args"
                f"{', and give --end_to_end_steps N instead' if option == '--max_steps' else ''}."
            )
    # any other argument train refuses, as train's parser says it, before any run (before: a traceback after it)
    refused = outcome("benchmark", [*argv, "--output", "X"])
    assert refused.error == (
        "error: --train_args with --end_to_end configs/train_digits.json: Unknown argument --output (did you mean "
        "'--output_dir'?): arguments are matched exactly, not abbreviated."
    )
    assert not (tmp_path / "r.json").exists()


@pytest.mark.usefixtures("nothing_runs")
@pytest.mark.parametrize(
    "key, value, why",
    [
        ("push_to_hub", True, "the benchmark never pushes (its runs are a few steps into a temporary folder)"),
        ("hub_model_id", "me/model", "the benchmark never pushes (its runs are a few steps into a temporary folder)"),
        (
            "resume_from_checkpoint",
            True,
            "the benchmark never resumes (each round trains afresh into a temporary folder)",
        ),
    ],
    ids=["push", "hub-id", "resume"],
)
def test_a_push_or_resume_in_a_benchmarked_recipe_or_train_args_is_one_line(tmp_path, key, value, why):
    """A recipe with `push_to_hub: true` (and a token) pushed the benchmark's model of a few steps to the user's
    repository without a word; `resume_from_checkpoint: true` named a temporary folder and a fix the benchmark
    refuses. In a recipe or in --train_args, one line before any run; false is no push (benchmarked)."""
    recipe = tmp_path / "r_push.json"
    recipe.write_text(json.dumps({**json.loads(Path("configs/train_digits.json").read_text()), key: value}))
    argv = ["--end_to_end", str(recipe), "--json", str(tmp_path / "r.json")]
    refused = outcome("benchmark", argv)
    assert refused.one_line, refused
    assert refused.error == (
        f"error: --end_to_end {recipe} sets {key!r}: {why}: drop {key!r} from the recipe (or benchmark a copy without "
        "it)."
    )
    given = ["--end_to_end", "configs/train_digits.json", "--json", str(tmp_path / "r.json"), "--train_args"]
    refused = outcome("benchmark", [*given, f"--{key}", str(value).lower()])
    assert refused.error == f"error: --train_args --{key}: {why}: drop --{key} from --train_args."
    assert not (tmp_path / "r.json").exists()
    from modeling_vit_scratch.benchmark.end_to_end import check_never_in_benchmark

    recipe.write_text(json.dumps({"model": "m.json", "push_to_hub": False}))
    check_never_in_benchmark([str(recipe)], ["--push_to_hub", "false"])  # no push: nothing to refuse
