"""What the package asks of a process it did not start, by its id: whether it lives, when it started, whether it runs
Python. A process id is reused; with its start time it names one process. Read from /proc where the system has it;
elsewhere a living id is all that is known."""

import hashlib
import os
import socket
from functools import cache
from pathlib import Path


def process_start(pid: int) -> str | None:
    """When process `pid` started (field 22 of /proc/PID/stat: clock ticks after boot), or None where the system
    does not say (no /proc, no such process). With the PID it names one process: a PID is reused, a start never."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # after the name, which may hold spaces: field 3 onwards
    return None if len(fields) < 20 or fields[0] == "Z" else fields[19]  # a zombie has ended


def process_alive(pid: int) -> bool:
    """Whether a process `pid` exists and has not ended (a zombie, ended but not yet reaped, has)."""
    if pid <= 0:  # 0 and negative ids name process groups, never one process
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:  # another user's: alive
        pass
    except (OSError, OverflowError, ValueError):
        return False
    return not os.path.isdir("/proc") or process_start(pid) is not None


def is_python(pid: int) -> bool | None:
    """Whether process `pid` runs Python (the program it runs, as /proc names it: a console script runs its
    interpreter), or None where the system does not say."""
    try:
        program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return None
    return os.path.basename(program).startswith(b"python") if program else None  # empty: in the midst of exec


@cache
def this_host() -> str:
    """Six hex digits naming this machine (a hash of its host name), for names left on disk beside a process id: an
    id names a process on one machine only, and a folder shared between machines (a network /tmp, an output folder
    on shared storage) holds names that other machines' processes left, whose ids say nothing here."""
    return hashlib.blake2b(socket.gethostname().encode(), digest_size=3).hexdigest()
