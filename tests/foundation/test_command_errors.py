"""A command's end: an error the user can cause is one line and exit status 1, Ctrl-C is its line and 130, no token in
either; a bug stays a traceback."""

import argparse
import errno
import io
import sys
from contextlib import redirect_stderr

import pytest
from huggingface_hub.errors import LocalEntryNotFoundError
from huggingface_hub.utils import validate_repo_id
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import load as load_safetensors
from test_secret_text import hub_tokens, knowing, tokens

from modeling_vit_scratch.errors import UserError, check_fits, command, on_interrupt
from modeling_vit_scratch.image_processing_vit_scratch import read_image_file


def full_disk(token):
    raise OSError(errno.ENOSPC, "No space left on device", f"/data/{token}/model.safetensors")


def our_rule(token):
    raise UserError(f"--hub_token {token} is wrong\nline two \x1b[31m: {token}")


def bad_argument(token):
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("--dtype", choices=["bf16", "fp32"])
    parser.parse_args(["--dtype", token])


def unreachable_hub(token):
    cause = ConnectionError(f"[Errno 111] Connection refused\nfor {token}")
    raise LocalEntryNotFoundError("cannot find the snapshot folder on the local disk") from cause


bad_repo_id, damaged_weights, no_image = (
    lambda token: validate_repo_id(f"{token}//x"),
    lambda token: load_safetensors(token.encode()),
    lambda token: read_image_file(io.BytesIO(token.encode()), f"--image {token}.png"),
)
RAISING = [our_rule, full_disk, bad_repo_id, damaged_weights, bad_argument, unreachable_hub, no_image]


@pytest.fixture(autouse=True)
def _excepthook(monkeypatch):
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # `command` sets its own; put the test runner's back


@given(token=tokens | hub_tokens, raising=st.sampled_from(RAISING), on_command_line=st.booleans())
def test_a_users_error_is_one_line_and_status_1_without_the_token(token, raising, on_command_line):
    main = command(lambda argv: raising(token))
    known = ("", "env") if on_command_line else (token, "remembered")  # on the command line, only there
    with knowing(*known), pytest.raises(SystemExit) as ended:
        main(["--hub_token", token] if on_command_line else [])
    line = ended.value.code
    assert isinstance(line, str) and line.startswith("error: ")  # Python exits 1 with it on stderr
    assert "\n" not in line and "\x1b" not in line and token not in line


@given(token=tokens | hub_tokens, at=st.sampled_from(["line", "callable", "none"]))
def test_ctrl_c_is_its_line_and_130_without_the_token(token, at):
    line = f"stopped at step 3 of {token}\nresume with --resume_from_checkpoint"

    @command
    def main(argv):
        on_interrupt({"line": line, "callable": lambda: line, "none": None}[at])
        raise KeyboardInterrupt

    printed = io.StringIO()
    with knowing(token, "remembered"), redirect_stderr(printed), pytest.raises(SystemExit) as ended:
        main([])
    assert ended.value.code == 130
    assert token not in printed.getvalue() and ("resume" in printed.getvalue()) == (at != "none")


def test_argparse_usage_errors_pass_through_with_status_2_without_the_token(capsys):
    token = "hf_" + "Q" * 34

    @command
    def main(argv):
        argparse.ArgumentParser().parse_args(argv)

    with pytest.raises(SystemExit) as ended:
        main(["--hub_tok", token])
    printed = capsys.readouterr().err
    assert ended.value.code == 2 and "--hub_tok" in printed and token not in printed


def test_a_job_that_cannot_fit_is_one_line_before_it_starts():
    main = command(lambda argv: check_fits(1 << 60, "training", "lower --per_device_train_batch_size"))
    with pytest.raises(SystemExit, match="^error: .*--per_device_train_batch_size"):
        main([])
    check_fits(1, "one byte", "nothing to do")


@pytest.mark.parametrize("bug", [ZeroDivisionError, KeyError, AttributeError, TypeError])
def test_a_bug_stays_a_traceback(bug):
    @command
    def main(argv):
        raise bug("a bug of ours")

    with pytest.raises(bug):
        main([])
