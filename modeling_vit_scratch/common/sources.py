"""Names of data and model sources, for the arguments that accept a name, a local path or a hub repo id."""

import os

DIGITS = "digits"  # the --dataset name of the handwritten digits embedded in scikit-learn


def looks_like_local_path(text: str) -> bool:
    """True for "/x", "./x", "~/x", "x/", "a/b/c", or "a/b" where the folder "a" exists here; hub ids are "name" or
    "owner/name" (no trailing "/")."""
    if text.startswith(("/", ".", "~")) or text.endswith("/") or text.count("/") > 1:
        return True
    return "/" in text and os.path.isdir(text.split("/")[0])


def check_folder_path(source: str, argument: str) -> None:
    """Refuse, before any work, a model source that is a local file (a folder is read: name the one that holds it),
    or a local path that does not exist (never looked up on the Hub as a repo id)."""
    if os.path.isfile(source):
        raise ValueError(
            f"{argument} {source!r} is a file, not a folder: give the folder that holds it "
            f"({os.path.dirname(source) or '.'!r}), with its config.json beside the weights."
        )
    if not os.path.exists(source) and looks_like_local_path(source):
        raise FileNotFoundError(
            f"{argument} {source!r} does not exist: check the path of the folder (a hub repo id is owner/name, "
            "without ./ or a trailing /)."
        )
