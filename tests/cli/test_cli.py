"""The `vit-scratch` command: one sub-command per script, each the function its script calls."""

import os
import subprocess
import sys

import pytest
from helpers import PROCESS_TIMEOUT, REPO, one_by_default
from PIL import Image

from modeling_vit_scratch import cli


def test_help_lists_every_command_and_an_unknown_one_is_one_line(capsys):
    cli.main(["--help"])
    listed = capsys.readouterr().out
    for name in ("train", "explain", "push", "convert", "benchmark"):
        assert f"\n  {name} " in listed
    with pytest.raises(SystemExit) as refused:
        cli.main(["trian"])
    assert str(refused.value) == (
        "error: unknown command 'trian': choose one of train, explain, push, convert, benchmark (vit-scratch --help)."
    )


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_each_command_is_the_function_its_script_calls(name):
    """`vit-scratch NAME` runs the same `main` as the script in scripts/: the script runs the module the command
    dispatches to, through `vit_scratch_command.run` (signals one line before torch is imported)."""
    from helpers import REPO

    script = {"push": "push_to_hub", "convert": "convert_checkpoint"}.get(name, name)
    text = (REPO / "scripts" / f"{script}.py").read_text()
    assert f'run("{cli.COMMANDS[name][0]}")' in text and "from vit_scratch_command import run" in text
    assert len(text.splitlines()) <= 150


# a new process each, in the slow tier: each command's main is run in process by its room's tests, and its script
# is the command's own (`test_each_command_is_the_function_its_script_calls`)
@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_each_command_answers_help_with_its_own_name(name):
    result = subprocess.run(
        [sys.executable, "-m", "modeling_vit_scratch.cli", name, "--help"],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"vit-scratch {name}" in result.stdout.splitlines()[0] or name == "train"
    assert "--" in result.stdout  # its arguments are listed


@pytest.mark.integration
@pytest.mark.parametrize(
    "endpoint, entry",
    one_by_default(
        [
            ("http://[", [str(REPO / "scripts" / "explain.py")]),  # huggingface_hub cannot parse it as it is imported
            ("notaurl", [str(REPO / "scripts" / "explain.py")]),  # the Hub client refuses it at the first request
            ("notaurl", ["-m", "modeling_vit_scratch.cli", "explain"]),
        ]
    ),
)
def test_an_hf_endpoint_that_is_no_url_is_one_line_naming_it_and_the_fix(tmp_path, endpoint, entry):
    Image.new("RGB", (8, 8)).save(tmp_path / "in.png")
    env = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0", "HF_HOME": str(tmp_path / "home")}
    ran = subprocess.run(
        [sys.executable, *entry, "--model", "owner/name", "--image", tmp_path / "in.png", "--out", tmp_path / "out"],
        env={**env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    line = ran.stderr.strip()
    assert ran.returncode == 1 and line.startswith("error: ") and "\n" not in line, ran.stderr[-2000:]
    assert "HF_ENDPOINT" in line and "https://" in line and not (tmp_path / "out").exists()


LATE_STOP = """
import atexit, os, signal, time
def late():  # a Ctrl-C while Python shuts down, after the command has done its work
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(1)
def main(argv):
    atexit.register(late)
    print("done")
"""


def test_a_stop_after_the_work_ends_the_process_without_a_traceback(tmp_path):
    (tmp_path / "late_stop.py").write_text(LATE_STOP)
    code = f"import sys; sys.path[:0] = [{str(REPO)!r}, {str(tmp_path)!r}]; import vit_scratch_command as c; c.run('late_stop', [])"
    ended = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
    assert ended.stdout == "done\n" and ended.stderr == ""
