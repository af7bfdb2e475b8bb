"""What every command's `main` runs inside (train, explain, push, convert, benchmark: `vit-scratch NAME` and
`scripts/*.py` call the same decorated function), so two promises hold once for all of them:

- Nothing a command prints holds a known secret. While it runs, `sys.stdout` and `sys.stderr` are redacting writers
  (`RedactingStream`), the logging handlers that captured the old streams write through them, every log record is
  redacted as it is made (`redacting_logs`), and a traceback that escapes is redacted when Python prints it. Warnings,
  progress bars and argparse write to `sys.stderr` when they print, so they pass through the same writer.
- A line a command ends with (the message given to `sys.exit`, the line printed on Ctrl-C) quotes user text
  (values, paths, repo ids, names) as data: control characters are shown escaped (`\\x1b`), so an escape sequence
  in a name never reaches the terminal raw; newlines stay as they are (`shown_controls`).
- Ctrl-C (SIGINT), SIGTERM (what `kill`, `timeout` and cluster schedulers send) and SIGHUP (the terminal closed)
  end the command with one line saying what was and was not done and how to go on, and the shell's exit code for
  the signal (130, 143, 129; SIGHUP ignored, as `nohup` starts it, stays ignored). The line
  is the room's: it calls `when_interrupted` as its work advances (push: before and after its commit); before that,
  the default says nothing was done. Before the command (Python importing torch) and after it (the interpreter's
  exit), the signals are `vit_scratch_command`'s, which the `vit-scratch` command and the scripts run first: one
  line there too.

Training glue, never imported by the model files.
"""

import functools
import io
import logging
import os
import re
import shlex
import shutil
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from contextlib import contextmanager

from modeling_vit_scratch.common.children import remove_stale_scratch
from modeling_vit_scratch.common.names import shown_name
from modeling_vit_scratch.common.secrets import TOKEN_SHAPE, known_secrets, redact, redacting_logs, secrets_in_argv
from vit_scratch_command import (
    ENDED,
    HUNG_UP,
    INTERRUPTED,
    NOTHING_DONE,
    SIGNALS,
    TERMINATED,
    exit_on_signal,
    holds_signals,
)

TOKEN_START = re.compile(r"h(?:f(?:_[A-Za-z0-9]*)?)?\Z")


def shown_controls(text: str) -> str:
    """`text` with every unprintable character but the newline written as Python writes it in a string (`\\x1b`,
    `\\t`, `\\u202e`; `common/names.py` `shown_name`, line by line): a line that quotes user text never sends the
    terminal an escape sequence, a carriage return or a bidi override."""
    return "\n".join(shown_name(line) for line in text.split("\n"))


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, so it stops as Ctrl-C stops it: every file kept, one line."""

    code = TERMINATED  # the shell's exit code for the signal


class HungUp(Terminated):
    """SIGHUP (the terminal closed, `kill -HUP`): stopped as SIGTERM stops it, with the shell's code for SIGHUP."""

    code = HUNG_UP


class RedactingStream(io.TextIOBase):
    """A text stream that forwards what is written to `stream` with every secret masked. A secret may arrive in
    pieces (a progress bar's writes, `print`'s separate arguments), so the end of a write that could be the start of
    one is held until the next write or `release` shows what follows; everything else goes through at once, so
    progress bars still move. `buffer` is not offered: bytes written there would pass unredacted."""

    def __init__(self, stream, secrets: list[str]):
        self.stream, self.secrets, self.held = stream, secrets, ""
        self.pattern = re.compile("|".join([*map(re.escape, secrets), TOKEN_SHAPE.pattern]))

    def write(self, text: str) -> int:
        self.held += text
        cut = self.safe_end(self.held)
        if cut:
            self.stream.write(redact(self.held[:cut], self.secrets))
            self.held = self.held[cut:]
        return len(text)

    def safe_end(self, text: str) -> int:
        """Where the part of `text` that no later write can turn into a secret ends: before the longest end that
        could begin a secret (or a token-shaped string, which may go on), and never inside a secret or a
        token-shaped string."""
        match = TOKEN_START.search(text)
        held = len(match.group()) if match else 0
        for secret in self.secrets:
            for size in range(min(len(secret) - 1, len(text)), held, -1):
                if text.endswith(secret[:size]):
                    held = size
                    break
        cut = len(text) - held
        for found in self.pattern.finditer(text):
            if found.start() < cut < found.end():
                cut = found.start()
        return cut

    def release(self) -> None:
        """Write what is held (the command has ended: nothing can complete it) and flush."""
        held, self.held = self.held, ""
        if held:
            self.stream.write(redact(held, self.secrets))
        self.flush()

    def flush(self) -> None:
        self.stream.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:  # progress bars draw themselves only on a terminal
        return self.stream.isatty()

    def fileno(self) -> int:  # a child process writes to the same place and redacts its own lines
        return self.stream.fileno()

    @property
    def encoding(self):
        return self.stream.encoding

    @property
    def errors(self):
        return self.stream.errors


def stream_handlers() -> list[logging.StreamHandler]:
    """Every handler of every logger that writes to a stream (transformers, datasets and huggingface_hub each keep
    one that captured `sys.stderr` when they were imported)."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    handlers = {
        id(handler): handler
        for logger in loggers
        for handler in getattr(logger, "handlers", [])  # a PlaceHolder has none
        if isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
        and "stream" in vars(handler)  # not logging's last resort, which reads sys.stderr when it writes
    }
    return list(handlers.values())


@contextmanager
def redacted_output(secrets: list[str]):
    """While inside, everything printed to stdout or stderr, directly or through logging, has `secrets` (and anything
    shaped like a Hub token) masked. The old streams, and every handler's, come back on exit."""
    old = {"stdout": sys.stdout, "stderr": sys.stderr}
    new = {name: RedactingStream(stream, secrets) for name, stream in old.items()}
    by_old = {id(old[name]): new[name] for name in old}
    by_new = {id(new[name]): old[name] for name in old}
    swapped = [(handler, by_old[id(handler.stream)]) for handler in stream_handlers() if id(handler.stream) in by_old]
    for handler, stream in swapped:
        handler.stream = stream
    sys.stdout, sys.stderr = new["stdout"], new["stderr"]
    try:
        with redacting_logs(secrets):
            yield
    finally:
        sys.stdout, sys.stderr = old["stdout"], old["stderr"]
        for stream in new.values():
            stream.release()
        for handler in stream_handlers():  # those swapped, and those made meanwhile with a redacting stream
            if id(handler.stream) in by_new:
                handler.stream = by_new[id(handler.stream)]


_escaping_secrets: list[str] = []  # the secrets of the command whose exception escaped


def redact_escaping_traceback(secrets: list[str]) -> None:
    """Have Python print the traceback of an exception that escapes a command with `secrets` masked: it prints it
    after the command's streams are restored, through `sys.excepthook` (installed once per process)."""
    _escaping_secrets[:] = secrets
    previous = sys.excepthook
    if getattr(previous, "redacting", False):
        return

    def hook(kind, error, trace):
        if issubclass(kind, KeyboardInterrupt):
            return previous(kind, error, trace)
        sys.stderr.write(redact("".join(traceback.format_exception(kind, error, trace)), _escaping_secrets))
        sys.stderr.flush()

    hook.redacting = True
    sys.excepthook = hook


def take_signals() -> dict | None:
    """While a command runs, Ctrl-C raises KeyboardInterrupt and SIGTERM `Terminated` where the command is, so its
    `finally` blocks run and the room's line is printed. Returns the handlers it replaced (None off the main thread,
    where signal handlers cannot be set). An ignored SIGINT (a background job's) stays ignored. SIGXFSZ (a file
    over `ulimit -f`) is ignored, so the write fails with EFBIG instead of killing the process without a word."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = {number: signal.getsignal(number) for number in SIGNALS}

    def terminate(signum, frame):
        raise HungUp if signum == getattr(signal, "SIGHUP", None) else Terminated

    if previous[signal.SIGINT] is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, terminate)
    if hasattr(signal, "SIGHUP") and previous[signal.SIGHUP] is not signal.SIG_IGN:  # `nohup`: stays ignored
        signal.signal(signal.SIGHUP, terminate)
    if hasattr(signal, "SIGXFSZ"):  # a file size limit: the write fails with an error the command can name
        previous[signal.SIGXFSZ] = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return previous


def hand_back_signals(previous: dict | None, stopped: bool) -> None:
    """The command has ended: the signals go back to `vit_scratch_command` where it started the process (a signal
    while the interpreter exits then ends it at once: silently if the command said why it stopped, else with one
    line), or to the handlers `take_signals` replaced (the package used from Python)."""
    if previous is None:
        return
    if holds_signals():
        exit_on_signal(None if stopped else ENDED)
        return
    for number, handler in previous.items():
        signal.signal(number, handler if handler is not None else signal.SIG_DFL)


def close_progress_bars() -> None:
    """Close every progress bar still open (tqdm keeps each class's bars in its `_instances`): a command stopped
    mid-loop leaves its bars open, and a bar left open draws itself once more when it is collected, after the line
    the command ended with, which must be the last thing printed. A bar that cannot draw (the terminal closed) is
    closed without a word."""
    try:
        from tqdm import tqdm
    except ImportError:
        return
    classes, bars = [tqdm], set()
    while classes:  # tqdm.auto's bars are a subclass's, which may keep its own set
        kind = classes.pop()
        classes += kind.__subclasses__()
        bars |= set(kind.__dict__.get("_instances", ()))
    for bar in bars:
        try:
            bar.close()
        except (OSError, ValueError):
            bar.disable = True


def stopping() -> None:
    """The running command is saying why it stops (its line is being printed): from now on a further signal does not
    cut that line short nor add another (torchrun sends SIGTERM to the processes that are left)."""
    if _running:
        _running[0]["stopped"] = True
    if threading.current_thread() is threading.main_thread():
        for number in SIGNALS:
            signal.signal(number, signal.SIG_IGN)


_running: list[dict] = []  # the commands running in this process, innermost last: what Ctrl-C would print for each


def when_interrupted(line: str | Callable[[], str | None] | None) -> None:
    """What Ctrl-C or SIGTERM prints from now on for the running command: a line, or a function that makes it when
    the command stops (None, or a function that returns None: print nothing, e.g. on a training rank other than
    the first). Called outside a
    command (the package used from Python), it does nothing."""
    if _running:
        _running[-1]["line"] = line


def entry_point(secrets: Callable[[list[str]], list[str]] | None = None):
    """The decorator of every command's `main(argv)`: `secrets(argv)` (default: every token this process knows, and
    the value of every argument named like a secret's) are masked in all it prints, and Ctrl-C or SIGTERM ends it
    with the room's line (`when_interrupted`) and exit code 130 or 143. A command called inside another (in one process) runs inside the outer one's streams."""

    def decorate(main: Callable[[list[str]], None]) -> Callable[[list[str]], None]:
        @functools.wraps(main)
        def run(argv: list[str]) -> None:
            _running.append({"line": NOTHING_DONE, "stopped": False})
            outermost = len(_running) == 1
            previous = take_signals() if outermost else None  # an inner command runs inside the outer's handlers
            if outermost:  # what a killed command of the package left in the temporary folder
                remove_stale_scratch()
            found = []
            try:
                found = secrets(argv) if secrets else known_secrets(*secrets_in_argv(argv))
                with redacted_output(found):
                    try:
                        main(argv)
                    except (KeyboardInterrupt, SystemExit):
                        close_progress_bars()  # the line it stops with is the last thing printed
                        raise
            except KeyboardInterrupt as stop:  # the streams are back: the line is redacted here
                stopping()
                line = _running[-1]["line"]
                line = line() if callable(line) else line
                if line:
                    print(shown_controls(redact(line, found)), file=sys.stderr)
                sys.exit(getattr(stop, "code", INTERRUPTED))  # 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP
            except SystemExit as stop:  # Python prints a message given to sys.exit after the streams are back
                if isinstance(stop.code, str):
                    raise SystemExit(shown_controls(redact(stop.code, found))) from None
                raise
            except Exception:
                redact_escaping_traceback(found)
                raise
            finally:
                command = _running.pop()
                if outermost:
                    hand_back_signals(previous, command["stopped"])

        return run

    return decorate


def printed_python() -> str:
    """The interpreter every printed command starts with: `python` where that name finds this interpreter (the same
    file), else this interpreter's path, quoted, so a command printed by a run started as `.venv/bin/python ...`
    runs as pasted where `python` is another interpreter (or none)."""
    found = shutil.which("python")
    if found and os.path.realpath(found) == os.path.realpath(sys.executable):
        return "python"
    return shlex.quote(sys.executable) if sys.executable else "python"


FOLDERS_MADE = ("--output_dir", "--logging_dir")  # options naming a folder that need not exist yet


def relative_path_in(words: list[str]) -> str | None:
    """The first word of a command that a shell would read as a path relative to the working folder: one that names
    a file or folder here, or the value of an option naming a folder the command will make (`FOLDERS_MADE`); never an option, an
    absolute path or a URL. None when every path the command holds is absolute."""
    option = ""
    for word in words:
        name, given, value = word.partition("=") if word.startswith("--") else (option, "", word)
        if word.startswith("-") and not given:
            option = word
            continue
        option = ""
        relative = value and not value.startswith(("-", "/")) and "://" not in value
        if relative and (os.path.lexists(value) or name.replace("-", "_") in FOLDERS_MADE):
            return value
    return None


def printed_command(launcher: str, words: list[str]) -> str:
    """The one form of every command a line tells the user to run: `launcher` (the interpreter, torchrun; already
    quoted) and `words` shell-quoted, after `cd WORKING_FOLDER && ` when a word is a relative path
    (`relative_path_in`), so the command holds pasted in any folder, as it held in the one the run started in."""
    command = launcher + shlex.join(words)
    if relative_path_in(words) is None:
        return command
    return f"cd {shlex.quote(os.getcwd())} && {command}"
