"""Recipes: a JSON or YAML file of argument names and values (`configs/train_*.json`), given first on the command line.

A recipe is read as plain data (`yaml.safe_load`: no Python objects) and must be a mapping; each key must be an
argument's name, which the parser checks when the recipe becomes command-line words (`recipe_words`).
The recipes the package ships are found by name from anywhere (`vit-scratch train train_digits`).
"""

import json
from pathlib import Path

import yaml

from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.secrets import shown

RECIPE_SUFFIXES = (".json", ".yaml", ".yml")
RECIPE_PATH_KEYS = ("model", "teacher", "dataset")  # what a recipe names to read: found beside it too
# the repository's configs/ as the package ships it (a link in a checkout, a folder in an installed wheel)
SHIPPED = Path(__file__).resolve().parent.parent / "configs"


def shipped_recipes() -> list[str]:
    """The names of the recipes the package ships (`train_digits`, ...)."""
    return sorted(path.stem for path in SHIPPED.glob("*.json"))


def shipped_recipe(value: str) -> Path | None:
    """The shipped recipe `value` names when no file `value` exists here: its name (`train_digits`), its file name,
    or its path in a checkout (`configs/train_digits.json`), so the README's command lines work from an installed
    package. None for anything else: a path that exists here is always the user's own file."""
    path = Path(value)
    if path.exists() or path.parent not in (Path("."), Path("configs")):
        return None
    name = path.name if path.suffix == ".json" else f"{path.name}.json" if not path.suffix else None
    found = SHIPPED / name if name else None
    return found if found is not None and found.is_file() else None


def load_recipe(path: str | Path) -> dict:
    """The recipe at `path` as a dict; a file that does not parse, or holds no mapping, is one line naming it."""
    path = Path(path)
    text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (some editors write one) is no text
    try:
        recipe = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise UserError(f"recipe {shown(path)} does not parse ({' '.join(str(error).split())}): fix the file") from None
    if not isinstance(recipe, dict) or not recipe:
        raise UserError(
            f'recipe {shown(path)} holds no mapping of argument names to values: write e.g. {{"learning_rate": 3e-4}}'
        )
    return recipe


def recipe_words(path: Path, recipe: dict) -> list[str]:
    """The command-line words a recipe stands for: `--key value` (a list as several words, a mapping as JSON text, a
    boolean as true/false); a relative path to read that is not in the working folder but beside the recipe is
    given as the one beside it."""
    words = []
    for key, value in recipe.items():
        if value is None:
            continue
        if key in RECIPE_PATH_KEYS and isinstance(value, str) and not Path(value).is_absolute():
            beside = path.parent / value
            value = str(beside) if not Path(value).exists() and beside.exists() else value
        items = value if isinstance(value, list) else [value]
        text = [
            json.dumps(item) if isinstance(item, dict) else str(item).lower() if isinstance(item, bool) else str(item)
            for item in items
        ]
        words += [f"--{key}={text[0]}"] if len(text) == 1 and text[0].startswith("-") else [f"--{key}", *text]
    return words
