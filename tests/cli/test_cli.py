"""The `vit-scratch` command: one sub-command per script, each the function its script calls."""

import subprocess
import sys

import pytest
from helpers import PROCESS_TIMEOUT

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
