"""The command line of `scripts/train.py`: three argument groups and transformers' `TrainingArguments`, parsed by
`HfArgumentParser`, with a recipe (JSON or YAML, given first) read as the words it stands for.

A recipe's keys become `--key value` words placed before the command line's, so the parser checks both alike (an
unknown key is its "not used" error naming it; a value of the wrong type is argparse's line) and the command line
wins, as does the last of a repeated option (`config_overrides` field by field). A relative path the recipe names to
read (`model`, `teacher`, `dataset`) is found from the working folder, else beside the recipe. Each field's metadata
may give its allowed `range` (an interval such as "[0, 1)") and the argument it `needs`; `check_fields` checks them
all in one loop, with `TRAINING_RANGES` for the TrainingArguments fields whose range transformers does not check.
"""

import copy
import json
import math
import os
import types
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

import torch
from transformers import HfArgumentParser, TrainingArguments

from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.secrets import SECRET_OPTIONS, redact, remember, shown
from modeling_vit_scratch.training.model_source import parse_overrides
from modeling_vit_scratch.training.precision import BF16_MIN_SPEEDUP
from modeling_vit_scratch.training.recipes import RECIPE_SUFFIXES, load_recipe, recipe_words, shipped_recipe


@dataclass
class ModelArguments:
    model: str = field(
        default="vit-tiny-patch16-224",
        metadata={
            "help": "What to train: a preset name (e.g. vit-base-patch16-224), a config JSON file to build a new "
            "model from, or a saved folder / hub repo id to fine-tune."
        },
    )
    objective: Literal["classification", "masked_image_modeling"] = field(
        default="classification",
        metadata={
            "help": "'classification': learn the data set's classes; 'masked_image_modeling': pretrain the model on "
            "every training image, whatever its labels (a folder of images without class sub-folders works), as a "
            "masked autoencoder (He et al. 2021; the config's mask_ratio, decoder_* and norm_pix_loss), then "
            "fine-tune it with --model OUTPUT_DIR. docs/training.md#few-labels-many-images."
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
        metadata={
            "help": "Config fields to override, e.g. 'image_size=64,drop_path_rate=0.1'; on a saved model only what "
            "leaves its tensors as saved (pooling, dropout, mask_ratio, ...)."
        },
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
            "needs": "teacher",
            "help": "The branch, tag or full commit id of a hub repo --teacher (default: main); the commit read is "
            "recorded.",
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
        default=0.5, metadata={"range": "[0, 1]", "help": "The teacher's share of the loss; the labels' is 1 - alpha."}
    )
    distillation_temperature: float = field(
        default=1.0, metadata={"range": "(0, 100]", "help": "Softmax temperature of 'soft'."}
    )
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
    ema_decay: float | None = field(
        default=None,
        metadata={
            "range": "[0, 1)",
            "help": "Keep an exponential moving average of the weights with this decay, in [0, 1) (e.g. 0.9998), "
            "updated after every optimizer step: evaluation scores it, checkpoints keep it, and the saved model is "
            "it (default: off).",
        },
    )
    layer_decay: float | None = field(
        default=None,
        metadata={
            "range": "(0, 1]",
            "help": "Layer-wise learning-rate decay in (0, 1] for fine-tuning (e.g. 0.75): the head trains at "
            "--learning_rate, block i of L at --learning_rate x decay^(L - i), the embeddings at x decay^(L + 1) "
            "(default: off, one rate).",
        },
    )


@dataclass
class DataArguments:
    dataset: str = field(
        default="digits",
        metadata={
            "help": "'digits' (the embedded scikit-learn digits), an imagefolder or save_to_disk folder, "
            "or a hub dataset name."
        },
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    image_column: str | None = field(default=None, metadata={"help": "Image column (default: detected)."})
    label_column: str | None = field(default=None, metadata={"help": "Label column (default: detected)."})
    validation_fraction: float = field(
        default=0.1,
        metadata={
            "range": "[0, 1)",
            "help": "Share of train held out for model selection when there is no validation split.",
        },
    )
    test_fraction: float = field(
        default=0.1, metadata={"range": "[0, 1)", "help": "Share of train held out when there is no test split."}
    )
    split_seed: int = field(
        default=0,
        metadata={"range": "[0, 4294967295]", "help": "Seed of the splits made here (independent of --seed)."},
    )
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
    max_shift: float = field(
        default=0.1, metadata={"range": "[0, 1]", "help": "Largest shift, as a fraction of the image side."}
    )
    max_degrees: float = field(default=10.0, metadata={"range": "[0, 180]", "help": "Largest rotation in degrees."})
    crop_scale: float | None = field(
        default=None,
        metadata={
            "range": "(0, 1]",
            "help": "Random-resized crop: smallest share of the image's area kept, in (0, 1] (photos: 0.08).",
        },
    )
    crop_ratio: float | None = field(
        default=None,
        metadata={
            "range": "(0, 1]",
            "help": "Random-resized crop: aspect ratios from this to its inverse, in (0, 1] (photos: 0.75).",
        },
    )
    hflip: float | None = field(
        default=None, metadata={"range": "[0, 1]", "help": "Chance of a horizontal flip (photos: 0.5)."}
    )
    rand_augment: str | None = field(
        default=None,
        metadata={
            "help": "'rand-mM-nN' (RandAugment, N operations at magnitude M of 10), 'trivial' or 'none' "
            "(photos: rand-m9-n2)."
        },
    )
    random_erasing: float | None = field(
        default=None,
        metadata={"range": "[0, 1]", "help": "Chance that a rectangle of an image is erased (photos: 0.25)."},
    )
    mixup: float | None = field(
        default=None, metadata={"range": "[0, 1]", "help": "Share of batches mixed by Mixup (photos: 0.5)."}
    )
    cutmix: float | None = field(
        default=None, metadata={"range": "[0, 1]", "help": "Share of batches mixed by CutMix (photos: 0.5)."}
    )
    crop_pct: float | None = field(
        default=None,
        metadata={
            "range": "(0, 1]",
            "help": "Evaluate (and save the processor to infer) on a centre crop: resize so that the crop takes this "
            "share of the image, e.g. 0.875 (default: the image squashed to the model's size).",
        },
    )
    eval_flip: bool = field(
        default=False, metadata={"help": "Score each evaluation image as the mean of it and its mirror image."}
    )
    validation_views: int = field(
        default=1,
        metadata={
            "range": "[1, inf)",
            "help": "Score each validation image on the averaged probabilities of itself and this many - 1 seeded "
            "shifts and rotations (the training augmentation), so that model selection on a small validation split "
            "can tell epochs apart.",
        },
    )
    images_in_memory_mb: float = field(
        default=2048,
        metadata={
            "range": "[0, inf)",
            "help": "Process each split's images once and keep them in memory as tensors when they take at most "
            "this many MB (float32 at the model's input size); larger splits, or 0, are processed anew each time a "
            "batch is read.",
        },
    )
    total_train_batch_size: int | None = field(
        default=None,
        metadata={
            "range": "[1, inf)",
            "help": "Global batch size: sets the per-device batch from the number of processes and gradient "
            "accumulation steps, so a recipe trains the same way on 1 or N processes.",
        },
    )
    min_train_steps: int = field(
        default=0,
        metadata={
            "range": "[0, inf)",
            "help": "Train for more epochs than --num_train_epochs where those would make fewer optimizer steps than "
            "this (a few hundred labelled images); the run says how many epochs it chose (default 0: off).",
        },
    )
    max_train_samples: int | None = field(
        default=None,
        metadata={
            "range": "[1, inf)",
            "help": "Use only this many training images (at least one of every class the run is scored on).",
        },
    )
    check_images: bool | None = field(
        default=None,
        metadata={
            "help": "Decode every image before the first training step (default: when there are at most "
            "100,000; above that only check that each file exists and its header parses)."
        },
    )

    streaming: bool = field(
        default=False,
        metadata={
            "needs": "max_steps",
            "help": "Read the set while training instead of loading it (a folder of parquet or WebDataset .tar "
            "shards, an imagefolder, or a hub set): each process reads its own shards; needs --max_steps. "
            "docs/training.md, 'Sets that do not fit'.",
        },
    )
    shuffle_buffer_size: int = field(
        default=1000,
        metadata={
            "range": "[1, inf)",
            "help": "With --streaming: rows are shuffled in windows of this many (held undecoded).",
        },
    )
    max_bad_images: int = field(
        default=10,
        metadata={
            "range": "[0, inf)",
            "help": "With --streaming: skip up to this many images that cannot be decoded, then stop.",
        },
    )
    max_eval_samples: int = field(
        default=2000,
        metadata={
            "range": "[1, inf)",
            "help": "With --streaming: at most this many validation and this many test images, in memory.",
        },
    )


@dataclass
class OutputArguments:
    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Replace the model already in --output_dir (without it, a folder holding a model is refused)."
        },
    )


ARGUMENT_TYPES = (ModelArguments, DataArguments, OutputArguments, TrainingArguments)
TRAINING_RANGES = {
    "learning_rate": "(0, 10]",  # above this every optimizer the Trainer builds diverges at the first steps
    "weight_decay": "[0, 10]",
    "label_smoothing_factor": "[0, 1)",
    "num_train_epochs": "[0, inf)",
    "per_device_train_batch_size": "[1, inf)",
    "per_device_eval_batch_size": "[1, inf)",
    "gradient_accumulation_steps": "[1, inf)",
    "seed": "[0, 4294967295]",  # numpy's and torch's seeds are unsigned 32-bit integers
}


class Parser(HfArgumentParser):
    """`HfArgumentParser`, keeping the metadata keys of `check_fields` (`range`, `needs`) from argparse."""

    @staticmethod
    def _parse_dataclass_field(parser, item):
        item = copy.copy(item)
        item.metadata = types.MappingProxyType({k: v for k, v in item.metadata.items() if k not in ("range", "needs")})
        HfArgumentParser._parse_dataclass_field(parser, item)


def argument_names() -> list[str]:
    """Every argument `scripts/train.py` accepts, as written in a recipe (`learning_rate`)."""
    return [item.name for kind in ARGUMENT_TYPES for item in fields(kind) if item.init]


def in_range(value: float, interval: str) -> bool:
    """Whether `value` lies in `interval`, written "[low, high)" with "inf" for no bound."""
    low, high = (float(bound) for bound in interval[1:-1].split(","))
    above = value >= low if interval[0] == "[" else value > low
    below = value <= high if interval[-1] == "]" else value < high
    return above and below


def is_set(value) -> bool:
    """Whether an argument was given a value that does something (not None, False, 0 or the Trainer's -1)."""
    return value not in (None, False, 0, -1, "")


def check_fields(*groups) -> None:
    """Every number finite and in its field's `range`, every field that is set has the argument it `needs`, and no
    token in a field but the token's own: the Trainer writes its arguments into checkpoints and TensorBoard files."""
    values = {item.name: getattr(group, item.name) for group in groups for item in fields(group) if item.init}
    metadata = {item.name: item.metadata for group in groups for item in fields(group)}
    for name, value in values.items():
        if not SECRET_OPTIONS.match(f"--{name}") and redact(str(value)) != str(value):
            raise UserError(
                f"--{name} holds a Hub token: nothing was done; give the token with --hub_token, HF_TOKEN or "
                "`hf auth login`, never inside another argument"
            )
        interval = metadata[name].get("range") or TRAINING_RANGES.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            pass
        elif not math.isfinite(value) or (interval and not in_range(value, interval)):
            raise UserError(f"--{name} {value:g} is out of range: give a value in {interval or '(-inf, inf)'}")
        needed = metadata[name].get("needs")
        if needed in values and is_set(value) and not is_set(values[needed]):
            raise UserError(f"--{name} needs --{needed}: give --{needed} too")


def parse_arguments(argv: list[str]) -> tuple[ModelArguments, DataArguments, OutputArguments, TrainingArguments]:
    """The four argument groups from `argv`: a recipe first (a file, or the name of one the package ships), then
    `--name value` words, which win over the recipe's."""
    argv, recipe, loaded = list(argv), [], {}
    if argv and not argv[0].startswith("-"):
        path = shipped_recipe(argv[0]) or Path(argv[0])
        if path.suffix not in RECIPE_SUFFIXES:
            raise UserError(f"{shown(argv[0])} is no recipe: a recipe is a .json, .yaml or .yml file, given first")
        loaded = load_recipe(path)
        recipe, argv = recipe_words(path, loaded), argv[1:]
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")  # launched CPU processes join as one run (gloo)
    parser = Parser(ARGUMENT_TYPES, allow_abbrev=False)
    # without an accelerator the CPU is the device: `--bf16 true` then trains under the CPU's autocast
    parser.set_defaults(use_cpu=not torch.accelerator.is_available())
    try:
        groups = parser.parse_args_into_dataclasses([*recipe, *argv])
    except ValueError as error:  # an unknown name, or a value a group refuses in its own checks
        raise UserError(f"{' '.join(str(error).split())}: `--help` lists the arguments") from None
    remember(groups[3].hub_token)
    if given := loaded.get("config_overrides"):  # a mapping: the command line's fields join the recipe's, and win
        given = given if isinstance(given, dict) else parse_overrides(str(given))
        groups[0].config_overrides = json.dumps({**given, **parse_overrides(groups[0].config_overrides)})
    check_fields(*groups)
    named = [word for word in [*recipe, *argv] if word.split("=")[0] in ("--output_dir", "--output-dir")]
    if not named or not str(groups[3].output_dir).strip():  # never the Trainer's ./trainer_output
        raise UserError("no output folder is given: name it with --output_dir DIR (or output_dir in the recipe)")
    return groups
