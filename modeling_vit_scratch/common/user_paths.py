"""Path arguments as the user meant them: a leading `~` (or `~user`) is a home folder, and a `file://` URL the path
it names, on every command.

A shell expands `~` at the start of a word (`--out ~/figs`) but not after `=` (`--out=~/figs`), nor inside a recipe;
left as is, `~/figs` would be a folder named `~` in the working folder. A file manager or a browser copies a file as
`file:///home/me/cat.jpg`, which names that file, not a folder `file:` here. Every path argument of every command is
read through `user_path`, so each spelling names the same file or folder and every line prints the plain path.

Training glue, never imported by the model files.
"""

import argparse
import os
import re
from urllib.parse import urlsplit
from urllib.request import url2pathname

# URL schemes are case-insensitive (RFC 3986, 3.1): `FILE:///x`, `HTTP://host/a.png` are the same URLs lower-cased
FILE_URL = re.compile(r"file:/", re.IGNORECASE)
HTTP_URL = re.compile(r"https?://", re.IGNORECASE)
THIS_MACHINE = ("", "localhost")  # the hosts a file URL may name for a file here


class NotALocalPath(ValueError, argparse.ArgumentTypeError):
    """A path argument that names no file on this machine; argparse prints its message as is."""


def is_http_url(text: str) -> bool:
    """Whether `text` is an http or https URL, its scheme in any case: what a command downloads rather than opens."""
    return bool(HTTP_URL.match(text))


def user_path(text: str) -> str:
    """`text` with a leading `~` or `~user` expanded to that home folder, and a `file://` URL (`file:///W/x.jpg`,
    `file://localhost/W/x.jpg`, percent-escapes decoded) as the path it names; any other text (a relative path, a hub
    repo id, an http URL) as it was. A file URL of another host is refused: it names no file here. argparse's `type=`
    for a path argument."""
    if FILE_URL.match(text):
        parts = urlsplit(text)
        if (parts.hostname or "") not in THIS_MACHINE:
            raise NotALocalPath(
                f"{text!r} is a file URL on the host {parts.hostname!r}, not on this machine: copy the file here and "
                "give its path"
            )
        return url2pathname(parts.path)
    return os.path.expanduser(text) if text.startswith("~") else text


def expand_user_paths(values: dict, names: tuple[str, ...]) -> None:
    """Read, in place, each of `names` in `values` (parsed arguments) that holds a path string through `user_path`."""
    for name in names:
        if isinstance(values.get(name), str):
            try:
                values[name] = user_path(values[name])
            except NotALocalPath as error:
                raise ValueError(f"--{name} {error}.") from None


# `$NAME` or `${NAME}`: what `datasets` replaces by an environment variable in every local path it reads
# (`os.path.expandvars` in its `relative_to_absolute_path`), so a folder named `${HOME}` would be read as another path
VARIABLE_REFERENCE = re.compile(r"\$(\w|\{)")


DATASETS_READS_IT = (
    "which datasets reads as an environment variable ($HOME, ${HOME}) in every path it opens, so its images would be "
    "looked for elsewhere"
)


def refuse_variable_reference(
    name: str, what: str, why: str = DATASETS_READS_IT, fix: str = "rename it without '$'"
) -> None:
    """A one-line ValueError when `name` (`what` says which: a class folder, a file, --dataset, a recipe's path) holds
    `$NAME` or `${NAME}`, saying `why` that is wrong there (datasets would read it as that environment variable's
    value, a path that is not there; a recipe, read by no shell, would keep it as is) and the `fix`."""
    if VARIABLE_REFERENCE.search(name):
        raise ValueError(f"{what} ({name!r}) holds '$' before a name, {why}: {fix}.")
