"""Training with the transformers `Trainer`: a preset, architecture file or saved model + an image data set -> a model
folder.

`train` runs one line: the output folder checked (new, empty or ours; a model in it replaced only with
--overwrite_output_dir or continued with --resume_from_checkpoint), the model's architecture and its memory at the
batch size, the data (`data.read_data`, which checks it), the model built for the data's labels, the Trainer (with a
teacher, a weight average, layer decay, bf16 where faster), evaluation on validation and test, then the model folder
staged and published whole, its card written, and the push. The same code runs on one process or several (torchrun,
accelerate launch): process 0 holds the folder and writes; every process trains and takes part in saving (FSDP).
"""

import math
import os
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np
import torch
from transformers import Trainer, set_seed

from modeling_vit_scratch.errors import UserError, describe, on_interrupt
from modeling_vit_scratch.explanation.figures import plot_reconstructions
from modeling_vit_scratch.explanation.reconstruction import RECONSTRUCTION_FILE, Reconstructions, reconstructions
from modeling_vit_scratch.folders import LOCK, MARKER, OutputFolder, ours, remove_entry
from modeling_vit_scratch.modeling_vit_scratch import ViTScratchForPreTraining
from modeling_vit_scratch.secrets import shown
from modeling_vit_scratch.sharing.card import write_card
from modeling_vit_scratch.sharing.push import check_target, push_folder
from modeling_vit_scratch.sources import is_local
from modeling_vit_scratch.training.arguments import OutputArguments, check_fields
from modeling_vit_scratch.training.checkpoints import (
    KeepRun,
    check_same_model,
    interrupted_line,
    plain_command,
    resolved_checkpoint,
    resumed_legs,
)
from modeling_vit_scratch.training.class_metrics import class_metrics
from modeling_vit_scratch.training.data import model_inputs, read_data
from modeling_vit_scratch.training.distillation import distillation_text, load_teacher
from modeling_vit_scratch.training.ema import WeightAverage, copy_parameters, ema_text
from modeling_vit_scratch.training.layer_decay import layer_decay_optimizer, layer_decay_text
from modeling_vit_scratch.training.model_source import PRETRAINING, build_model, check_memory, model_plan
from modeling_vit_scratch.training.policies import POLICIES, AugmentationPolicy, augmentation_policy
from modeling_vit_scratch.training.precision import KeepPrecisionChoice, choose_bf16, precision_words
from modeling_vit_scratch.training.record import training_record, write_results
from modeling_vit_scratch.training.streaming import stream_metrics

FIX = "--overwrite_output_dir true (or --resume_from_checkpoint true to continue)"
# what a new model folder replaces of an older one in the same folder, where it writes no file of that name
REPLACED = (
    "model.safetensors.index.json",
    "model-*-of-*.safetensors",
    "confusion_matrix.png",
    "conversion_record.json",
    RECONSTRUCTION_FILE,
)


def train(model_args, data_args, training_args, output_args: OutputArguments | None = None) -> dict:
    """Train, evaluate, test and write the model folder (see the module docstring). Returns the metrics."""
    started, command = time.time(), plain_command()
    output_args = output_args or OutputArguments()
    check_fields(model_args, data_args, output_args, training_args)
    set_total_batch(training_args, data_args.total_train_batch_size)
    if training_args.fsdp and training_args.device.type == "cpu":  # accelerate would drop it without a word
        raise UserError("--fsdp shards the model over GPUs and accelerate ignores it on CPU: drop --fsdp")
    output_dir = Path(training_args.output_dir)
    checkpoint = resolved_checkpoint(training_args.resume_from_checkpoint, output_dir)
    overwrite = output_args.overwrite_output_dir and not checkpoint
    inputs_read = (data_args.dataset, model_args.model, model_args.teacher)
    folder = OutputFolder(
        output_dir, "--output_dir", replace=bool(overwrite or checkpoint), fix=FIX, inputs=inputs_read
    )
    folder.check()  # on every process: each stops with the same line, none waits for another
    if not overwrite and not checkpoint and list(output_dir.glob("checkpoint-*")):
        raise UserError(f"--output_dir {shown(output_dir)} holds the checkpoints of an earlier run: pass {FIX}")
    plan = model_plan(model_args)  # every error of the model arguments, before any data is read
    check_memory(plan.config, training_args.per_device_train_batch_size)
    pretraining = model_args.objective == PRETRAINING
    policy = augmentation_policy(data_args, training_args)  # its errors, before any data is read
    if pretraining:  # the model scores itself: its loss is the evaluation
        check_pretraining(policy, data_args, training_args)
        training_args.label_names, training_args.prediction_loss_only = ["pixel_values"], True
    hub_token, training_args.hub_token = training_args.hub_token, None  # the Trainer pickles its arguments
    push, training_args.push_to_hub = training_args.push_to_hub, False  # pushed below, through the sharing gate
    repo_id = training_args.hub_model_id or output_dir.name
    if push:
        check_target(repo_id, hub_token)  # before any work: a push that cannot happen is said now, not after training
    main = training_args.process_index == 0
    with folder if main else nullcontext():
        on_interrupt(lambda: interrupted_line(output_dir, started if overwrite else 0.0))
        set_seed(training_args.seed)  # before the model is built: the initial weights follow --seed
        training_args.resume_from_checkpoint = checkpoint  # the resolved path (or None) for the data's callbacks
        reading = time.time()
        data = read_data(data_args, training_args, labelled=not pretraining)
        legs = resumed_legs(checkpoint, data.identity)
        model, processor = build_model(
            plan, data.labels, data.num_channels, model_args.attn_implementation, model_args.objective
        )
        check_same_model(checkpoint, model)
        inputs = model_inputs(data, processor, data_args, training_args, checkpoint)
        stretched = not data.streamed and stretch_epochs(training_args, len(inputs.train), data_args.min_train_steps)
        if stretched and main:
            print(stretched)
        prepared = round(time.time() - reading, 1)  # reading, checking and processing the images
        choice = None
        if model_args.bf16_when_faster:
            size = processor.size
            shape = (processor.num_channels, size["height"], size["width"])
            choice = choose_bf16(model, shape, training_args, checkpoint)
            if choice and main:
                print(f"Training in {precision_words('bf16' if training_args.bf16 else 'float32', choice)}.")
        trainer = ImageTrainer(
            model=model,
            args=training_args,
            train_dataset=inputs.train,
            eval_dataset=inputs.validation,
            processing_class=processor,
            compute_metrics=None if pretraining else accuracy_metrics(inputs.validation_views),
            compute_loss_func=inputs.compute_loss,
            callbacks=[*inputs.callbacks, KeepRun(data.identity, legs, command, started)],
            teacher=load_teacher(model_args, processor, data.labels) if model_args.teacher else None,
            ema_decay=model_args.ema_decay,
            train_loader=inputs.train_loader,
            augment=inputs.augment,
        )
        if model_args.layer_decay is not None:
            trainer.optimizer_cls_and_kwargs = layer_decay_optimizer(
                trainer.model, training_args, model_args.layer_decay
            )
        if choice:
            trainer.add_callback(KeepPrecisionChoice(training_args.bf16, choice.split(": ", 1)[-1]))
        if overwrite and main:  # every check has passed: the earlier run's files go now, never on a refusal
            for entry in output_dir.iterdir():
                if entry.name not in (MARKER, LOCK) and ours(entry.name):
                    remove_entry(entry)
        if main:
            print(f"Output folder: {os.path.abspath(output_dir)}")
        result = trainer.train(resume_from_checkpoint=checkpoint)
        metrics = {**result.metrics, **trainer.evaluate(metric_key_prefix="eval")}
        trainer.compute_metrics = None if pretraining else accuracy_metrics(inputs.test_views)
        test = trainer.predict(inputs.test, metric_key_prefix="test")
        trainer.log(test.metrics)
        pictures = None
        if pretraining:  # on every process: a sharded model's forward takes them all
            examples = torch.stack([inputs.test[index]["pixel_values"] for index in range(min(6, len(inputs.test)))])
            pictures = reconstructions(trainer.model, examples.to(training_args.device), processor, training_args.seed)
        else:
            probabilities, labels = by_image(test.predictions, test.label_ids, inputs.test_views)
            metrics.update(class_metrics(probabilities, labels, dict(enumerate(data.labels)), prefix="test"))
        total_batch = training_args.per_device_train_batch_size * training_args.world_size
        total_batch *= training_args.gradient_accumulation_steps
        metrics.update(
            test.metrics,
            num_parameters=trainer.model.num_parameters(),
            world_size=training_args.world_size,
            total_train_batch_size=total_batch,
            wall_time_seconds=round(time.time() - started, 1),
            data_preparation_seconds=prepared,
        )
        if data.streamed:  # every process takes part: the images skipped are summed over them
            metrics.update(stream_metrics(trainer, inputs.train))
        metrics.update({"precision_choice": choice} if choice else {})
        metrics.update({"ema_decay": model_args.ema_decay} if model_args.ema_decay is not None else {})
        notes = {
            "objective": model_args.objective,
            "initial_weights": None if plan.folder is None else model_args.model,
            # a Hub snapshot's folder is named by the commit it holds: the revision resolved, whatever was typed
            "initial_weights_commit": None if plan.folder is None or is_local(model_args.model) else plan.folder.name,
            "augmentation": inputs.policy_words,
            "distillation": distillation_text(model_args),
            "precision_choice": choice,
            "weight_average": ema_text(model_args.ema_decay),
            "layer_decay": layer_decay_text(model_args.layer_decay, model.config),
            "finished_at_step": trainer.state.global_step,
            "validation_views": data_args.validation_views,
            "legs": [*legs, {"command": command, "wall_time_seconds": metrics["wall_time_seconds"]}],
        }
        notes["wall_time_seconds"] = round(sum(leg.get("wall_time_seconds") or 0 for leg in notes["legs"]), 1)
        splits = {name: len(split) for name in ("validation", "test") if (split := getattr(data, name)) is not None}
        splits["train"] = None if data.streamed else len(data.train)
        record = training_record(command, data_args.dataset, splits, training_args, metrics, notes)
        save_folder(trainer, folder if main else None, metrics, record, pictures)
    if push and main:
        try:
            result = push_folder(output_dir, repo_id, private=bool(training_args.hub_private_repo), token=hub_token)
        except Exception as error:
            if (line := describe(error)) is None:
                raise
            raise UserError(
                f"{line} (the model is saved in {shown(output_dir)}: push it with python scripts/push_to_hub.py "
                f"{shown(output_dir)} {shown(repo_id)})"
            ) from None
        print(f"repo: {result.url}\ncommit: {result.commit}", *result.notes, sep="\n")
    return metrics


def save_folder(
    trainer: Trainer, folder: OutputFolder | None, metrics: dict, record: dict, pictures: Reconstructions | None = None
) -> None:
    """The model folder: weights (gathered from every process under FSDP), config, code, processor, metrics, record,
    pictures (a masked autoencoder's reconstructions too) and card, staged and published whole by the process holding
    `folder` (the others take part only)."""
    if folder is None:
        trainer.save_model(trainer.args.output_dir)  # every process takes part; only process 0 writes
        return
    with folder.staging() as stage:
        trainer.save_model(str(stage))
        (stage / "training_args.bin").unlink(missing_ok=True)  # pickled settings: no part of a model folder
        write_results(stage, metrics, record, trainer.state.log_history)
        if pictures is not None:
            plot_reconstructions(pictures, stage / RECONSTRUCTION_FILE)
        write_card(stage)
        folder.publish(stage, remove=REPLACED)


class ImageTrainer(Trainer):
    """The Trainer with training batches augmented on their device, an optional teacher (DeiT's loss) and an
    optional weight average, scored and saved."""

    def __init__(self, *args, teacher=None, ema_decay=None, train_loader=None, augment=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.pretraining = isinstance(self.model, ViTScratchForPreTraining)  # it reads pixels, scores itself
        self.augment = augment.to(self.args.device) if augment is not None else None
        self.train_loader = train_loader  # a stream's own loader: each process reads its own shards
        self.teacher = teacher.to(self.args.device) if teacher is not None else None
        self.average = WeightAverage(self.model, ema_decay) if ema_decay is not None else None  # on its device
        if self.average is not None:
            self.add_callback(self.average)
        self.holds_average = False

    def get_train_dataloader(self):
        if self.train_loader is None:
            return super().get_train_dataloader()
        return self.train_loader(self._train_batch_size)

    def _prepare_inputs(self, inputs):
        inputs = super()._prepare_inputs(inputs)
        return {"pixel_values": inputs["pixel_values"]} if self.pretraining else inputs

    def training_step(self, model, inputs, num_items_in_batch=None):
        if self.augment is not None:
            inputs = self.augment(self._prepare_inputs(inputs))
        return super().training_step(model, inputs, num_items_in_batch)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.teacher is None:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        return self.teacher.compute_loss(model, inputs, return_outputs, self.args.label_smoothing_factor)

    @contextmanager
    def scored(self):
        """Evaluation of the weights to score (the average, where one is kept); a masked autoencoder hides the same
        patches at each evaluation (drawn from --seed), and training's random state is left as it was."""
        average = self.average is not None and not self.holds_average
        with self.average.applied(self.model) if average else nullcontext():
            if not self.pretraining:
                yield
                return
            with torch.random.fork_rng(devices=[self.args.device] if self.args.device.type == "cuda" else []):
                torch.manual_seed(self.args.seed)
                yield

    def evaluate(self, *args, **kwargs):
        with self.scored():
            return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        with self.scored():
            return super().predict(*args, **kwargs)

    def train(self, resume_from_checkpoint=None, *args, **kwargs):
        """Train; with an average, restore it from the checkpoint resumed, and end holding it (the best
        checkpoint's with --load_best_model_at_end)."""
        if self.average is not None:
            self.average.load(resume_from_checkpoint)
        result = super().train(resume_from_checkpoint, *args, **kwargs)
        if self.average is not None:
            if self.args.load_best_model_at_end:
                self.average.load(self.state.best_model_checkpoint)
            copy_parameters(self.average.average.module, self.model)
            self.holds_average = True
        return result


def check_pretraining(policy: AugmentationPolicy, data_args, training_args) -> None:
    """What masked image modelling has no use for, refused in one line before any data is read: mixing labels (given,
    or the `policy`'s), what acts on class scores, and a model selection on any metric but its reconstruction loss."""
    if policy.mixes:
        named = POLICIES[data_args.augmentation]
        if any(getattr(data_args, name) is None and named.get(name) for name in ("mixup", "cutmix")):
            raise UserError(
                f"--augmentation {data_args.augmentation} mixes batches by Mixup and CutMix, which mix labels, and "
                "masked image modelling has none: add --mixup 0 --cutmix 0 (the rest of the policy is kept)"
            )
        raise UserError("--mixup and --cutmix mix labels, which masked image modelling has none of: set them to 0")
    scoring = {
        "label_smoothing_factor": training_args.label_smoothing_factor,
        "eval_flip": data_args.eval_flip,
        "validation_views": data_args.validation_views - 1,
    }
    if given := [f"--{name}" for name, value in scoring.items() if value]:
        raise UserError(
            f"{' and '.join(given)} act on class scores, which masked image modelling has none of: leave them out"
        )
    metric = training_args.metric_for_best_model
    if metric is not None and metric.removeprefix("eval_") != "loss":
        raise UserError(
            f"--metric_for_best_model {metric}: masked image modelling reports only its reconstruction loss: give "
            "--metric_for_best_model loss with --greater_is_better false, or leave it unset"
        )


def set_total_batch(training_args, total: int | None) -> None:
    """--total_train_batch_size: the per-device batch from the processes and the accumulation steps."""
    if total is None:
        return
    shards = training_args.world_size * training_args.gradient_accumulation_steps
    if total % shards:
        raise UserError(
            f"--total_train_batch_size {total} does not divide over {training_args.world_size} processes x "
            f"{training_args.gradient_accumulation_steps} accumulation steps: choose a multiple of {shards}"
        )
    training_args.per_device_train_batch_size = total // shards


def stretch_epochs(training_args, num_train: int, min_steps: int) -> str | None:
    """--min_train_steps: more epochs where --num_train_epochs of `num_train` images make fewer optimizer steps than
    `min_steps` (a set of a few hundred images); the line saying so, or None where nothing changed."""
    total = training_args.per_device_train_batch_size * training_args.world_size
    per_epoch = math.ceil(num_train / (total * training_args.gradient_accumulation_steps))
    epochs = math.ceil(min_steps / per_epoch)
    if training_args.max_steps > 0 or epochs <= training_args.num_train_epochs:
        return None
    asked, training_args.num_train_epochs = training_args.num_train_epochs, epochs
    return (
        f"Training for {epochs} epochs, not {asked:g}: {num_train} images make {per_epoch} optimizer steps an epoch "
        f"and --min_train_steps is {min_steps} (0 trains for --num_train_epochs)"
    )


def by_image(logits, labels, views: int) -> tuple[np.ndarray, np.ndarray]:
    """(probabilities, labels) per image: the softmax averaged over its `views` rows (the images, then each further
    view of them in the same order)."""
    logits = logits[0] if isinstance(logits, tuple) else logits
    probabilities = torch.from_numpy(np.asarray(logits)).float().softmax(-1).numpy()
    labels = np.asarray(labels)
    if views > 1:
        probabilities = probabilities.reshape(views, -1, probabilities.shape[-1]).mean(0)
        labels = labels.reshape(views, -1)[0]
    return probabilities, labels


def accuracy_metrics(views: int = 1):
    """compute_metrics: top-1 accuracy, top-5 with more than 5 classes, and `selection_score`: the accuracy with
    ties broken by the lower cross-entropy (on a small validation set many epochs reach the same accuracy)."""

    def metrics(prediction) -> dict[str, float]:
        probabilities, labels = by_image(prediction.predictions, prediction.label_ids, views)
        accuracy = float((probabilities.argmax(-1) == labels).mean())
        loss = float(-np.log(np.clip(probabilities[np.arange(len(labels)), labels], 1e-12, None)).mean())
        found = {"accuracy": accuracy, "selection_score": accuracy - 1e-4 * min(loss, 50.0)}
        if probabilities.shape[-1] > 5:
            top5 = np.argsort(-probabilities, axis=-1)[:, :5]
            found["top5_accuracy"] = float((top5 == labels[:, None]).any(-1).mean())
        return found

    return metrics
