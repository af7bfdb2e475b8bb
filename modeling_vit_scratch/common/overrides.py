"""`--config_overrides` as the training and conversion commands take it: "key=value,..." -> checked config fields."""

import difflib
import json
import math
from dataclasses import fields

from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig

EXAMPLES = {"--timm_kwargs": "img_size=384"}  # an item each argument takes, for its error lines


def parse_overrides(text: str | None, flag: str = "--config_overrides") -> dict:
    """'a=1,b=0.5,c=mean,d=true' -> {'a': 1, 'b': 0.5, 'c': 'mean', 'd': True}; errors name `flag`, the argument
    the text came from."""
    overrides = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        if "=" not in item:
            raise ValueError(
                f"{flag} item {item!r} is not key=value: write e.g. '{EXAMPLES.get(flag, 'hidden_size=64')}'."
            )
        key, value = (part.strip() for part in item.split("=", 1))
        if key in overrides:  # the later would win without a word, as a recipe's key given twice would
            raise ValueError(f"{flag} gives {key} twice ({key}={overrides[key]}, then {item}): keep one.")
        try:
            overrides[key] = json.loads(value.lower() if value.lower() in ("true", "false", "null") else value)
        except json.JSONDecodeError:
            overrides[key] = value
        if any(isinstance(number, float) and not math.isfinite(number) for number in numbers_in(overrides[key])):
            raise ValueError(f"{flag} {key}={value} is not a finite number: give e.g. '{key}=0.1'.")
    return overrides


def numbers_in(value) -> list:
    """The value itself, or the items of a list (`stem_depths=[3,4,9]`), to check each number once."""
    return list(value) if isinstance(value, list) else [value]


# Keys a config may be given besides its dataclass fields: PreTrainedConfig's keyword arguments and properties.
STANDARD_CONFIG_KEYS = ("num_labels", "attn_implementation", "torch_dtype", "output_attentions")


def check_config_overrides(overrides: dict) -> None:
    """Raise a ValueError for a key that is no config field, naming the closest real one (a typo such as
    `hiden_size` would otherwise be stored and ignored)."""
    known = sorted({field.name for field in fields(ViTScratchConfig)} | set(STANDARD_CONFIG_KEYS))
    for key in overrides:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known fields: {', '.join(known)}."
            raise ValueError(f"Unknown config field {key!r}: {hint}")
