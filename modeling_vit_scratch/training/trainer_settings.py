"""The Trainer arguments that take a mapping or one word of a fixed set, checked as data before any work.

transformers reads a mapping argument (every `TrainingArguments` field typed `dict`: accelerator_config,
fsdp_config, deepspeed, lr_scheduler_kwargs, ...) as JSON text when it starts with "{", else, where its help says it
takes a JSON file, as that file's path, and only once the run starts: its errors name neither the argument nor the
file (`Expecting value: line 1 column 1`). Each is read here, bounded, and any fault is one line naming the argument,
the file and what is wrong; a file is never inside the output folder (a run replaces what is there) nor a path
holding a token.

A word that transformers or accelerate checks only later against an enum of its own (`DOWNSTREAM_CHOICES`) gets that
enum's values as argparse choices, and an argument argparse converts through an enum (`debug`) lists its values when
a word is none of them: a wrong word is one line naming the argument, the word as typed and the choices.
"""

import argparse
import enum
import functools
import json
import os
import typing
from dataclasses import fields
from pathlib import Path

from transformers import TrainingArguments

from modeling_vit_scratch.common.folders import overlap
from modeling_vit_scratch.common.model_folder import MAX_SETTINGS_BYTES
from modeling_vit_scratch.common.secrets import refuse_token_in_path

EXAMPLE = "'{\"key\": value}'"


def _takes_mapping(hint) -> bool:
    """Whether a type hint allows a dict (`dict | str | None`, `dict[str, Any] | str | None`)."""
    parts = (
        typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, __import__("types").UnionType) else [hint]
    )
    return any(part is dict or typing.get_origin(part) is dict for part in parts)


@functools.cache
def mapping_arguments() -> tuple[str, ...]:
    """The TrainingArguments fields that take a mapping, as JSON text (or a JSON file's path, `file_arguments`)."""
    hints = typing.get_type_hints(TrainingArguments)
    return tuple(item.name for item in fields(TrainingArguments) if item.init and _takes_mapping(hints[item.name]))


@functools.cache
def file_arguments() -> tuple[str, ...]:
    """The mapping arguments that transformers reads from a JSON file when not given as JSON text: those whose
    help says so."""
    helps = {item.name: item.metadata.get("help", "").lower() for item in fields(TrainingArguments)}
    return tuple(name for name in mapping_arguments() if "json config file" in helps[name])


def check_mapping_arguments(values: dict, output_dir: str | None) -> None:
    """A ValueError naming the argument (and file) for a mapping argument in `values` that is not a JSON object, or
    whose file is missing, a folder, too large, not UTF-8 JSON, inside `output_dir`, or named by a token-bearing
    path."""
    for name in mapping_arguments():
        value, argument = values.get(name), f"--{name}"
        if not isinstance(value, str):
            continue
        if value.startswith("{"):  # as transformers tells text from a path
            read_mapping(argument, value)
        elif name in file_arguments():
            check_settings_file(argument, value, output_dir)
        else:
            raise ValueError(
                f"{argument} takes a JSON object, e.g. {argument} {EXAMPLE}, not {value[:60]!r}: write the object "
                "(in a recipe, a mapping)."
            )


def check_settings_file(argument: str, value: str, output_dir: str | None) -> None:
    """The checks of `check_mapping_arguments` for a file-valued argument given the path `value`."""
    refuse_token_in_path(argument, value, read=True)
    where = f"{argument} {value}"
    fix = f"give the path of a JSON file, or the JSON object itself ({argument} {EXAMPLE})"
    path = Path(value)
    if not path.exists():
        raise ValueError(f"{where} does not exist: {fix}.")
    if not path.is_file():
        raise ValueError(f"{where} is not a file: {fix}.")
    inside = overlap(os.path.realpath(output_dir), argument, value) if output_dir else None
    if inside in ("is", "holds"):
        raise ValueError(
            f"{where} is inside --output_dir {output_dir} (as is the file it links to, if a link), which a run "
            "replaces: keep the settings file outside the output folder."
        )
    size = path.stat().st_size
    if size > MAX_SETTINGS_BYTES:
        raise ValueError(
            f"{where} is {size:,} bytes, more than the {MAX_SETTINGS_BYTES:,} a settings file may be: {fix}."
        )
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"{where} is not UTF-8 text ({error.reason}): {fix}.") from None
    except OSError as error:
        raise ValueError(f"{where} cannot be read ({error.strerror}): {fix}.") from None
    read_mapping(argument, text, value)


def read_mapping(argument: str, text: str, path: str | None = None) -> dict:
    """The JSON object `text` (given to `argument`, read from the file `path` if any), or a one-line ValueError."""
    where = f"{argument} {path}" if path else argument
    holding = "a file holding " if path else ""
    if len(text) > MAX_SETTINGS_BYTES:
        raise ValueError(f"{where} is longer than the {MAX_SETTINGS_BYTES:,} characters a setting may be.")
    try:
        content = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{where} is not JSON (line {error.lineno} column {error.colno}: {error.msg}): give {holding}a JSON "
            f"object, e.g. {EXAMPLE}."
        ) from None
    except RecursionError:
        raise ValueError(f"{where} is nested too deep to read: no setting nests like that; write it out.") from None
    if not isinstance(content, dict):
        raise ValueError(
            f"{where} holds a JSON {type(content).__name__}, not an object of names and values: give {holding}a JSON "
            f"object, e.g. {EXAMPLE}."
        )
    return content


def dynamo_backends() -> list[str]:
    """The torch.compile backends accelerate takes (it upper-cases the word and reads it as a `DynamoBackend`)."""
    from accelerate.utils import DynamoBackend

    return [backend.value.lower() for backend in DynamoBackend]


def compile_modes() -> list[str]:
    """The modes torch.compile takes."""
    import torch._inductor

    return list(torch._inductor.list_mode_options())


# Word arguments typed `str` that are checked against a set of their own only once the run starts: where that set is
DOWNSTREAM_CHOICES = {"torch_compile_backend": dynamo_backends, "torch_compile_mode": compile_modes}


def enum_word(kind: type[enum.Enum]):
    """argparse's converter of a word to `kind`, whose refusal lists the words it takes."""

    def convert(word: str):
        try:
            return kind(word)
        except ValueError:
            choices = ", ".join(repr(member.value) for member in kind)
            raise argparse.ArgumentTypeError(f"invalid choice: {word!r} (choose from {choices})") from None

    convert.__name__, convert.enum = kind.__name__, kind
    return convert


def add_word_choices(parser: argparse.ArgumentParser) -> None:
    """Give `parser`'s word arguments their choices: those of `DOWNSTREAM_CHOICES`, and an enum converter's values."""
    for action in parser._actions:
        names = [option[2:] for option in action.option_strings]
        choices = next((DOWNSTREAM_CHOICES[name] for name in names if name in DOWNSTREAM_CHOICES), None)
        if choices:
            action.choices = choices()
        elif isinstance(action.type, type) and issubclass(action.type, enum.Enum):
            action.type = enum_word(action.type)
