"""Several processes that train one model: CPU processes joined under `torchrun`, the processes the launcher
started being the ones the Trainer sees, --fsdp only where accelerate shards, and the global batch split over them.
The Trainer and accelerate do the distribution itself (gloo on CPU, NCCL on GPUs)."""

import os

import torch
from transformers import TrainingArguments


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
