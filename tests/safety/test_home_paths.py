"""A path argument that starts with `~` is the user's home folder on every command, for what it reads and what it
writes: the shell leaves `~` unexpanded after `=` (`--out=~/figs`), and a literal `./~/figs` in the working folder is
never what was meant. Every line names the expanded path."""

import pytest
from entry_points import Scenario, outcome


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home folder of its own, and a working folder beside it that must stay empty."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    yield home
    assert list(work.iterdir()) == []  # no folder named `~` in the working folder


@pytest.mark.parametrize(
    "name, argv, written",
    [
        ("explain", ["--model=~/model", "--image=~/picture.png", "--out=~/figs"], "figs"),
        ("convert", ["--to", "transformers", "--input=~/model", "--output=~/hfx"], "hfx"),
    ],
)
def test_a_tilde_after_equals_writes_into_the_home_folder(name, argv, written, home, capsys):
    Scenario(home).model()
    Scenario(home).picture()
    result = outcome(name, argv)
    assert result.code == 0, result
    assert (home / written).is_dir() and any((home / written).iterdir())
    assert str(home / written) in capsys.readouterr().out  # the expanded path, never `~/...`


@pytest.mark.parametrize(
    "name, argv, argument",
    [
        ("explain", ["--model=~/missing", "--image", "x.png", "--out", "figs"], "--model"),
        ("convert", ["--to", "transformers", "--input=~/missing", "--output", "out"], "--input"),
        ("push", ["~/missing", "local-user/a"], "FOLDER"),
        ("train", ["--dataset", "digits", "--model", "vit-tiny-patch16-224", "--teacher=~/missing"], "Teacher folder"),
    ],
)
def test_a_tilde_in_an_input_names_the_home_folder(name, argv, argument, home):
    result = outcome(name, [*argv, "--output_dir=~/run"] if name == "train" else argv)
    assert result.one_line, result
    assert f"{argument} '{home / 'missing'}' does not exist" in result.error


@pytest.mark.parametrize(
    "name, argument",
    [("benchmark", "--json"), ("train", "--output_dir"), ("explain", "--out"), ("convert", "--output")],
)
def test_a_tilde_in_an_output_is_checked_as_the_home_folder(name, argument, home):
    (home / "notes.txt").write_text("the user's notes")
    argv = Scenario(home).argv(name)
    argv = [*argv[: argv.index(argument)], *argv[argv.index(argument) + 2 :], f"{argument}=~/notes.txt/sub"]
    result = outcome(name, argv)
    assert result.one_line, result
    assert str(home / "notes.txt") in result.error and "~" not in result.error
