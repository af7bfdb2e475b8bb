"""What a command leaves behind when it is killed: no process, and no temporary folder that the next command does not
clear.

- A child process the package starts dies with its parent (`DIE_WITH_PARENT`, run first by the child: on Linux
  `prctl(PR_SET_PDEATHSIG, SIGKILL)`; elsewhere a thread that ends the child once its parent is gone). A SIGKILL to a
  push leaves no reload check running, a SIGKILL to a benchmark none of its workers. Every child the package starts
  is started so: Python code after `DIE_WITH_PARENT`, a module through `module_command`, with `child_env`.
- A temporary folder is made in the system's temporary folder under a name holding its owner's process id
  and its machine (`scratch_folder`: `vit-scratch-PURPOSE-PID-HOST-XXXXXXXX`); every command first removes those of
  this machine's processes that are gone (`remove_stale_scratch`), never one of a living process nor another
  machine's (a /tmp shared between machines).
- `stale_of_dead_process` is the one test of "a dead process's leftover" by the PID in a name, also used for a
  conversion's staging folder beside its output (`common/folders.py` `replaced_folder`).
"""

import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from modeling_vit_scratch.common.processes import process_alive, this_host

PARENT_VARIABLE = "VIT_SCRATCH_PARENT_PID"
SCRATCH_PREFIX = "vit-scratch-"
SCRATCH_NAME = re.compile(rf"^{re.escape(SCRATCH_PREFIX)}[a-z-]+-(\d+)-([0-9a-f]{{6}})-[a-z0-9_]+$")

# Python run first by a `python -c` child (before its own code): it ends when the process named in PARENT_VARIABLE,
# its parent, ends, however that ends (SIGKILL included).
DIE_WITH_PARENT = f"""
import os as _os
def _die_with_parent():
    parent = int(_os.environ.get({PARENT_VARIABLE!r}, "0"))
    if not parent:
        return
    try:  # Linux: the kernel sends SIGKILL when the parent ends
        import ctypes, signal
        if ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL)) != 0:  # 1: PR_SET_PDEATHSIG
            raise OSError
    except (OSError, AttributeError):  # no prctl: look for the parent every second
        import threading, time
        def watch():
            while _os.getppid() == parent:
                time.sleep(1)
            _os._exit(1)
        threading.Thread(target=watch, daemon=True).start()
    if _os.getppid() != parent:  # the parent ended before the line above took effect
        _os._exit(1)
_die_with_parent()
"""


def module_command(module: str, *arguments: str) -> list[str]:
    """`python -m MODULE ARGUMENTS` as a child that dies with its parent: `DIE_WITH_PARENT` runs first, then the
    module as `-m` would run it. Start it with `child_env`'s environment."""
    run = f"import runpy\nrunpy.run_module({module!r}, run_name='__main__', alter_sys=True)\n"
    return [sys.executable, "-c", DIE_WITH_PARENT + run, *arguments]


def child_env(env: dict[str, str]) -> dict[str, str]:
    """`env` for a child that runs `DIE_WITH_PARENT`: it names this process as the parent to die with."""
    return {**env, PARENT_VARIABLE: str(os.getpid())}


def stale_of_dead_process(name: str, pattern: re.Pattern) -> bool:
    """Whether `name` matches `pattern` (group 1: the owner's process id, group 2: its machine, `this_host`) and that
    process, of this machine, is gone. Another machine's process may live: its leftovers are kept."""
    found = pattern.match(name)
    if not found or found.group(2) != this_host():
        return False
    pid = int(found.group(1))
    return pid > 0 and pid != os.getpid() and not process_alive(pid)  # another user's process lives: kept


@contextmanager
def scratch_folder(purpose: str) -> Iterator[Path]:
    """A private temporary folder named `vit-scratch-PURPOSE-PID-HOST-...`, removed afterwards; if this process is killed
    first, the next command removes it (`remove_stale_scratch`)."""
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}{purpose}-{os.getpid()}-{this_host()}-") as folder:
        yield Path(folder)


def remove_stale_scratch() -> list[str]:
    """Remove the `scratch_folder`s of processes that are gone (this user's only); their names."""
    root, removed = Path(tempfile.gettempdir()), []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return []
    for entry in entries:
        if not stale_of_dead_process(entry.name, SCRATCH_NAME):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.name)
    return removed
