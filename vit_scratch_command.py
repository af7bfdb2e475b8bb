"""The first module the `vit-scratch` command and `scripts/*.py` run (and the package's `__init__` under `python -m
modeling_vit_scratch.cli`): Ctrl-C (SIGINT), SIGTERM and SIGHUP (the terminal closed) are one line from the process's
first instant to its exit, then the command is imported and run.

Before any command's code runs, Python spends seconds importing torch and transformers: importing anything in
`modeling_vit_scratch` imports the package, which imports them. This module imports only the standard library and
lives outside the package, so its handler is in place before those imports. Three phases, one owner each:

- importing: a signal ends the process at once with the line that nothing was done (nothing was);
- the command running: its `entry_point` (`modeling_vit_scratch/common/commands.py`) takes the signals and says what
  was done, then hands them back here with `exit_on_signal`;
- exiting (`atexit` callbacks, a library's clean-up, threads being joined): a signal ends the process at once with
  one line saying the command had ended, or silently where the command has already said why it stopped.

A signal the process was started ignoring (SIGINT in a shell's background job, SIGHUP under `nohup`) stays ignored.
"""

import importlib
import logging
import os
import signal
import sys
import threading

INTERRUPTED = 130  # the exit code of a command stopped by Ctrl-C (SIGINT), as shells report it
TERMINATED = 143  # the exit code of a command stopped by SIGTERM
HUNG_UP = 129  # the exit code of a command stopped by SIGHUP (its terminal closed, `kill -HUP`)
PIPE_CLOSED = 141  # the exit code of a command whose reader closed its stdout (SIGPIPE), as shells report it
NOTHING_DONE = "Interrupted before any work was done: nothing was written or sent; run the same command again."
ENDED = "Interrupted while exiting, after the command had ended: its lines above say what it did."
SIGNALS = (signal.SIGINT, signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else []))
EXIT_CODES = {signal.SIGTERM: TERMINATED, **({signal.SIGHUP: HUNG_UP} if hasattr(signal, "SIGHUP") else {})}

_line: list[str | None] = [NOTHING_DONE]  # what a signal prints while no command holds the signals (None: nothing)
_started = [False]  # whether `run` started this process's command
_ignored: set[int] = set()  # the signals the process was started ignoring: they stay ignored


def exit_at_once(number: int, frame) -> None:
    """The signal handler outside a command: what was printed is flushed, the line said, the process ended with the
    shell's code for the signal. It ends the process there (`os._exit`): an exception raised here, inside an import
    or an `atexit` callback, would print a traceback."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, RuntimeError, ValueError):  # a closed stream, or one the signal interrupted mid-write
            pass
    if _line[0] and speaks_for_machine():
        try:
            os.write(2, f"{_line[0]}\n".encode())
        except OSError:
            pass
    os._exit(EXIT_CODES.get(number, INTERRUPTED))


def speaks_for_machine() -> bool:
    """Whether this process says the lines every process of a launched run would say alike (an argument error, a
    stop before any work): the first process on its machine (`LOCAL_RANK` 0, as torchrun and accelerate set it), or a
    process no launcher started. Each machine says them once, so one whose files differ still speaks."""
    return os.environ.get("LOCAL_RANK", "0").strip() in ("", "0")


def exit_on_signal(line: str | None) -> None:
    """From now on, until a command takes them, SIGINT and SIGTERM end the process at once with `line` (None: with
    no line). Signal handlers belong to the main thread: elsewhere this changes nothing."""
    _line[0] = line
    if not holds_signals():
        return
    for number in set(SIGNALS) - _ignored:
        signal.signal(number, exit_at_once)


def holds_signals() -> bool:
    """Whether the process was started through `run`, and this is its main thread: the signals are this module's
    before and after the command, not the caller's (Python used as a library keeps its own handlers)."""
    return threading.current_thread() is threading.main_thread() and _started[0]


def take_start_up() -> None:
    """From now on this process is a command's: SIGINT, SIGTERM and SIGHUP end it at once with the line that nothing
    was done (a signal it was started ignoring stays ignored), until the command's `entry_point` takes them; and
    library notices addressed to library authors are kept from the user (`LibraryNoticeFilter`)."""
    if not _started[0]:
        _started[0] = True
        _ignored.update(number for number in SIGNALS if signal.getsignal(number) is signal.SIG_IGN)
        logging.getLogger(PYTREE_LOGGER).addFilter(LibraryNoticeFilter())
    exit_on_signal(NOTHING_DONE)


# torch's pytree logs a deprecation for each Enum a library (torchao, imported by transformers where installed)
# registers as a constant: a note to that library's authors, printed before a command's first line
PYTREE_LOGGER = "torch.utils._pytree"
PYTREE_ENUM_NOTICE = "is an Enum subclass and is now natively supported by torch.compile"


class LibraryNoticeFilter(logging.Filter):
    """Drops torch pytree's Enum `register_constant` deprecation records (that logger, that message), nothing else."""

    def filter(self, record: logging.LogRecord) -> bool:
        return PYTREE_ENUM_NOTICE not in record.getMessage()


# the package whose commands `python -m` may start (`modeling_vit_scratch.cli`, `modeling_vit_scratch.benchmark.command`)
PACKAGE = "modeling_vit_scratch"
TAKING_A_VALUE = "WX"  # interpreter options whose value follows (`-X dev`, `-Werror`)


def started_module(orig_argv: list[str]) -> str | None:
    """The module the interpreter was started to run with `-m` (`python -X dev -Bm pkg.cli ...` -> "pkg.cli"), or
    None: a script, `-c`, stdin or an interactive interpreter. Short options may be joined (`-Bm`), and `-m`'s, `-W`'s
    and `-X`'s values follow them or are the next word, as Python reads its command line."""
    words = iter(orig_argv[1:])
    for word in words:
        if word == "-" or not word.startswith("-") or word.startswith("--"):
            if word.startswith("--") and word != "--":
                continue  # --version, --help and the like
            return None
        for index, letter in enumerate(word[1:], start=2):
            if letter in "mc" + TAKING_A_VALUE:
                value = word[index:] or next(words, None)
                if letter == "m":
                    return value
                if letter == "c":
                    return None
                break
    return None


def take_start_up_of_package_command() -> None:
    """Called by the package's `__init__` before it imports torch and transformers: where the interpreter was
    started to run one of the package's commands (`python -m modeling_vit_scratch.cli ...`), and is locating it now
    (`sys.argv[0]` is "-m" until then), the signals are one line from here, as for `vit-scratch` and the scripts;
    an import of the package by anything else leaves the process's signal handling as it was."""
    module = started_module(getattr(sys, "orig_argv", []))
    if sys.argv[:1] == ["-m"] and module and (module == PACKAGE or module.startswith(f"{PACKAGE}.")):
        take_start_up()
        sys.excepthook = failed_start(
            module
        )  # until `run` imports the command: the package's libraries fail as one line


def failed_start(module: str):
    """An excepthook for the package's own import under `python -m`: a library that fails while imported (a setting
    it cannot read) is `start_failure`'s line, as under `vit-scratch`, not a traceback through the package's
    `__init__`. Anything but an `Exception` (Ctrl-C, an exit) is Python's as before."""

    def hook(kind, error, traceback) -> None:
        if not issubclass(kind, Exception):
            sys.__excepthook__(kind, error, traceback)
            return
        print(start_failure(module, error), file=sys.stderr)

    return hook


def run(module: str, argv: list[str] | None = None) -> None:
    """Import `module` (torch and transformers with it) with signals already one line, and run its `main(argv)`
    (default: the process's arguments)."""
    take_start_up()
    sys.excepthook = sys.__excepthook__  # the package has been imported: from here a failure is the command's own
    try:
        main = importlib.import_module(module).main
    except Exception as error:  # noqa: BLE001 - a library that cannot start: one line, not its traceback
        sys.exit(start_failure(module, error))
    try:
        main(sys.argv[1:] if argv is None else argv)
        sys.stdout.flush()  # here, not at exit: a reader gone is met where it can be handled
    except BrokenPipeError:
        reader_gone()
    finally:
        if _line[0] == NOTHING_DONE:  # no command took the signals (`--help`, an unknown command): it has ended
            exit_on_signal(ENDED)


def start_failure(module: str, error: Exception) -> str:
    """The line for a command whose libraries failed while being imported, before any of its code ran: most often a
    setting they read from the environment at import (`HF_HUB_ETAG_TIMEOUT=abc`), named where its value is in the
    error."""
    said = " ".join(str(error).split())
    settings = sorted(
        name
        for name, value in os.environ.items()
        if name.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TORCH", "PYTORCH_"))
        and value
        and repr(value) in said
    )
    fix = (
        f"{' and '.join(settings)} holds a value the libraries cannot read: correct or unset it"
        if settings
        else "check the environment variables the libraries read (HF_*, TRANSFORMERS_*, TORCH*) and the installed "
        "packages (`pip check`)"
    )
    return (
        f"error: {started_as(module)} could not start: importing its libraries failed ({type(error).__name__}: "
        f"{said}): {fix}, then run the command again. Nothing was written or sent."
    )


def started_as(module: str) -> str:
    """The command as the user started it: the script's or installed command's name, or `python -m MODULE` (while
    Python locates a `-m` module, `sys.argv[0]` is "-m")."""
    name = os.path.basename(sys.argv[0]) if sys.argv else ""
    return name if name not in ("", "-m", "-c") else f"python -m {module}"


def reader_gone() -> None:
    """The reader of stdout went away (`vit-scratch ... | head`): end quietly, as a command killed by SIGPIPE would,
    with its exit code (141), not with a traceback. Python's recipe: stdout is pointed at devnull, so the flush at
    exit finds nothing to write."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(PIPE_CLOSED)


def main() -> None:
    """The `vit-scratch` command (pyproject.toml's [project.scripts])."""
    run("modeling_vit_scratch.cli")
