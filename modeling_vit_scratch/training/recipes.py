"""A recipe (`configs/train_*.json`, or YAML) read as a mapping of argument names to values, strictly: every error
is one line naming the file and, where the text has one, the line (a JSON or YAML syntax error, a key given twice,
a second YAML document, a YAML tag that would build a Python object, a YAML anchor or alias, values nested past what
a parser takes), and an empty recipe or one that is not a mapping is refused. A recipe holds plain values: without anchors and aliases its size
is that of its text (an alias bomb would grow to gigabytes)."""

import json
import re
from pathlib import Path

import yaml

EXAMPLE = 'e.g. {"learning_rate": 0.0003, "num_train_epochs": 10}'
# the repository's configs/ as the package ships it (a link in a checkout, a folder in an installed wheel)
SHIPPED = Path(__file__).resolve().parent.parent / "configs"


def shipped_recipes() -> list[str]:
    """The names of the recipes the package ships (`train_digits`, ...), for `vit-scratch train NAME`."""
    return sorted(path.stem for path in SHIPPED.glob("*.json"))


def shipped_recipe(value: str) -> Path | None:
    """The recipe the package ships that `value` names, when no file `value` exists here: its name (`train_digits`),
    its file name, or its path in a checkout (`configs/train_digits.json`), so that the README's command lines work
    from an installed package. None for anything else: a path that exists here is always the user's own file."""
    path = Path(value)
    if path.exists() or path.parent not in (Path("."), Path("configs")):
        return None
    name = path.name if path.suffix == ".json" else f"{path.name}.json" if not path.suffix else None
    found = SHIPPED / name if name else None
    return found if found is not None and found.is_file() else None


def load_recipe(path: Path) -> dict:
    """The recipe at `path` (.json, .yaml or .yml) as a dict, or a one-line ValueError naming the file and line."""
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (some Windows editors write one) is no text
    except UnicodeDecodeError as error:
        raise ValueError(f"Recipe {path} is not UTF-8 text ({error.reason}): save it as UTF-8.") from None
    recipe = load_json(path, text) if path.suffix == ".json" else load_yaml(path, text)
    if recipe is None or recipe == {}:
        raise ValueError(f"Recipe {path} is empty: give the arguments as names and values, {EXAMPLE}.")
    if not isinstance(recipe, dict):
        raise ValueError(
            f"Recipe {path} holds a {type(recipe).__name__}, not a mapping of argument names to values: write "
            f"{EXAMPLE}."
        )
    return recipe


def load_json(path: Path, text: str) -> dict:
    def unique(pairs: list[tuple]) -> dict:
        seen = {}
        for key, value in pairs:
            if key in seen:
                raise twice(path, key, nth_key_line(text, key, 2), nth_key_line(text, key, 1))
            seen[key] = value
        return seen

    try:
        return json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as error:
        raise ValueError(f"Recipe {path} line {error.lineno}: {error.msg}: {json_fix(text, error.pos)}.") from None
    except RecursionError:
        raise too_deep(path) from None


def json_fix(text: str, position: int) -> str:
    """The fix for JSON that does not parse at `position`: what people write that JSON lacks (comments, a comma
    before a closing bracket) named as such, else "fix the JSON there"."""
    rest, before = text[position:].lstrip(), text[:position].rstrip()
    if rest.startswith(("//", "/*", "#")):
        return "JSON holds no comments: remove it, or write the recipe as YAML (.yaml), where comments start with #"
    if before.endswith(",") and rest[:1] in ("}", "]"):
        return "JSON allows no comma before a closing bracket: remove it"
    return "fix the JSON there"


def too_deep(path: Path) -> ValueError:
    """The error for values nested past what the parser can follow: no argument takes anything like it."""
    return ValueError(
        f"Recipe {path}: values are nested too deep to read: a recipe holds plain values, write them out."
    )


def twice(path: Path, key, line: int, first: int) -> ValueError:
    """The error for a key given twice: a recipe would otherwise keep the last value without a word."""
    return ValueError(f"Recipe {path} line {line}: key {key!r} is given twice (first on line {first}): keep one.")


def key_line(path: Path, key: str) -> str:
    """' line N' where a top-level `key` is first written in the recipe at `path` (JSON or YAML), or ''."""
    written = re.compile(rf"""(^|[{{,])[ \t]*["']?{re.escape(str(key))}["']?[ \t]*:""", re.MULTILINE)
    found = written.search(path.read_text(encoding="utf-8-sig"))
    return f" line {found.string.count(chr(10), 0, found.start()) + 1}" if found else ""


def nth_key_line(text: str, key: str, n: int) -> int:
    """The line (from 1) of the `n`-th place where `key` is written as a JSON object key, or 0 if not found."""
    places = list(re.finditer(re.escape(json.dumps(key)) + r"\s*:", text))
    return text.count("\n", 0, places[n - 1].start()) + 1 if len(places) >= n else 0


class DuplicateKey(Exception):
    """A key given twice in a YAML mapping: the key, its line and the line where it was first given."""


class Alias(Exception):
    """A YAML anchor or alias, at this line."""


class RecipeLoader(yaml.SafeLoader):
    """YAML's safe loader (no tag builds a Python object), refusing a key given twice in one mapping (plain YAML
    keeps the last value without a word) and any anchor or alias (`&a`, `*a`): nested aliases multiply a few lines
    into gigabytes, and a recipe holds plain values."""

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise Alias(event.start_mark.line + 1)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise DuplicateKey(key, line, seen[key])
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: Path, text: str):
    try:
        return yaml.load(text, Loader=RecipeLoader)
    except DuplicateKey as duplicate:
        raise twice(path, *duplicate.args) from None
    except Alias as alias:
        raise ValueError(
            f"Recipe {path} line {alias.args[0]}: YAML anchors and aliases are not allowed in a recipe: write the "
            "value out."
        ) from None
    except RecursionError:
        raise too_deep(path) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = " ".join(str(error.problem or error.context).split())
        if "could not determine a constructor" in problem:
            problem = f"{problem} (a tag that would build a Python object; a recipe holds plain values)"
        line = f" line {mark.line + 1}" if mark else ""
        if "another document" in problem:  # `---` starts a second document, which a recipe (one mapping) has not
            raise ValueError(
                f"Recipe {path}{line}: a second YAML document starts here, and a recipe is one document (one mapping "
                f"of arguments): remove the '---' at{line} and keep one mapping, its keys each given once."
            ) from None
        if "expected '<document start>'" in problem:  # text after `...`, which ends the one document
            raise ValueError(
                f"Recipe {path}{line}: text follows the end of the YAML document (a '...' line above it), and a recipe "
                "is one document: remove the '...' and keep one mapping, its keys each given once."
            ) from None
        raise ValueError(f"Recipe {path}{line}: {problem}: fix the YAML there.") from None
    except yaml.YAMLError as error:
        raise ValueError(f"Recipe {path}: {' '.join(str(error).split())}: fix the YAML.") from None
