"""The run a checkpoint belongs to, kept in it, so that a resumed run continues that run and no other.

A resumed run that read another data set (other images under the same class names, or the same images split by other
fractions or seeds) would train on, and then test on, other splits: images it has trained on could land in its test
split, and the card's test accuracy would say nothing. A resumed run with other settings (another seed, batch,
learning rate, augmentation, no weight average where the run kept one, ...) would go on as another run from the
middle of the first, silently, and its card would describe neither. Each checkpoint therefore holds `DATA_FILE`: the
`--dataset` argument, a fingerprint of the splits (every row's label and image: its file's path inside the data set
folder and size, or a hash of its bytes: a set moved between an interrupt and its resume is the same set) and the settings that shape the run's course (`run_settings`). `check_resumed_settings` compares the
settings before any data is read, `check_resumed_data` the splits before the pre-flight. A streamed run keeps its
place in the stream instead of a fingerprint (`streaming.py`). The steps and epochs are settings too: the Trainer builds
the learning-rate schedule for the run's total steps, so a resume with more would stretch the schedule it is halfway
through (a longer run is a new run from the checkpoint's weights). What may change on resume (logging, evaluation and
saving cadence, output and reporting, the number of processes at the same total batch, the attention kernel) is left
out of the settings: docs/safety.md lists both. This module is training glue: the model code never
imports it.
"""

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path

from datasets import DatasetDict
from datasets import Image as ImageFeature
from transformers import TrainerCallback

from modeling_vit_scratch.common.folders import checkpoints, is_complete_checkpoint
from modeling_vit_scratch.common.run_state import checkpoint_steps, finished_at

DATA_FILE = "vit_scratch_data.json"  # in each checkpoint: {"dataset": ..., "splits_fingerprint": ..., "settings": ...}
BATCH_ROWS = 1_000


def splits_fingerprint(splits: DatasetDict, root: str | None = None) -> str:
    """A short hash of every split's rows in order: the label and the image (a hash of the stored bytes, or its
    file's path and size; the path inside the data set folder `root` where it lies there, so that a set moved between
    an interrupt and its resume is the same set; `root` None: the file's real path, the rule of earlier versions)."""
    digest = hashlib.sha256()
    for name in sorted(splits):
        split = splits[name].select_columns(["image", "label"]).cast_column("image", ImageFeature(decode=False))
        digest.update(f"{name}:{len(split)}\n".encode())
        for start in range(0, len(split), BATCH_ROWS):
            block = split[start : start + BATCH_ROWS]
            for cell, label in zip(block["image"], block["label"]):
                digest.update(f"{label}:{image_identity(cell, root)}\n".encode())
    return digest.hexdigest()[:16]


def image_identity(cell: dict | None, root: str | None = None) -> str:
    """What names one stored image: a hash of its bytes, or its file's path (inside `root` where it lies there,
    else real) and size."""
    cell = cell or {}
    if cell.get("bytes") is not None:
        return hashlib.sha256(cell["bytes"]).hexdigest()
    given = cell.get("path") or ""
    size = os.path.getsize(given) if os.path.isfile(given) else -1
    if root is not None:
        inside = os.path.relpath(os.path.abspath(given), os.path.realpath(root))
        if inside != os.pardir and not inside.startswith(os.pardir + os.sep):
            return f"{Path(inside).as_posix()}:{size}"
    return f"{os.path.realpath(given)}:{size}"


# a checkpoint keeps the names of its set's images up to this many (a few hundred KB), so a resume on a set that
# changed can name the images added or removed; a larger set keeps only the number in each split
KEPT_IMAGES = 20_000


def image_names(splits: DatasetDict, root: str | None) -> dict:
    """What a checkpoint keeps to name a change of its set: the rows of each split and, for a set of at most
    `KEPT_IMAGES`, each image's name (`image_identity` inside `root`), sorted."""
    rows = {name: len(splits[name]) for name in sorted(splits)}
    kept = {"split_rows": rows}
    if sum(rows.values()) <= KEPT_IMAGES:
        names = []
        for name in sorted(splits):
            split = splits[name].select_columns(["image"]).cast_column("image", ImageFeature(decode=False))
            names += [image_identity(cell, root) for cell in split["image"]]
        kept["images"] = sorted(names)
    return kept


def shown_change(kept: dict, now: dict) -> str:
    """The change between the images a checkpoint kept (`image_names`) and this run's, in words: how many images
    fewer or more, and some of their names; empty where the checkpoint kept no count (or the counts are equal and
    no names were kept)."""
    if "split_rows" not in kept:
        return ""
    before, after = sum(kept["split_rows"].values()), sum(now["split_rows"].values())
    if "images" in kept and "images" in now:
        gone = sorted(set(kept["images"]) - set(now["images"]))
        new = sorted(set(now["images"]) - set(kept["images"]))
        named = [
            f"{len(items)} image{'s' if len(items) != 1 else ''} {word} ("
            + ", ".join(item.rsplit(":", 1)[0] if len(item) != 64 else "an image's bytes" for item in items[:3])
            + (", ..." if len(items) > 3 else "")
            + ")"
            for items, word in ((gone, "fewer"), (new, "more"))
            if items
        ]
        if named:
            return " and ".join(named)
    if before != after:
        return f"{abs(before - after)} image{'s' if abs(before - after) != 1 else ''} {'fewer' if after < before else 'more'}"
    return ""


def data_root(dataset: str) -> str | None:
    """The folder a `--dataset` names (its files' paths are fingerprinted from it), or None (the digits, a hub set)."""
    path = os.path.expanduser(dataset)
    return path if os.path.isdir(path) else None


# which rule names an image file in the splits' fingerprint; a checkpoint without it used the file's real path
FINGERPRINT_RULE = "path inside the data set folder, size"


# The arguments that shape a run's course, by the group they are parsed into: a resumed run must give the same.
# The data set and its splits are the fingerprint's (a stream has none: its source is a setting too).
MODEL_SETTINGS = (
    "model",
    "model_revision",
    "config_overrides",
    "teacher",
    "teacher_revision",
    "distillation",
    "distillation_alpha",
    "distillation_temperature",
    "ema_decay",
    "layer_decay",
)
DATA_SETTINGS = (
    "streaming",
    "max_train_samples",
    "augment",
    "augmentation",
    "max_shift",
    "max_degrees",
    "crop_scale",
    "crop_ratio",
    "hflip",
    "rand_augment",
    "random_erasing",
    "mixup",
    "cutmix",
    "crop_pct",
)
# a stream's source, the fractions that decide which of its rows are held out, and its shuffle window
STREAM_SETTINGS = (
    "dataset",
    "dataset_config",
    "image_column",
    "label_column",
    "validation_fraction",
    "test_fraction",
    "shuffle_buffer_size",
)
# Every field of TrainingArguments is in one of the two lists below (a test holds them to it, so a field a new
# transformers adds is classified before it is used). Compared: what the optimiser, the schedule, the loss, the
# numbers, the rows and their order depend on.
TRAINING_SETTINGS = (
    "max_steps",
    "num_train_epochs",
    "seed",
    "data_seed",
    "full_determinism",
    "learning_rate",
    "lr_scheduler_type",
    "lr_scheduler_kwargs",
    "warmup_steps",
    "weight_decay",
    "optim",
    "optim_args",
    "optim_target_modules",
    "adam_beta1",
    "adam_beta2",
    "adam_epsilon",
    "max_grad_norm",
    "label_smoothing_factor",
    "neftune_noise_alpha",
    "average_tokens_across_devices",
    "auto_find_batch_size",
    "dataloader_drop_last",
    "train_sampling_strategy",
    "length_column_name",
    "label_names",
    "ignore_data_skip",
    "accelerator_config",
    "deepspeed",
    "bf16",
    "fp16",
    "tf32",
)
# Allowed to change: when to log, evaluate and save, what evaluation computes, where the
# output goes and who is told, how the processes share the same total batch (which `run_settings` compares itself),
# how the same computation is run (kernels, compilation, recomputation, loading workers, the device), and the
# arguments the package sets itself or that resuming reads from the checkpoint.
ALLOWED_TRAINING_CHANGES = (
    "output_dir",
    "resume_from_checkpoint",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "logging_strategy",
    "logging_steps",
    "logging_first_step",
    "log_on_each_node",
    "logging_nan_inf_filter",
    "include_num_input_tokens_seen",
    "log_level",
    "log_level_replica",
    "disable_tqdm",
    "report_to",
    "run_name",
    "project",
    "trackio_space_id",
    "trackio_bucket_id",
    "trackio_static_space_id",
    "eval_strategy",
    "eval_steps",
    "eval_delay",
    "eval_on_start",
    "per_device_eval_batch_size",
    "prediction_loss_only",
    "eval_do_concat_batches",
    "eval_use_gather_object",
    "eval_accumulation_steps",
    "include_for_metrics",
    "batch_eval_metrics",
    "bf16_full_eval",
    "fp16_full_eval",
    "load_best_model_at_end",
    "metric_for_best_model",
    "greater_is_better",
    "save_strategy",
    "save_steps",
    "save_total_limit",
    "save_on_each_node",
    "save_only_model",
    "enable_jit_checkpoint",
    "restore_callback_states_from_checkpoint",
    "push_to_hub",
    "hub_token",
    "hub_private_repo",
    "hub_model_id",
    "hub_strategy",
    "hub_always_push",
    "hub_revision",
    "activation_checkpointing",
    "activation_checkpointing_kwargs",
    "gradient_checkpointing",
    "gradient_checkpointing_kwargs",
    "torch_compile",
    "torch_compile_backend",
    "torch_compile_mode",
    "use_liger_kernel",
    "liger_kernel_config",
    "use_cache",
    "torch_empty_cache_steps",
    "use_cpu",
    "parallelism_config",
    "fsdp",
    "fsdp_config",
    "ddp_find_unused_parameters",
    "ddp_bucket_cap_mb",
    "ddp_broadcast_buffers",
    "ddp_static_graph",
    "ddp_backend",
    "ddp_timeout",
    "local_rank",
    "dataloader_num_workers",
    "dataloader_pin_memory",
    "dataloader_persistent_workers",
    "dataloader_prefetch_factor",
    "dataloader_multiprocessing_context",
    "dataloader_in_order",
    "remove_unused_columns",
    "debug",
    "skip_memory_metrics",
    "do_train",
    "do_eval",
    "do_predict",
)


def run_settings(model_args, data_args, training_args) -> dict:
    """The settings that shape a run's course, as the command gives them (call it before the run changes its
    arguments): `MODEL_SETTINGS`, `DATA_SETTINGS` (and `STREAM_SETTINGS` for a stream), `TRAINING_SETTINGS`, and the
    total batch (rows per optimisation step), which the number of processes may share otherwise."""
    settings = {name: getattr(model_args, name, None) for name in MODEL_SETTINGS}
    data = DATA_SETTINGS + (STREAM_SETTINGS if data_args.streaming else ())
    settings.update({name: getattr(data_args, name, None) for name in data})
    if data_args.streaming:  # how a stream's rows are held out: a checkpoint of another rule would mix the sides
        settings["held_out_rows"] = HELD_OUT_ROWS
    settings.update({name: getattr(training_args, name, None) for name in TRAINING_SETTINGS})
    if settings["max_steps"] is None or settings["max_steps"] <= 0:  # -1: not given, the epochs set the steps
        settings["max_steps"] = None
    else:  # the Trainer reads no epochs when it is given steps
        settings["num_train_epochs"] = None
    settings["total_train_batch_size"] = data_args.total_train_batch_size or (
        training_args.per_device_train_batch_size * training_args.world_size * training_args.gradient_accumulation_steps
    )
    for name in ("model", "teacher", "dataset"):  # a local folder however it is spelt (./x, x/, a link): its real path
        if isinstance(settings.get(name), str) and os.path.exists(settings[name]):
            settings[name] = os.path.realpath(settings[name])
    return {name: json_value(value) for name, value in settings.items()}


def json_value(value):
    """`value` as JSON keeps it: an enum by its value, a list as a list, a dict or dataclass (`--lr_scheduler_kwargs`,
    `--accelerator_config`) as a dict, anything else not JSON by its text."""
    value = getattr(value, "value", value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): json_value(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_value(dataclasses.asdict(value))
    return str(value)


class KeepDataIdentity(TrainerCallback):
    """Writes the data set argument, its splits' fingerprint (None for a stream), the run's settings
    (`run_settings`) and its legs so far into each checkpoint (`DATA_FILE`). A leg is one command of the run (the
    first, then each that resumed it): the earlier legs come from the checkpoint resumed (`earlier_legs`), this one
    is `command` and its wall time since `started` (`time.time()`), so the card tells the whole run."""

    def __init__(
        self,
        dataset: str,
        fingerprint: str | None,
        settings: dict | None = None,
        legs: tuple[list[dict], str, float] | None = None,
        images: dict | None = None,
    ):
        self.identity = {"dataset": dataset, "splits_fingerprint": fingerprint, "settings": settings or {}}
        self.identity.update(images or {})  # `image_names`: to name what changed, should a resume read another set
        self.legs = legs
        if fingerprint is not None:
            self.identity["fingerprint_rule"] = FINGERPRINT_RULE

    def keep_in_checkpoint(self, args, state) -> None:
        """Write the record into the checkpoint of this step, staged and moved into place whole (a resume reads all
        of it or none). The run's saving (`training/saving.py`) calls it inside the checkpoint's own save, so a
        write the system refuses stops the run in one line and removes the checkpoint: no checkpoint is left that
        looks complete without its record."""
        folder = Path(args.output_dir, f"checkpoint-{state.global_step}")
        if state.is_world_process_zero and folder.is_dir():
            identity = {**self.identity, **({"legs": run_legs(*self.legs)} if self.legs else {})}
            staged = folder / f".{DATA_FILE}.partial"
            staged.write_text(json.dumps(identity, indent=2) + "\n")
            staged.replace(folder / DATA_FILE)

    def on_save(self, args, state, control, **kwargs):
        """A checkpoint saved outside the run's saving (none is, but a Trainer may add one) gets the record too."""
        if not Path(args.output_dir, f"checkpoint-{state.global_step}", DATA_FILE).exists():
            self.keep_in_checkpoint(args, state)

    def on_train_end(self, args, state, control, **kwargs):
        """The checkpoint the Trainer saves outside its saving (--enable_jit_checkpoint's, on SIGTERM), which no
        `on_save` sees, gets the file too."""
        self.on_save(args, state, control, **kwargs)


def earlier_legs(checkpoint: str | None) -> list[dict]:
    """The legs of the run before this command (each `{"command", "wall_time_seconds"}`), as the checkpoint it
    resumes keeps them; none for a new run. A checkpoint written before legs were kept gives one leg it knows
    nothing of (both None), so no card says the run took only its last leg."""
    if not checkpoint:
        return []
    kept = Path(checkpoint) / DATA_FILE
    legs = json.loads(kept.read_text()).get("legs") if kept.is_file() else None
    return legs if isinstance(legs, list) else [{"command": None, "wall_time_seconds": None}]


def resumed_leg(checkpoint: str | None) -> dict:
    """What a leg that resumes `checkpoint` keeps of where it started: the step it resumed from, and the step at
    which the run had finished, where it had (`finished_at`: a finished run trained on is never called stopped);
    {} for a new run. Asked before the run marks its folder as started."""
    if not checkpoint:
        return {}
    finished = finished_at(checkpoint)
    return {
        "resumed_from_step": checkpoint_steps(checkpoint)[0],
        **({"finished_at_step": finished} if finished else {}),
    }


def run_legs(earlier: list[dict], command: str, started: float, resumed: dict | None = None) -> list[dict]:
    """The legs of the run up to now: the `earlier` ones, then this command's, timed since `started`, with where it
    `resumed` from (`resumed_leg`)."""
    return [*earlier, {"command": command, "wall_time_seconds": round(time.time() - started, 1), **(resumed or {})}]


def check_resumed_settings(checkpoint: str, settings: dict) -> None:
    """A resumed run gives the settings its checkpoint's run was given (`run_settings`), or one line naming each that
    differs (the checkpoint's value, then the one asked) and the fix. A checkpoint without them (written before they
    were kept) is refused (`check_record_kept`); a setting it does not hold (added since) is not compared."""
    kept = Path(checkpoint) / DATA_FILE
    check_record_kept(checkpoint)
    saved = json.loads(kept.read_text()).get("settings")
    if not saved:
        return
    if "held_out_rows" in settings and saved.get("streaming") and "held_out_rows" not in saved:
        raise ValueError(
            f"--resume_from_checkpoint: {checkpoint} belongs to a stream held out by an earlier rule (its images' "
            "absolute paths), and this version holds out other rows (by their paths inside the set), so the resumed "
            f"run could validate and test on rows it trained on: start a new run from its weights (--model "
            f"{checkpoint}, without --resume_from_checkpoint) in another --output_dir."
        )
    differ = [name for name in settings if name in saved and saved[name] != settings[name]]
    if not differ:
        return
    shown = "; ".join(
        f"{SHOWN_NAMES.get(name, '--' + name)} {shown_in(name, saved)} in it, {shown_in(name, settings)} now"
        for name in differ
    )
    new_run = "start a new run in another --output_dir."
    if set(differ) & set(SCHEDULE_SETTINGS):
        new_run = (
            f"start a new run from its weights (--model {checkpoint}, without --resume_from_checkpoint) in another "
            "--output_dir: its learning-rate schedule was built for the steps it was given, so a run of another "
            "length is a new run."
        )
    raise ValueError(
        f"--resume_from_checkpoint: {checkpoint} belongs to a run trained with other settings ({shown}): a resumed "
        f"run goes on as it started; resume with the settings it was trained with (drop the changes), or {new_run}"
    )


# The model and data arguments that may change on resume, or that are compared otherwise: the same computation
# (the attention kernel), a choice each checkpoint keeps itself (the precision `--bf16_when_faster` chose), what
# the distillation arguments make, what is evaluated or how it is checked and held, and, for a set of known length,
# what its splits' fingerprint compares (its source and how it is split)
ALLOWED_MODEL_CHANGES = ("attn_implementation", "bf16_when_faster", "distillation_loss")
ALLOWED_DATA_CHANGES = (
    "eval_flip",
    "validation_views",
    "max_eval_samples",
    "images_in_memory_mb",
    "check_images",
    "max_bad_images",
    "total_train_batch_size",  # compared as the total batch, whatever sets it
)
FINGERPRINTED = (*STREAM_SETTINGS, "split_seed")  # a stream compares STREAM_SETTINGS; its split_seed splits nothing


# the settings that set the run's total steps, for which the Trainer builds the learning-rate schedule
SCHEDULE_SETTINGS = ("max_steps", "num_train_epochs")


# which rule chose a stream's held-out rows (streaming.py `held_out_share`); kept so that another rule is refused
HELD_OUT_ROWS = "image bytes, else path inside the set; label"

# settings that no single argument gives, in words
SHOWN_NAMES = {
    "total_train_batch_size": "the total batch (--total_train_batch_size, or --per_device_train_batch_size x "
    "processes x --gradient_accumulation_steps)"
}


def shown_in(name: str, settings: dict) -> str:
    """Setting `name` of `settings` in words (`shown_setting`); of the two that set the steps, the one not read says
    which set them: `--num_train_epochs` is kept as None when `--max_steps` is given (the Trainer reads no epochs
    then), whether or not it was given, so "not given" would be false."""
    if settings[name] is None and name == "num_train_epochs" and settings.get("max_steps"):
        return f"unused (--max_steps {shown_setting(settings['max_steps'])} sets the steps)"
    if settings[name] is None and name == "max_steps":
        return "none (--num_train_epochs sets the steps)"
    return shown_setting(settings[name])


def shown_setting(value) -> str:
    """A setting as the command line gives it; an argument left out as `not given`."""
    if value is None:
        return "not given"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():  # --num_train_epochs 3, as given
        return str(int(value))
    if isinstance(value, dict | list):  # --lr_scheduler_kwargs and the like, as JSON, the way they are given
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def check_resumed_data(
    checkpoint: str, dataset: str, fingerprint: str, splits: DatasetDict | None = None, images: dict | None = None
) -> None:
    """A resumed run's splits are those its checkpoint was trained on, or one line naming both data sets and the fix.
    A checkpoint without `DATA_FILE` is refused (`check_record_kept`); one written under the earlier rule (real
    paths, no `fingerprint_rule`) is compared with `splits` fingerprinted by that rule."""
    kept = Path(checkpoint) / DATA_FILE
    check_record_kept(checkpoint)
    identity = json.loads(kept.read_text())
    if identity.get("splits_fingerprint") == fingerprint:
        return
    if "fingerprint_rule" not in identity and splits is not None:
        fingerprint = splits_fingerprint(splits)  # as it was written then: the images' real paths
        if identity.get("splits_fingerprint") == fingerprint:
            return
    change = shown_change(identity, images) if images else ""
    if change and identity.get("dataset") == dataset:
        raise ValueError(
            f"--resume_from_checkpoint: --dataset {dataset!r} changed since {checkpoint} was written: {change}; a "
            "resumed run could test on images it trained on: put the set back as it was, or start a new run in "
            "another --output_dir."
        )
    raise ValueError(
        f"--resume_from_checkpoint: {checkpoint} was trained on --dataset {identity.get('dataset')!r} (splits "
        f"{identity.get('splits_fingerprint')}), and this run reads --dataset {dataset!r} whose splits differ "
        f"({fingerprint}): a resumed run could test on images it trained on; resume with the same --dataset and "
        "split arguments, or start a new run in another --output_dir."
    )


def check_record_kept(checkpoint: str) -> None:
    """A checkpoint to resume holds its record (`DATA_FILE`): without it nothing shows that the resumed run reads
    the same data and settings, so it is never read as "nothing to compare" (a checkpoint cut off while saving, by
    a full disk or a kill, or written by a version before the record). The line names the newest checkpoint of its
    run that holds one, or the fixes."""
    if (Path(checkpoint) / DATA_FILE).is_file():
        return
    kept = [
        path
        for path in checkpoints(Path(checkpoint).parent)
        if is_complete_checkpoint(path) and (path / DATA_FILE).is_file()
    ]
    way_on = (
        f"resume from the newest checkpoint that holds it, --resume_from_checkpoint {kept[-1]}, or"
        if kept
        else "start the run anew with --overwrite_output_dir true in place of --resume_from_checkpoint, or"
    )
    raise ValueError(
        f"--resume_from_checkpoint: {checkpoint} has no {DATA_FILE} (it was cut off while saving, or written by an "
        "earlier version), so nothing shows that the resumed run would read the same data and settings: "
        f"{way_on} fine-tune from its weights with --model {checkpoint} (without --resume_from_checkpoint) into "
        "another --output_dir."
    )
