"""Numbers a command accepts, checked as a rule: each argument's allowed values (`Allowed`) in one table per
command or argument group, checked once after parsing (`check_numbers`), or by the parser itself as the argument's
`type=` (`argument_type`: the benchmark's). A float must be finite whether or not a table names it; the table adds
its range. The commands print the refusal as one line, before any work."""

import argparse
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Allowed:
    """The values one number argument may take: from `low` to `high` (None: no bound on that side), each end
    excluded when its `open_*` flag is set; `integer` for counts; `unset` is the value that means "not given"
    (`--max_steps -1`), always accepted; `example` is a value to suggest."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False
    integer: bool = False
    unset: float | None = None
    example: str = ""

    def admits(self, value: float) -> bool:
        if self.unset is not None and value == self.unset:
            return True
        if not math.isfinite(value):
            return False
        above_low = self.low is None or (value > self.low if self.open_low else value >= self.low)
        below_high = self.high is None or (value < self.high if self.open_high else value <= self.high)
        return above_low and below_high

    def describe(self) -> str:
        """'a number in (0, 10]', 'an integer >= 1', with the unset value and an example when there are."""
        kind = "an integer" if self.integer else "a number"
        if self.low is None and self.high is None:
            return f"a finite {kind[2:].lstrip()}"
        if self.low is not None and self.high is not None:
            low, high = written(self.low), written(self.high)
            bounds = f"in {'(' if self.open_low else '['}{low}, {high}{')' if self.open_high else ']'}"
        elif self.low is not None:
            bounds = f"{'>' if self.open_low else '>='} {written(self.low)}"
        else:
            bounds = f"{'<' if self.open_high else '<='} {written(self.high)}"
        unset = f" (or {written(self.unset)}: not set)" if self.unset is not None else ""
        example = f", e.g. {self.example}" if self.example else ""
        return f"{kind} {bounds}{unset}{example}"


def written(number: float) -> str:
    """A bound as a user would type it: whole numbers in full (4294967295), others short (3e-4)."""
    return str(int(number)) if float(number).is_integer() and abs(number) < 1e16 else f"{number:g}"


def refusal(value: float, allowed: Allowed) -> str | None:
    """Why `value` is not allowed ("0 is out of range: give an integer >= 1"), or None when it is."""
    if allowed.admits(value):
        return None
    problem = "is not a finite number" if not math.isfinite(value) else "is out of range"
    return f"{written(value)} {problem}: give {allowed.describe()}"


def check_numbers(values: dict, limits: dict) -> None:
    """A one-line ValueError for the first number in `values` (argument name -> parsed value) that is not finite
    or not in its argument's range (`limits`: argument name -> `Allowed`), naming the argument, the value and what is allowed."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        refused = refusal(value, limits.get(name, Allowed()))
        if refused:
            raise ValueError(f"--{name} {refused}.")


def argument_type(allowed: Allowed):
    """An argparse `type=` reading one value as `allowed` says (an int for counts): a value that is no number, or
    not finite, or out of range, is refused while the command line is parsed (argparse names the argument), before
    the command does anything; each value of a list argument (`nargs`) is read by it alone."""

    def read(text: str) -> int | float:
        try:
            value = int(text) if allowed.integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number: give {allowed.describe()}") from None
        refused = refusal(value, allowed)
        if refused:
            raise argparse.ArgumentTypeError(refused)
        return value

    read.__name__ = "integer" if allowed.integer else "number"  # argparse's name for the kind, in its messages
    read.allowed = allowed  # what the parser admits, for tests and help
    return read
