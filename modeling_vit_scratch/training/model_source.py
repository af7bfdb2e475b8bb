"""The model a run trains, from what `--model` names: a preset, a config file (ours, or another transformers
image classifier such as a teacher), a saved folder or a hub repo to fine-tune; with the data set's labels and the
image processor that goes with it. Every error in the model arguments surfaces in `model_config`, before any data
is read."""

import json
from contextlib import nullcontext
from pathlib import Path

from datasets import Image as ImageFeature
from torch import nn
from transformers import AutoConfig, AutoModelForImageClassification, PreTrainedConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES

from modeling_vit_scratch.common.model_folder import check_model_size, check_no_adapter, check_processor_fits
from modeling_vit_scratch.common.overrides import check_config_overrides, parse_overrides
from modeling_vit_scratch.common.remote_code import check_no_foreign_code
from modeling_vit_scratch.common.run_state import check_run_state
from modeling_vit_scratch.common.secrets import refuse_secrets_in_settings
from modeling_vit_scratch.common.sources import (
    check_not_url,
    check_repo_id,
    hub_commit,
    hub_misanswered,
    looks_like_local_path,
    path_or_id_fix,
)
from modeling_vit_scratch.common.weights import check_finite, check_finite_files, unreadable_weights
from modeling_vit_scratch.configuration_vit_scratch import PRESETS, ViTScratchConfig
from modeling_vit_scratch.image_processing_vit_scratch import ViTScratchImageProcessor
from modeling_vit_scratch.loading_vit_scratch import without_load_report
from modeling_vit_scratch.modeling_vit_scratch import (
    ViTScratchForImageClassification,
    ViTScratchForImageClassificationWithTeacher,
)
from modeling_vit_scratch.training.arguments import ModelArguments
from modeling_vit_scratch.training.data import PreparedData, shown_labels
from modeling_vit_scratch.training.preflight import open_image

# the hub repos a run may read, by their arguments: (the source, its revision)
HUB_SOURCES = {"--model": ("model", "model_revision"), "--teacher": ("teacher", "teacher_revision")}
KIND_WORDS = {"preset": "a preset name", "file": "an architecture file", "folder": "a local folder"}


def pin_hub_sources(args: ModelArguments) -> None:
    """A hub repo given as --model or --teacher is read at one commit: its revision (--model_revision,
    --teacher_revision; default: main) is checked before anything loads (a revision the repo lacks is one line) and
    resolved once to the full 40-hex commit, which every later load reads and the record and card name. A revision
    given with a source that is no hub repo is one line."""
    for argument, (source_field, revision_field) in HUB_SOURCES.items():
        source, revision = getattr(args, source_field), getattr(args, revision_field)
        if not source:
            continue
        kind = model_input_kind(source, argument)
        option = f"--{revision_field}"
        if kind != "hub" and revision is not None:
            raise ValueError(
                f"{option} {revision!r} names a version of a hub repo, and {argument} {source!r} is "
                f"{KIND_WORDS[kind]}: leave out {option}."
            )
        if kind == "hub":
            setattr(args, revision_field, hub_commit(source, argument, revision, option))


def model_config(args: ModelArguments) -> tuple[PreTrainedConfig, bool]:
    """The architecture `--model` names, without the data's labels, and whether it is a new model. Every error in
    the model arguments surfaces here, cheaply, before the data is read. With `--teacher`, a new model gets a
    distillation token, and a checkpoint must have one."""
    if args.teacher:
        model_input_kind(args.teacher, "--teacher")
        check_readable_folder(args.teacher, "--teacher", args.teacher_revision)
    config, new = named_config(args)
    if isinstance(config, ViTScratchConfig):
        check_model_size(config)
    if args.teacher and new and isinstance(config, ViTScratchConfig):
        config.distillation_token = True
    if args.teacher and not getattr(config, "distillation_token", False):
        kind = "a new model" if new else f"the checkpoint {args.model!r}"
        raise ValueError(
            f"--teacher trains a distillation token, which {kind} has not: train a new vit_scratch model with "
            "--teacher, or drop --teacher."
        )
    return config, new


# What each model argument takes, in the words of its refusals
MODEL_TAKES = {
    "--model": "a preset name (e.g. vit-tiny-patch16-224), an architecture JSON file, a saved folder or a hub repo id "
    "(owner/name)",
    "--teacher": "a folder of a trained image classifier (e.g. one written by `make teacher`) or a hub repo id "
    "(owner/name)",
}


def model_input_kind(value: str, argument: str) -> str:
    """What `value`, given to `argument` (--model or --teacher), names: "preset", "file" (an architecture JSON),
    "folder" or "hub" (a repo id); a kind the argument does not take, or a path that is not there, is one line saying
    what the argument takes. Only names and the file system are looked at: nothing is read or loaded."""
    takes = MODEL_TAKES[argument]
    check_not_url(value, argument, revision=None)  # training reads a repo's main
    path = Path(value).expanduser()
    if value.lstrip().startswith(("{", "[")) and not path.exists():  # JSON text, where a file's path belongs
        raise ValueError(f"{argument} was given JSON text, not a name or path: {argument} takes {takes}.")
    if value in PRESETS and (argument == "--model" or not path.exists()):
        if argument == "--teacher":
            raise ValueError(
                f"--teacher {value!r} is a preset name: an architecture with no trained weights, which has nothing "
                f"to teach; --teacher takes {takes}."
            )
        return "preset"
    if path.is_dir():
        check_run_state(value, argument, "train")  # a live or interrupted run's folder, as every reader says
        return "folder"
    if path.is_file():
        if argument == "--model" and value.endswith(".json"):
            return "file"
        if value.endswith(".json"):  # a teacher's architecture: trained first, then the run's folder teaches
            raise ValueError(
                f"--teacher {value!r} is an architecture file, with no trained weights: train it first (--model "
                f"{value}) and give --teacher that run's output folder."
            )
        folder = (
            f" (or the model folder that holds it, '{path.parent}')" if (path.parent / "config.json").is_file() else ""
        )
        raise ValueError(f"{argument} {value!r} is a file, not a model; {argument} takes {takes}{folder}.")
    if value.endswith(".json") and argument == "--model":
        raise FileNotFoundError(f"Config file {value!r} does not exist: give an existing JSON file.")
    if looks_like_local_path(value) and argument == "--teacher":
        fix = "give a folder written by scripts/train.py (e.g. `make teacher`) or a hub repo id"
        raise FileNotFoundError(f"Teacher folder {value!r} does not exist: {path_or_id_fix(value, fix)}.")
    if looks_like_local_path(value):
        fix = path_or_id_fix(value, "give a saved folder or repo id")
        raise FileNotFoundError(f"Checkpoint folder {value!r} does not exist: {fix}.")
    if "/" not in value:
        if argument == "--model":
            raise ValueError(
                f"Unknown preset {value!r}. Known presets: {', '.join(sorted(PRESETS))}; "
                "or give a config JSON file, a saved folder or a hub repo id."
            )
        raise ValueError(f"--teacher {value!r} is no folder here and no hub repo id: --teacher takes {takes}.")
    check_repo_id(value, f"The repo id of {argument}", f"{argument} takes {takes}")
    return "hub"


def named_config(args: ModelArguments) -> tuple[PreTrainedConfig, bool]:
    """`model_config` without the teacher's requirement. A config file with another `model_type` (e.g. "resnet",
    a teacher) builds that transformers image classifier; its `image_size` sets the processor's."""
    overrides = parse_overrides(args.config_overrides)
    kind = model_input_kind(args.model, "--model")
    if kind == "file":
        fields_in_file = architecture_file(args.model)
        model_type = fields_in_file.pop("model_type", ViTScratchConfig.model_type)
        if model_type != ViTScratchConfig.model_type:
            return AutoConfig.for_model(model_type, **{**fields_in_file, **overrides}), True
        check_config_overrides(overrides)
        try:
            check_config_overrides(fields_in_file, "the file")
            config = ViTScratchConfig(**{**fields_in_file, **overrides})
        except ValueError as error:  # the file's own fields, or what the overrides make of them
            given = " with --config_overrides" if overrides else ""
            raise ValueError(f"The architecture file {args.model}{given}: {error}") from None
        return check_trainable_channels(config, args, overrides), True
    check_config_overrides(overrides)
    if kind == "preset":
        return check_trainable_channels(ViTScratchConfig.from_preset(args.model, **overrides), args, overrides), True
    if overrides:
        raise ValueError("--config_overrides applies to new models only; a checkpoint keeps its architecture.")
    if kind == "folder" and not (Path(args.model) / "config.json").exists():
        check_no_adapter(args.model)  # an unmerged adapter is a model's part, not a model: said as such
        raise FileNotFoundError(f"{args.model!r} has no config.json: give a folder written by save_pretrained.")
    check_readable_folder(args.model, "--model", args.model_revision)  # a folder, or a repo id
    try:
        return AutoConfig.from_pretrained(args.model, trust_remote_code=False, revision=args.model_revision), False
    except OSError as error:
        misanswered = hub_misanswered(f"Cannot load the checkpoint {args.model!r}", error)
        if misanswered:
            raise FileNotFoundError(misanswered) from None
        raise FileNotFoundError(
            f"Cannot load the checkpoint {args.model!r}: it is no folder here and no reachable hub repo "
            f"({str(error).splitlines()[0]}). Check the path (a folder name needs ./ in front) or the repo id."
        ) from None


def check_trainable_channels(config: ViTScratchConfig, args: ModelArguments, overrides: dict) -> ViTScratchConfig:
    """`config` if its images can reach it: training feeds images as grayscale (1 channel) or RGB (3), so any other
    `num_channels` is one line naming where it was written, before any data is read."""
    if config.num_channels in (1, 3):
        return config
    where = "--config_overrides" if "num_channels" in overrides else f"The architecture file {args.model}"
    raise ValueError(
        f"{where} gives num_channels {config.num_channels}, but training feeds images as grayscale (1) or RGB (3): "
        "write num_channels 1 or 3, or leave it out to take the data set's."
    )


# Fields that only a config written by save_pretrained holds: an architecture file names none of them
SAVED_CONFIG_FIELDS = ("architectures", "auto_map", "transformers_version")


def architecture_file(path: str) -> dict:
    """The fields of an architecture JSON file given to --model: read as this package's config (no `model_type`, or
    "vit_scratch"), or as one of transformers' image classifiers (a teacher such as "resnet", which must give its
    `image_size`); any other `model_type` is one line naming the file and the fix."""
    try:
        fields_in_file = json.loads(Path(path).read_text(encoding="utf-8-sig"))  # a byte-order mark is no text
    except (UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"--model {path} is not a JSON file ({error}): fix the file or give another.") from None
    if not isinstance(fields_in_file, dict):
        raise ValueError(
            f"--model {path} holds a {type(fields_in_file).__name__}, not a mapping of config fields: write e.g. "
            '{"image_size": 32, "patch_size": 4}.'
        )
    saved = [name for name in SAVED_CONFIG_FIELDS if name in fields_in_file]
    if saved:
        raise ValueError(
            f"--model {path} is the config.json of a saved model (it holds {', '.join(saved)}), not an "
            f"architecture file: {saved_config_fix(Path(path), saved)}."
        )
    model_type = fields_in_file.get("model_type", ViTScratchConfig.model_type)
    if model_type != ViTScratchConfig.model_type and model_type not in MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES:
        raise ValueError(
            f"{path} gives model_type {model_type!r}, which is neither {ViTScratchConfig.model_type!r} nor an image "
            f'classifier of transformers: leave model_type out (or write "model_type": '
            f'"{ViTScratchConfig.model_type}") for a vit-scratch architecture, or name a transformers image '
            'classifier, e.g. "resnet" for a teacher.'
        )
    if model_type != ViTScratchConfig.model_type and "image_size" not in fields_in_file:
        raise ValueError(
            f"{path} (model_type {model_type!r}) gives no image_size: add the side images are resized to, e.g. "
            '"image_size": 32.'
        )
    return fields_in_file


def saved_config_fix(path: Path, saved: list[str]) -> str:
    """What to do with a saved model's config.json given as an architecture file: fine-tune the model of the folder
    that holds it, named as a path the user can give (never a bare "."), where that folder holds weights; else (a
    config copied on its own) build a new model from it without the fields save_pretrained wrote."""
    folder = path.parent
    shown = str(folder) if str(folder) not in ("", ".") else str(folder.absolute())
    if any((folder / name).is_file() for name in ("model.safetensors", "model.safetensors.index.json")):
        return (
            f"to fine-tune that model give its folder, --model {shown}; to build a new model, give an architecture "
            "file (e.g. configs/models/model_digits.json)"
        )
    labels = [name for name in ("id2label", "label2id", "num_labels") if name in json.loads(path.read_text())]
    return (
        f"{shown} holds no weights beside it, so there is no model to fine-tune; to build a new model from its "
        f"architecture, remove {', '.join([*saved, *labels])} from it (labels come from the data set)"
    )


def check_resumed_labels(checkpoint: str, labels: list[str], dataset: str) -> None:
    """A resumed run's data has the labels, in the same order, that its checkpoint's config.json names: the Trainer
    loads the checkpoint's head as it is, so other classes would silently be relabelled (the same count) or fail
    deep in the load (another count)."""
    config = Path(checkpoint) / "config.json"
    if not config.is_file():  # not one of ours: the Trainer's load names what is missing
        return
    id2label = json.loads(config.read_text()).get("id2label") or {}
    saved = [str(id2label[index]) for index in sorted(id2label, key=int)]
    if saved != labels:
        raise ValueError(
            f"The checkpoint '{checkpoint}' was trained on {len(saved)} classes ({shown_labels(saved)}) but the data "
            f"set {dataset} has {len(labels)} ({shown_labels(labels)}): resume with the data set it was trained on, "
            f"or start a new run that fine-tunes it on this data (--model {checkpoint} without "
            "--resume_from_checkpoint, into another --output_dir)."
        )


# Config fields that describe a run's labels, provenance or kernel, not its architecture: they may differ on resume
NOT_ARCHITECTURE = {
    "id2label",
    "label2id",
    "num_labels",
    "architectures",
    "transformers_version",
    "_name_or_path",
    "dtype",
    "torch_dtype",
    "problem_type",
    "auto_map",
    "custom_pipelines",
}


# Architecture fields set by another argument than --model and --config_overrides: named in a resume's refusal
ARGUMENT_OF_FIELD = {"distillation_token": "--teacher"}


def check_resumed_architecture(checkpoint: str, requested: PreTrainedConfig, from_data: set[str] = frozenset()) -> None:
    """A resumed run asks for the architecture its checkpoint has (--model, --config_overrides): the Trainer loads
    the checkpoint's weights into the model built from the arguments, and another size fails there, after the
    pre-flight, as a size-mismatch traceback. One line naming the fields that differ.

    `requested` is the architecture the command resolves to, the same rules the first run applied: called before any
    data is read with the fields that the data fills (`fields_from_data`) left out as `from_data`, and again once it
    is read with `with_data_fields` applied, so a field the first run took from its data (a grayscale set's one
    channel) is compared with what this command takes from it, never with the config's default."""
    path = Path(checkpoint) / "config.json"
    if not path.is_file():  # not one of ours: the Trainer's load names what is missing
        return
    saved = json.loads(path.read_text())
    if saved.get("model_type") == requested.model_type:  # every field, also those saved as their default (left out)
        saved = json.loads(type(requested).from_dict(saved).to_json_string(use_diff=False))
    asked = json.loads(requested.to_json_string(use_diff=False))
    differ = sorted(
        name
        for name in (saved.keys() | asked.keys()) - NOT_ARCHITECTURE - set(from_data)
        if saved.get(name) != asked.get(name)
    )
    if differ:
        shown = "; ".join(f"{name}: {saved.get(name)!r} in it, {asked.get(name)!r} asked" for name in differ[:3])
        shown += f"; and {len(differ) - 3} more" if len(differ) > 3 else ""
        arguments = sorted({ARGUMENT_OF_FIELD.get(name, "--model and --config_overrides") for name in differ})
        asked_by = f"{' and '.join(arguments)} ask{'s' * (arguments == ['--teacher'])}"
        fix = f"resume with the {' and '.join(arguments)} it was trained with (drop the new overrides)"
        if "distillation_token" in differ:  # a distillation token comes from --teacher, added or left out
            trained = "with" if saved.get("distillation_token") else "without"
            shown += f"; a distillation token comes from --teacher, and this run was trained {trained} one"
            if arguments == ["--teacher"]:
                fix = f"resume {trained} --teacher, as it was trained"
        raise ValueError(
            f"The checkpoint '{checkpoint}' has another architecture than {asked_by} for ({shown}): {fix}, or start "
            "a new run in another --output_dir."
        )


def check_readable_folder(source: str, argument: str, revision: str | None = None) -> None:
    """A local model folder that `argument` names asks to run no code but the package's own, and holds its weights
    as safetensors that fit their files; a hub repo's auto_map is checked too, its weights by the load (safetensors
    only)."""
    check_no_foreign_code(
        source,
        f"training never runs a model folder's own code; give {argument} a folder saved by vit-scratch, or by "
        "transformers for a model class that ships with it (no auto_map)",
        revision=revision,
    )
    if Path(source).is_dir():
        check_finite_files(source)  # before the data is read: NaN weights would train to NaN
        check_processor_fits(source)  # its processor feeds the run: it must give the model's image size
        refuse_secrets_in_settings(source)  # copied into every checkpoint and the model


def classifier_class(config: PreTrainedConfig):
    """The two-headed classifier for a config with a distillation token, the one-headed one for the rest of ours,
    and transformers' own class for another model type (a teacher)."""
    if not isinstance(config, ViTScratchConfig):
        return AutoModelForImageClassification
    return (
        ViTScratchForImageClassificationWithTeacher if config.distillation_token else ViTScratchForImageClassification
    )


def build_model(args: ModelArguments, data: PreparedData) -> tuple[ViTScratchForImageClassification, object]:
    """A new model (preset or config file) or a fine-tuned checkpoint, with the data set's labels and its processor.
    A new model takes the data set's channels (`image_channels`) unless its config file or overrides name them."""
    config, new = model_config(args)
    kernel = {"attn_implementation": args.attn_implementation} if args.attn_implementation else {}
    if not new:
        return fine_tuned_model(args.model, config, data, kernel, args.model_revision)
    config = with_data_fields(config, new, args, data)
    model_class = classifier_class(config)
    # the Auto class builds another model type (a teacher); ours are built by their own class, since the Auto class
    # picks between our two classifiers by `config.architectures`, which a new config does not have yet
    build = model_class.from_config if model_class is AutoModelForImageClassification else model_class._from_config
    model = build(config, **kernel)
    return model, ViTScratchImageProcessor.for_config(config)


def fields_from_data(config: PreTrainedConfig, new: bool, args: ModelArguments) -> set[str]:
    """The architecture fields that `with_data_fields` takes from the data for this command: a new vit_scratch
    model's `num_channels`, unless its config file or overrides name it (the labels are compared on their own,
    `check_resumed_labels`)."""
    return {"num_channels"} if new and isinstance(config, ViTScratchConfig) and not channels_given(args) else set()


def with_data_fields(config: PreTrainedConfig, new: bool, args: ModelArguments, data: PreparedData):
    """`config` (from `model_config`) as the run builds it: a new model takes the data set's labels, and the fields
    `fields_from_data` names from its images. The one place these rules live: the model is built from it, and a
    resumed run's architecture is compared through it."""
    if not new:
        return config
    config.id2label, config.label2id = data.id2label, {name: i for i, name in data.id2label.items()}
    config.num_labels = len(data.labels)
    if "num_channels" in fields_from_data(config, new, args):
        # a stream holds no training split: its held-out images are the same set's
        config.num_channels = image_channels(data.splits.get("train") or data.splits["validation"])
    return config


# Image modes without colour; any other mode (RGB, RGBA, palette, CMYK, ...) makes a colour model
GRAY_MODES = ("1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F")


def channels_given(args: ModelArguments) -> bool:
    """Whether the user chose the channel count: in --config_overrides, or written in the --model config file
    (a preset's 3 is ImageNet's default, not a choice)."""
    if "num_channels" in parse_overrides(args.config_overrides):
        return True
    path = Path(args.model)
    return (
        args.model.endswith(".json")
        and path.is_file()
        and "num_channels" in json.loads(path.read_text(encoding="utf-8-sig"))
    )


def image_channels(split, sample: int = 64) -> int:
    """1 when the first `sample` images of `split` are all grayscale (by their mode, read from the file headers
    without decoding), else 3: a new model takes the data set's channels unless its config or overrides say."""
    cells = split.select(range(min(sample, len(split)))).cast_column("image", ImageFeature(decode=False))["image"]
    for cell in cells:
        if cell is None:
            continue
        with open_image(cell) as image:
            if image.mode not in GRAY_MODES:
                return 3
    return 1


def fine_tuned_model(
    source: str, saved: ViTScratchConfig, data: PreparedData, kernel: dict, revision: str | None = None
) -> tuple[ViTScratchForImageClassification, object]:
    """A saved folder or hub repo (at `revision`), to fine-tune on `data`. A new label set gets a new head, initialised afresh;
    every other weight must load as saved (a shape that differs anywhere else is an error, never a re-init)."""
    # the labels set the head's size (num_labels beside them only makes transformers warn of a conflict)
    labels = dict(id2label=data.id2label, label2id={name: i for i, name in data.id2label.items()})
    try:
        ours = isinstance(saved, ViTScratchConfig)  # another model type's report is left as transformers gives it
        with without_load_report() if ours else nullcontext():  # `fine_tuning_line` says what it would, in one line
            model, loading = classifier_class(saved).from_pretrained(
                source,
                ignore_mismatched_sizes=True,
                output_loading_info=True,
                trust_remote_code=False,
                use_safetensors=True,
                **labels,
                revision=revision,
                **kernel,
            )
    except OSError as error:  # a repo without safetensors weights, or out of reach
        raise unreadable_weights(source, error) from None
    check_finite(model.state_dict(), source)  # a hub repo's, read only now
    heads = ("classifier.", "distillation_classifier.")
    body_mismatches = sorted(name for name, *_ in loading["mismatched_keys"] if not name.startswith(heads))
    missing = sorted(name for name in loading["missing_keys"] if ours and not name.startswith(heads))
    if body_mismatches or missing:
        found = ", ".join([*body_mismatches, *missing][:3])
        raise ValueError(
            f"The weights of {source!r} do not fit its config.json ({found}{' missing' if missing else ''}): re-save "
            "the checkpoint with save_pretrained."
        )
    # a folder's config may name other code to run (custom_pipelines); the trained folder names only the package's
    vars(model.config).pop("custom_pipelines", None)
    saved_labels = [str(saved.id2label[index]) for index in sorted(saved.id2label or {})]
    if saved_labels != data.labels and not loading["mismatched_keys"] and isinstance(saved, ViTScratchConfig):
        for head in ("classifier", "distillation_classifier"):  # same count, other labels: new heads
            if hasattr(model, head):
                setattr(model, head, nn.Linear(model.config.hidden_size, model.config.num_labels))
                model._init_weights(getattr(model, head))
    try:
        processor = ViTScratchImageProcessor.from_pretrained(source, revision=revision)
    except OSError:  # a checkpoint saved without its processor
        processor = ViTScratchImageProcessor.for_config(model.config)
    return model, processor


def fine_tuning_line(source: str, saved: PreTrainedConfig, labels: list[str]) -> str | None:
    """What fine-tuning `source` (its config `saved`) on a data set with `labels` keeps and replaces, in one line:
    another label set gets a new classifier head, initialised afresh (`fine_tuned_model`); the rest is kept. None
    when the classes are the same (every weight starts as saved)."""
    id2label = saved.id2label or {}
    saved_labels = [str(id2label[index]) for index in sorted(id2label)]
    if saved_labels == labels:  # the head is kept, as every other weight
        return None
    return (
        f"Fine-tuning {source}, trained on {len(saved_labels)} classes ({shown_labels(saved_labels)}), on "
        f"{len(labels)} classes ({shown_labels(labels)}): its classifier head is replaced by a new one, initialised "
        "afresh; every other weight starts as saved."
    )


def channels_line(split, num_channels: int) -> str | None:
    """When the data set's images (`split`, by `image_channels`) have other channels than the model takes
    (`num_channels`), how each image is converted for it (`to_model_mode`); else None."""
    if image_channels(split) == num_channels:
        return None
    if num_channels == 3:
        return (
            "The data set's images are grayscale and the model takes RGB (num_channels 3): each image is given to it "
            "as RGB, its gray level in all three channels."
        )
    return (
        "The data set's images are in colour and the model takes grayscale (num_channels 1): each image is "
        "converted to gray (PIL's luma, L = 0.299 R + 0.587 G + 0.114 B)."
    )
