"""Training with the transformers `Trainer`: a preset, config file or checkpoint + any image data set -> a model folder.

`training/command.py` (`vit-scratch train`, `scripts/train.py`) parses the argument groups of `arguments.py`
(command line or a JSON/YAML recipe in `configs/`) and calls `train`, which runs the line: the output folder claimed,
the data and its pre-flight check (`data.py`, `preflight.py`), the model (`model_source.py`), the precision
(`precision.py`), the Trainer (with augmentation or a teacher), evaluation, and the output folder (`output.py`). The
same code runs on one CPU process or several (`distributed.py`), with `--bf16` and gradient accumulation.
"""

import copy
import json
import logging
import math
import os
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from datasets import DatasetDict
from transformers import TrainingArguments, set_seed

from modeling_vit_scratch.common.commands import Terminated
from modeling_vit_scratch.common.folders import (
    CHECKPOINT,
    RESUME_OFF,
    STAGING_PREFIX,
    ClaimedFolder,
    check_continuable,
    check_output_folder,
    check_removals,
    claim_output_folder,
    refuse_a_model,
    resolve_checkpoint,
)
from modeling_vit_scratch.common.run_state import checkpoint_steps, finished_at, run_folder, start_run
from modeling_vit_scratch.common.secrets import known_secrets, redacting_logs, refuse_secret
from modeling_vit_scratch.common.weights import check_checkpoint
from modeling_vit_scratch.training.arguments import (
    DataArguments,
    ModelArguments,
    OutputArguments,
    closest,
    new_run_command,
    plain_command,
    resume_command,
)
from modeling_vit_scratch.training.augmentation import AugmentedViews, AugmentingTrainer, RandomShiftRotate
from modeling_vit_scratch.training.class_metrics import class_metrics
from modeling_vit_scratch.training.data import (
    PreparedData,
    check_dataset_source,
    check_label_forms,
    check_label_text,
    collate_images,
    left_out_line,
    load_image_dataset,
    outside_paths_lines,
    prepare_splits,
    processed_rows,
)
from modeling_vit_scratch.training.distillation import DistillationTrainer, load_teacher
from modeling_vit_scratch.training.distributed import (
    NodeProcesses,
    check_fsdp,
    check_world_size,
    once_per_node,
    set_global_batch_size,
    together,
)
from modeling_vit_scratch.training.ema import averaging, check_ema, ema_text
from modeling_vit_scratch.training.layer_decay import (
    check_layer_decay,
    check_resumed_groups,
    layer_decay_optimizer,
    layer_decay_text,
)
from modeling_vit_scratch.training.mixing import BatchMixing
from modeling_vit_scratch.training.model_source import (
    build_model,
    channels_line,
    check_resumed_architecture,
    check_resumed_labels,
    fields_from_data,
    fine_tuning_line,
    model_config,
    pin_hub_sources,
    with_data_fields,
)
from modeling_vit_scratch.training.output import (
    check_push_ready,
    distillation_text,
    push_trained_folder,
    write_model_folder,
)
from modeling_vit_scratch.training.packages import check_report_to
from modeling_vit_scratch.training.policies import (
    augmentation_policy,
    check_mixing_batch,
    training_and_evaluation_transforms,
    training_augmentation,
)
from modeling_vit_scratch.training.precision import (
    KeepPrecisionChoice,
    choose_bf16,
    precision_words,
    slow_bf16_warning,
    training_precision,
)
from modeling_vit_scratch.training.preflight import ImageCheck, check_images, check_training_classes
from modeling_vit_scratch.training.resumed_data import (
    KeepDataIdentity,
    check_resumed_data,
    check_resumed_settings,
    data_root,
    earlier_legs,
    image_names,
    resumed_leg,
    run_legs,
    run_settings,
    splits_fingerprint,
)
from modeling_vit_scratch.training.rotation import GuardedRotation
from modeling_vit_scratch.training.saving import SavingIntoClaimedFolder, check_held, written_whole
from modeling_vit_scratch.training.streaming import open_stream, stream_left_out_line, stream_metrics, streaming_trainer
from modeling_vit_scratch.training.views import view_averaged

logger = logging.getLogger(__name__)


def train(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: TrainingArguments,
    output_args: OutputArguments | None = None,
    removed: list[str] | None = None,
) -> dict:
    """Train, keep the last epoch or (load_best_model_at_end) the best on validation, test it, and write the model
    folder. Returns the metrics.

    Everything that can be checked is checked before the first step: the repo id and the credentials of
    `--push_to_hub`, the output folder (`check_output_folder`'s rule against the data set, model, teacher and
    checkpoint read; writable, not in use, not holding a model unless overwriting or resuming), the checkpoint to
    resume, the images, the labels (no token in their names), the steps. Nothing is removed before then; what is
    removed then is added to `removed`. While it runs, every log record is redacted of the tokens this process knows.
    """
    output_args = output_args or OutputArguments()
    removed = [] if removed is None else removed  # filled with the names removed from the output folder at the start
    hub_token, training_args.hub_token = training_args.hub_token, None  # the Trainer pickles its arguments
    check_world_size(training_args)
    check_report_to(training_args.report_to)  # again for a caller from Python: the command checks it on parsing
    check_fsdp(training_args)
    if training_args.push_to_hub:
        check_push_ready(training_args, hub_token)
    resume = training_args.resume_from_checkpoint
    main_process = training_args.process_index == 0
    slow_bf16 = slow_bf16_warning(training_args.device, "Leave out --bf16 true") if training_args.bf16 else None
    if slow_bf16 and main_process:
        logger.warning(slow_bf16)
    resuming = resume not in RESUME_OFF
    # the inputs first, from their names and the file system: a wrong one is named as such, never blamed on the output
    pin_hub_sources(model_args)  # a hub --model or --teacher: read at one commit, checked and resolved once
    requested, new = model_config(model_args)  # the model arguments' errors before any data is read
    check_layer_decay(model_args.layer_decay, requested, training_args)
    check_ema(model_args.ema_decay, training_args)
    check_dataset_source(data_args.dataset, data_args.dataset_config)
    settings = run_settings(model_args, data_args, training_args)  # as given, before the run changes its arguments
    inputs = {"--dataset": data_args.dataset, "--model": model_args.model, "--teacher": model_args.teacher}
    if resuming and resume not in (True, "true", "True"):  # a checkpoint's path: read, so never written over
        inputs["--resume_from_checkpoint"] = resume

    def new_run(model: Path) -> str:  # a new run from a finished run's weights, as printed fixes give it
        return new_run_command(model, training_args.output_dir)

    if resuming and not output_args.overwrite_output_dir and not os.path.isdir(training_args.output_dir):
        # before the claim makes it: there is no run to resume (both at once are refused by the claim)
        resolve_checkpoint(training_args.output_dir, resume, new_run)

    rotating = bool(training_args.save_total_limit)  # the Trainer then removes old checkpoints as it saves
    claim = claim_output_folder(training_args.output_dir, output_args.overwrite_output_dir, resuming, inputs, rotating)
    if not main_process:  # the same refusals on every process, so none waits for one that has stopped
        check_output_folder(
            training_args.output_dir, "--output_dir", inputs, live=False, runs=False
        )  # process 0 holds it
        refuse_a_model(Path(training_args.output_dir), output_args.overwrite_output_dir, resuming)
        check_removals(Path(training_args.output_dir), output_args.overwrite_output_dir, resuming, rotating)
    with claim if main_process else nullcontext() as claimed, redacting_logs(known_secrets(hub_token)):

        def remove_and_note() -> list[str]:  # what was removed, for the line Ctrl-C prints (`removed`)
            names = claimed.remove_leftovers() if claimed else []
            if main_process:  # until its model is published, readers of the folder call the run interrupted
                start_run(training_args.output_dir, plain_command(), resume_command(output_args.overwrite_output_dir))
            removed.extend(names)
            return names

        checkpoint = resolve_checkpoint(training_args.output_dir, resume, new_run)
        if checkpoint:  # read by the Trainer only once training starts: its weights and pickled states checked now
            check_checkpoint(checkpoint)
            check_continuable(checkpoint)  # the optimiser, schedule and random states: the run goes on exactly
            # the fields this command takes from the data are compared once it is read (train_in_claimed_folder)
            check_resumed_architecture(checkpoint, requested, fields_from_data(requested, new, model_args))
            check_resumed_settings(checkpoint, settings)
        if main_process:
            print(f"Output folder: {os.path.abspath(training_args.output_dir)}")
        metrics = train_in_claimed_folder(
            model_args,
            data_args,
            training_args,
            checkpoint,
            hub_token,
            remove_and_note,
            (requested, new),
            settings,
            claimed,
        )
    return metrics


def train_in_claimed_folder(
    model_args,
    data_args,
    training_args,
    checkpoint: str | None,
    hub_token: str | None,
    remove_leftovers=list,
    architecture: tuple | None = None,
    settings: dict | None = None,
    claimed: ClaimedFolder | None = None,
) -> dict:
    """`train` once the output folder is held: data, pre-flight, model, Trainer, evaluation, the model folder.
    `remove_leftovers` (from `claim_output_folder`) runs just before the first step, once every check has passed:
    a refused run removes nothing. `architecture` is `model_config`'s answer (config, new), compared with a resumed
    checkpoint's once the data has filled its fields; `settings` (`run_settings`) is kept in each checkpoint;
    `claimed` is the output folder this process holds, the only one it writes into (`training/saving.py`)."""
    started = time.time()
    if training_args.disable_tqdm:  # the libraries' own bars too (loading data, writing each checkpoint's shards)
        quiet_progress_bars()
    secrets = known_secrets(hub_token)  # read once: every login file and variable that holds a token
    policy = augmentation_policy(data_args)  # the augmentation's errors too
    check_mixing_batch(policy, training_args, data_args.total_train_batch_size)
    set_seed(training_args.seed)  # before the model is built, so the initial weights follow --seed
    if data_args.streaming:  # read while training, never held whole: streaming.py
        stream = open_stream(data_args, training_args, secrets)
        data = stream.held_out  # validation and test only, bounded
        fingerprint = whole_splits = kept_names = None  # a stream resumes from its place in it
    else:
        data = once_per_node(lambda: load_and_split(data_args, secrets))
        fingerprint = splits_fingerprint(data.splits, data_root(data_args.dataset))  # before --max_train_samples
        whole_splits = DatasetDict(data.splits)  # as fingerprinted: an older checkpoint's rule is asked of them
        kept_names = image_names(whole_splits, data_root(data_args.dataset))  # kept, to name a change on resume
        check_training_classes(data.splits, data.labels, data_args.max_train_samples)  # every scored class trained
        if data_args.max_train_samples is not None:
            data.splits["train"] = data.splits["train"].select(
                range(min(data_args.max_train_samples, len(data.splits["train"])))
            )
    set_global_batch_size(training_args, data_args.total_train_batch_size)
    if not data_args.streaming:
        check_training_steps(training_args, len(data.splits["train"]))
    check_metric_name(training_args, len(data.labels))
    check_label_names(data.id2label, data_args.dataset, secrets)
    if checkpoint:  # before the pre-flight: a resumed run trains the labels its checkpoint's head was trained on
        check_resumed_labels(checkpoint, data.labels, data_args.dataset)
        if architecture is not None:  # and the architecture this command resolves to with this data
            config, new = architecture
            check_resumed_architecture(checkpoint, with_data_fields(copy.deepcopy(config), new, model_args, data))
        if not data_args.streaming:  # and on the splits it started with, for as many steps
            check_resumed_data(checkpoint, data_args.dataset, fingerprint, whole_splits, kept_names)
            check_resumed_steps(training_args, len(data.splits["train"]), checkpoint)
        check_trains_on(checkpoint, training_args.output_dir)  # once the run is known to be the same: no step left?
    main_process = training_args.process_index == 0
    images = check_images_together(
        data.splits, data_args.check_images, main_process and not training_args.disable_tqdm, data.carved_from
    )
    if main_process:
        print(images.summary())
        for line in images.copies_lines(data.labels):  # identical files under two classes, or train and held out
            print(line)
        for line in data.notes:  # how the labels were read: their order, classes without images, names alike
            print(line)
        # the files of the data set folder that are not read, named: never a file the loader reads
        left_out = (stream_left_out_line if data_args.streaming else left_out_line)(data_args.dataset)
        if left_out:
            print(left_out)
    model, processor = build_model(model_args, data)
    if main_process:  # what fine-tuning replaces, and how the images meet the model's channels, in one line each
        config, new = architecture or (None, True)
        notes = [] if new else [fine_tuning_line(model_args.model, config, data.labels)]
        notes.append(channels_line(data.splits.get("train") or data.splits["validation"], processor.num_channels))
        for line in filter(None, notes):
            print(line)
    if data_args.crop_pct is not None:
        processor.crop_pct = data_args.crop_pct  # saved with the model: inference crops as evaluation does
    transforms = training_and_evaluation_transforms(processor)
    preparing = time.perf_counter()  # processing the splits kept in memory: before the Trainer's clock starts
    validation_set, test_set = (
        processed_rows(data.splits[name], transforms[False], data_args.images_in_memory_mb)
        for name in ("validation", "test")
    )
    if data_args.streaming:  # the stream's position, not the Trainer's skipping, resumes it
        train_set, training_args.ignore_data_skip = stream.rows(transforms[True], checkpoint), True
    else:
        train_set = processed_rows(data.splits["train"], transforms[True], data_args.images_in_memory_mb)
    augmentation = RandomShiftRotate.for_processor(processor, data_args.max_shift, data_args.max_degrees)
    if data_args.validation_views > 1:
        validation_set = AugmentedViews(validation_set, data_args.validation_views, augmentation)
    data_preparation_seconds = round(time.perf_counter() - preparing, 2)

    training_args.remove_unused_columns = False  # the image column must reach the transform
    push = training_args.push_to_hub  # pushed below through the same gate as `vit-scratch push`
    training_args.push_to_hub = False
    choice = None
    if model_args.bf16_when_faster:
        choice = choose_bf16(model, test_set[0]["pixel_values"].shape, training_args, checkpoint)
    precision_choice = str(choice) if choice else None  # in words, for the output, the record and the card
    if main_process and precision_choice:
        print(f"Training in {precision_words(training_precision(training_args), precision_choice)}.")
    trainer_class, teaching = AugmentingTrainer, {}
    if model_args.teacher:
        teacher, teacher_inputs = load_teacher(
            model_args.teacher, processor, data.id2label, model_args.teacher_revision
        )
        trainer_class = DistillationTrainer
        teaching = dict(teacher=teacher, teacher_inputs=teacher_inputs, distillation=model_args.distillation_loss)
    averaged = {} if model_args.ema_decay is None else {"ema_decay": model_args.ema_decay}
    if averaged:
        trainer_class = averaging(trainer_class)
    views = data_args.validation_views  # each validation image scored once, on its views' averaged probabilities
    if data_args.streaming:
        trainer_class = streaming_trainer(trainer_class)
    if training_args.save_total_limit:
        trainer_class = type(f"Guarded{trainer_class.__name__}", (GuardedRotation, trainer_class), {})
    trainer_class = type(f"Saving{trainer_class.__name__}", (SavingIntoClaimedFolder, trainer_class), {})
    trainer = trainer_class(
        model=model,
        args=training_args,
        train_dataset=train_set,
        eval_dataset=validation_set,
        data_collator=collate_images,
        compute_metrics=view_averaged(accuracy_metrics, views) if views > 1 else accuracy_metrics,
        processing_class=processor,
        augmentation=training_augmentation(policy, processor, augmentation),
        mixing=BatchMixing(policy.mixup, policy.cutmix, len(data.labels)) if policy.mixes else None,
        eval_flip=data_args.eval_flip,
        **teaching,
        **averaged,
    )
    trainer.claimed = claimed
    if model_args.layer_decay is not None:  # the groups of the model on its device
        trainer.optimizer_cls_and_kwargs = layer_decay_optimizer(trainer.model, training_args, model_args.layer_decay)
    if checkpoint:  # one line, where the Trainer would fail to load an optimizer built with other groups
        check_resumed_groups(checkpoint, trainer.optimizer_cls_and_kwargs)
    if choice:  # each checkpoint keeps it, so a resumed run trains on in the same precision
        trainer.add_callback(KeepPrecisionChoice(choice))
    # each checkpoint names its data and settings, so a resumed run reads the same splits and goes on as it started
    legs = (earlier_legs(checkpoint), plain_command(), started, resumed_leg(checkpoint))  # commands, times, steps
    trainer.add_callback(KeepDataIdentity(data_args.dataset, fingerprint, settings, legs, kept_names))
    removed = remove_leftovers()
    replaced = [name for name in removed if CHECKPOINT.match(name)]  # the earlier run's checkpoints
    figures = [name for name in removed if not CHECKPOINT.match(name) and not name.startswith(STAGING_PREFIX)]
    unfinished = [name for name in removed if name.startswith(STAGING_PREFIX)]  # saves that were never completed
    if replaced:
        logger.warning(
            "Removed the earlier run's checkpoints in %s, replaced as --overwrite_output_dir asks: %s",
            training_args.output_dir,
            ", ".join(replaced),
        )
    if figures:  # explain's, of the model it explained: never read as this run's
        logger.warning(
            "Removed the figures of explain in %s, which describe another model, as --overwrite_output_dir asks: %s",
            training_args.output_dir,
            ", ".join(figures),
        )
    if unfinished:
        logger.warning(
            "Removed the unfinished saves of an interrupted run in %s: %s",
            training_args.output_dir,
            ", ".join(unfinished),
        )
    # read now: --save_total_limit may rotate the resumed checkpoint away while training; nothing after reads it
    resumed_at = steps_trained(checkpoint) if checkpoint else None
    train_result = trainer.train(resume_from_checkpoint=checkpoint)
    check_finished(trainer)
    metrics = {**train_result.metrics}
    if resumed_at == trainer.state.global_step:  # a resume that only finishes the run
        metrics.pop("train_loss", None)  # no step trained now: the Trainer's 0 is no loss
    if resumed_at == trainer.state.global_step and trainer.is_world_process_zero():  # said once per run
        logger.warning(  # said whatever the run marker says: "Model saved" alone would read as new training
            "Trained no step: %s is the run's last step (%d), so this resume only evaluates it and writes its model "
            "folder.",
            checkpoint,
            trainer.state.global_step,
        )
    if data_args.streaming:
        metrics.update(stream_metrics(trainer, train_set))
    metrics.update(trainer.evaluate(validation_set, metric_key_prefix="eval"))
    trainer.compute_metrics = accuracy_metrics  # the test split has one view of each image
    # predict, not evaluate: the same metrics, plus the predictions of every process for the per-class results
    test = trainer.predict(test_set, metric_key_prefix="test")
    trainer.log(test.metrics)  # logged as evaluate logs them
    metrics.update(test.metrics)
    metrics.update(class_metrics(test.predictions, test.label_ids, data.id2label, prefix="test"))
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
    if model_args.ema_decay is not None:  # the weights saved, and scored above, are the average
        metrics["ema_decay"] = model_args.ema_decay
    _, new = architecture or model_config(model_args)
    notes = dict(
        initial_weights=None if new else model_args.model,  # None: a new model, trained from its random start
        distillation=distillation_text(model_args),
        precision_choice=precision_choice,
        weight_average=ema_text(model_args.ema_decay),
        layer_decay=layer_decay_text(model_args.layer_decay, model.config),
        legs=run_legs(*legs),  # every command of the run, and its wall time
        label_notes=data.notes or None,  # how the labels were read (their order, classes without images)
    )
    if not new and model_args.model_revision:  # a hub repo's: the full commit it was read at (`pin_hub_sources`)
        notes["initial_weights_commit"] = model_args.model_revision
    notes["wall_time_seconds"] = round(sum(leg["wall_time_seconds"] or 0 for leg in notes["legs"]), 1)  # all legs
    # every process: a sharded model's weights are gathered from all of them; process 0 writes
    check_held(claimed)
    output_dir = Path(training_args.output_dir)
    with written_whole(output_dir, output_dir):
        write_model_folder(trainer, processor, data, data_args, metrics, secrets, notes)
    if push and trainer.is_world_process_zero():
        push_trained_folder(training_args, hub_token)
    trainer.accelerator.wait_for_everyone()
    return metrics


def check_finished(trainer) -> None:
    """A run whose Trainer returned before its planned steps was stopped, not finished: with
    --enable_jit_checkpoint the Trainer catches SIGTERM itself, saves a checkpoint and returns as if done. It ends
    as SIGTERM ends any run (`Terminated`: the interrupt line, exit code 143), and publishes no model folder."""
    if trainer.state.global_step < trainer.state.max_steps:
        raise Terminated


def load_and_split(data_args: DataArguments, secrets: list[str]) -> PreparedData:
    """The data set loaded and split as the data arguments say."""
    raw = load_image_dataset(data_args.dataset, data_args.dataset_config, secrets)
    data = prepare_splits(
        raw,
        data_args.image_column,
        data_args.label_column,
        data_args.validation_fraction,
        data_args.test_fraction,
        data_args.split_seed,
        getattr(data_args, "fractions_given", {}),
        data_root(data_args.dataset),
    )
    # images read from files outside a local set by the path in their cell: named, as links out of it are
    columns = [split.data.column("image") for split in data.splits.values()]  # each split's table: its rows and more
    data.notes += outside_paths_lines(columns, data_root(data_args.dataset))
    return data


def check_images_together(splits, decode: bool | None, progress: bool, carved_from: dict[str, str]) -> ImageCheck:
    """The pre-flight check of every image, shared by the processes of each machine (each image checked once per
    machine); a failure found by any process stops every process with its line."""
    node = NodeProcesses.current()
    checks = together(
        lambda: check_images(splits, decode=decode, progress=progress, part=node.local_part, carved_from=carved_from)
    )
    return ImageCheck.combined(checks[node.node_main_rank : node.node_main_rank + node.local_world_size])


def check_label_names(id2label: dict, dataset: str, secrets: list[str]) -> None:
    """No class name holds a token (it would be written to config.json, the card and the logs; never echoed) or an
    unprintable character (`check_label_text`), and no two are one name in two Unicode forms, spacings or cases (`check_label_forms`),
    wherever the names came from: folders, class names or numbers."""
    check_label_forms(list(id2label.values()), dataset)
    for label in id2label.values():
        check_label_text(str(label), dataset)
        refuse_secret(
            f"A class name of the data set {dataset}",
            str(label),
            secrets,
            "rename that class (its folder, or its label in the data set) before training",
        )


def check_training_steps(training_args: TrainingArguments, num_train: int) -> None:
    """At least one optimisation step, or one line saying why not: a training split that yields a batch on every
    process (`--dataloader_drop_last true` drops one that is not full), and steps or epochs to train."""
    if num_train == 0:
        raise ValueError(
            "The training split is empty: give a data set with training images (or a larger --max_train_samples)."
        )
    processes, batch = training_args.world_size, training_args.per_device_train_batch_size
    if training_args.dataloader_drop_last and num_train < batch * processes:  # a batch for every process, or none
        each = f" x {processes} processes" if processes > 1 else ""
        raise ValueError(
            f"--dataloader_drop_last true drops every batch of the training split: it holds {num_train} images, "
            f"fewer than one batch (--per_device_train_batch_size {batch}{each}): lower "
            "--per_device_train_batch_size, or leave out --dataloader_drop_last."
        )
    if training_args.max_steps <= 0 and training_args.num_train_epochs <= 0:
        raise ValueError(
            f"--num_train_epochs {training_args.num_train_epochs:g} trains nothing: give "
            "--num_train_epochs > 0 or --max_steps >= 1."
        )


def check_resumed_steps(training_args: TrainingArguments, num_train: int, checkpoint: str) -> None:
    """A resumed run plans the total steps its checkpoint's run planned, for which the Trainer built the
    learning-rate schedule, or one line (`--max_steps` and `--num_train_epochs` are compared before any data is read;
    this compares the total, whatever set it). The same total finishes a run stopped after its last step, before its
    model folder was written: the Trainer trains no more, and the run evaluates, tests and writes the model folder."""
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    planned = planned_steps(training_args, num_train)
    scheduled = state.get("max_steps") or steps_trained(checkpoint)  # a state without it: at least its steps
    if planned == scheduled or (not state.get("max_steps") and planned > scheduled):
        return
    asked = (
        f"--max_steps {training_args.max_steps}"
        if training_args.max_steps > 0
        else f"--num_train_epochs {training_args.num_train_epochs:g}"
    )
    raise ValueError(
        f"--resume_from_checkpoint: {checkpoint} belongs to a run of {scheduled} steps (it has trained "
        f"{steps_trained(checkpoint)}), and {asked} plans {planned}: its learning-rate schedule was built for "
        f"{scheduled}, and a resumed run goes on as it started; resume with the steps it was given, or start a new "
        f"run from its weights (--model {checkpoint}, without --resume_from_checkpoint) in another --output_dir."
    )


def check_trains_on(checkpoint: str, output_dir: str) -> None:
    """A resume trains at least one step, or one line: a run that finished (published its model) at the step of
    `checkpoint` has nothing to resume, and republishing its model would read as a new leg of it. The fix is a
    command that runs as printed: a new run from its weights in a new folder. A run stopped after its last
    checkpoint but before it published its model is not finished: its resume writes the model folder."""
    step, planned = checkpoint_steps(checkpoint)
    finished = finished_at(checkpoint)
    if finished is None or planned is None or step < planned:
        return
    run = run_folder(Path(checkpoint))
    raise ValueError(
        f"--resume_from_checkpoint: the run in {str(run)!r} finished at step {finished} ({checkpoint} is its last "
        "step), so there is nothing to resume; to train on from its weights, start a new run (set --num_train_epochs "
        f"or --max_steps to the length you want): {new_run_command(run, output_dir)}"
    )


def steps_trained(checkpoint: str) -> int:
    """The optimisation steps `checkpoint` has trained (its `trainer_state.json`)."""
    return json.loads((Path(checkpoint) / "trainer_state.json").read_text()).get("global_step", 0)


def planned_steps(training_args: TrainingArguments, num_train: int) -> int:
    """The optimisation step the Trainer stops at: `--max_steps`, else the epochs times the steps in one (each
    process reads its share of the rows in batches; an accumulation step that is not full still steps)."""
    if training_args.max_steps > 0:
        return training_args.max_steps
    rows = math.ceil(num_train / training_args.world_size)
    divide = math.floor if training_args.dataloader_drop_last else math.ceil
    batches = divide(rows / training_args.per_device_train_batch_size)
    per_epoch = max(math.ceil(batches / training_args.gradient_accumulation_steps), 1)
    return math.ceil(training_args.num_train_epochs * per_epoch)


def computed_metrics(num_classes: int) -> list[str]:
    """The names of the validation metrics a run computes (`accuracy_metrics`, and the loss), as
    --metric_for_best_model takes them."""
    return ["loss", "accuracy", "selection_score", *(["top5_accuracy"] if num_classes > 5 else [])]


def check_metric_name(training_args: TrainingArguments, num_classes: int) -> None:
    """--metric_for_best_model names a metric the run computes (with or without the `eval_` prefix), or one line
    listing them: the Trainer would look it up only at the first evaluation, after an epoch of training."""
    name = training_args.metric_for_best_model
    valid = computed_metrics(num_classes)
    if name is None or name.removeprefix("eval_") in valid:
        return
    raise ValueError(
        f"--metric_for_best_model {name!r} is not a metric this run computes{closest(name, valid)}: give one of "
        f"{', '.join(valid)}."
    )


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


def quiet_progress_bars() -> None:
    """`--disable_tqdm true` silences every progress bar the run shows, not only the Trainer's: transformers'
    (writing model shards at each checkpoint), datasets' and huggingface_hub's, each by its own switch."""
    import datasets
    import huggingface_hub
    import transformers

    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    huggingface_hub.utils.disable_progress_bars()
