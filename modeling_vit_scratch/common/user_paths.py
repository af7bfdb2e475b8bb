"""Path arguments as the user meant them: a leading `~` (or `~user`) is a home folder on every command.

A shell expands `~` at the start of a word (`--out ~/figs`) but not after `=` (`--out=~/figs`), nor inside a recipe;
left as is, `~/figs` would be a folder named `~` in the working folder. Every path argument of every command is
read through `user_path`, so both spellings name the same folder and every line prints the expanded path.

Training glue, never imported by the model files.
"""

import os


def user_path(text: str) -> str:
    """`text` with a leading `~` or `~user` expanded to that home folder; any other text (a relative path, a hub
    repo id, a URL) as it was. argparse's `type=` for a path argument."""
    return os.path.expanduser(text) if text.startswith("~") else text


def expand_user_paths(values: dict, names: tuple[str, ...]) -> None:
    """Expand, in place, each of `names` in `values` (parsed arguments) that holds a path string."""
    for name in names:
        if isinstance(values.get(name), str):
            values[name] = user_path(values[name])
