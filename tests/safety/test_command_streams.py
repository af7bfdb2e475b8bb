"""What every command prints, and how it stops (`common/commands.py`'s `entry_point`, around every command's `main`).

- Nothing a command prints holds a known secret: stdout, stderr, log records (also through a handler that captured
  the old stderr), warnings, progress bars written in pieces, the message given to `sys.exit`, and a traceback that
  escapes.
- No output path holds a token: `--output_dir`, `--out`, `--output`, `--json` are refused in one line that does not
  echo it, before anything is written (a token never becomes a file name).
- Ctrl-C and SIGTERM end every command with one line saying what was and was not done and how to go on, and exit
  code 130 or 143; push's line says whether its model commit was made, and the same command finishes it. That holds
  from the process's first instant to its exit: while Python imports torch (the scripts and `vit-scratch` take the
  signals first, `vit_scratch_command`), and while the interpreter exits after the command (its `atexit` clean-up).
  Used from Python, a command hands the signals back as it found them.

In this process where the rule can be tried so; two runs in new processes send the real signal and interrupt a push
between its two commits (integration).
"""

import importlib
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from entry_points import ENTRY_POINTS, OUTPUT_ARGUMENT, Scenario, command_env, outcome, with_argument
from helpers import PROCESS_TIMEOUT, REPO
from hub_server import TOKEN, LocalHub
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_secrets import SECRET, logged_in  # noqa: F401 (a fixture: HF_TOKEN holds SECRET, no saved login)

from modeling_vit_scratch import cli
from modeling_vit_scratch.common.commands import (
    HUNG_UP,
    INTERRUPTED,
    NOTHING_DONE,
    TERMINATED,
    HungUp,
    RedactingStream,
    Terminated,
    entry_point,
    hand_back_signals,
    take_signals,
)
from modeling_vit_scratch.common.secrets import MASK, redact
from vit_scratch_command import ENDED, exit_at_once, started_module, take_start_up_of_package_command

CLI = "modeling_vit_scratch.cli"  # `python -m` runs it as the `vit-scratch` command
SHAPED = "hf_" + "Q" * 34  # a value shaped like a token that no variable holds
OWN = "hf_own.token-of-a-local-hub"  # a known token of no Hub shape (an Enterprise Hub's, a local one's)
NAME_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\\x00"), max_size=10)


class Sink:
    """A stream that keeps what was written to it."""

    def __init__(self):
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


@given(
    before=st.text(max_size=20),
    after=st.text(max_size=20),
    secret=st.sampled_from([SECRET, SHAPED, OWN]),
    cuts=st.lists(st.integers(0, 80), max_size=6),
)
def test_a_secret_written_in_any_pieces_never_passes_the_redacting_writer(before, after, secret, cuts):
    text = f"{before}{secret}{after}"
    sink = Sink()
    stream = RedactingStream(sink, [SECRET, OWN])
    bounds = sorted({0, len(text), *(min(cut, len(text)) for cut in cuts)})
    for start, end in itertools.pairwise(bounds):
        stream.write(text[start:end])
        assert secret not in sink.text
    stream.release()
    assert sink.text == redact(text, [SECRET, OWN])
    assert secret not in sink.text


@pytest.mark.usefixtures("logged_in")
def test_nothing_a_command_prints_holds_a_secret(capsys, monkeypatch):
    from tqdm import tqdm

    logger = logging.getLogger("vit-scratch-test.streams")
    captured = logging.StreamHandler(sys.stderr)  # made before the command: it holds the old stderr
    logger.addHandler(captured)
    monkeypatch.setattr(logger, "propagate", False)

    def show_warning(message, category, filename, lineno, file=None, line=None):  # Python's own, which pytest replaces
        (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))

    monkeypatch.setattr(warnings, "showwarning", show_warning)

    @entry_point()
    def main(argv):
        print("a line", SECRET, *argv)
        print(f"data/{SECRET}/1.png", file=sys.stderr)
        logger.warning("could not read %s", SECRET)
        warnings.warn(f"a warning about {SECRET}", UserWarning, stacklevel=1)
        for piece in (SECRET[:5], SECRET[5:20], SECRET[20:]):  # a progress bar's pieces, each flushed
            sys.stderr.write(piece)
            sys.stderr.flush()
        for _ in tqdm(range(3), desc=SECRET, file=sys.stderr):
            pass
        sys.exit(f"error: cannot use {SECRET}")

    try:
        with pytest.raises(SystemExit) as stop:
            main([SHAPED])
    finally:
        logger.removeHandler(captured)
    printed = capsys.readouterr()
    assert str(stop.value) == f"error: cannot use {MASK}"
    assert SECRET not in printed.out + printed.err and SHAPED not in printed.out
    assert printed.out == f"a line {MASK} {MASK}\n"
    assert f"data/{MASK}/1.png\ncould not read {MASK}\n" in printed.err
    assert f"a warning about {MASK}" in printed.err and printed.err.count(MASK) >= 5
    assert captured.stream is sys.stderr  # the handler writes to the stream it had again


@pytest.mark.usefixtures("logged_in")
def test_a_traceback_that_escapes_a_command_is_redacted(capsys, monkeypatch):
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored after the test

    @entry_point()
    def main(argv):
        raise RuntimeError(f"failed on {SECRET}")

    with pytest.raises(RuntimeError) as escaped:
        main([])
    sys.excepthook(escaped.type, escaped.value, escaped.tb)  # what Python does with it at exit
    err = capsys.readouterr().err
    assert f"RuntimeError: failed on {MASK}" in err and SECRET not in err


# where each command's work starts once its arguments are read: a function of its room's command module
WORK = {
    "train": "train",
    "explain": "explain_image",
    "push": "push_to_hub",
    "convert": "check_parity",  # after the folder is written beside --output, before it is moved in
    "benchmark": "run_measurements",
}
# the start of each command's line on Ctrl-C there
STOPPED = {
    "train": "Interrupted before the first checkpoint: nothing in {output} was removed; run the same command again",
    "explain": "Interrupted before any picture was written: {output} is as it was; run the same command again.",
    "push": "Interrupted before anything changed on the Hub: nothing was pushed; run the same command again to push.",
    "convert": "Interrupted: nothing was moved into place, {output} is as it was (the partial folder beside it was "
    "removed); run the same command again to convert.",
    "benchmark": "Interrupted: nothing was measured to the end, no results were written and --json {output} is as it "
    "was; run the same command again to measure.",
}


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
@pytest.mark.parametrize("stop, code", [(KeyboardInterrupt, INTERRUPTED), (Terminated, TERMINATED), (HungUp, HUNG_UP)])
@pytest.mark.usefixtures("logged_in")
def test_every_command_stops_with_one_line_on_ctrl_c_or_sigterm(name, stop, code, tmp_path, monkeypatch, capsys):
    """Ctrl-C (KeyboardInterrupt) or SIGTERM (`Terminated`, what its handler raises) in the middle of the work: the
    room's line, the shell's exit code, no traceback, nothing printed holds the token, no file changed."""
    argv = Scenario(tmp_path).argv(name)
    output = Path(argv[argv.index("--json") + 1]) if name == "benchmark" else tmp_path / f"out-{name}"

    def work(*args, **kwargs):
        print(f"working with {SECRET}")
        logging.getLogger("transformers").warning("reading %s", SECRET)
        raise stop

    monkeypatch.setattr(importlib.import_module(ENTRY_POINTS[name]), WORK[name], work)
    before = sorted(tmp_path.rglob("*"))
    done = outcome(name, argv)
    printed = capsys.readouterr()
    assert done.code == code and done.traceback is None, (done, printed.err[-2000:])
    assert sorted(tmp_path.rglob("*")) == before  # convert: its staged folder is gone, --output never made
    assert SECRET not in printed.out + printed.err and f"working with {MASK}" in printed.out
    assert printed.err.strip().splitlines()[-1].startswith(STOPPED[name].format(output=output))


def test_ctrl_c_while_the_command_is_imported_is_the_line_that_nothing_was_done(monkeypatch, capsys):
    def interrupted_import(name):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "importlib", SimpleNamespace(import_module=interrupted_import))
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the dispatch names the command in sys.argv
    with pytest.raises(SystemExit) as stop:
        cli.main(["convert", "--help"])
    assert stop.value.code == INTERRUPTED
    assert capsys.readouterr().err == NOTHING_DONE + "\n"


@pytest.mark.parametrize("stop", [KeyboardInterrupt, Terminated, None])
def test_a_command_used_from_python_hands_the_signals_back_as_it_found_them(stop, tmp_path, monkeypatch):
    """A notebook or a test calling `main` keeps its own handlers: the command takes SIGINT and SIGTERM only while it
    runs, whether it finished, was interrupted or stopped with a line."""
    ours = {number: lambda signum, frame: None for number in (signal.SIGINT, signal.SIGTERM)}
    before = {number: signal.signal(number, handler) for number, handler in ours.items()}
    try:
        if stop:

            def work(*args, **kwargs):
                raise stop

            monkeypatch.setattr(importlib.import_module(ENTRY_POINTS["explain"]), WORK["explain"], work)
        outcome("explain", Scenario(tmp_path).argv("explain"))
        after = {number: signal.getsignal(number) for number in ours}
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
    assert after == ours


def started(command: list[str], env: dict) -> subprocess.Popen:
    """`command` in a new process, as a terminal starts it (with Python's own SIGINT handler)."""
    # a child inherits an ignored SIGINT (a test run in a background job has one): it gets Python's handler
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(
            command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
    finally:
        signal.signal(signal.SIGINT, ignored)


def stopped_when(run: subprocess.Popen, stream, said: bytes, sent: int) -> tuple[str, str]:
    """Send `sent` to `run` once it has written a line holding `said` to `stream`; what it printed, as text."""
    seen = []
    deadline = time.monotonic() + PROCESS_TIMEOUT
    while not seen or said not in seen[-1]:
        seen.append(stream.readline())
        assert seen[-1] or run.poll() is None, b"".join(seen)[-3000:]
        assert time.monotonic() < deadline
    run.send_signal(sent)
    stdout, stderr = run.communicate(timeout=PROCESS_TIMEOUT)
    printed = b"".join(seen)
    return (printed + stdout if stream is run.stdout else stdout).decode(), (
        printed + stderr if stream is run.stderr else stderr
    ).decode()


@pytest.mark.integration
@pytest.mark.parametrize(
    "command, sent, code",
    [
        ([str(REPO / "scripts" / "train.py"), "--help"], signal.SIGINT, INTERRUPTED),
        (["-m", CLI, "train", "--help"], signal.SIGTERM, TERMINATED),
    ],
    ids=["script", "python -m"],
)
def test_a_signal_while_python_imports_torch_for_a_script_is_the_line_that_nothing_was_done(
    tmp_path, command, sent, code
):
    """scripts/train.py or `python -m modeling_vit_scratch.cli` stopped while Python imports the package's libraries
    (numpy imported, torch and transformers on their way; `-X importtime` says so as it goes): before, Python's
    KeyboardInterrupt traceback, and through `python -m` SIGTERM's exit 143 with no line."""
    env = command_env(tmp_path)
    run = started([sys.executable, "-X", "importtime", *command], env)
    _, stderr = stopped_when(run, run.stderr, b" numpy\n", sent)
    assert run.returncode == code, stderr[-3000:]
    said = [line for line in stderr.splitlines() if not line.startswith("import time:")]
    assert said == [NOTHING_DONE]


@pytest.mark.parametrize(
    ("orig_argv", "module"),
    [
        (["python", "-m", CLI, "train"], CLI),
        (
            ["python", "-X", "importtime", "-Bm", "modeling_vit_scratch.benchmark.command"],
            "modeling_vit_scratch.benchmark.command",
        ),
        (["python", "-Wignore", f"-m{CLI}"], CLI),
        (["python", "scripts/train.py", "-m", CLI], None),
        (["python", "-c", "import modeling_vit_scratch", "-m", CLI], None),
        (["python"], None),
    ],
)
def test_the_module_python_was_started_to_run_is_read_as_python_reads_its_command_line(orig_argv, module):
    assert started_module(orig_argv) == module


@pytest.mark.parametrize(
    ("orig_argv", "argv0", "takes"),
    [
        (["python", "-m", CLI, "train"], "-m", True),  # the package's command, being located: its import
        (["python", "-m", "modeling_vit_scratch"], "-m", True),
        (["python", "-m", "pytest"], "-m", False),  # another tool importing the package
        (["python", "-m", CLI, "train"], CLI, False),  # located already: any later import is a library's
        (["python", "app.py"], "app.py", False),
    ],
)
def test_importing_the_package_takes_the_signals_only_for_its_own_command(monkeypatch, orig_argv, argv0, takes):
    """`python -m modeling_vit_scratch.cli` imports the package (and torch with it) before the CLI's first line: the
    package's `__init__` takes the signals then, and for nothing else (a library import keeps the user's handling)."""
    import vit_scratch_command

    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    monkeypatch.setattr(sys, "argv", [argv0])
    monkeypatch.setattr(vit_scratch_command, "_started", [False])
    monkeypatch.setattr(vit_scratch_command, "_ignored", set())
    before = {number: signal.getsignal(number) for number in vit_scratch_command.SIGNALS}
    try:
        take_start_up_of_package_command()
        now = {number: signal.getsignal(number) for number in vit_scratch_command.SIGNALS}
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
    started_ignoring = {number for number, handler in before.items() if handler is signal.SIG_IGN}  # nohup: kept
    taken = {number: handler if number in started_ignoring else exit_at_once for number, handler in before.items()}
    assert now == (taken if takes else before)


# the installed `vit-scratch` command as pip writes it, with a clean-up that runs while the interpreter exits (as a
# library's `atexit` callback or thread does) and says when it has started
EXITING = """
import atexit, sys, time
atexit.register(lambda: (print("exiting", flush=True), time.sleep(600)))
sys.argv[0] = "vit-scratch"
from vit_scratch_command import main
sys.exit(main())
"""


@pytest.mark.integration
@pytest.mark.parametrize("argv", [["explain", "--help"], ["convert", "--from", "nowhere"]], ids=["done", "refused"])
def test_a_signal_while_the_interpreter_exits_after_a_command_is_one_line(tmp_path, argv):
    """Ctrl-C after the command has ended, in the interpreter's exit (before: `Exception ignored in atexit callback`
    and a KeyboardInterrupt traceback, exit code 0): one line, the shell's code, what the command printed kept."""
    env = command_env(tmp_path)
    run = started([sys.executable, "-c", EXITING, *argv], env)
    stdout, stderr = stopped_when(run, run.stdout, b"exiting", signal.SIGINT)
    assert run.returncode == INTERRUPTED, stderr[-3000:]
    assert "Traceback" not in stderr and "Exception ignored" not in stderr
    assert stderr.strip().splitlines()[-1] == ENDED
    assert ("usage: vit-scratch explain" in stdout) if argv[0] == "explain" else "error: " in stderr


# a command stopped by Ctrl-C in a process started with SIGINT as argv[1] says (ignored: a shell's background job):
# the handlers once it has said its line, while the interpreter exits
STOPPED_COMMAND = """
import atexit, signal, sys
if sys.argv[1] == "ignored":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
else:  # as Python starts a process whose parent did not ignore SIGINT, whatever started the tests
    signal.signal(signal.SIGINT, signal.default_int_handler)


def handlers():
    found = [signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)]
    print(*["SIG_IGN" if handler is signal.SIG_IGN else handler.__name__ for handler in found], flush=True)


atexit.register(handlers)
sys.modules["stopped"] = type(sys)("stopped")
from modeling_vit_scratch.common.commands import entry_point

@entry_point()
def main(argv):
    raise KeyboardInterrupt

sys.modules["stopped"].main = main
from vit_scratch_command import run
run("stopped", [])
"""


@pytest.mark.integration
@pytest.mark.parametrize("started, sigint", [("ignored", "SIG_IGN"), ("handled", "exit_at_once")])
def test_after_a_command_stopped_the_signals_end_the_exit_at_once_unless_the_process_ignored_them(
    tmp_path, started, sigint
):
    """The signals a command ignores while it says its line are given back as the process got them: SIGINT stays
    ignored where it was, else it (and SIGTERM) ends the exit at once, without a second line."""
    run = subprocess.run(
        [sys.executable, "-c", STOPPED_COMMAND, started],
        env=command_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert run.returncode == INTERRUPTED, run.stderr[-3000:]
    assert run.stdout.split() == [sigint, "exit_at_once"]
    assert run.stderr.strip() == NOTHING_DONE


# every path a command writes, by entry point: OUTPUT_ARGUMENT's folders, and the benchmark's results file
OUTPUT_PATHS = [*OUTPUT_ARGUMENT.items(), ("benchmark", "--json")]


@pytest.mark.parametrize("name, argument", OUTPUT_PATHS, ids=[f"{n}{a}" for n, a in OUTPUT_PATHS])
@pytest.mark.usefixtures("logged_in")
@settings(max_examples=6, suppress_health_check=[HealthCheck.function_scoped_fixture])  # the same login throughout
@given(before=NAME_TEXT, after=NAME_TEXT, secret=st.sampled_from([SECRET, SHAPED]), deeper=st.booleans())
def test_a_token_in_an_output_path_is_refused_without_echoing_it(
    name, argument, before, after, secret, deeper, tmp_path_factory
):
    """A token (the one HF_TOKEN holds, or a value shaped like one) anywhere in the path, in the last name or in a
    folder above it, would become a file name printed in every line that names it."""
    root = tmp_path_factory.mktemp("scenario")
    scenario = Scenario(root)
    name_part = f"{before}{secret}{after}".replace(".", "_") or "x"
    path = root / name_part / "out" if deeper else root / f"out-{name_part}"
    argv = with_argument(scenario.argv(name), argument, path.with_suffix(".json") if name == "benchmark" else path)
    on_disk = sorted(root.rglob("*"))
    done = outcome(name, argv)
    assert done.one_line, done
    assert done.error.startswith(f"error: The value of {argument} holds or looks like a Hub token"), done.error
    assert secret not in done.error
    assert sorted(root.rglob("*")) == on_disk  # nothing made, not even the folder above


@pytest.mark.integration
@pytest.mark.parametrize("sent, code", [(signal.SIGINT, INTERRUPTED), (signal.SIGTERM, TERMINATED)])
def test_a_real_signal_during_a_push_is_one_line_and_says_nothing_was_pushed(tmp_path, sent, code):
    """The command as a user runs it, stopped while it waits on a Hub that accepts the connection and never
    answers (its first request checks the token): the one line, the shell's code, no traceback, no token (a folder
    whose path holds one is refused before any request: `test_secrets.py`)."""
    folder = tmp_path / "run"
    Scenario(tmp_path).model().rename(folder)
    with socket.socket() as hub:
        hub.bind(("127.0.0.1", 0))
        hub.listen()
        hub.settimeout(PROCESS_TIMEOUT)
        env = command_env(tmp_path, HF_ENDPOINT=f"http://127.0.0.1:{hub.getsockname()[1]}", HF_TOKEN=TOKEN)
        env.update(HF_HUB_OFFLINE="0", HF_HOME=str(tmp_path / "hf_home"), NO_PROXY="127.0.0.1")
        command = [sys.executable, "-m", "modeling_vit_scratch.cli", "push", str(folder), "local-user/x"]
        # a child inherits an ignored SIGINT (a test run in a background job has one): it gets Python's handler
        ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            run = subprocess.Popen(
                command,
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        finally:
            signal.signal(signal.SIGINT, ignored)
        try:
            connection, _ = hub.accept()  # the command is in its work: its first request is here
            run.send_signal(sent)
            stdout, stderr = run.communicate(timeout=PROCESS_TIMEOUT)
            connection.close()
        finally:
            if run.poll() is None:
                run.kill()
    assert run.returncode == code, stderr[-3000:]
    assert "Traceback" not in stderr and TOKEN not in stdout + stderr
    assert stderr.strip().splitlines() == [
        "Interrupted before anything changed on the Hub: nothing was pushed; run the same command again to push."
    ]


# a push run as the command, with one Hub call of the client stopped as Ctrl-C stops it (argv: the call, FOLDER, REPO)
STOPPED_PUSH = """
import sys
from huggingface_hub import HfApi
from modeling_vit_scratch import cli

def stopped(self, *args, **kwargs):
    raise KeyboardInterrupt

call, *argv = sys.argv[1:]
setattr(HfApi, call, stopped)
cli.main(["push", *argv])
"""


@pytest.mark.integration
@pytest.mark.slow
def test_ctrl_c_during_a_push_says_whether_the_model_commit_was_made_and_the_same_command_finishes(tmp_path):
    """Stopped while the model is being sent (before its commit), then between the model commit and the card's:
    each line says which, and the same command then finishes the push without committing the model twice."""
    folder = Scenario(tmp_path).model()
    with LocalHub(tmp_path / "hub") as hub:
        env = {**command_env(tmp_path), **hub.env(tmp_path / "hf_home")}

        def push(*stopped_at: str):
            command = ["-c", STOPPED_PUSH, *stopped_at] if stopped_at else ["-m", "modeling_vit_scratch.cli", "push"]
            return subprocess.run(
                [sys.executable, *command, str(folder), "local-user/x"],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=PROCESS_TIMEOUT,
            )

        before_commit = push("create_commit")
        assert before_commit.returncode == INTERRUPTED, before_commit.stderr[-3000:]
        assert before_commit.stderr.strip().splitlines()[-1] == (
            "Interrupted while the model was being sent to local-user/x: its files upload first, then one commit, "
            "all or nothing, so the model commit was made only if it is on the repo now; run the same command "
            "again: it commits the model unless the repo holds it already."
        )
        history = hub.commits("local-user/x")
        assert len(history) == 1  # the repo's first, empty commit: no model commit

        before_card = push("upload_file")
        assert before_card.returncode == INTERRUPTED, before_card.stderr[-3000:]
        model_commit, _ = hub.commits("local-user/x")[0]
        assert before_card.stderr.strip().splitlines()[-1] == (
            f"Interrupted after the model commit {model_commit} to local-user/x: the model is there, complete and "
            "loadable, its card not yet pinned to that commit; run the same command again to pin it (the model is "
            "not committed again)."
        )

        finished = push()
        assert finished.returncode == 0, finished.stderr[-3000:]
        titles = [title for _, title in hub.commits("local-user/x")]
    assert len(titles) == 3 and titles[0] == f"Model card: pin the loading example to {model_commit}"
    assert titles[1].startswith("Upload vit_scratch model")
    assert "Traceback" not in before_commit.stderr + before_card.stderr


RED = "\x1b[31m"  # an escape sequence that would turn the user's terminal red
# by entry point: an argument whose value each command quotes in its error line, given as (argument, value)
QUOTED_VALUES = {
    "train": ("--dataset", "nope{red}/x"),
    "explain": ("--image", "nope{red}.png"),
    "push": (None, "user/a{red}"),  # the repo id (its second argument)
    "convert": ("--input", "./nope{red}"),
    "benchmark": ("--configs", "digits{red}"),
}


def test_a_line_a_command_ends_with_shows_control_characters_escaped(capsys):
    @entry_point()
    def main(argv):
        sys.exit(f"error: the name {argv[0]} is bad,\nand so on")

    with pytest.raises(SystemExit) as stop:
        main([f"a{RED}b\rc\td\x9b"])
    assert stop.value.code == "error: the name a\\x1b[31mb\\rc\\td\\x9b is bad,\nand so on"  # the newline kept


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_every_command_quotes_a_value_with_an_escape_sequence_escaped(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argument, value = QUOTED_VALUES[name]
    argv = Scenario(tmp_path).argv(name)
    if argument is None:
        argv[1] = value.format(red=RED)
    else:
        argv = with_argument(argv, argument, value.format(red=RED))
    done = outcome(name, argv)
    assert done.one_line, done
    assert "\x1b" not in done.error and value.format(red="\\x1b[31m") in done.error, done.error


@pytest.mark.parametrize("nohup", [False, True])
def test_sighup_stops_a_command_as_sigterm_does_unless_it_was_started_ignoring_it(nohup):
    """SIGHUP (the terminal closed, `kill -HUP`) is taken like SIGTERM while a command runs (before: the process
    ended without a word, its staged files left); a process started under `nohup` (SIGHUP ignored) goes on."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN if nohup else signal.SIG_DFL)
    previous = take_signals()
    try:
        assert (signal.getsignal(signal.SIGHUP) is signal.SIG_IGN) == nohup
        if not nohup:
            with pytest.raises(HungUp):
                signal.raise_signal(signal.SIGHUP)
    finally:
        hand_back_signals(previous, True)
        signal.signal(signal.SIGHUP, before)


@pytest.mark.integration
@pytest.mark.parametrize("command", [["-m", "modeling_vit_scratch.cli", "convert"], ["scripts/benchmark.py"]])
def test_a_reader_that_closes_stdout_ends_the_command_quietly(command):
    """`vit-scratch ... | head`: the reader gone, the command ends with the shell's code for SIGPIPE (141) and
    nothing on stderr, never a BrokenPipeError traceback; the one place is vit_scratch_command.run."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        [sys.executable, *command, "--help"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    process.stdout.close()  # the reader is gone before the command writes its first line
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=PROCESS_TIMEOUT) == 141 and stderr == "", stderr[-2000:]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, Terminated, HungUp])
def test_the_line_a_stopped_command_ends_with_is_printed_after_its_progress_bars(stop, capsys):
    """A bar left open by the loop the signal stopped draws itself once more when it is collected: it is closed
    first, so the command's line is the last thing printed (before: tqdm's bar came after "Interrupted: ...")."""
    import gc

    from tqdm.auto import tqdm

    @entry_point()
    def main(argv):
        bar = tqdm(total=10, file=sys.stderr)
        bar.update(3)
        raise stop

    with pytest.raises(SystemExit):
        main([])
    gc.collect()  # the stopped frame and its bar are gone: an open bar would print here
    assert capsys.readouterr().err.strip().splitlines()[-1] == NOTHING_DONE


@pytest.mark.parametrize(
    ("environment", "names"),
    [({"HF_HUB_ETAG_TIMEOUT": "abc"}, "HF_HUB_ETAG_TIMEOUT holds a value"), ({}, "check the environment variables")],
)
def test_libraries_that_fail_while_imported_are_one_line_naming_the_setting(monkeypatch, environment, names):
    """A library that cannot start (huggingface_hub reads `HF_HUB_ETAG_TIMEOUT=abc` with int() at import) was a
    37-line traceback before any of the command's code ran: one line naming the variable whose value is in the error."""
    import vit_scratch_command

    def failing_import(name):
        raise ValueError("invalid literal for int() with base 10: 'abc'")

    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(vit_scratch_command, "importlib", SimpleNamespace(import_module=failing_import))
    monkeypatch.setattr(sys, "argv", ["scripts/explain.py"])
    monkeypatch.setattr(vit_scratch_command, "_started", [False])
    before = {number: signal.getsignal(number) for number in vit_scratch_command.SIGNALS}
    try:
        with pytest.raises(SystemExit) as stop:
            vit_scratch_command.run("modeling_vit_scratch.explanation.command")
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
    line = str(stop.value.code)
    assert line.startswith("error: explain.py could not start: importing its libraries failed (ValueError: ")
    assert names in line and line.endswith("then run the command again. Nothing was written or sent.")
    assert "\n" not in line


def test_the_package_failing_while_imported_under_python_m_is_the_same_one_line(monkeypatch, capsys):
    """`python -m modeling_vit_scratch.cli` imports the package (torch, transformers) before any command code: a
    library failing there was Python's traceback through the package's `__init__`; it is `start_failure`'s line,
    naming the command as started, and only until `run` has imported the command."""
    import vit_scratch_command

    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "abc")
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-m", "modeling_vit_scratch.cli", "train"], raising=False)
    monkeypatch.setattr(sys, "argv", ["-m"])
    monkeypatch.setattr(sys, "excepthook", sys.__excepthook__)
    monkeypatch.setattr(vit_scratch_command, "_started", [False])
    before = {number: signal.getsignal(number) for number in vit_scratch_command.SIGNALS}
    try:
        vit_scratch_command.take_start_up_of_package_command()
        hook = sys.excepthook
        error = ValueError("invalid literal for int() with base 10: 'abc'")
        hook(ValueError, error, None)
        line = capsys.readouterr().err
        assert line.startswith("error: python -m modeling_vit_scratch.cli could not start: importing its libraries")
        assert "HF_HUB_ETAG_TIMEOUT holds a value the libraries cannot read" in line and line.count("\n") == 1
        hook(KeyboardInterrupt, KeyboardInterrupt(), None)  # not an Exception: Python's own report
        assert capsys.readouterr().err.strip() == "KeyboardInterrupt"  # sys.__excepthook__'s, not our line
        monkeypatch.setattr(vit_scratch_command, "importlib", SimpleNamespace(import_module=lambda name: 1 / 0))
        with pytest.raises(SystemExit):
            vit_scratch_command.run("modeling_vit_scratch.cli", [])
        assert sys.excepthook is sys.__excepthook__  # the command's own failures are its own from here
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


@pytest.mark.parametrize(("local_rank", "speaks"), [(None, True), ("0", True), ("1", False), (" 3 ", False)])
def test_an_argument_error_of_a_launched_run_is_said_once_per_machine(monkeypatch, local_rank, speaks):
    """Under torchrun every process parses the same arguments and met the same error: each printed it. The first
    process on each machine says it; the others end with the same exit code, silently."""
    from entry_points import outcome

    import vit_scratch_command

    if local_rank is None:
        monkeypatch.delenv("LOCAL_RANK", raising=False)
    else:
        monkeypatch.setenv("LOCAL_RANK", local_rank)
    assert vit_scratch_command.speaks_for_machine() is speaks
    result = outcome("train", ["--max_steps", "0", "--output_dir", "never-made"])
    assert result.code == 1
    assert (result.error or "").startswith("error: --max_steps 0") is speaks
    assert not Path("never-made").exists()
