"""File and folder names as the lines of every command show them: a name comes from the user's file system and may
hold anything a file system takes (an escape sequence, a newline, a bidi override, bytes that are not UTF-8), and a
line must never carry those raw to a terminal, where they would move the cursor, recolour or clear the screen, or
hide text. `shown_name` is the one place a name is made safe to print; every line naming a data set's file or folder
goes through it.

Tooling, never imported by the model files.
"""

import os
import unicodedata
from pathlib import PurePath

# Unicode categories a printed name may not carry raw: control (escape, bell, newline, tab) and format characters
# (bidi overrides, zero-width), line and paragraph separators, and lone surrogates (bytes that are not UTF-8, as
# Python holds them)
UNPRINTABLE_CATEGORIES = ("Cc", "Cf", "Zl", "Zp", "Cs")


def is_unprintable(character: str) -> bool:
    return unicodedata.category(character) in UNPRINTABLE_CATEGORIES


def shown_name(name: str | os.PathLike) -> str:
    """`name` (a path, POSIX separators) with each unprintable character written as Python escapes it (`\\x1b`,
    `\\n`, `\\u202e`, a byte that is not UTF-8 as `\\xe9`), every other character as it is (`café/0.png`)."""
    text = PurePath(name).as_posix() if isinstance(name, os.PathLike) else name
    return "".join(escaped(character) if is_unprintable(character) else character for character in text)


def escaped(character: str) -> str:
    if unicodedata.category(character) == "Cs":  # a byte the file system gave that is not UTF-8
        return os.fsencode(character).decode("ascii", "backslashreplace")
    return repr(character)[1:-1]
