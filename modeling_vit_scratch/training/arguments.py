"""The command line of `scripts/train.py`: its argument groups, recipes, and the token values it must never leak.

Arguments are those of `ModelArguments`, `DataArguments`, `OutputArguments` and transformers' `TrainingArguments`,
given on the command line or in a JSON/YAML recipe (`configs/`, read strictly by `recipes.py`; one, given first),
matched exactly: an unknown or shortened name is an error naming the closest real one, which never echoes the value
that follows it (it may be a token); a value that follows no argument is named. The output folder must be named, and
what an argument needs beyond the package's dependencies is checked at once (`packages.py`). Every number is checked against its group's table (`limits.py`) before any group is built. Any value given
to an argument whose name holds "token" is masked wherever the command is shown.
"""

import argparse
import difflib
import filecmp
import functools
import json
import os
import re
import sys
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

import torch
from transformers import HfArgumentParser, TrainingArguments

from modeling_vit_scratch.cli import COMMAND
from modeling_vit_scratch.common.blank import blank_argument_line, is_blank, shown_blank
from modeling_vit_scratch.common.commands import printed_command, printed_python
from modeling_vit_scratch.common.numbers import check_numbers
from modeling_vit_scratch.common.overrides import parse_overrides
from modeling_vit_scratch.common.repeated import repeated_option
from modeling_vit_scratch.common.secrets import (
    holds_secret,
    known_secrets,
    mask_token_values,
    redact,
    refuse_token_in_path,
    secrets_in_argv,
)
from modeling_vit_scratch.common.sources import DIGITS, looks_like_local_path
from modeling_vit_scratch.common.user_paths import (
    NotALocalPath,
    expand_user_paths,
    refuse_variable_reference,
    user_path,
)
from modeling_vit_scratch.training.distillation import Distillation
from modeling_vit_scratch.training.distributed import first_process
from modeling_vit_scratch.training.limits import LIMITS
from modeling_vit_scratch.training.packages import check_argument_packages
from modeling_vit_scratch.training.precision import BF16_MIN_SPEEDUP
from modeling_vit_scratch.training.preflight import DECODE_UP_FRONT_MAX_IMAGES
from modeling_vit_scratch.training.recipes import (
    key_line,
    load_json,
    load_recipe,
    load_yaml,
    shipped_recipe,
    shipped_recipes,
)
from modeling_vit_scratch.training.trainer_settings import add_word_choices, check_mapping_arguments, file_arguments


@dataclass
class ModelArguments:
    model: str = field(
        default="vit-tiny-patch16-224",
        metadata={
            "help": "What to train: a preset name (e.g. vit-base-patch16-224), a config JSON file to build a new "
            "model from, or a saved folder / hub repo id to fine-tune."
        },
    )
    model_revision: str | None = field(
        default=None,
        metadata={
            "help": "The branch, tag or full commit id of a hub repo --model (default: main); the commit read is "
            "recorded."
        },
    )
    config_overrides: str | None = field(
        default=None,
        metadata={"help": "Config fields to override for a new model, e.g. 'image_size=64,drop_path_rate=0.1'."},
    )
    attn_implementation: str | None = field(
        default=None, metadata={"help": "Attention kernel: 'eager' or 'sdpa' (default: transformers' choice)."}
    )
    teacher: str | None = field(
        default=None,
        metadata={
            "help": "Train against this teacher (DeiT): a folder or hub repo of an image classifier with the same "
            "labels, e.g. one trained by this script from configs/models/model_digits_teacher.json. The student gets a "
            "distillation token and a second head."
        },
    )
    teacher_revision: str | None = field(
        default=None,
        metadata={
            "help": "The branch, tag or full commit id of a hub repo --teacher (default: main); the commit read is "
            "recorded."
        },
    )
    distillation: Literal["hard", "soft"] = field(
        default="hard",
        metadata={
            "help": "'hard': the distillation head learns the teacher's top class; 'soft': its softened "
            "probabilities (KL divergence at --distillation_temperature)."
        },
    )
    distillation_alpha: float = field(
        default=0.5, metadata={"help": "The teacher's share of the loss; the labels' is 1 - alpha."}
    )
    distillation_temperature: float = field(default=1.0, metadata={"help": "Softmax temperature of 'soft'."})
    bf16_when_faster: bool = field(
        default=False,
        metadata={
            "help": "Before training, time a few training steps of the model in float32 and under bf16 autocast on "
            f"this machine and train in bf16 if it is at least {BF16_MIN_SPEEDUP:g}x faster (CPUs with bf16 units, "
            "most GPUs); the output, the record and the model card say which and why; a resumed run keeps the "
            "choice its checkpoint records. --bf16 true, --fp16 true or accelerate's mixed_precision (`accelerate "
            "launch --mixed_precision`) override it."
        },
    )
    # the loss the three options above describe: built (and so checked) once, here, and used by the trainer
    distillation_loss: Distillation = field(init=False, repr=False)
    ema_decay: float | None = field(
        default=None,
        metadata={
            "help": "Keep an exponential moving average of the weights with this decay, in [0, 1) (e.g. 0.9998), "
            "updated after every optimizer step: evaluation scores it, checkpoints keep it, and the saved model is "
            "it (default: off)."
        },
    )
    layer_decay: float | None = field(
        default=None,
        metadata={
            "help": "Layer-wise learning-rate decay in (0, 1] for fine-tuning (e.g. 0.75): the head trains at "
            "--learning_rate, block i of L at --learning_rate x decay^(L - i), the embeddings at x decay^(L + 1) "
            "(default: off, one rate)."
        },
    )

    def __post_init__(self):
        self.distillation_loss = Distillation(self.distillation, self.distillation_alpha, self.distillation_temperature)


@dataclass
class DataArguments:
    dataset: str = field(
        default=DIGITS,
        metadata={
            "help": f"'{DIGITS}' (the embedded scikit-learn digits), an imagefolder or save_to_disk folder, "
            "or a hub dataset name."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    image_column: str | None = field(default=None, metadata={"help": "Image column (default: detected)."})
    label_column: str | None = field(default=None, metadata={"help": "Label column (default: detected)."})
    validation_fraction: float = field(
        default=0.1, metadata={"help": "Share of train held out for model selection when there is no validation split."}
    )
    test_fraction: float = field(default=0.1, metadata={"help": "Share of train held out when there is no test split."})
    split_seed: int = field(default=0, metadata={"help": "Seed of the splits made here (independent of --seed)."})
    augment: bool = field(
        default=True, metadata={"help": "Augment training images as --augmentation says (false: not at all)."}
    )
    augmentation: Literal["digits", "photos", "none"] = field(
        default="digits",
        metadata={
            "help": "The training augmentation policy: 'digits' (small shifts and rotations: --max_shift, "
            "--max_degrees), 'photos' (random-resized crop, flip, RandAugment, random erasing, Mixup / CutMix: "
            "each knob below changes it), 'none'. docs/training.md#photos."
        },
    )
    max_shift: float = field(default=0.1, metadata={"help": "Largest shift, as a fraction of the image side."})
    max_degrees: float = field(default=10.0, metadata={"help": "Largest rotation in degrees."})
    crop_scale: float | None = field(
        default=None,
        metadata={"help": "Random-resized crop: smallest share of the image's area kept, in (0, 1] (photos: 0.08)."},
    )
    crop_ratio: float | None = field(
        default=None,
        metadata={"help": "Random-resized crop: aspect ratios from this to its inverse, in (0, 1] (photos: 0.75)."},
    )
    hflip: float | None = field(default=None, metadata={"help": "Chance of a horizontal flip (photos: 0.5)."})
    rand_augment: str | None = field(
        default=None,
        metadata={
            "help": "'rand-mM-nN' (RandAugment, N operations at magnitude M of 10), 'trivial' or 'none' "
            "(photos: rand-m9-n2)."
        },
    )
    random_erasing: float | None = field(
        default=None, metadata={"help": "Chance that a rectangle of an image is erased (photos: 0.25)."}
    )
    mixup: float | None = field(default=None, metadata={"help": "Share of batches mixed by Mixup (photos: 0.5)."})
    cutmix: float | None = field(default=None, metadata={"help": "Share of batches mixed by CutMix (photos: 0.5)."})
    crop_pct: float | None = field(
        default=None,
        metadata={
            "help": "Evaluate (and save the processor to infer) on a centre crop: resize so that the crop takes this "
            "share of the image, e.g. 0.875 (default: the image squashed to the model's size)."
        },
    )
    eval_flip: bool = field(
        default=False, metadata={"help": "Score each evaluation image as the mean of it and its mirror image."}
    )
    validation_views: int = field(
        default=1,
        metadata={
            "help": "Score each validation image on the averaged probabilities of itself and this many - 1 seeded "
            "shifts and rotations (the training augmentation), so that model selection on a small validation split "
            "can tell epochs apart."
        },
    )
    images_in_memory_mb: float = field(
        default=2048,
        metadata={
            "help": "Process each split's images once and keep them in memory as tensors when they take at most "
            "this many MB (float32 at the model's input size); larger splits, or 0, are processed anew each time a "
            "batch is read."
        },
    )
    total_train_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "Global batch size: sets the per-device batch from the number of processes and gradient "
            "accumulation steps, so a recipe trains the same way on 1 or N processes."
        },
    )
    max_train_samples: int | None = field(
        default=None,
        metadata={"help": "Use only this many training images (at least one of every class the run is scored on)."},
    )
    check_images: bool | None = field(
        default=None,
        metadata={
            "help": "Decode every image before the first training step (default: when there are at most "
            f"{DECODE_UP_FRONT_MAX_IMAGES:,}; above that only check that each file exists and its header parses)."
        },
    )

    streaming: bool = field(
        default=False,
        metadata={
            "help": "Read the set while training instead of loading it (a folder of parquet or WebDataset .tar "
            "shards, an imagefolder, or a hub set): each process reads its own shards; needs --max_steps. "
            "docs/training.md, 'Sets that do not fit'."
        },
    )
    shuffle_buffer_size: int = field(
        default=1000,
        metadata={"help": "With --streaming: rows are shuffled in windows of this many (held undecoded)."},
    )
    max_bad_images: int = field(
        default=10,
        metadata={"help": "With --streaming: skip up to this many images that cannot be decoded, then stop."},
    )
    max_eval_samples: int = field(
        default=2000,
        metadata={"help": "With --streaming: at most this many validation and this many test images, in memory."},
    )

    def __post_init__(self):
        if self.validation_views < 1:
            raise ValueError(f"--validation_views must be at least 1 (the image itself), got {self.validation_views}.")


@dataclass
class OutputArguments:
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Replace the model already in --output_dir (without it, a folder holding a model is refused)."
        },
    )


ARGUMENT_TYPES = (ModelArguments, DataArguments, OutputArguments, TrainingArguments)


def argument_names() -> list[str]:
    """Every argument `scripts/train.py` accepts, as written in a recipe (`learning_rate`)."""
    return [item.name for kind in ARGUMENT_TYPES for item in fields(kind) if item.init]


def closest(name: str, names: list[str]) -> str:
    """' (did you mean X?)' for the nearest real name, or ''."""
    match = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


# Arguments that name an input, an output or a name (output_dir has its own line: it has no default), and what each
# takes: given empty, on the command line or in a recipe, each is one line (`blank.py`), never its default
NAMED_ARGUMENTS = {
    "model": "a preset name (e.g. vit-tiny-patch16-224), an architecture JSON file, or a saved folder / hub repo id",
    "teacher": "a folder or hub repo id of the teacher",
    "dataset": f"'{DIGITS}', an imagefolder or save_to_disk folder, or a hub data set name",
    "dataset_config": "a hub data set configuration name",
    "image_column": "the name of the image column",
    "label_column": "the name of the label column",
    "resume_from_checkpoint": "a checkpoint folder, or true for the last one in --output_dir",
    "hub_model_id": "a repo id such as your-name/vit-digits",
    "run_name": "a name for the run",
}


def refuse_blank_arguments(argv: list[str], values: dict) -> None:
    """A ValueError for an argument of `NAMED_ARGUMENTS` given empty on the command line (`--dataset ""`, `--teacher
    "$T"` with T unset): it would read the working folder, or train with no teacher, without a word."""
    given = given_names(argv)
    for name, what in NAMED_ARGUMENTS.items():
        if name in given and is_blank(values[name]):
            raise ValueError(blank_argument_line(f"--{name}", values[name], what, optional=True))


def refuse_blank_recipe_value(path: Path, key: str, value) -> None:
    """A ValueError for a key of `NAMED_ARGUMENTS` left empty in the recipe at `path` (`dataset:` with nothing after
    it is YAML's null; `teacher: "$T"` with T unset is ""), naming the file and line: it would train on the default
    (the digits, vit-tiny at 224 px, no teacher) without a word."""
    if key in NAMED_ARGUMENTS and (value is None or is_blank(value)):
        shown = "null" if value is None else shown_blank(value)
        raise ValueError(
            f"Key {key!r} in the recipe {path}{key_line(path, key)} is empty ({shown}): give it "
            f"{NAMED_ARGUMENTS[key]}, or remove the key for the default."
        )


# Recipe keys that name a file or folder to read: relative to the working directory, or else to the recipe's folder
RECIPE_PATH_KEYS = ("model", "teacher", "dataset")
# every argument that names a file or folder: a leading `~` is a home folder, on the command line and in a recipe
PATH_ARGUMENTS = (*RECIPE_PATH_KEYS, "output_dir", "resume_from_checkpoint", *file_arguments())
# a recipe is read by no shell: `$HOME/x` would stay a folder named '$HOME' in the working folder, and `~` is expanded
RECIPE_IS_NO_SHELL = (
    "which a recipe keeps as written (no shell reads it), so it would name a path of that very name, not the "
    "variable's value"
)
RECIPE_PATHS = (
    "Train from a recipe (RECIPE.json or .yaml, given first) and/or arguments; the command line wins. Relative paths "
    "in a recipe: what it reads (model, teacher, dataset) is found from the working folder or beside the recipe (or "
    "the file it links to; two different ones are refused; the one read is printed); what it writes (output_dir, always named) is relative to "
    "the working folder, as on the command line. The resolved output folder is printed at the start."
)


def path_in_recipe(recipe: Path, key: str, value: str) -> tuple[str, str | None]:
    """A path that a recipe names to read (`RECIPE_PATH_KEYS`), as the command line gets it, and where it was found.

    A relative path is found from the working directory (a recipe written for one place), beside the recipe as given
    (so `configs/train_digits.json` finds `models/...` beside it from anywhere), or, for a recipe given through a
    symbolic link, beside the file it links to (where its neighbours are): where it exists in one of these, that
    one, and `where` says which; where it exists in several and they differ (two files with other bytes, two
    folders), a ValueError naming each, since taking either silently may train on what the user did not mean; where
    a name that can only be a local path (`looks_like_local_path`, or an architecture `.json`) exists in none, a
    FileNotFoundError naming the recipe, the key and each place looked. An absolute path, or a name that is no local
    path (a preset, a hub id, the digits), is kept, with `where` None."""
    if is_absolute_path(value) or (key == "dataset" and value == DIGITS):
        return value, None
    places = recipe_places(recipe, value)
    written = f"Key {key!r} in the recipe {recipe}{key_line(recipe, key)} is {value!r}"
    found = [(path, where) for path, where in places.items() if path.exists()]
    if any(not same_input(found[0][0], path) for path, _ in found[1:]):
        shown = listed([f"{os.path.abspath(path)} ({where})" for path, where in found])
        raise ValueError(
            f"{written}, which names {NUMBER_WORDS[len(found)]} different inputs: {shown}: write the one you mean as an absolute "
            f"path in the recipe, or give --{key} on the command line."
        )
    if found:
        path, where = found[0]
        return (value if where == HERE else str(path)), where
    if looks_like_local_path(value) or (key != "dataset" and value.endswith(".json")):
        shown = listed([f"{os.path.abspath(path)} ({where})" for path, where in places.items()])
        raise FileNotFoundError(
            f"{written}, which is in none of the places a recipe's path is read from: {shown}: write the path of an "
            f"existing file or folder, or give --{key} on the command line."
        )
    return value, None


HERE = "from the working folder"
NUMBER_WORDS = {2: "two", 3: "three"}


def listed(items: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`."""
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 1 else items)


def is_absolute_path(value: str) -> bool:
    """Whether `value` names a path from the root once a leading `~` or a file URL is read (`user_path`)."""
    try:
        return Path(user_path(value)).is_absolute()
    except NotALocalPath:  # another host's file URL: refused with its own line when the argument is read
        return True


def recipe_places(recipe: Path, value: str) -> dict[Path, str]:
    """Where a recipe's relative `value` is looked for, in order, each with the words that say where: the working
    folder, beside the recipe as given, and beside the file it links to when it is (or sits in) a symbolic link."""
    places = {Path(value): HERE, recipe.parent / value: "beside the recipe"}
    target = Path(os.path.realpath(recipe))
    if target.parent != Path(os.path.realpath(recipe.parent)):
        places.setdefault(target.parent / value, f"beside {target}, which the recipe links to")
    return places


def same_input(first: Path, second: Path) -> bool:
    """Whether two existing paths are one input: the same file or folder, or two files with the same bytes."""
    if os.path.samefile(first, second):
        return True
    return first.is_file() and second.is_file() and filecmp.cmp(first, second, shallow=False)


def recipe_inputs_read(argv: list[str]) -> list[str]:
    """One line for each file or folder the recipe (`argv[0]`) names to read by a relative path, saying which path
    was read and where it was found (printed at the start, as the output folder is); an input the command line
    overrides is not read, and not named."""
    if not argv or not argv[0].endswith(RECIPE_SUFFIXES):
        return []
    recipe, given = Path(argv[0]), given_names(argv[1:])
    lines = []
    for key, value in load_recipe(recipe).items():
        if key in RECIPE_PATH_KEYS and value is not None and key not in given:
            read, where = path_in_recipe(recipe, key, str(value))
            if where:
                lines.append(f"--{key} from the recipe: {os.path.abspath(read)} (found {where}).")
    return lines


def merged_overrides(argv: list[str], given: str | None) -> tuple[str | None, dict]:
    """`given`, the --config_overrides argparse kept, merged key by key into the recipe's (`argv[0]`) when both the
    recipe and the command line give it (argparse keeps the last, which would drop the recipe's without a word): the
    command line wins on a shared key. Returns the text the run takes and {key: (recipe's, command line's)} for each
    key the command line replaced."""
    if not argv or not argv[0].endswith(RECIPE_SUFFIXES) or "config_overrides" not in given_names(argv[1:]):
        return given, {}
    written = load_recipe(Path(argv[0])).get("config_overrides")
    if written is None:
        return given, {}
    recipe = parse_overrides(recipe_words(Path(argv[0]), "config_overrides", written)[0])
    command = parse_overrides(given)
    replaced = {key: (recipe[key], value) for key, value in command.items() if key in recipe}
    merged = {**recipe, **command}
    return (json.dumps(merged) if merged else given), replaced


def recipe_lines(argv: list[str]) -> list[str]:
    """What the recipe (`argv[0]`) changed hands with the command line, printed at the start: each input read by a
    relative path (`recipe_inputs_read`), and the recipe's config_overrides keys the command line replaced."""
    _, replaced = merged_overrides(argv, command_line_value(argv[1:], "config_overrides"))
    shown = ", ".join(f"{key} ({plain_word(old)} -> {plain_word(new)})" for key, (old, new) in replaced.items())
    merge = [f"--config_overrides on the command line replaces the recipe's {shown}; its other keys are kept."]
    return recipe_inputs_read(argv) + (merge if replaced else [])


def command_line_value(argv: list[str], name: str) -> str | None:
    """The value of the last `--name VALUE` (or `--name=VALUE`, dashes for underscores) in `argv`, as argparse
    keeps it, or None."""
    value = None
    for index, arg in enumerate(argv):
        given, equals, after = arg.partition("=")
        if given.startswith("--") and given[2:].replace("-", "_") == name:
            value = after if equals else (argv[index + 1] if index + 1 < len(argv) else None)
    return value


def given_names(argv: list[str]) -> set[str]:
    """The argument names given in `argv` (`--seed 3`, `--seed=3` -> "seed")."""
    return {arg[2:].partition("=")[0].replace("-", "_") for arg in argv if arg.startswith("--")}


RECIPE_SUFFIXES = (".json", ".yaml", ".yml")


def with_shipped_recipe(argv: list[str]) -> tuple[list[str], str | None]:
    """`argv` with its first word, when it names a recipe the package ships and no file here (`train_digits`,
    `configs/train_digits.json` outside a checkout), replaced by the shipped file's path, and the line that says so
    (None when nothing was replaced)."""
    found = shipped_recipe(argv[0]) if argv and not argv[0].startswith("-") else None
    if found is None:
        return argv, None
    return [str(found), *argv[1:]], f"Recipe {argv[0]}: the one the package ships, {found}"


def recipe_to_argv(argv: list[str]) -> list[str]:
    """`[recipe.json, --key value, ...]` -> the recipe's arguments as command-line arguments, then the rest.

    Arguments given on the command line come last, so they override the recipe's. Recipe keys must be argument
    names exactly: an unknown or shortened key is an error naming the closest real one. A file or folder the recipe
    names is found from the working directory or from the recipe's folder (`path_in_recipe`). A first value that
    is a folder or a file not named as a recipe is refused (`refuse_a_non_recipe`).
    """
    if not argv or not argv[0].endswith(RECIPE_SUFFIXES):
        if argv:
            refuse_a_non_recipe(argv[0])
        return argv
    path = Path(argv[0])
    if not path.is_file():
        raise FileNotFoundError(
            f"Recipe {argv[0]!r} not found: give a JSON or YAML file, or the name of one the package ships "
            f"({', '.join(shipped_recipes())})."
        )
    recipe = load_recipe(path)
    names, overridden = argument_names(), given_names(argv[1:])
    args = []
    for key, value in recipe.items():
        if key not in names:
            raise ValueError(
                f"Unknown key {key!r} in the recipe {argv[0]}{key_line(path, key)}{closest(key, names)}: fix or remove it."
            )
        if key not in overridden:
            refuse_blank_recipe_value(path, key, value)
        if value is None:
            continue
        if key in PATH_ARGUMENTS and isinstance(value, str):
            refuse_variable_reference(
                value,
                f"Key {key!r} in the recipe {path}{key_line(path, key)}",
                RECIPE_IS_NO_SHELL,
                "write the path out, or use ~ for your home folder",
            )
        if key in RECIPE_PATH_KEYS and key not in overridden and not isinstance(value, (dict, list)):
            value, _ = path_in_recipe(path, key, str(value))  # a mapping or list is refused as such, never a path
        written = recipe_words(path, key, value)
        # a single value that starts with "-" as --key=value, which argparse never reads as an option (-inf)
        single_dash = not isinstance(value, list) and written[0].startswith("-")
        args += [f"--{key}={written[0]}"] if single_dash else [f"--{key}", *written]
    return args + argv[1:]


def refuse_a_non_recipe(value: str) -> None:
    """A ValueError when `value`, the first word of a command line, is a folder or an existing file not named
    .json/.yaml/.yml: argparse would call it a value without an argument."""
    path = Path(value)
    if value.startswith("-") or value.endswith(RECIPE_SUFFIXES):
        return
    if path.is_dir():
        recipes = sorted(str(item) for item in path.iterdir() if item.suffix in RECIPE_SUFFIXES)[:3]
        example = f", e.g. {', '.join(recipes)}" if recipes else ""
        raise ValueError(
            f"{value} is a folder, and a recipe is a .json, .yaml or .yml file given first: give a recipe file in it{example}."
        )
    if path.is_file() and reads_as_recipe(path):
        raise ValueError(
            f"{value} is not named .json, .yaml or .yml, as a recipe must be: rename it "
            f"(e.g. {path.with_suffix('.json')}) or give a recipe file."
        )
    if path.is_file():
        raise ValueError(
            f"{value} is a file given without an argument name, and no recipe (a .json, .yaml or .yml file of argument "
            "names and values): give it after the argument it is for, e.g. --model takes a saved model folder, a "
            "preset name or an architecture .json file; --dataset an image folder."
        )


def reads_as_recipe(path: Path) -> bool:
    """Whether the file at `path` holds a recipe's text (a JSON or YAML mapping naming an argument) under another
    name: only then is renaming it the fix; a README or an image given where an argument's value belongs is not."""
    if path.stat().st_size > 1_000_000:
        return False
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return False
    for load in (load_json, load_yaml):
        try:
            recipe = load(path, text)
        except ValueError:
            continue
        if isinstance(recipe, dict) and set(map(str, recipe)) & set(argument_names()):
            return True
    return False


# Arguments that take "key=value,..." text, which a recipe may write as the mapping it stands for (read as JSON)
MAPPING_AS_TEXT = ("config_overrides",)


def recipe_words(path: Path, key: str, value) -> list[str]:
    """A recipe's `value` for `key` as the command line gives it: a mapping as one JSON text (arguments such as
    lr_scheduler_kwargs read JSON), a list as its values, anything else as one value. Each value is checked here, as
    the recipe is read, by the very converter and choices argparse will apply (`refuse_other_type`), so a value of
    another type is one line naming the file, line, key, value and what the argument takes; a shape the argument
    does not take (a list or mapping for a one-value argument, a list holding lists or mappings) likewise."""
    takes = str(argument_hints()[key])
    where = f"Key {key!r} in the recipe {path}{key_line(path, key)}"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and takes_text_only(argument_hints()[key]):
        refuse_number_for_text(path, key, value, where)
    if isinstance(value, dict):
        if "dict" not in takes and key not in MAPPING_AS_TEXT:
            instead = INSTEAD_OF_MAPPING.get(key, "give it one value")
            raise ValueError(f"{where} holds a mapping, which --{key} does not take: {instead}.")
        return [json.dumps(value)]
    if isinstance(value, list):
        if "list" not in takes:
            raise ValueError(
                f"{where} holds a list, which --{key} does not take: {ONE_VALUE.get(key, 'give it one value')}."
            )
        nested = [item for item in value if isinstance(item, (list, dict))]
        if nested:
            raise ValueError(
                f"{where} holds a {'list' if isinstance(nested[0], list) else 'mapping'} inside its list, which "
                f'--{key} does not take: give it a list of plain values, e.g. ["a", "b"].'
            )
        for item in value:
            refuse_other_type(key, item, plain_word(item), where)
        return [plain_word(item) for item in value]
    refuse_other_type(key, value, written_value(path, key, value), where)
    return [plain_word(value)]


# What a one-value argument that a recipe gave a list takes instead, where it takes more than one form
ONE_VALUE = {
    "config_overrides": 'write it as one text, config_overrides: "hidden_size=12,num_hidden_layers=6", or as a '
    "mapping, config_overrides: {hidden_size: 12, num_hidden_layers: 6}",
}


# What a one-value argument that a recipe gave a mapping takes instead, where a mapping has a place elsewhere
INSTEAD_OF_MAPPING = {
    "model": "an architecture is read from a JSON file, checked as such: write these fields to one (e.g. "
    "configs/models/NAME.json) and give its path, model: configs/models/NAME.json",
}


@functools.cache
def argument_actions() -> dict:
    """argparse's action of every argument, by name: its `type` converter and `choices`, as the parser applies them."""
    parser = HfArgumentParser(ARGUMENT_TYPES, allow_abbrev=False)  # as `parse_arguments` reads them
    add_word_choices(parser)
    return {option[2:]: action for action in parser._actions for option in action.option_strings}


def accepts(action, word: str) -> bool:
    """Whether argparse takes `word` for `action`: its converter reads it and the result is among its choices."""
    try:
        converted = action.type(word) if action.type else word
    except (TypeError, ValueError, argparse.ArgumentTypeError):
        return False
    return not action.choices or converted in action.choices


def what_it_takes(key: str) -> str:
    """What argument `key` takes, in the words of a refusal: its choices, its range (`limits.py`), or its kind."""
    action = argument_actions()[key]
    if action.choices:
        return f"one of {', '.join(str(choice) for choice in action.choices)}"
    kind = {int: "an integer", float: "a number"}.get(action.type)
    if kind and key in LIMITS and LIMITS[key].describe().startswith(kind):
        return LIMITS[key].describe()
    if getattr(action.type, "__name__", "") == "string_to_bool":
        return "true or false"
    return kind or "text"


def refuse_other_type(key: str, value, written: str, where: str) -> None:
    """A ValueError where a recipe's `value` (`written` so in the file) is not of the type argument `key` takes
    (`seed: true`, `"per_device_train_batch_size": 8.0`, `save_strategy: sometimes`): argparse would refuse it
    naming no file or line. The fix offered is one that works for that type: a whole number written as one; a YAML
    boolean word (`no`, read as false) quoted only where the argument takes that word as text."""
    action = argument_actions()[key]
    word = plain_word(value)
    boolean_word = isinstance(value, bool) and bool(YAML_BOOLEAN_WORDS.fullmatch(written))
    if boolean_word and "bool" not in str(argument_hints()[key]) and accepts(action, written):
        raise ValueError(
            f'{where} is {written}, which YAML reads as {word}, but --{key} takes text: quote it ({key}: "{written}").'
        )
    if accepts(action, word):
        return
    read = f", which YAML reads as {word}" if boolean_word else ""
    whole = isinstance(value, float) and value.is_integer() and action.type is int
    fix = f"write {int(value)}" if whole else "write one there"
    raise ValueError(f"{where} is {written}{read}, but --{key} takes {what_it_takes(key)}: {fix}.")


# Words YAML 1.1 (PyYAML) reads as true or false when unquoted, beside true and false themselves
YAML_BOOLEAN_WORDS = re.compile(r"y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF")


def takes_text_only(hint) -> bool:
    """Whether an argument typed `hint` takes text and no number (`str | None`, a string enum; not `float | str`)."""
    kinds = {kind for kind in flat_types(hint) if kind is not type(None)}
    return bool(kinds) and all(isinstance(kind, type) and issubclass(kind, str) for kind in kinds)


def flat_types(hint) -> list:
    """The types a (possibly union) type hint allows: `str | None` -> [str, NoneType]; `list[str]` stays itself."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [kind for part in typing.get_args(hint) for kind in flat_types(part)]
    return [hint]


def refuse_number_for_text(path: Path, key: str, value, where: str) -> None:
    """A ValueError where a recipe gives a number to an argument that takes text (`hub_revision: 1.10` arrives as
    1.1, `run_name: 010` as 8): the parser has already changed the text, so the fix is to quote it as written."""
    written = written_value(path, key, value)
    syntax, quoted = ("JSON", f'"{key}": "{written}"') if path.suffix == ".json" else ("YAML", f'{key}: "{written}"')
    raise ValueError(
        f"{where} is {written}, which {syntax} reads as the number {value!r}, but --{key} takes text: quote it "
        f"({quoted})."
    )


def written_value(path: Path, key: str, value) -> str:
    """A one-line recipe value as written in the file at `path` (`1.10`, `yes`, `8.0`), where its line is found, else
    as the parser read it."""
    line = key_line(path, key)
    if not line:
        return plain_word(value)
    text = path.read_text(encoding="utf-8-sig").splitlines()[int(line.split()[-1]) - 1]
    return text.partition(":")[2].split("#")[0].strip().rstrip(",}]").strip() or plain_word(value)


def plain_word(value) -> str:
    """One plain recipe value as a command-line word (YAML's and JSON's true as `true`)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


@functools.cache
def argument_hints() -> dict:
    """Every argument's type (`int`, `dict | str | None`, ...), by name."""
    return {name: hint for kind in ARGUMENT_TYPES for name, hint in typing.get_type_hints(kind).items()}


# Trainer arguments the package sets itself: the value it trains with, and what it does instead of the others
HONOURED_ONLY = {
    "hub_strategy": ("end", "vit-scratch pushes the final, checked model only, once training ends"),
    "hub_always_push": (False, "vit-scratch pushes the final, checked model only, once training ends"),
    "remove_unused_columns": (False, "vit-scratch keeps every column of the data set, so that the images reach it"),
}


WHOLE_SPLIT = "the accuracy and the confusion matrix are computed over the whole split at once"
# Trainer arguments that would break the package's data path: the value it trains with, and what another one breaks
DATA_PATH_ONLY = {
    "label_names": (
        None,
        "the batches carry the labels as `labels`, which the Trainer finds by itself; another name leaves evaluation unlabelled",
    ),
    "prediction_loss_only": (False, "evaluation must return predictions to score accuracy and pick the best model"),
    "eval_do_concat_batches": (True, WHOLE_SPLIT),
    "batch_eval_metrics": (False, WHOLE_SPLIT),
}


def refuse_overridden(argv: list[str], values: dict) -> None:
    """A ValueError for a Trainer argument given (in `argv`, a recipe's expanded) with a value the package would
    silently replace (`HONOURED_ONLY`), saying what it does instead, or one that would break its data path
    (`DATA_PATH_ONLY`) only once training has run, saying why."""
    given = given_names(argv)
    for name, (honoured, instead) in HONOURED_ONLY.items():
        if name in given and values[name] != honoured:
            raise ValueError(f"--{name} {shown_value(values[name])} is not used: {instead}; leave out --{name}.")
    for name, (needed, why) in DATA_PATH_ONLY.items():
        if name in given and values[name] != needed:
            raise ValueError(
                f"--{name} {shown_value(values[name])} would break training here: {why}; leave out --{name}."
            )


# Arguments that take effect only beside another: the argument -> the one it needs, as the fix gives it
APPLIES_ONLY_WITH = {
    "shuffle_buffer_size": "--streaming true",
    "max_bad_images": "--streaming true",
    "max_eval_samples": "--streaming true",
    "distillation": "--teacher TEACHER",
    "distillation_alpha": "--teacher TEACHER",
    "distillation_temperature": "--teacher TEACHER",
    "teacher_revision": "--teacher TEACHER",
    "hub_model_id": "--push_to_hub true",
    "hub_private_repo": "--push_to_hub true",
    "hub_revision": "--push_to_hub true",
    "hub_token": "--push_to_hub true",
    "fsdp_config": "--fsdp full_shard",
}


def refuse_unused_companions(argv: list[str], values: dict) -> None:
    """A ValueError for an argument given (on the command line, or in the recipe `argv` starts with, which it names
    with the line) without the one it works with (`APPLIES_ONLY_WITH`), or with that one off: it would be silently
    ignored."""
    typed, given = given_names(argv), given_names(recipe_to_argv(argv))
    for name, needs in APPLIES_ONLY_WITH.items():
        needed = needs.split()[0][2:]
        if name in given and not values[needed]:
            path = Path(argv[0])
            where = f"--{name}" if name in typed else f"Key {name!r} in the recipe {path}{key_line(path, name)}"
            raise ValueError(
                f"{where} is used only with {needs}, which is {'off' if needed in given else 'not given'}, so it "
                f"would be ignored: add {needs}, or "
                f"drop {f'--{name}' if name in typed else f'{name!r} from the recipe'}."
            )


# Arguments that have no effect beside another that overrides them: the argument -> (the one that wins, whether its
# value wins, why)
OVERRIDDEN_BY = {
    "num_train_epochs": (
        "max_steps",
        lambda steps: steps is not None and steps > 0,
        "the Trainer stops at that step, whatever the epochs, streamed or not",
    ),
}


# Set by a command that runs train for the user (the benchmark): a JSON map from an argument it added (`--max_steps`)
# to what the user gave for it (`--end_to_end_steps 3`), so that train's lines name what the user typed
GIVEN_AS_ENV = "VIT_SCRATCH_GIVEN_AS"


def given_as(option: str, value: str) -> str:
    """`option value` as the user gave it: as typed, or what the command that runs train for them says (`GIVEN_AS_ENV`)."""
    try:
        said = json.loads(os.environ.get(GIVEN_AS_ENV) or "{}")
    except ValueError:
        said = {}
    shown = said.get(option) if isinstance(said, dict) else None
    return shown if isinstance(shown, str) else f"{option} {value}"


def note_overridden(argv: list[str], values: dict) -> None:
    """One warning line (stderr) for an argument given (on the command line, or in the recipe `argv` starts with,
    named with its line) that another given argument overrides (`OVERRIDDEN_BY`), before any work. A warning, not a
    refusal: a recipe's epochs with `--max_steps` added on the command line is a legitimate override (a short try of
    a long recipe); what it must not be is silent. Said once per run: by its first process only (`first_process`)."""
    if not first_process():
        return
    typed, given = given_names(argv), given_names(recipe_to_argv(argv))
    for name, (winner, wins, why) in OVERRIDDEN_BY.items():
        if name in given and winner in given and wins(values[winner]):
            path, value = Path(argv[0]), shown_value(values[name])
            value = f"{values[name]:g}" if isinstance(values[name], float) else value  # 3, as given, not 3.0
            where = f"--{name} {value}" if name in typed else f"Key {name!r} ({value}) in the recipe {path}"
            print(
                f"warning: {where}{'' if name in typed else key_line(path, name)} has no effect: "
                f"{given_as(f'--{winner}', shown_value(values[winner]))} sets the length of the run ({why}).",
                file=sys.stderr,
            )


def shown_value(value) -> str:
    """An argument's value as the command line writes it (a list as its words)."""
    return " ".join(plain_word(item) for item in value) if isinstance(value, list) else plain_word(value)


def program_name() -> str:
    """The command as the user ran it, for argparse's `prog` and the help hint of every refusal: `vit-scratch train`
    (`cli.main` names it in sys.argv[0]) or `python scripts/train.py` (the script, by the path it was run by)."""
    program = sys.argv[0]
    if program.startswith(f"{COMMAND} "):
        return program
    return f"{printed_python()} {program}" if Path(program).name == "train.py" else f"{COMMAND} train"


def raise_value_error(message: str):
    """argparse's `error`, as an exception the script prints as one line (argparse would print usage and exit)."""
    raise ValueError(f"{message}; `{program_name()} --help` lists the arguments.")


def parse_arguments(argv: list[str]) -> tuple[ModelArguments, DataArguments, OutputArguments, TrainingArguments]:
    """`scripts/train.py`'s command line (a recipe first, if any): names are matched exactly, never abbreviated."""
    refuse_one_dash_names(argv)
    parser = HfArgumentParser(ARGUMENT_TYPES, allow_abbrev=False, description=RECIPE_PATHS, prog=program_name())
    parser.error = raise_value_error
    add_word_choices(parser)  # a word checked only once the run starts is checked here, its choices listed
    # Without a GPU (or other accelerator) the CPU is the device: saying so lets `--bf16 true` train under the CPU's
    # autocast, which TrainingArguments refuses unless `use_cpu` is set.
    parser.set_defaults(use_cpu=not torch.accelerator.is_available())
    repeated = repeated_option(parser, argv)  # the command line only: its values replace the recipe's
    if repeated:
        raise ValueError(f"{repeated}.")
    namespace, remaining = parser.parse_known_args(recipe_to_argv(argv))
    options = [arg.split("=", 1)[0] for arg in remaining if arg.startswith("-")]
    if options:  # named without the value that follows it, which may be a secret
        known = [f"--{name}" for name in argument_names()]
        raise ValueError(
            f"Unknown argument {options[0]}{closest(options[0].replace('-', '_'), known)}: "
            "arguments are matched exactly, not abbreviated."
        )
    if remaining:
        refuse_a_non_recipe(remaining[0])
        refuse_stray_values(argv, remaining)
    if argv and argv[0].endswith(RECIPE_SUFFIXES):  # the recipe's own path: read, and named in every line
        refuse_token_in_path("RECIPE", argv[0], read=True)
    refuse_misplaced_tokens(recipe_to_argv(argv), command_secrets(argv))
    values = vars(namespace)
    refuse_blank_arguments(argv, values)
    values["config_overrides"] = merged_overrides(argv, values["config_overrides"])[0]
    expand_user_paths(values, PATH_ARGUMENTS)
    refuse_overridden(recipe_to_argv(argv), values)
    check_numbers(values, LIMITS)  # before any group is built: its own checks then see only finite, in-range numbers
    refuse_unused_companions(argv, values)
    note_overridden(argv, values)
    check_mapping_arguments(values, values["output_dir"])  # transformers reads them only once the run starts
    check_argument_packages(values)  # --deepspeed fails inside TrainingArguments itself
    check_output_dir_named(argv, values["output_dir"])
    check_best_model_strategies(values)
    parsed = tuple(
        kind(**{item.name: values[item.name] for item in fields(kind) if item.init}) for kind in ARGUMENT_TYPES
    )
    # the shares of splits the user asked for, and where: a set with such a split of its own has them refused (the
    # command line) or said to be unused (a recipe, written for many sets), not ignored (`data.check_own_splits`)
    typed, read = given_names(argv), given_names(recipe_to_argv(argv))
    parsed[1].fractions_given = {
        name: "command line" if f"{name}_fraction" in typed else "recipe"
        for name in ("validation", "test")
        if f"{name}_fraction" in read
    }
    return parsed


def check_best_model_strategies(values: dict) -> None:
    """--load_best_model_at_end loads the best of the checkpoints saved when the model was evaluated, so checkpoints
    must be saved when it is evaluated (or by --save_strategy best): one line naming the option to give, before
    TrainingArguments' own multi-line refusal with its enum names."""
    if not values.get("load_best_model_at_end"):
        return
    save, evaluation = (
        str(getattr(values[name], "value", values[name])) for name in ("save_strategy", "eval_strategy")
    )
    if save not in ("best", evaluation):
        raise ValueError(
            f"--load_best_model_at_end true keeps the best of the checkpoints saved when the model is evaluated, but "
            f"--eval_strategy is {evaluation} and --save_strategy {save}: give "
            + (f"--eval_strategy {save}" if evaluation == "no" else f"--save_strategy {evaluation}")
            + ", or leave --load_best_model_at_end out."
        )


def refuse_stray_values(argv: list[str], remaining: list[str]) -> None:
    """A ValueError naming the values of the command line that follow no --argument (`remaining`, as argparse left
    them): a second recipe file gets its own line, since a run reads one recipe, given first."""
    recipes = [value for value in remaining if value.endswith(RECIPE_SUFFIXES)]
    if recipes and argv[0].endswith(RECIPE_SUFFIXES):
        raise ValueError(
            f"{recipes[0]} is a second recipe file, and a run takes one recipe ({argv[0]}, given first): merge them "
            "into one, or pass the second's values as --arguments."
        )
    if recipes:
        raise ValueError(
            f"{recipes[0]} is a recipe file given after other arguments, and a recipe goes first: "
            f"`{program_name()} {recipes[0]} --argument value ...`."
        )
    shown = ", ".join(repr(value if len(value) <= 60 else value[:57] + "...") for value in remaining[:3])
    more = f" and {len(remaining) - 3} more" if len(remaining) > 3 else ""
    raise ValueError(
        f"{shown}{more} on the command line follow{'s' * (len(remaining) == 1)} no --argument: each value goes right "
        "after the --argument it is for (a recipe file goes first); fix the command line."
    )


def check_output_dir_named(argv: list[str], output_dir: str | None) -> None:
    """The output folder is always one the user named, on the command line or in the recipe: without it the
    Trainer would write into ./trainer_output wherever the command was run (maybe inside a checkout)."""
    if output_dir is not None and str(output_dir).strip():
        return
    if output_dir is not None:
        raise ValueError(
            "--output_dir is empty: give the folder to write the model to, e.g. --output_dir outputs/vit-digits."
        )
    recipe = Path(argv[0]) if argv and argv[0].endswith(RECIPE_SUFFIXES) else None
    null = recipe is not None and "output_dir" in load_recipe(recipe)
    where = f" (the recipe {recipe}{key_line(recipe, 'output_dir')} leaves output_dir empty)" if null else ""
    raise ValueError(
        f"No output folder is given{where}: name the folder to train into with --output_dir DIR, or output_dir in "
        "the recipe, e.g. --output_dir outputs/vit-digits."
    )


ONE_DASH_NAME = re.compile(r"-([A-Za-z][A-Za-z0-9_-]+)(=.*)?")  # `-hub_token`: argparse would read `-h ub_token`


def refuse_one_dash_names(argv: list[str]) -> None:
    """A ValueError naming the two-dash form of a long argument written with one dash (`-seed 3`), which argparse
    would otherwise split into a short option and a value (`-hub_token` is `-h` with "ub_token"). Only the name is
    shown, never the value that follows it."""
    for arg in argv:
        match = ONE_DASH_NAME.fullmatch(arg)
        if match:
            name = match.group(1)
            raise ValueError(f"Argument -{name} has one dash: long arguments take two, write --{name}.")


def refuse_misplaced_tokens(argv: list[str], secrets: list[str] = ()) -> None:
    """A ValueError when a value shaped like a Hub token, or holding a token this process knows (`secrets`: given
    with --hub_token, in HF_TOKEN or saved by `hf auth login`), is given to an argument that is not for tokens
    (e.g. `--hub_model_id hf_...`, `--teacher /data/<token>/resnet`, `--output_dir runs/<token>`): it would be
    written to the card, the record and every checkpoint. Refused before any work; the value is never echoed."""
    masked = set(secrets_in_argv(argv))
    for index, arg in enumerate(argv):
        name, _, value = arg.partition("=") if arg.startswith("--") else (argv[index - 1] if index else "", "", arg)
        if value in masked:
            continue
        if holds_secret(value, secrets):
            raise ValueError(
                f"The value of {name or 'an argument'} holds or looks like a Hub token: tokens go in --hub_token, "
                "HF_TOKEN or `hf auth login`, never in another argument, where they would be written to "
                "files; fix the command line."
            )


def command_secrets(argv: list[str]) -> list[str]:
    """Every token value this command could leak: given on the command line or in its recipe, or known to
    huggingface_hub (`HF_TOKEN`, the saved login)."""
    try:
        expanded = recipe_to_argv(argv)
    except (OSError, ValueError):
        expanded = argv
    return known_secrets(*secrets_in_argv(argv), *secrets_in_argv(expanded))


def plain_command(args: list[str] | None = None) -> str:
    """The command that started this run, as a user can paste it again, with every token value replaced by ***:
    `vit-scratch train ARGS` through the installed command (`cli.main` names it in sys.argv[0]), `python
    scripts/train.py ARGS` through the script, each under `torchrun` when several processes run; `args` replace the
    arguments it was given."""
    program, args = sys.argv[0], sys.argv[1:] if args is None else args
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    # torchrun as a module of the interpreter that ran (`printed_python`), as every printed command starts
    torchrun = f"{printed_python()} -m torch.distributed.run --nproc_per_node {world_size} " if world_size > 1 else ""
    if program.startswith(f"{COMMAND} "):  # the installed command: run as it is, by torchrun without python
        words, launcher = program.split(), torchrun and f"{torchrun}--no-python "
    else:
        words, launcher = [program], torchrun or f"{printed_python()} "
    return redact(printed_command(launcher, words + mask_token_values(args)), command_secrets(args))


# Arguments that start a run afresh or name a checkpoint: left out of the command that resumes a run
RESTARTING = (
    "--overwrite_output_dir",
    "--overwrite-output-dir",
    "--resume_from_checkpoint",
    "--resume-from-checkpoint",
)


def without(args: list[str], names: tuple[str, ...]) -> list[str]:
    """`args` without the arguments `names` (as `--name value` or `--name=value`)."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        name, equals, _ = arg.partition("=")
        if name in names:
            skip = not equals
            continue
        kept.append(arg)
    return kept


def resume_command(overwrite: bool = False) -> str:
    """The command that resumes this run from its last checkpoint: `plain_command` without the arguments that
    start afresh or name a checkpoint, with `--resume_from_checkpoint true` (and `--overwrite_output_dir false` where
    the run was asked to overwrite, as `overwrite` says, perhaps by its recipe: resuming refuses both)."""
    kept = without(sys.argv[1:], RESTARTING)
    kept += ["--overwrite_output_dir", "false"] if overwrite else []
    return plain_command([*kept, "--resume_from_checkpoint", "true"])


def new_folder_beside(folder: str | Path) -> str:
    """A folder name beside `folder` that does not exist yet: `NAME-2`, `NAME-3`, ..."""
    base = str(folder).rstrip("/") or "outputs/run"
    return next(f"{base}-{number}" for number in range(2, 10_000) if not os.path.lexists(f"{base}-{number}"))


def new_run_command(model: str | Path, output_dir: str | Path) -> str:
    """The command that starts a new run from the weights of `model` (a finished run's folder or checkpoint) into a
    new folder beside `output_dir`: this command without the arguments that start afresh or resume, with
    `--model` and `--output_dir` set, as a user can run it as printed."""
    kept = without(sys.argv[1:], (*RESTARTING, "--model", "--output_dir", "--output-dir"))
    return plain_command([*kept, "--model", str(model), "--output_dir", new_folder_beside(output_dir)])
