"""Values named empty: `--dataset ""`, `--teacher "$T"` with T unset, a recipe's `dataset:` left null. An argument
that names an input, an output or a name is given something or left out; given empty, it is one line naming the
argument (and, in a recipe, its file and line), never read as its default or as the working folder.

Training glue, never imported by the model files.
"""

import argparse


def is_blank(value) -> bool:
    """Whether `value` is text with nothing but white space in it (`""`, `"  "`, a newline)."""
    return isinstance(value, str) and not value.strip()


def shown_blank(value: str) -> str:
    """How an empty value is shown in a line: `''`, or its white space as Python writes it (`'  \\n'`)."""
    return repr(value)


def blank_argument_line(name: str, value: str, what: str, optional: bool) -> str:
    """The line for `name` (`--dataset`) given the empty `value`: what it takes, and that leaving it out is the way
    to its default (where it has one)."""
    default = f", or leave out {name} for its default" if optional else ""
    return f"{name} is empty ({shown_blank(value)}): give {what}{default}."


def refuse_blank_options(parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> None:
    """`parser.error` for the first argument of `namespace` given an empty value (or an empty item, for a list):
    an argparse command's every text argument names something, and none takes empty text. Arguments whose values
    are handed on unread (`argparse.REMAINDER`) are left to the command that reads them."""
    for action in parser._actions:
        if action.nargs == argparse.REMAINDER or action.dest == argparse.SUPPRESS:
            continue
        value = getattr(namespace, action.dest, None)
        blank = next((item for item in value if is_blank(item)), None) if isinstance(value, list) else value
        if is_blank(blank):
            name = action.option_strings[0] if action.option_strings else action.metavar or action.dest.upper()
            what = f"it a value ({action.help})" if action.help and action.help != argparse.SUPPRESS else "it a value"
            optional = not action.required and bool(action.option_strings)
            parser.error(blank_argument_line(name, blank, what, optional).rstrip("."))  # error() adds the help hint
