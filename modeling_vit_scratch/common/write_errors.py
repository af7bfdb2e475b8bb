"""A write the system refuses (a full disk, a quota, a file size limit, an I/O error) is one line naming what was
being written, the cause and the fix, never a traceback; what was half-written is removed by the writer
(`common/folders.py`: `write_file` stages each file, `replaced_folder` each folder). SIGXFSZ is ignored by every
command (`common/commands.py` `take_signals`), so a file over `ulimit -f` fails with EFBIG instead of killing the
process without a word.
"""

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REFUSED_WRITES = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO)  # the system refused the write, not the code
# how safetensors (Rust) names the system's error, and how an OSError's text does (a child process's last line)
OS_ERROR = re.compile(r"os error (\d+)|\[Errno (\d+)\]")
TORCH_WRITER = ("PytorchStreamWriter", "inline_container")  # torch.save's writer, which names no cause
WRITE_FIX = "free space on that disk (or raise the file size limit, `ulimit -f`) and run the same command again"
# the same for a command's temporary copies, which go where TMPDIR says
TEMPORARY_FIX = (
    "free space on that disk, or point TMPDIR at a folder on a disk with room (or raise the file size limit, "
    "`ulimit -f`), and run the same command again"
)


def refused_write(error: BaseException, folder: Path | None = None) -> str | None:
    """The system's reason, in its words, when `error` (or what caused it) is a write it refused (`REFUSED_WRITES`),
    else None. torch.save's writer names no cause: given the `folder` written into, a full file system is said where
    it is one, else that the write was cut short."""
    seen = error
    while seen is not None:
        number = seen.errno if isinstance(seen, OSError) else None
        found = OS_ERROR.search(str(seen))
        number = number or (int(found.group(1) or found.group(2)) if found else None)
        if number in REFUSED_WRITES:
            return os.strerror(number)
        seen = seen.__cause__ or seen.__context__
    if folder is not None and isinstance(error, RuntimeError) and any(name in str(error) for name in TORCH_WRITER):
        try:
            space = os.statvfs(folder)
            full = space.f_bavail * space.f_frsize < 1 << 20
        except OSError:  # the folder is gone: nothing to say of its file system
            full = False
        return os.strerror(errno.ENOSPC) if full else "the write was cut short, by a full disk or a file size limit"
    return None


@contextmanager
def refused_writes_named(what: str, kept: str, fix: str = WRITE_FIX) -> Iterator[None]:
    """Writing `what` (a sentence part naming the path): a write the system refuses becomes a ValueError of one
    line, `Writing WHAT failed (CAUSE): KEPT; FIX.`, where `kept` says what is (and is not) on disk now and `fix`
    (default: free space) how to go on."""
    try:
        yield
    except Exception as error:
        reason = refused_write(error)
        if reason is None:
            raise
        raise ValueError(f"Writing {what} failed ({reason}): {kept}; {fix}.") from None
