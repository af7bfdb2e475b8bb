"""Training with the transformers `Trainer`: a preset, config file or checkpoint + any image data set -> a model folder.

`scripts/train.py` parses the three argument groups below (command line or a JSON/YAML recipe in `configs/`) and
calls `train`. The same code runs on one CPU process, under `torchrun` / `accelerate launch` with several processes
(gloo on CPU, NCCL on GPUs), with `--bf16` and gradient accumulation: the Trainer and accelerate do the distribution.
The output folder is what `push_to_hub` and the Auto classes read: weights, config, code, image processor, metrics,
a training-curve picture and a model card.
"""

import json
import os
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForImageClassification, Trainer, TrainingArguments, set_seed

from .configuration_vit_scratch import PRESETS, ViTScratchConfig
from .data import DIGITS, ImageTransform, PreparedData, collate_images, load_image_dataset, prepare_splits
from .image_processing_vit_scratch import ViTScratchImageProcessor
from .modeling_vit_scratch import ViTScratchForImageClassification
from .paths import looks_like_local_path

CURVES_FILE = "training_curves.png"
RESULTS_FILE = "all_results.json"
RECORD_FILE = "training_record.json"


@dataclass
class ModelArguments:
    model: str = field(
        default="vit-tiny-patch16-224",
        metadata={
            "help": "What to train: a preset name (e.g. vit-base-patch16-224), a config JSON file to build a new "
            "model from, or a saved folder / hub repo id to fine-tune."
        },
    )
    config_overrides: str | None = field(
        default=None,
        metadata={"help": "Config fields to override for a new model, e.g. 'image_size=64,drop_path_rate=0.1'."},
    )
    attn_implementation: str | None = field(
        default=None, metadata={"help": "Attention kernel: 'eager' or 'sdpa' (default: transformers' choice)."}
    )


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
    augment: bool = field(default=True, metadata={"help": "Random small shifts and rotations of training images."})
    max_shift: float = field(default=0.1, metadata={"help": "Largest shift, as a fraction of the image side."})
    max_degrees: float = field(default=10.0, metadata={"help": "Largest rotation in degrees."})
    total_train_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "Global batch size: sets the per-device batch from the number of processes and gradient "
            "accumulation steps, so a recipe trains the same way on 1 or N processes."
        },
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only this many training images."})


def recipe_to_argv(argv: list[str]) -> list[str]:
    """`[recipe.json, --key value, ...]` -> the recipe's arguments as command-line arguments, then the rest.

    Arguments given on the command line come last, so they override the recipe's.
    """
    if not argv or not argv[0].endswith((".json", ".yaml", ".yml")):
        return argv
    path = Path(argv[0])
    if not path.is_file():
        raise FileNotFoundError(f"Recipe {argv[0]!r} not found: give a JSON or YAML file such as configs/train_digits.json.")
    if path.suffix == ".json":
        recipe = json.loads(path.read_text())
    else:
        import yaml

        recipe = yaml.safe_load(path.read_text())
    args = []
    for key, value in recipe.items():
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        args += [f"--{key}", *(str(v).lower() if isinstance(v, bool) else str(v) for v in values)]
    return args + argv[1:]


def use_cpu_processes_without_accelerator() -> None:
    """Under torchrun with no GPU, make accelerate join the CPU processes (gloo) instead of running N separate copies.

    transformers only builds a multi-process CPU state when asked for the CPU; call this before `TrainingArguments`
    is created. On machines with GPUs it does nothing.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")


def check_world_size(training_args: TrainingArguments) -> None:
    """The processes the launcher started are the processes that train together, or a clear error."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if training_args.world_size != launched:
        raise RuntimeError(
            f"{launched} processes were launched but the Trainer sees {training_args.world_size}: each would train "
            "alone. Launch with torchrun or `accelerate launch --multi_gpu`/`--num_processes` on a configured machine."
        )


def parse_overrides(text: str | None) -> dict:
    """'a=1,b=0.5,c=mean,d=true' -> {'a': 1, 'b': 0.5, 'c': 'mean', 'd': True}."""
    overrides = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        if "=" not in item:
            raise ValueError(f"--config_overrides item {item!r} is not key=value: write e.g. 'hidden_size=64'.")
        key, value = (part.strip() for part in item.split("=", 1))
        try:
            overrides[key] = json.loads(value.lower() if value.lower() in ("true", "false", "null") else value)
        except json.JSONDecodeError:
            overrides[key] = value
    return overrides


def build_model(args: ModelArguments, data: PreparedData) -> tuple[ViTScratchForImageClassification, object]:
    """A new model (preset or config file) or a fine-tuned checkpoint, with the data set's labels and its processor.

    Fine-tuning a checkpoint whose labels differ from the data set's re-initialises the classification head.
    """
    labels = dict(id2label=data.id2label, label2id={name: i for i, name in data.id2label.items()})
    kernel = {"attn_implementation": args.attn_implementation} if args.attn_implementation else {}
    overrides = parse_overrides(args.config_overrides)
    if args.model in PRESETS or args.model.endswith(".json"):
        if args.model in PRESETS:
            config = ViTScratchConfig.from_preset(args.model, **overrides, **labels)
        elif Path(args.model).is_file():
            config = ViTScratchConfig(**{**ViTScratchConfig.get_config_dict(args.model)[0], **overrides, **labels})
        else:
            raise FileNotFoundError(f"Config file {args.model!r} does not exist: give an existing JSON file.")
        model = ViTScratchForImageClassification._from_config(config, **kernel)
        return model, ViTScratchImageProcessor.for_config(config)
    if overrides:
        raise ValueError("--config_overrides applies to new models only; a checkpoint keeps its architecture.")
    path = Path(args.model)
    looks_like_path = looks_like_local_path(args.model)
    if not path.exists() and looks_like_path:
        raise FileNotFoundError(f"Checkpoint folder {args.model!r} does not exist: give a saved folder or repo id.")
    if path.is_dir() and not (path / "config.json").exists():
        raise FileNotFoundError(f"{args.model!r} has no config.json: give a folder written by save_pretrained.")
    if not path.exists() and "/" not in args.model:
        raise ValueError(
            f"Unknown preset {args.model!r}. Known presets: {', '.join(sorted(PRESETS))}; "
            "or give a config JSON file, a saved folder or a hub repo id."
        )
    model = ViTScratchForImageClassification.from_pretrained(
        args.model, num_labels=len(data.labels), ignore_mismatched_sizes=True, **labels, **kernel
    )
    try:
        processor = ViTScratchImageProcessor.from_pretrained(args.model)
    except OSError:  # a checkpoint saved without its processor
        processor = ViTScratchImageProcessor.for_config(model.config)
    return model, processor


def accuracy_metrics(eval_prediction) -> dict[str, float]:
    """Top-1 accuracy, top-5 when there are more than 5 classes, and `selection_score` for picking the best epoch.

    `selection_score` is the accuracy with ties broken by the lower cross-entropy: on a small validation set many
    epochs reach the same accuracy, and the earliest of them (the Trainer's choice) is usually the least trained.
    """
    logits, labels = eval_prediction.predictions, eval_prediction.label_ids
    logits = logits[0] if isinstance(logits, tuple) else logits
    accuracy = float((logits.argmax(-1) == labels).mean())
    log_probabilities = torch.from_numpy(logits).float().log_softmax(-1)
    loss = float(-log_probabilities.gather(1, torch.from_numpy(labels).long()[:, None]).mean())
    metrics = {"accuracy": accuracy, "selection_score": accuracy - 1e-4 * min(loss, 50.0)}  # 1e-4 * 50 < one image
    if logits.shape[-1] > 5:
        top5 = np.argsort(-logits, axis=-1)[:, :5]
        metrics["top5_accuracy"] = float((top5 == labels[:, None]).any(-1).mean())
    return metrics


def set_global_batch_size(training_args: TrainingArguments, total: int | None) -> None:
    """Per-device batch = total / (processes x accumulation steps); an error if it does not divide."""
    if total is None:
        return
    shards = training_args.world_size * training_args.gradient_accumulation_steps
    if total % shards:
        raise ValueError(
            f"--total_train_batch_size {total} does not divide over {training_args.world_size} processes x "
            f"{training_args.gradient_accumulation_steps} accumulation steps: choose a multiple of {shards}."
        )
    training_args.per_device_train_batch_size = total // shards


def augmentation_text(data_args: DataArguments) -> str | None:
    """How training images were augmented, in words for the model card."""
    if not data_args.augment:
        return None
    return (
        f"random shifts of up to {data_args.max_shift:.0%} of the image side and rotations of up to "
        f"{data_args.max_degrees:g} degrees, no flips"
    )


def plain_command() -> str:
    """The command that started this run, with any token value removed."""
    argv, shown, hide_next = sys.argv, [], False
    for arg in argv:
        if hide_next:
            shown.append("***")
            hide_next = False
        elif arg.startswith("--hub_token"):
            shown.append("--hub_token=***" if "=" in arg else arg)
            hide_next = "=" not in arg
        else:
            shown.append(arg)
    launcher = f"torchrun --nproc_per_node {os.environ['WORLD_SIZE']} " if int(os.environ.get("WORLD_SIZE", 1)) > 1 else "python "
    return launcher + shlex.join(shown)


def train(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> dict:
    """Train, select the best epoch on validation, test it, and write the model folder. Returns the metrics."""
    started = time.time()
    set_seed(training_args.seed)  # before the model is built, so the initial weights follow --seed
    raw = load_image_dataset(data_args.dataset, data_args.dataset_config)
    data = prepare_splits(
        raw, data_args.image_column, data_args.label_column, data_args.validation_fraction,
        data_args.test_fraction, data_args.split_seed,
    )  # fmt: skip
    if data_args.max_train_samples is not None:
        data.splits["train"] = data.splits["train"].select(range(min(data_args.max_train_samples, len(data.splits["train"]))))
    model, processor = build_model(model_args, data)
    train_set = data.splits["train"].with_transform(
        ImageTransform(processor, data_args.augment, data_args.max_shift, data_args.max_degrees)
    )
    evaluate_transform = ImageTransform(processor)
    validation_set = data.splits["validation"].with_transform(evaluate_transform)
    test_set = data.splits["test"].with_transform(evaluate_transform)

    check_world_size(training_args)
    training_args.remove_unused_columns = False  # the image column must reach the transform
    push = training_args.push_to_hub  # pushed below through the same gate as scripts/push_to_hub.py
    training_args.push_to_hub = False
    set_global_batch_size(training_args, data_args.total_train_batch_size)
    trainer = Trainer(
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=validation_set,
        data_collator=collate_images,
        compute_metrics=accuracy_metrics,
        processing_class=processor,
    )
    train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    metrics = {**train_result.metrics}
    metrics.update(trainer.evaluate(validation_set, metric_key_prefix="eval"))
    metrics.update(trainer.evaluate(test_set, metric_key_prefix="test"))
    metrics.update(
        num_parameters=trainer.model.num_parameters(),
        world_size=training_args.world_size,
        total_train_batch_size=training_args.per_device_train_batch_size
        * training_args.world_size
        * training_args.gradient_accumulation_steps,
        wall_time_seconds=round(time.time() - started, 1),
    )
    if trainer.is_world_process_zero():
        write_model_folder(trainer, processor, data, data_args, metrics)
        if push:
            from .hub import push_to_hub

            result = push_to_hub(
                training_args.output_dir, training_args.hub_model_id or Path(training_args.output_dir).name,
                private=bool(training_args.hub_private_repo), token=training_args.hub_token,
                revision=training_args.hub_revision,
            )  # fmt: skip
            print(f"Pushed to {result.repo_url} (commit {result.commit_id})")
    trainer.accelerator.wait_for_everyone()
    return metrics


def write_model_folder(trainer: Trainer, processor, data: PreparedData, data_args: DataArguments, metrics: dict) -> None:
    """Weights, config, code, processor, metrics, curves and card; each file replaced atomically."""
    from .model_card import render_model_card, training_record
    from .plots import plot_training_curves

    output_dir = Path(trainer.args.output_dir)
    model = trainer.accelerator.unwrap_model(trainer.model)
    with tempfile.TemporaryDirectory(dir=output_dir, prefix=".saving-") as staging:
        staging = Path(staging)
        model.save_pretrained(staging)
        processor.save_pretrained(staging)
        (staging / RESULTS_FILE).write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        plot_training_curves(trainer.state.log_history, staging / CURVES_FILE)
        splits = {name: len(split) for name, split in data.splits.items()}
        record = training_record(plain_command(), data_args.dataset, splits, trainer.args, metrics,
                                 augmentation_text(data_args))  # fmt: skip
        (staging / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
        card = render_model_card(model.config, metrics, record)
        card.save(staging / "README.md")
        for path in staging.iterdir():
            path.chmod(0o644)  # staged files may be private (mkstemp); the folder is meant to be shared
            os.replace(path, output_dir / path.name)
    check_reload(model, output_dir, data.splits["test"].with_transform(ImageTransform(processor)))


def check_reload(model, folder: Path, test_set) -> None:
    """The saved folder, loaded through the Auto class, computes what the trained model computes."""
    reloaded = AutoModelForImageClassification.from_pretrained(folder).eval()
    batch = collate_images([test_set[i] for i in range(min(8, len(test_set)))])
    model_was_training = model.training
    model.eval()
    with torch.no_grad():
        expected = model(pixel_values=batch["pixel_values"].to(model.device, model.dtype)).logits.float().cpu()
        got = reloaded(pixel_values=batch["pixel_values"]).logits.float()
    model.train(model_was_training)
    if not torch.allclose(expected, got, atol=1e-4, rtol=1e-4):
        raise RuntimeError(f"The folder {folder} does not reload to the trained model (max diff "
                           f"{(expected - got).abs().max():.2e}); it was not written completely.")
