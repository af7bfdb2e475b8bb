"""Names of data and model sources, for the arguments that accept a name, a local path or a hub repo id."""

DIGITS = "digits"  # the --dataset name of the handwritten digits embedded in scikit-learn


def looks_like_local_path(text: str) -> bool:
    """True for "/x", "./x", "~/x" or "a/b/c"; hub ids are "name" or "owner/name"."""
    return text.startswith(("/", ".", "~")) or text.count("/") > 1
