"""Several processes that train one model: CPU processes joined under `torchrun`, the processes the launcher
started being the ones the Trainer sees, --fsdp only where accelerate shards, and the global batch split over them.
The Trainer and accelerate do the distribution itself (gloo on CPU, NCCL on GPUs).

Data work is done once per machine, not once per process: the first process of a machine loads and splits the data
set and the others read its result (`once_per_node`); the machine's processes share the image pre-flight and the
processing of the splits kept in memory, and hold one copy of them (`together`, `node_shared_array`). A sharded
model (FSDP) is saved whole: its weights gathered from every process (`full_state_dict`).
"""

import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
import torch.distributed as dist
from transformers import TrainingArguments

T = TypeVar("T")


# what a launcher sets in each process it starts, besides WORLD_SIZE and RANK: torchrun (torch/distributed/elastic/
# agent/server/local_elastic_agent.py), which `accelerate launch` also runs under, and accelerate's own launch
# (accelerate/utils/launch.py: the ACCELERATE_* settings of its processes)
# what a launcher sets in the processes it starts: torchrun's; a cluster's task launcher (SLURM's srun) and MPI's
# (mpirun: Open MPI, MPICH/Intel MPI's PMI), under which a job script sets WORLD_SIZE and RANK itself
LAUNCHER_VARIABLES = (
    "TORCHELASTIC_RUN_ID",
    "GROUP_RANK",
    "TORCHELASTIC_RESTART_COUNT",
    "SLURM_PROCID",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
)
LAUNCHER_PREFIX = "ACCELERATE_"
# the variables a process reads to join a group: left in a shell by an earlier launch, they say nothing of a launch
JOIN_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def check_launched(environ: dict | None = None) -> None:
    """A process told to join others (WORLD_SIZE over 1) was started by a launcher, or a ValueError naming the
    variables and the fix: without one no other process is coming, and joining would wait for them until the
    group's timeout (`--ddp_timeout`, half an hour by default), with no line. Asked before the process joins."""
    environ = os.environ if environ is None else environ
    try:
        world_size = int(environ.get("WORLD_SIZE", "1"))
    except ValueError:
        world_size = 1
    launched = any(name in environ for name in LAUNCHER_VARIABLES) or any(
        name.startswith(LAUNCHER_PREFIX) and name != "ACCELERATE_USE_CPU" for name in environ
    )  # ACCELERATE_USE_CPU: set by this module itself, so a process of an earlier run in the same shell may hold it
    if world_size <= 1 or launched:
        return
    named = " ".join(f"{name}={environ[name]}" for name in JOIN_VARIABLES if name in environ)
    unset = " ".join(name for name in JOIN_VARIABLES if name in environ)
    raise ValueError(
        f"{named} is set, but no launcher started this process (no torchrun or accelerate launch), so the other "
        f"{world_size - 1} process{'es' if world_size > 2 else ''} it would wait for {'never come' if world_size > 2 else 'never comes'}: unset them (unset "
        f"{unset}) to train in one process, or start the command through torchrun (python -m torch.distributed.run "
        f"--nproc_per_node {world_size} ...)."
    )


def join_failed(error: BaseException) -> str | None:
    """The line for a process that could not join its group (its rendezvous timed out waiting for the others, or
    could not reach the first process), or None for any other error. The wait is the group's timeout
    (`--ddp_timeout`): torch gives the rendezvous no timeout of its own, and a shorter group timeout would cut the
    training collectives short too."""
    if not isinstance(error, dist.DistStoreError | dist.DistNetworkError):
        return None
    return (
        f"this process could not join the run's other processes ({' '.join(str(error).split())}): start them all "
        "through one launcher (python -m torch.distributed.run --nproc_per_node N ...), with MASTER_ADDR and "
        "MASTER_PORT reaching the first one; --ddp_timeout SECONDS sets how long a process waits for the others."
    )


def use_cpu_processes_without_accelerator() -> None:
    """Under torchrun with no GPU, make accelerate join the CPU processes (gloo) instead of running N separate copies.

    transformers only builds a multi-process CPU state when asked for the CPU; call this before `TrainingArguments`
    is created. On machines with GPUs it does nothing. First, a process told to join others that no launcher
    started is one line (`check_launched`), before it waits for them.
    """
    try:
        check_launched()
    except ValueError as error:
        sys.exit(f"error: {error}")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        os.environ.setdefault("ACCELERATE_USE_CPU", "true")


def leave_process_group() -> None:
    """Close this process's part of the group before the interpreter exits: a gloo or NCCL group still open at exit
    can abort the process ("terminate called without an active exception") after the work is done."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


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


def first_process() -> bool:
    """Whether this is the run's first process (rank 0), from the launcher's RANK (torchrun, accelerate launch): known
    before the Trainer's arguments join the processes, so a line said once per run (a warning about the arguments)
    is printed by this process only."""
    return os.environ.get("RANK", "0").strip() in ("", "0")


@dataclass(frozen=True)
class NodeProcesses:
    """Where this process stands: its rank among all processes and among those of its machine (node).

    Data work is shared by a node's processes (`together`, `node_shared_array`), not done again by each: they read
    the same files and hold one copy of the processed images between them.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @classmethod
    def current(cls) -> "NodeProcesses":
        """From torch.distributed once the Trainer's arguments have joined the processes, and the launcher's
        LOCAL_RANK / LOCAL_WORLD_SIZE (torchrun, accelerate launch); one lone process otherwise."""
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return cls()
        world_size = dist.get_world_size()
        local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        return cls(dist.get_rank(), world_size, int(os.environ.get("LOCAL_RANK", "0")), local_world_size)

    @property
    def local_part(self) -> tuple[int, int]:
        """(this process's share, shares): the share of a machine's data work this process takes."""
        return self.local_rank, self.local_world_size

    @property
    def node_main_rank(self) -> int:
        """The global rank of this node's first process (torchrun numbers a node's processes consecutively)."""
        return self.rank - self.local_rank


# What gloo and NCCL say when a collective fails because another process of the group is gone (gloo's
# transport/tcp/pair.cc: the peer's socket closed or reset; NCCL: the communicator aborted by its watchdog)
PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "communicator was aborted")


def lost_peer(error: BaseException) -> str | None:
    """Why this process stopped, when `error` (or an error it arose from) says that another process of its run is
    gone: killed, interrupted or failed, seen from here as a collective (the gradients' all-reduce, a gather) whose
    peer closed its connection, or a lost rendezvous store. None otherwise, and in a run of one process. The reason
    is the library's own first sentence, without its source-file prefix."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return None
    seen: BaseException | None = error
    while seen is not None:
        message = " ".join(str(seen).split())
        if isinstance(seen, (dist.DistNetworkError, dist.DistStoreError)) or any(s in message for s in PEER_GONE):
            return re.sub(r"^\[[^\]]*\]\s*", "", message).split(". ")[0]
        seen = seen.__cause__ or seen.__context__
    return None


class OtherProcessFailed(RuntimeError):
    """A process of the run failed at a step that all of them take together; its error is named."""


def together(work: Callable[[], T]) -> list[T]:
    """Run `work` on every process and return every process's result, in rank order.

    When `work` fails on one process, every process raises: the one that failed its own error, the others a
    `ValueError` with the same line (bad input: the command prints one line on each) or an `OtherProcessFailed`
    naming it, so no process waits at the next collective for one that has stopped.
    """
    processes = NodeProcesses.current()
    try:
        outcome = ("ok", work())
    except Exception as error:  # noqa: BLE001 (re-raised below, after the others have heard of it)
        failure = error
        kind = "input" if isinstance(error, (ValueError, FileNotFoundError)) else "bug"
        outcome = (kind, f"{type(error).__name__}: {' '.join(str(error).split())}" if kind == "bug" else str(error))
    else:
        failure = None
    if processes.world_size == 1:
        outcomes = [outcome]
    else:
        outcomes = [None] * processes.world_size
        dist.all_gather_object(outcomes, outcome)
    if failure is not None:
        raise failure
    for rank, (kind, value) in enumerate(outcomes):
        if kind == "input":
            raise ValueError(value)
        if kind == "bug":
            raise OtherProcessFailed(f"Process {rank} failed ({value}); this process stops with it.")
    return [value for _, value in outcomes]


def once_per_node(work: Callable[[], T]) -> T:
    """`work` run by the first process of each machine, its result handed to the machine's other processes.

    The result travels pickled: a `datasets` split backed by its cache files travels as their names, and the other
    processes map the same files. A failure stops every process with its line (`together`).
    """
    node = NodeProcesses.current()
    return together(work if node.local_rank == 0 else lambda: None)[node.node_main_rank]


def node_shared_array(shape: tuple[int, ...], fill: Callable[[np.ndarray, range], None]) -> torch.Tensor:
    """A float32 tensor of `shape` computed once per node and shared by its processes.

    `fill(array, rows)` writes `array[rows]` (a range); the node's processes each fill their share of the rows into
    one preallocated array (no concatenation, so no second copy at the peak). With one process the array is plain
    memory. With several, it is a memory-mapped file that the node's first process creates in the temporary folder
    (TMPDIR) and removes once every process has mapped it: the mapping outlives the name, the operating system
    holds the pages once for all the processes, and nothing is left on disk after the run. Each process maps it
    copy-on-write, so a process that changed an image in place would change only its own copy.
    """
    processes = NodeProcesses.current()
    rows = shape[0] if shape else 0
    if processes.world_size == 1:
        array = np.empty(shape, dtype=np.float32)
        fill(array, range(rows))
        return torch.from_numpy(array)
    index, shares = processes.local_part
    share = range(index * rows // shares, (index + 1) * rows // shares)  # contiguous rows, read in order
    folder = tempfile.mkdtemp(prefix="vit-scratch-data-") if index == 0 else None
    try:
        path = Path(together(lambda: folder)[processes.node_main_rank]) / "pixels.npy"

        def create() -> None:
            if index == 0:
                np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=shape).flush()

        def fill_share() -> None:
            array = np.load(path, mmap_mode="r+")
            fill(array, share)
            array.flush()

        together(create)
        together(fill_share)
        array = np.load(path, mmap_mode="c")  # copy-on-write: a change would stay this process's own
        together(lambda: None)  # every process has mapped the file: its name can go
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    return torch.from_numpy(array)


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether `model` holds only a shard of its weights on each process (FSDP or FSDP2 `fully_shard`)."""
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    return any(isinstance(module, (FSDPModule, FullyShardedDataParallel)) for module in model.modules())


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A sharded model's whole weights under their plain names, gathered on the CPU of process 0 (the other
    processes get `{}`). Every process must call it: the gather is collective."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def sharded_runner(wrapped: torch.nn.Module, unwrapped: torch.nn.Module) -> torch.nn.Module:
    """The module that runs a sharded model's forward: FSDP's wrapper (its root gathers the weights), or the model
    itself under FSDP2, whose `fully_shard` works in place."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    return wrapped if isinstance(wrapped, FullyShardedDataParallel) else unwrapped


def unsharded_copy(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    """A plain model of `model`'s class and config holding `weights` (`full_state_dict`), on the CPU: what
    `save_pretrained` writes. The sharded model itself is of a class FSDP2 made (`FSDPViTScratch...`) whose
    module is torch's, so saving it would copy torch's FSDP files into the folder as the model's code."""
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    model_class = next(c for c in type(model).__mro__ if not issubclass(c, (FSDPModule, FullyShardedDataParallel)))
    plain = model_class(model.config)
    plain.load_state_dict(weights)
    return plain.eval()
