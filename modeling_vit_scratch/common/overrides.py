"""`--config_overrides` as the training and conversion commands take it: "key=value,..." -> checked config fields."""

import difflib
import json
import math
import re
import types
import typing
from dataclasses import MISSING, fields

from huggingface_hub.dataclasses import type_validator

from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig

EXAMPLES = {"--timm_kwargs": "img_size=384"}  # an item each argument takes, for its error lines


def parse_overrides(text: str | None, flag: str = "--config_overrides") -> dict:
    """'a=1,b=0.5,c=mean,d=true' -> {'a': 1, 'b': 0.5, 'c': 'mean', 'd': True}; a JSON object ('{"a": 1}', what a
    recipe's mapping becomes) the same; errors name `flag`, the argument the text came from."""
    if (text or "").lstrip().startswith("{"):
        return json_overrides(text, flag)
    refuse_split_lists(text or "", flag)
    overrides = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        if "=" not in item:
            raise ValueError(
                f"{flag} item {item!r} is not key=value: write e.g. '{EXAMPLES.get(flag, 'hidden_size=64')}'."
            )
        key, value = (part.strip() for part in item.split("=", 1))
        if key in overrides:  # the later would win without a word, as a recipe's key given twice would
            raise ValueError(f"{flag} gives {key} twice ({key}={overrides[key]}, then {item}): keep one.")
        overrides[key] = read_value(value)
        if any(isinstance(number, float) and not math.isfinite(number) for number in numbers_in(overrides[key])):
            raise ValueError(f"{flag} {key}={value} is not a finite number: give e.g. '{key}=0.1'.")
    return overrides


def read_value(value: str):
    """One value of the key=value form: JSON where it reads as JSON (any case of true, false, null), else text."""
    try:
        return json.loads(value.lower() if value.lower() in ("true", "false", "null") else value)
    except json.JSONDecodeError:
        return value


# `key=[a,b,...` in the key=value form: a list whose commas would split it into items
SPLIT_LIST = re.compile(r"([^=,\s][^=,]*?)\s*=\s*(\[[^\]]*,[^\]]*\]?)")


def refuse_split_lists(text: str, flag: str) -> None:
    """A ValueError for a list of more than one value in the key=value form (`stem_channels=[8,16]`): its commas
    split the items, so it would be read as `stem_channels=[8` and `16]`. The line gives the whole text in the JSON
    form, which holds lists."""
    found = SPLIT_LIST.search(text)
    if not found:
        return
    items = re.findall(r"([^=,\s][^=,]*?)\s*=\s*(\[[^\]]*\]?|[^,]*)", text)
    closed = {key.strip(): value.strip() for key, value in items}
    closed = {key: f"{value}]" if value[:1] == "[" and value[-1:] != "]" else value for key, value in closed.items()}
    whole = json.dumps({key: read_value(value) for key, value in closed.items()})
    raise ValueError(
        f"{flag} gives {found.group(1).strip()} a list in the key=value form ({found.group(1).strip()}="
        f"{found.group(2)}), whose commas split the items: write it in the JSON form, {flag} '{whole}'."
    )


def json_overrides(text: str, flag: str) -> dict:
    """A JSON object of overrides (a recipe's `config_overrides: {hidden_size: 32}`), held to the rules of the
    key=value form: each key once, every number finite."""

    def unique(pairs: list[tuple]) -> dict:
        seen = {}
        for key, value in pairs:
            if key in seen:
                raise ValueError(f"{flag} gives {key} twice: keep one.")
            seen[key] = value
        return seen

    def not_finite(word: str):
        raise ValueError(f'{flag} holds {word}, which is not a finite number: give e.g. {{"drop_path_rate": 0.1}}.')

    try:
        overrides = json.loads(text, object_pairs_hook=unique, parse_constant=not_finite)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{flag} starts with '{{' but is not a JSON object ({error.msg}): write e.g. '{{\"hidden_size\": 64}}' or "
            "'hidden_size=64'."
        ) from None
    if not isinstance(overrides, dict):  # '{}' followed by more text is a decode error; a dict is all that is left
        raise ValueError(f"{flag} is not a JSON object: write e.g. '{{\"hidden_size\": 64}}'.")
    return overrides


def numbers_in(value) -> list:
    """The value itself, or the items of a list (`stem_depths=[3,4,9]`), to check each number once."""
    return list(value) if isinstance(value, list) else [value]


# Keys a config may be given besides its dataclass fields: PreTrainedConfig's keyword arguments and properties.
STANDARD_CONFIG_KEYS = ("attn_implementation", "torch_dtype", "output_attentions")

# Keys the package sets itself, and where each comes from: given by the user (an override, an architecture file),
# each is one line saying so, never dropped without a word nor matched to a field it only looks like.
LABELS = "is set from the data set's classes (one label per class)"
SAVED = "is written by save_pretrained when the model is saved"
SET_BY_PACKAGE = {
    "model_type": "is fixed by --model: vit_scratch (or the model_type an architecture file names for a teacher)",
    "num_labels": LABELS,
    "num_classes": LABELS,
    "id2label": LABELS,
    "label2id": LABELS,
    "architectures": SAVED,
    "auto_map": SAVED,
    "transformers_version": SAVED,
    "_name_or_path": SAVED,
}
CLOSE_MATCH = 0.75  # a suggestion for a typo (hiden_size -> hidden_size), never for a word alike by chance (dtype)


def check_config_overrides(overrides: dict, given_by: str = "--config_overrides") -> None:
    """Raise a one-line ValueError for a key the package sets itself (`SET_BY_PACKAGE`: where it comes from), for
    a key that is no config field, naming the closest real one (a typo such as `hiden_size` would otherwise be stored
    and ignored), and for a value of another type than its field's (`refuse_other_type`). `given_by` names where the
    keys were written, in the line."""
    known = sorted(
        ({field.name for field in fields(ViTScratchConfig)} | set(STANDARD_CONFIG_KEYS)) - set(SET_BY_PACKAGE)
    )
    for key, value in overrides.items():
        if key in SET_BY_PACKAGE:
            raise ValueError(f"{given_by} gives {key}, which {SET_BY_PACKAGE[key]}, not by {given_by}: remove it.")
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=CLOSE_MATCH)
            hint = f"did you mean {close[0]!r}?" if close else f"known fields: {', '.join(known)}."
            raise ValueError(f"Unknown config field {key!r}: {hint}")
        refuse_other_type(key, value, given_by)


def refuse_other_type(key: str, value, given_by: str) -> None:
    """A ValueError where `value` is not of the type of config field `key` (checked as the config's @strict checks
    it), naming how that type is written in an override (`qkv_bias=no` -> true or false; a list in the JSON form)."""
    field = ViTScratchConfig.__dataclass_fields__.get(key)
    if field is None:
        return  # a standard key (attn_implementation, ...): the config reads it itself
    try:
        type_validator(key, value, field.type)
    except (TypeError, ValueError):
        default = None if field.default is MISSING else field.default
        takes, fix = spelling(key, field.type, value, default, given_by)
        shown = repr(value) if isinstance(value, str) else json.dumps(value)  # as an override writes it: true, [8]
        raise ValueError(f"{given_by} gives {key} {shown}, but {key} takes {takes}: write {fix}.") from None


def spelling(key: str, hint, value, default, given_by: str) -> tuple[str, str]:
    """What a field typed `hint` takes, as an override writes it, and a fix for `value` that works."""
    kinds = [kind for kind in flat_types(hint) if kind is not type(None)]
    origins = {typing.get_origin(kind) or kind for kind in kinds}
    if typing.Literal in origins:
        choices = ", ".join(repr(choice) for kind in kinds for choice in typing.get_args(kind))
        return f"one of {choices}", "one of them"
    if origins == {bool}:
        return "true or false", "true or false"
    if origins & {list, tuple}:
        example = [default, default] if isinstance(default, int) else list(default) or [3, 4, 9]
        json_form = json.dumps({key: example}) if given_by.startswith("--") else json.dumps(example)
        json_form = f"{given_by} '{json_form}'" if given_by.startswith("--") else json_form
        if int in origins:
            return "an integer or a list of integers, in the JSON form", f"e.g. {default}, or {json_form}"
        return "a list of integers, in the JSON form", json_form
    if origins == {int}:
        whole = isinstance(value, float) and value.is_integer()
        return "an integer", f"{int(value)}" if whole else f"an integer, e.g. {default}"
    if origins == {float}:
        number = isinstance(value, int) and not isinstance(value, bool)
        return "a number written with a point", f"{float(value)}" if number else f"a number, e.g. {default}"
    if float in origins:
        return "a number", f"a number, e.g. {default}"
    return "text", "it in quotes"


def flat_types(hint) -> list:
    """The types a (possibly union) type hint allows: `int | list[int]` -> [int, list[int]]."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [kind for part in typing.get_args(hint) for kind in flat_types(part)]
    return [hint]
