"""An option given twice on one command line is one line, never "the last one wins": `--config_overrides a=1
--config_overrides b=2` would train without a=1 while the card's command still shows it, and `--dataset A --dataset B`
would train on B without a word. Options are matched by what they set (`--num-train-epochs` and `--num_train_epochs`
are one option); what follows an option that hands the rest of the line on unread (`argparse.REMAINDER`) is not
looked at. The values are never shown: one of them may be a secret.

Tooling, never imported by the model files.
"""

import argparse


def repeated_option(parser: argparse.ArgumentParser, args: list[str]) -> str | None:
    """The line (no final full stop: `parser.error` adds the help hint) for the first option of `parser` that `args`
    gives twice, or None."""
    seen: dict[str, str] = {}
    for arg in args:
        if arg == "--":
            break
        if not arg.startswith("-"):
            continue
        action = parser._option_string_actions.get(arg.split("=", 1)[0])
        if action is None:
            continue
        if action.nargs == argparse.REMAINDER:
            break
        name = arg.split("=", 1)[0]
        if action.dest not in seen:
            seen[action.dest] = name
            continue
        first = seen[action.dest]
        spelled = f" ({first} and {name})" if first != name else ""
        several = (
            ": one --config_overrides takes several keys (a=1,b=2, or a JSON object)"
            if action.dest == "config_overrides"
            else ", with all its values after it"
            if action.nargs in ("+", "*")
            else ""
        )
        return (
            f"{first} is given twice on the command line{spelled}, and the command would use only the last value "
            f"without a word: give it once{several}"
        )
    return None
