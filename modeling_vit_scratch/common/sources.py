"""Names of data and model sources, for the arguments that accept a name, a local path or a hub repo id."""

import os

from modeling_vit_scratch.common.folders import running_owner

DIGITS = "digits"  # the --dataset name of the handwritten digits embedded in scikit-learn


def looks_like_local_path(text: str) -> bool:
    """True for "/x", "./x", "~/x", "x/", "a/b/c", or "a/b" where the folder "a" exists here; hub ids are "name" or
    "owner/name" (no trailing "/")."""
    if text.startswith(("/", ".", "~")) or text.endswith("/") or text.count("/") > 1:
        return True
    return "/" in text and os.path.isdir(text.split("/")[0])


def check_folder_path(source: str, argument: str) -> None:
    """Refuse, before any work, a model source that is a local file (a folder is read: name the one that holds it),
    a local path that does not exist (never looked up on the Hub as a repo id), or a folder a live training run is
    writing (its model may be replaced while it is read: an `--overwrite_output_dir` run, a run about to save)."""
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
    owner = running_owner(source) if os.path.isdir(source) else None
    if owner:
        raise ValueError(
            f"{argument} {source!r} is in use by a training run (process {owner}), which may replace its model while "
            "it is read: wait for that run to end, then run this again."
        )
