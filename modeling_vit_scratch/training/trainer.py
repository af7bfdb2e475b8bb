"""Training with the transformers `Trainer`: a preset, config file or checkpoint + any image data set -> a model folder.

`scripts/train.py` parses the argument groups of `arguments.py` (command line or a JSON/YAML recipe in `configs/`)
and calls `train`. The same code runs on one CPU process, under `torchrun` / `accelerate launch` with several processes
(gloo on CPU, NCCL on GPUs), with `--bf16` and gradient accumulation: the Trainer and accelerate do the distribution.
The output folder is what `push_to_hub` and the Auto classes read: weights, config, code, image processor, metrics,
a training-curve picture and a model card.
"""

import json
import logging
import os
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForImageClassification,
    PreTrainedConfig,
    Trainer,
    TrainingArguments,
    set_seed,
)

from modeling_vit_scratch.common.folders import (
    CURVES_FILE,
    RECORD_FILE,
    RESULTS_FILE,
    RESUME_OFF,
    claim_output_folder,
    publish,
    refuse_a_model,
    resolve_checkpoint,
    staging_inside,
)
from modeling_vit_scratch.common.overrides import check_config_overrides, parse_overrides
from modeling_vit_scratch.common.secrets import find_secrets, known_secrets, weights_sha256
from modeling_vit_scratch.common.sources import looks_like_local_path
from modeling_vit_scratch.configuration_vit_scratch import PRESETS, ViTScratchConfig
from modeling_vit_scratch.image_processing_vit_scratch import ViTScratchImageProcessor
from modeling_vit_scratch.modeling_vit_scratch import (
    ViTScratchForImageClassification,
    ViTScratchForImageClassificationWithTeacher,
)
from modeling_vit_scratch.sharing.reload_check import FolderReloadError, check_reloads_to
from modeling_vit_scratch.training.arguments import DataArguments, ModelArguments, OutputArguments, plain_command
from modeling_vit_scratch.training.augmentation import AugmentedViews, AugmentingTrainer, RandomShiftRotate
from modeling_vit_scratch.training.data import (
    ImageTransform,
    PreparedData,
    collate_images,
    load_image_dataset,
    prepare_splits,
    processed_rows,
)
from modeling_vit_scratch.training.distillation import DistillationTrainer, load_teacher
from modeling_vit_scratch.training.precision import (
    KeepPrecisionChoice,
    choose_bf16,
    precision_words,
    slow_bf16_warning,
    training_precision,
)
from modeling_vit_scratch.training.preflight import check_images

logger = logging.getLogger(__name__)


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


def check_fsdp(training_args: TrainingArguments) -> None:
    """--fsdp only where accelerate shards: it keeps its FSDP plugin for several GPU (NPU, XPU...) processes only
    (accelerate/state.py, `AcceleratorState.__init__`) and drops it without a word on CPU or in one process."""
    from accelerate.utils import DistributedType

    processes = training_args.world_size
    unsharded = (DistributedType.NO, DistributedType.MULTI_CPU)
    if training_args.fsdp and training_args.distributed_state.distributed_type in unsharded:
        raise ValueError(
            f"--fsdp shards the model across several GPUs, but accelerate ignores it for {processes} process"
            f"{'es' if processes > 1 else ''} on {training_args.device.type} (each would hold the whole model); drop "
            "--fsdp (torchrun on CPU trains data-parallel) or launch on GPUs."
        )


def model_config(args: ModelArguments) -> tuple[PreTrainedConfig, bool]:
    """The architecture `--model` names, without the data's labels, and whether it is a new model. Every error in
    the model arguments surfaces here, cheaply, before the data is read. With `--teacher`, a new model gets a
    distillation token, and a checkpoint must have one."""
    if args.teacher and looks_like_local_path(args.teacher) and not Path(args.teacher).is_dir():
        raise FileNotFoundError(
            f"Teacher folder {args.teacher!r} does not exist: give a folder written by scripts/train.py (e.g. `make "
            "teacher`) or a hub repo id."
        )
    config, new = named_config(args)
    if args.teacher and new and isinstance(config, ViTScratchConfig):
        config.distillation_token = True
    if args.teacher and not getattr(config, "distillation_token", False):
        kind = "a new model" if new else f"the checkpoint {args.model!r}"
        raise ValueError(
            f"--teacher trains a distillation token, which {kind} has not: train a new vit_scratch model with "
            "--teacher, or drop --teacher."
        )
    return config, new


def named_config(args: ModelArguments) -> tuple[PreTrainedConfig, bool]:
    """`model_config` without the teacher's requirement. A config file with another `model_type` (e.g. "resnet",
    a teacher) builds that transformers image classifier; its `image_size` sets the processor's."""
    overrides = parse_overrides(args.config_overrides)
    if args.model.endswith(".json") and Path(args.model).is_file():
        fields_in_file = ViTScratchConfig.get_config_dict(args.model)[0]
        model_type = fields_in_file.pop("model_type", ViTScratchConfig.model_type)
        if model_type != ViTScratchConfig.model_type:
            if "image_size" not in fields_in_file:
                raise ValueError(
                    f"{args.model} (model_type {model_type!r}) gives no image_size: add the side images are resized "
                    'to, e.g. "image_size": 32.'
                )
            return AutoConfig.for_model(model_type, **{**fields_in_file, **overrides}), True
    check_config_overrides(overrides)
    if args.model in PRESETS:
        return ViTScratchConfig.from_preset(args.model, **overrides), True
    if args.model.endswith(".json"):
        if not Path(args.model).is_file():
            raise FileNotFoundError(f"Config file {args.model!r} does not exist: give an existing JSON file.")
        check_config_overrides(fields_in_file)
        return ViTScratchConfig(**{**fields_in_file, **overrides}), True
    if overrides:
        raise ValueError("--config_overrides applies to new models only; a checkpoint keeps its architecture.")
    path = Path(args.model)
    if not path.exists() and looks_like_local_path(args.model):
        raise FileNotFoundError(f"Checkpoint folder {args.model!r} does not exist: give a saved folder or repo id.")
    if path.is_dir() and not (path / "config.json").exists():
        raise FileNotFoundError(f"{args.model!r} has no config.json: give a folder written by save_pretrained.")
    if not path.exists() and "/" not in args.model:
        raise ValueError(
            f"Unknown preset {args.model!r}. Known presets: {', '.join(sorted(PRESETS))}; "
            "or give a config JSON file, a saved folder or a hub repo id."
        )
    try:
        return AutoConfig.from_pretrained(args.model), False
    except OSError as error:
        raise FileNotFoundError(
            f"Cannot load the checkpoint {args.model!r}: it is no folder here and no reachable hub repo "
            f"({str(error).splitlines()[0]}). Check the path (a folder name needs ./ in front) or the repo id."
        ) from None


def classifier_class(config: PreTrainedConfig):
    """The two-headed classifier for a config with a distillation token, the one-headed one for the rest of ours,
    and transformers' own class for another model type (a teacher)."""
    if not isinstance(config, ViTScratchConfig):
        return AutoModelForImageClassification
    return (
        ViTScratchForImageClassificationWithTeacher if config.distillation_token else ViTScratchForImageClassification
    )


def build_model(args: ModelArguments, data: PreparedData) -> tuple[ViTScratchForImageClassification, object]:
    """A new model (preset or config file) or a fine-tuned checkpoint, with the data set's labels and its processor."""
    config, new = model_config(args)
    kernel = {"attn_implementation": args.attn_implementation} if args.attn_implementation else {}
    if not new:
        return fine_tuned_model(args.model, config, data, kernel)
    config.id2label, config.label2id = data.id2label, {name: i for i, name in data.id2label.items()}
    config.num_labels = len(data.labels)
    model_class = classifier_class(config)
    # the Auto class builds another model type (a teacher); ours are built by their own class, since the Auto class
    # picks between our two classifiers by `config.architectures`, which a new config does not have yet
    build = model_class.from_config if model_class is AutoModelForImageClassification else model_class._from_config
    model = build(config, **kernel)
    return model, ViTScratchImageProcessor.for_config(config)


def fine_tuned_model(
    source: str, saved: ViTScratchConfig, data: PreparedData, kernel: dict
) -> tuple[ViTScratchForImageClassification, object]:
    """A saved folder or hub repo, to fine-tune on `data`. A new label set gets a new head, initialised afresh;
    every other weight must load as saved (a shape that differs anywhere else is an error, never a re-init)."""
    labels = dict(id2label=data.id2label, label2id={name: i for i, name in data.id2label.items()})
    model, loading = classifier_class(saved).from_pretrained(
        source, num_labels=len(data.labels), ignore_mismatched_sizes=True, output_loading_info=True, **labels, **kernel
    )
    body_mismatches = sorted(name for name, *_ in loading["mismatched_keys"] if not name.startswith("classifier."))
    if body_mismatches:
        raise ValueError(
            f"The weights of {source!r} do not fit its config.json ({', '.join(body_mismatches[:3])}): re-save the "
            "checkpoint with save_pretrained."
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
        processor = ViTScratchImageProcessor.from_pretrained(source)
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
        f"{data_args.max_degrees:g} degrees (bilinear, sub-pixel, batched on the training device), no flips"
    )


def check_training_steps(training_args: TrainingArguments, num_train: int) -> None:
    """At least one optimisation step, or one line saying why not."""
    if num_train == 0:
        raise ValueError(
            "The training split is empty: give a data set with training images (or a larger --max_train_samples)."
        )
    if training_args.max_steps <= 0 and training_args.num_train_epochs <= 0:
        raise ValueError(
            f"--num_train_epochs {training_args.num_train_epochs:g} trains nothing: give "
            "--num_train_epochs > 0 or --max_steps >= 1."
        )


def train(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: TrainingArguments,
    output_args: OutputArguments | None = None,
) -> dict:
    """Train, keep the last epoch or (load_best_model_at_end) the best on validation, test it, and write the model
    folder. Returns the metrics.

    Everything that can be checked is checked before the first step: the output folder (writable, not in use, not
    holding a model unless overwriting or resuming), the checkpoint to resume, the images, the labels, the steps.
    """
    output_args = output_args or OutputArguments()
    hub_token, training_args.hub_token = training_args.hub_token, None  # the Trainer pickles its arguments
    check_world_size(training_args)
    check_fsdp(training_args)
    resume = training_args.resume_from_checkpoint
    main_process = training_args.process_index == 0
    slow_bf16 = slow_bf16_warning(training_args.device, "Leave out --bf16 true") if training_args.bf16 else None
    if slow_bf16 and main_process:
        logger.warning(slow_bf16)
    claim = claim_output_folder(training_args.output_dir, output_args.overwrite_output_dir, resume not in RESUME_OFF)
    if not main_process:  # the same refusal on every process, so none waits for one that has stopped
        refuse_a_model(Path(training_args.output_dir), output_args.overwrite_output_dir, resume not in RESUME_OFF)
    with claim if main_process else nullcontext([]) as removed:
        if removed:
            logger.warning(
                "Removed the leftovers of an earlier run in %s: %s", training_args.output_dir, ", ".join(removed)
            )
        checkpoint = resolve_checkpoint(training_args.output_dir, resume)
        metrics = train_in_claimed_folder(model_args, data_args, training_args, checkpoint, hub_token)
    return metrics


def train_in_claimed_folder(
    model_args, data_args, training_args, checkpoint: str | None, hub_token: str | None
) -> dict:
    """`train` once the output folder is held: data, pre-flight, model, Trainer, evaluation, the model folder."""
    started = time.time()
    model_config(model_args)  # the model arguments' errors before any data is read
    set_seed(training_args.seed)  # before the model is built, so the initial weights follow --seed
    raw = load_image_dataset(data_args.dataset, data_args.dataset_config)
    data = prepare_splits(
        raw,
        data_args.image_column,
        data_args.label_column,
        data_args.validation_fraction,
        data_args.test_fraction,
        data_args.split_seed,
    )
    if data_args.max_train_samples is not None:
        data.splits["train"] = data.splits["train"].select(
            range(min(data_args.max_train_samples, len(data.splits["train"])))
        )
    check_training_steps(training_args, len(data.splits["train"]))
    main_process = training_args.process_index == 0
    images = check_images(
        data.splits, decode=data_args.check_images, progress=main_process and not training_args.disable_tqdm
    )
    if main_process:
        print(images.summary())
    model, processor = build_model(model_args, data)
    transform = ImageTransform(processor)
    preparing = time.perf_counter()  # processing the splits kept in memory: before the Trainer's clock starts
    train_set, validation_set, test_set = (
        processed_rows(data.splits[name], transform, data_args.images_in_memory_mb)
        for name in ("train", "validation", "test")
    )
    augmentation = RandomShiftRotate.for_processor(processor, data_args.max_shift, data_args.max_degrees)
    if data_args.validation_views > 1:
        validation_set = AugmentedViews(validation_set, data_args.validation_views, augmentation)
    data_preparation_seconds = round(time.perf_counter() - preparing, 2)

    training_args.remove_unused_columns = False  # the image column must reach the transform
    push = training_args.push_to_hub  # pushed below through the same gate as scripts/push_to_hub.py
    training_args.push_to_hub = False
    set_global_batch_size(training_args, data_args.total_train_batch_size)
    choice = None
    if model_args.bf16_when_faster:
        choice = choose_bf16(model, train_set[0]["pixel_values"].shape, training_args, checkpoint)
    precision_choice = str(choice) if choice else None  # in words, for the output, the record and the card
    if main_process and precision_choice:
        print(f"Training in {precision_words(training_precision(training_args), precision_choice)}.")
    trainer_class, teaching = AugmentingTrainer, {}
    if model_args.teacher:
        teacher, teacher_inputs = load_teacher(model_args.teacher, processor, data.id2label)
        trainer_class = DistillationTrainer
        teaching = dict(teacher=teacher, teacher_inputs=teacher_inputs, distillation=model_args.distillation_loss)
    trainer = trainer_class(
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=validation_set,
        data_collator=collate_images,
        compute_metrics=accuracy_metrics,
        processing_class=processor,
        augmentation=augmentation if data_args.augment else None,
        **teaching,
    )
    if choice:  # each checkpoint keeps it, so a resumed run trains on in the same precision
        trainer.add_callback(KeepPrecisionChoice(choice))
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
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
        data_preparation_seconds=data_preparation_seconds,
    )
    if precision_choice:
        metrics["precision_choice"] = precision_choice
    if trainer.is_world_process_zero():
        notes = dict(distillation=distillation_text(model_args), precision_choice=precision_choice)
        write_model_folder(trainer, processor, data, data_args, metrics, known_secrets(hub_token), notes)
        if push:
            push_trained_folder(training_args, hub_token)
    trainer.accelerator.wait_for_everyone()
    return metrics


def distillation_text(model_args: ModelArguments) -> str | None:
    """How the model learned from a teacher, in words for the model card and the record (None without one)."""
    if not model_args.teacher:
        return None
    how = (
        "its top class (hard distillation)"
        if model_args.distillation == "hard"
        else f"its probabilities at temperature {model_args.distillation_temperature:g} (soft distillation)"
    )
    return (
        f"the distillation head learned from the teacher {model_args.teacher} {how}, with weight "
        f"{model_args.distillation_alpha:g} (the labels {1 - model_args.distillation_alpha:g})"
    )


def push_trained_folder(training_args: TrainingArguments, hub_token: str | None) -> None:
    """`--push_to_hub`: the saved folder through the same gate as scripts/push_to_hub.py. A failure says the model
    is saved and how to push it again, without training again."""
    from modeling_vit_scratch.sharing.push import PushError, push_to_hub

    folder, repo_id = training_args.output_dir, training_args.hub_model_id or Path(training_args.output_dir).name
    try:
        result = push_to_hub(
            folder,
            repo_id,
            private=bool(training_args.hub_private_repo),
            token=hub_token,
            revision=training_args.hub_revision,
        )
    except (PushError, ValueError, FileNotFoundError) as error:
        raise PushError(
            f"The trained model is saved in {folder}, but pushing it failed: {error} (to push it again "
            f"without training: python scripts/push_to_hub.py {folder} {repo_id})"
        ) from None
    print(f"Pushed to {result.repo_url} (commit {result.commit_id})")


def write_model_folder(
    trainer: Trainer,
    processor,
    data: PreparedData,
    data_args: DataArguments,
    metrics: dict,
    secrets: list[str],
    notes: dict[str, str | None] | None = None,
) -> None:
    """Weights, config, code, processor, metrics, curves, record and card, written beside the output folder, checked
    (it reloads to the trained model and holds no secret), then moved into place. `notes` go into the record and
    the card: how the model learned from a teacher (`distillation`), why it trained in its precision
    (`precision_choice`)."""
    from modeling_vit_scratch.sharing.card import render_model_card, render_other_model_card, training_record
    from modeling_vit_scratch.training.curves import plot_training_curves

    output_dir = Path(trainer.args.output_dir)
    # without the autocast that --bf16 wraps around forward: the reload check compares float32 with float32
    model = trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
    with staging_inside(output_dir) as staging:
        model.save_pretrained(staging)
        processor.save_pretrained(staging)
        (staging / RESULTS_FILE).write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        plot_training_curves(trainer.state.log_history, staging / CURVES_FILE)
        splits = {name: len(split) for name, split in data.splits.items()}
        record = training_record(
            plain_command(), data_args.dataset, splits, trainer.args, metrics, augmentation_text(data_args)
        )
        record["validation_views"] = data_args.validation_views  # selection scored this many views of each image
        record.update(notes or {})
        record["weights_sha256"] = weights_sha256(staging)  # the weights the metrics above were measured on
        (staging / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
        if isinstance(model.config, ViTScratchConfig):
            card = render_model_card(model.config, metrics, record)
        else:  # a transformers model, e.g. a teacher
            card = render_other_model_card(model.config, metrics, record)
        card.save(staging / "README.md")
        test_images = data.splits["test"].with_transform(ImageTransform(processor))
        batch = collate_images([test_images[i] for i in range(min(8, len(test_images)))])
        try:  # float32 both sides, one code path: only another order of summation may differ
            check_reloads_to(model, staging, batch["pixel_values"], tolerance=1e-3)
        except FolderReloadError as error:
            raise RuntimeError(f"{error}; nothing was written. Please report this as a bug.") from None
        leaked = find_secrets(staging, secrets)
        if leaked:
            raise RuntimeError(
                f"A token value was found in {', '.join(p.name for p in leaked)}; the model folder was "
                "not written. Please report this as a bug."
            )
        publish(staging, output_dir)
