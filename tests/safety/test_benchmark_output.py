"""The benchmark's `--json` file follows the write rules: a file the benchmark did not write, a link, a folder (or a
name ending in '/') or a missing folder is one line before anything is measured (the file left byte-identical); a result of its own is
replaced by a staged write that never follows a link and leaves no partial file. In this process."""

import json
import os
import socket

import pytest
from entry_points import Scenario, outcome, with_argument

from modeling_vit_scratch.benchmark import command
from modeling_vit_scratch.benchmark.results_file import RESULT_KEYS, write_results
from modeling_vit_scratch.common.folders import OUTPUT_FILE_ARGUMENTS

RESULT = {"machine": "a CPU", "argv": [], "rows": [], "bars": []}


def fail_if_reached(*args, **kwargs):
    raise AssertionError("the benchmark measured before refusing its output file")


@pytest.fixture
def nothing_measured(monkeypatch):
    monkeypatch.setattr(command, "run_measurements", fail_if_reached)
    monkeypatch.setattr(command, "run_end_to_end", fail_if_reached)


def the_users(tmp_path, kind: str):
    """A `--json` path of `kind`, with what the user had there."""
    path = tmp_path / "mine.json"
    if kind == "notes":
        path.write_text("my notes, not JSON\n")
    elif kind == "other json":
        path.write_text(json.dumps({"machine": "mine", "rows": []}))  # not every key of a result
    elif kind == "link":
        target = tmp_path / "elsewhere.json"
        target.write_text(json.dumps(RESULT))  # even a result of ours is not written through a link
        path.symlink_to(target)
    elif kind == "folder":
        path.mkdir()
    elif kind == "missing folder":
        path = tmp_path / "nope" / "mine.json"
    elif kind == "ends with /":  # a folder meant, new or not: never written as a file of that name
        return f"{tmp_path}/results/"
    elif kind == "dot":
        return f"{tmp_path}/."
    return path


SAID = {
    "notes": "is a file the benchmark did not write (no JSON object with argv, bars, machine, rows): it would be "
    "replaced; give a new file name, or move that file away.",
    "other json": "is a file the benchmark did not write",
    "link": "is a symbolic link: the benchmark never writes through one; remove the link or give another file.",
    "folder": "is a folder: give a file, e.g. --json",
    "missing folder": "does not exist: make it, or give another file.",
    "ends with /": "names a folder (its last part is empty: it ends with /): give a file, e.g. --json ",
    "dot": "names a folder (its last part is .): give a file, e.g. --json ",
}


@pytest.mark.usefixtures("nothing_measured")
@pytest.mark.parametrize("kind", list(SAID))
@pytest.mark.parametrize("mode", ["measure", "end_to_end"])
def test_an_output_file_the_benchmark_did_not_write_is_one_line_before_measuring(kind, mode, tmp_path):
    path = the_users(tmp_path, kind)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    argv = with_argument(Scenario(tmp_path).argv("benchmark"), "--json", path)
    if mode == "end_to_end":
        argv += ["--end_to_end", "configs/train_digits.json"]
    result = outcome("benchmark", argv)
    assert result.one_line, result
    assert result.error.startswith(f"error: --json {str(path)!r}") and SAID[kind] in result.error
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "results").exists()


def not_a_file(tmp_path, kind: str):
    """A path that is there as something no write can replace: a fifo, a socket, a device."""
    if kind == "device":
        return "/dev/null"
    path = tmp_path / "out.json"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        socket.socket(socket.AF_UNIX).bind(str(path))
    return str(path)


@pytest.mark.usefixtures("nothing_measured")
@pytest.mark.parametrize("kind", ["fifo", "socket", "device"])
@pytest.mark.parametrize(
    "command_name, argument", [(name, argument) for name, names in OUTPUT_FILE_ARGUMENTS.items() for argument in names]
)
def test_an_output_file_that_is_no_regular_file_is_one_line_and_never_opened(tmp_path, kind, command_name, argument):
    """Every argument of every command that names a file to write (`OUTPUT_FILE_ARGUMENTS`): a fifo, socket or
    device already there is one line before any work, and never opened (before: `--json fifo.json` waited for ever in
    open(), before the rest of the command line was checked)."""
    path = not_a_file(tmp_path, kind)
    result = outcome(command_name, with_argument(Scenario(tmp_path).argv(command_name), argument, path))
    assert result.one_line, result
    assert result.error.startswith(
        f"error: {argument} {path!r} is not a regular file (a device, fifo or socket), and {argument} names a file to "
        "write: nothing was read or changed"
    ), result.error


def test_a_result_of_its_own_is_replaced_whole_and_a_new_one_written(tmp_path, monkeypatch):
    reached = []
    monkeypatch.setattr(command, "run_measurements", lambda args, argv: reached.append(args.json))
    ours = tmp_path / "results.json"
    ours.write_text(json.dumps(RESULT))
    for path in (ours, tmp_path / "new.json"):
        assert outcome("benchmark", with_argument(Scenario(tmp_path).argv("benchmark"), "--json", path)).code == 0
    assert reached == [ours, tmp_path / "new.json"]
    write_results(ours, {**RESULT, "rows": [1]}, [])
    assert json.loads(ours.read_text())["rows"] == [1] and RESULT_KEYS <= json.loads(ours.read_text()).keys()
    assert sorted(os.listdir(tmp_path)) == ["results.json"]  # no staged file left
    assert ours.stat().st_mode & 0o777 == 0o644


def test_a_link_made_after_the_check_is_replaced_not_followed(tmp_path):
    target = tmp_path / "victim.txt"
    target.write_text("the user's\n")
    link = tmp_path / "results.json"
    link.symlink_to(target)
    write_results(link, RESULT, [])
    assert target.read_text() == "the user's\n"
    assert not link.is_symlink() and json.loads(link.read_text()) == RESULT


TOKEN = "my-own-token-AbCdEfGhIjKl0123"  # not shaped like a Hub token: only knowing it masks it


# with --push_to_hub true, which the token goes with (train refuses a token alone), which the benchmark refuses
@pytest.mark.parametrize(
    "given", [["--push_to_hub", "true", "--hub_token", TOKEN], ["--push_to_hub=true", f"--hub_token={TOKEN}"]]
)
def test_a_token_in_the_training_arguments_is_in_no_line_and_no_file(given, tmp_path, monkeypatch, capsys):
    """Every secret of the training command the benchmark starts is known to its one redaction path: the table it
    prints and the --json file it writes (argv, rows) mask it."""
    row = dict(
        recipe="configs/train_digits.json",
        train_args=" ".join(given),  # as if a row kept what it was given: the writer still masks it
        steps=2,
        batch=8,
        precision="float32",
        end_to_end_seconds=2.0,
        model_only_seconds=1.0,
        ratio=2.0,
        samples=[],
    )
    monkeypatch.setattr(command, "end_to_end", lambda args: [row])
    results = tmp_path / "e2e.json"
    argv = ["--end_to_end", "configs/train_digits.json", "--json", str(results), "--train_args", *given]
    refused = outcome("benchmark", argv)  # the benchmark never pushes: one line, the token not in it
    assert refused.one_line and "never pushes" in refused.error and TOKEN not in refused.error, refused
    assert not results.exists()
    monkeypatch.setattr(command, "check_train_args", lambda *args: None)  # as if given past it: still masked
    assert outcome("benchmark", argv).code == 0
    printed = capsys.readouterr()
    assert "configs/train_digits.json" in printed.out and TOKEN not in printed.out + printed.err
    written = results.read_text()
    assert TOKEN not in written and "***" in written
    assert json.loads(written)["argv"][-1].endswith("***")


@pytest.mark.parametrize(
    "given", [["--end_to_end_steps", "3"], ["--max_end_to_end_ratio", "1.5"], ["--train_args", "--bf16", "true"]]
)
def test_an_end_to_end_argument_without_end_to_end_is_one_line_before_any_measurement(tmp_path, given):
    result = outcome("benchmark", ["--json", str(tmp_path / "r.json"), *given])
    assert result.one_line, result
    assert result.error.startswith(
        f"error: {given[0]} is used only with --end_to_end RECIPE, which is not given, so it would be ignored: add "
        f"--end_to_end RECIPE, or drop {given[0]}"
    )
    assert not (tmp_path / "r.json").exists()
