"""The first module the `vit-scratch` command and `scripts/*.py` run: Ctrl-C, SIGTERM and SIGHUP are one line from
the process's first instant, then the command is imported and run.

Importing the package takes seconds (torch, transformers); this module imports only the standard library, so a stop
meanwhile says that nothing was done. Once the command runs, its `main` (decorated with `errors.command`) turns a stop
into the room's line: SIGTERM and SIGHUP are raised as `Stopped`, a KeyboardInterrupt with the shell's exit code.
"""

import importlib
import os
import signal
import sys
from urllib.parse import urlsplit

NOTHING_DONE = "Interrupted before any work was done: nothing was written or sent; run the same command again."
ENDPOINT_FIX = "set HF_ENDPOINT to the Hub's address, an http(s):// URL (e.g. https://huggingface.co), or unset it"
CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, **({signal.SIGHUP: 129} if hasattr(signal, "SIGHUP") else {})}


class Stopped(KeyboardInterrupt):
    """A stop by signal: `code` is the exit status a shell reports for it."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def stop(number: int, frame) -> None:
    raise Stopped(CODES.get(number, 130))


def endpoint_fault() -> str | None:
    """Why HF_ENDPOINT, the Hub's address, is no URL as huggingface_hub parses it when imported; None if it is one."""
    try:
        urlsplit(os.environ.get("HF_ENDPOINT", "")).port  # noqa: B018 - the port is parsed as it is read
    except ValueError as error:
        return str(error)
    return None


def run(module: str, argv: list[str] | None = None) -> None:
    """Import `module` with signals already one line, and run its `main(argv)` (default: the process's arguments).
    A signal the process was started ignoring (`nohup`, a background job) stays ignored."""
    for number in CODES:
        if signal.getsignal(number) is not signal.SIG_IGN:
            signal.signal(number, stop)
    try:
        main = importlib.import_module(module).main
    except KeyboardInterrupt as stopped:
        print(NOTHING_DONE, file=sys.stderr)
        sys.exit(getattr(stopped, "code", 130))
    except Exception as error:  # noqa: BLE001 - a library that cannot start (a setting it cannot read): one line
        said = " ".join(str(error).split())
        if fault := endpoint_fault():
            sys.exit(f"error: could not start: HF_ENDPOINT is no URL ({fault}): {ENDPOINT_FIX}")
        sys.exit(f"error: could not start: importing the libraries failed ({type(error).__name__}: {said}).")
    try:
        main(sys.argv[1:] if argv is None else argv)
        sys.stdout.flush()
        for number in CODES:  # the work is done and said: a stop while Python shuts down ends it, without a traceback
            if signal.getsignal(number) is not signal.SIG_IGN:
                signal.signal(number, signal.SIG_DFL)
    except BrokenPipeError:  # `vit-scratch ... | head`: end as a command killed by SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)


def main() -> None:
    """The `vit-scratch` command (pyproject.toml's [project.scripts])."""
    run("modeling_vit_scratch.cli")
