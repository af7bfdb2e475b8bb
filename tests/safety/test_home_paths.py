"""A path argument that starts with `~` is the user's home folder on every command, for what it reads and what it
writes: the shell leaves `~` unexpanded after `=` (`--out=~/figs`), and a literal `./~/figs` in the working folder is
never what was meant. Every line names the expanded path."""

import pytest
from entry_points import Scenario, outcome
from PIL import Image


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


def test_a_file_url_is_read_as_the_path_it_names(tmp_path, capsys):
    """A file manager copies a file as `file:///...`: every path argument reads it as that path (a CMYK JPEG here, as
    a browser saves one), never as a folder `file:` here."""
    scenario = Scenario(tmp_path)
    Image.new("CMYK", (20, 20), (0, 80, 160, 0)).save(tmp_path / "my cmyk.jpg")
    url = (tmp_path / "my cmyk.jpg").as_uri()  # file:///.../my%20cmyk.jpg
    argv = ["--model", scenario.model().as_uri(), "--image", url, "--out", f"file://localhost{tmp_path}/figs"]
    assert outcome("explain", argv).code == 0
    assert f"{tmp_path / 'figs'}/attention_rollout.png" in capsys.readouterr().out
    missing = outcome("push", [f"FILE://{tmp_path}/missing", "local-user/a"])  # a scheme in any case (RFC 3986)
    assert missing.error.startswith(f"error: FOLDER '{tmp_path / 'missing'}' does not exist"), missing


def test_a_file_url_of_another_host_is_one_line():
    result = outcome("convert", ["--to", "transformers", "--input", "file://server/share/model", "--output", "out"])
    assert result.error.startswith(
        "error: argument --input: 'file://server/share/model' is a file URL on the host 'server', not on this "
        "machine: copy the file here and give its path;"
    ), result
    trained = outcome("train", ["--dataset", "file://server/share/images", "--model", "vit-tiny-patch16-224"])
    assert trained.error == (
        "error: --dataset 'file://server/share/images' is a file URL on the host 'server', not on this machine: copy "
        "the file here and give its path."
    ), trained
