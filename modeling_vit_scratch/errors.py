"""One user-error type, and one place that turns the errors a user can cause into one line.

Every command's `main(argv)` is decorated with `command`: a `UserError`, or an error one of the libraries raises for
bad input or a machine's state (argparse, huggingface_hub's typed errors, safetensors, datasets, a config's
validation, an `OSError` such as a full disk or a denied write), ends the command with exit status 1 and one line,
`error: ...`, through `secrets.shown` (no token, no control character). Ctrl-C, SIGTERM and SIGHUP end it with the
line the room set with `on_interrupt` (exit status 130 / 143 / 129). Any other exception is a bug: its traceback is printed, redacted.
What a library prints to stderr itself (argparse's usage error) is redacted too.

Training glue, never imported by the model files.
"""

import argparse
import contextlib
import errno
import functools
import importlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path

from safetensors import SafetensorError

from vit_scratch_command import ENDPOINT_FIX, NOTHING_DONE, stop

from .image_processing_vit_scratch import UnreadableImage
from .loading_vit_scratch import WeightsError
from .secrets import redact, redact_logs, remember, secrets_in_argv, shown

INTERRUPTED = 130
FULL_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)


class UserError(Exception):
    """Bad input, or a state of the machine the user can change: the message names the problem and the fix."""


def library_errors() -> tuple[type[BaseException], ...]:
    """The libraries' exception types that mean bad input or a state the user can fix, never a bug of ours."""
    from huggingface_hub import errors as hub

    found = [
        UserError,
        argparse.ArgumentError,
        argparse.ArgumentTypeError,
        OSError,  # files: missing, denied, full disk
        MemoryError,
        SafetensorError,
        WeightsError,  # a saved model whose weights do not make its config's model (the model files' own type)
        UnreadableImage,  # an image file that is no image, damaged or too large (the model files' own type)
        hub.HFValidationError,
        hub.HfHubHTTPError,  # RepositoryNotFoundError, RevisionNotFoundError, GatedRepoError, ...
        hub.LocalEntryNotFoundError,
        hub.OfflineModeIsEnabled,
        hub.StrictDataclassFieldValidationError,  # a config field of the wrong type or value
        hub.StrictDataclassClassValidationError,  # a config whose fields do not fit together
    ]
    found += unusable_urls()
    try:
        from datasets import exceptions as data

        found += [data.DatasetNotFoundError, data.DataFilesNotFoundError]
    except ImportError:  # the model alone is installed: no data sets to read
        pass
    return tuple(found)


def unusable_urls() -> list[type[BaseException]]:
    """The HTTP client's errors for a URL it cannot request at all: a request to an HF_ENDPOINT that is no URL (the
    client is huggingface_hub's: httpx2 from huggingface_hub 2 on, httpx before)."""
    found = []
    for client in ("httpx2", "httpx"):
        with contextlib.suppress(ImportError):
            http = importlib.import_module(client)
            found += [http.UnsupportedProtocol, http.InvalidURL]
    return found


def describe(error: BaseException) -> str | None:
    """The one line for an error a user can cause (without `error: `), or None for a bug."""
    if not isinstance(error, library_errors()):
        return None
    if isinstance(error, OSError) and error.errno is not None:
        where = f" {error.filename}" if error.filename else ""
        if error.errno in FULL_DISK:
            return f"the disk is full (or a size limit was reached) writing{where}: free space, then run the same command again"
        if error.errno in DENIED:
            return f"permission denied for{where or ' a file'} ({error.strerror}): choose a folder you can write to"
        if error.errno == errno.EISDIR:
            return f"{where.strip() or 'a path'} is a folder, where a file is needed: give a file"
        if error.errno == errno.ENOENT:
            return f"no such file or folder:{where or ' ' + str(error)}"
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    if isinstance(error, OSError) and not isinstance(error, HfHubHTTPError):  # datasets' own error over the Hub's
        error = under(error, LocalEntryNotFoundError) or error
    if isinstance(error, LocalEntryNotFoundError) and isinstance(error.__cause__, HfHubHTTPError):
        answer = str(error.__cause__).splitlines()[0]  # the status and the URL asked: the repo's type and name
        return (
            f"the Hub at {constants.ENDPOINT} did not give the files asked for ({answer}) and they are not in the "
            "local cache: check the name (owner/name) and that HF_ENDPOINT serves it, or give a local folder"
        )
    if isinstance(error, LocalEntryNotFoundError):  # the Hub could not be reached and the cache lacks the files
        cause = f" ({' '.join(str(error.__cause__).split())})" if error.__cause__ else ""
        return (
            f"the Hub at {constants.ENDPOINT} could not be reached{cause} and the files are not in the local cache: "
            "check the network (or HF_ENDPOINT), or give a local folder"
        )
    if isinstance(error, tuple(unusable_urls())):
        return f"HF_ENDPOINT={constants.ENDPOINT} cannot be requested ({error}): {ENDPOINT_FIX}"
    if isinstance(error, SafetensorError):
        return f"a safetensors weights file is incomplete or corrupt ({error}): re-save the model or download it again"
    if isinstance(error, MemoryError):
        return "the machine ran out of memory: use a smaller model, batch size or image size"
    text = error.args[0] if isinstance(error, KeyError) and error.args else error
    return " ".join(str(text).split()) or type(error).__name__


def under(error: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The error of type `kind` that `error` was raised over (its cause, or the error being handled when it was raised:
    datasets raises its own `from None` while handling the Hub's), or None."""
    seen, inner = {id(error)}, error.__cause__ or error.__context__
    while inner is not None and id(inner) not in seen:
        if isinstance(inner, kind):
            return inner
        seen.add(id(inner))
        inner = inner.__cause__ or inner.__context__
    return None


_interrupt_line: list[str | Callable[[], str | None] | None] = [NOTHING_DONE]


def on_interrupt(line: str | Callable[[], str | None] | None) -> None:
    """What Ctrl-C or SIGTERM prints from now on (a callable is asked at the moment): how to go on."""
    _interrupt_line[0] = line


def take_signals() -> None:
    """SIGTERM (what `kill`, `timeout` and schedulers send) and SIGHUP (the terminal closed) stop a command as Ctrl-C
    does. Signal handlers belong to the main thread; a signal the process was started ignoring stays ignored."""
    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(number) is not signal.SIG_IGN:
                signal.signal(number, stop)  # raises `Stopped`, a KeyboardInterrupt with the shell's code


def speaks() -> bool:
    """Whether this process says the lines every process of a launched run would say alike: the first on its machine."""
    return os.environ.get("LOCAL_RANK", "0").strip() in ("", "0")


def command(main: Callable[[list[str]], object]) -> Callable[[list[str] | None], object]:
    """Run `main(argv)` as a command: secrets on its command line remembered, logs redacted, errors one line."""

    @functools.wraps(main)
    def run(argv: list[str] | None = None):
        argv = sys.argv[1:] if argv is None else list(argv)
        remember(*secrets_in_argv(argv))
        redact_logs()
        sys.excepthook = redacted_traceback
        on_interrupt(NOTHING_DONE)
        take_signals()
        stderr, sys.stderr = sys.stderr, RedactedStream(sys.stderr)
        try:
            return main(argv)
        except KeyboardInterrupt as stopped:  # Ctrl-C, or `Stopped` by SIGTERM / SIGHUP with the shell's code
            line = _interrupt_line[0]
            line = line() if callable(line) else line
            if line and speaks():
                print(shown(line, keep="\n"), file=sys.stderr)
            sys.exit(getattr(stopped, "code", INTERRUPTED))
        except SystemExit as ended:  # argparse's usage errors and --help
            if isinstance(ended.code, str):
                raise SystemExit(shown(ended.code, keep="\n")) from None
            raise
        except Exception as error:
            line = describe(error)
            if line is None:
                raise
            sys.exit(f"error: {shown(line)}" if speaks() else 1)
        finally:
            sys.stderr = stderr

    return run


class RedactedStream:
    """sys.stderr while a command runs, each write redacted: what a library prints itself (argparse's usage error
    echoes the command line, a token typed under a misspelt option too) holds no secret. Redacted only, not escaped:
    progress bars draw with carriage returns and escape sequences."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact(text) if isinstance(text, str) else text)
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def redacted_traceback(kind, error, trace) -> None:
    """sys.excepthook: a bug's traceback, as Python prints it, without a secret or a control character."""
    sys.stderr.write(shown("".join(traceback.format_exception(kind, error, trace)), keep="\n\t"))


def available_memory() -> int:
    """Bytes of memory this process may still take: the system's free memory, or its cgroup's limit where lower."""
    free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        return min(free, int(limit) - used) if limit.isdigit() else free
    except (OSError, ValueError):
        return free


def check_fits(needed: int, what: str, fix: str) -> None:
    """One line before the work starts, instead of an allocation failure after it: `what` needs `needed` bytes."""
    free = available_memory()
    if needed > free:
        raise UserError(
            f"{what} needs about {needed / 2**30:.1f} GiB of memory and {free / 2**30:.1f} GiB is free: {fix}"
        )
