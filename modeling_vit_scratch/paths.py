"""Telling a local path from a hub repo id, for the arguments that accept either."""


def looks_like_local_path(text: str) -> bool:
    """True for "/x", "./x", "~/x" or "a/b/c"; hub ids are "name" or "owner/name"."""
    return text.startswith(("/", ".", "~")) or text.count("/") > 1
