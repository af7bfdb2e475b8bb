"""Several CPU processes (torchrun, gloo): DDP through scripts/train.py, FSDP refused there (accelerate drops it on
CPU), and torch's FSDP2 sharded at `_no_split_modules` training like DDP.

Run as a script under torchrun, this file is the FSDP2-and-DDP worker of
`test_fsdp2_sharded_at_no_split_modules_trains_like_ddp`.
"""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from entry_points import outcome
from helpers import PROCESS_TIMEOUT, REPO, SUPPORT, run_script, tiny_model_file, torchrun
from safetensors.torch import load_file

WORKER_MODEL = dict(
    image_size=8,
    patch_size=4,
    num_channels=1,
    hidden_size=24,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=37,
    num_labels=10,
)
WORKER_STEPS, WORKER_GLOBAL_BATCH = 6, 16


# new processes, scripts or whole suites: `make test` runs them, `make test-fast` leaves them out
pytestmark = pytest.mark.integration


def test_two_processes_train_like_one_with_the_same_global_batch(tmp_path):
    """torchrun with 2 ranks (gloo) and 1 process, global batch 16: same samples per step, same weights.

    Each rank averages the loss over its 8 images and DDP averages the gradients, which is the mean over the 16
    images the single process sees; only float summation order differs, hence a tolerance instead of equality.
    """
    common = [
        "--model",
        tiny_model_file(tmp_path, num_channels=1),
        "--dataset",
        "digits",
        "--augment",
        "false",
        "--max_train_samples",
        "64",
        "--total_train_batch_size",
        "16",
        "--num_train_epochs",
        "2",
        "--eval_strategy",
        "epoch",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        "--learning_rate",
        "0.003",
        "--seed",
        "5",
    ]
    outputs = {nproc: tmp_path / f"nproc{nproc}" for nproc in (1, 2)}
    alone = outcome("train", [*common, "--output_dir", str(outputs[1])])  # one process: this one, on one thread
    assert alone.code == 0, alone
    result = run_script(*common, "--output_dir", str(outputs[2]), nproc=2)
    assert result.returncode == 0, result.stderr[-3000:]
    for nproc in (1, 2):
        results = json.loads((outputs[nproc] / "all_results.json").read_text())
        assert results["world_size"] == nproc
        # each test image counted once: the padding of the last batch of 2 processes is not counted
        assert sum(map(sum, results["test_confusion_matrix"]["matrix"])) == 360  # the digits' test split
    one, two = (load_file(outputs[n] / "model.safetensors") for n in (1, 2))
    for name, tensor in one.items():
        torch.testing.assert_close(two[name], tensor, atol=1e-5, rtol=1e-4)


def test_fsdp_on_cpu_processes_is_refused_before_anything_is_written(tmp_path):
    """accelerate 1.15 keeps the Trainer's FSDP plugin for several GPUs only (accelerate/state.py,
    `AcceleratorState.__init__`): on CPU it would train plain DDP copies of the whole model under an --fsdp flag."""
    output_dir = tmp_path / "out"
    result = run_script(
        "--model",
        tiny_model_file(tmp_path, num_channels=1),
        "--dataset",
        "digits",
        "--max_train_samples",
        "32",
        "--total_train_batch_size",
        "16",
        "--report_to",
        "none",
        "--fsdp",
        "--output_dir",
        str(output_dir),
        nproc=2,
    )
    assert result.returncode != 0
    expected = (
        "error: --fsdp shards the model across several GPUs, but accelerate ignores it for 2 processes on "
        "cpu (each would hold the whole model); drop --fsdp (torchrun on CPU trains data-parallel) or launch "
        "on GPUs."
    )
    assert expected in result.stderr  # both ranks print it, and their lines may interleave on the shared stderr
    assert not output_dir.exists()


def fsdp_and_ddp_worker(output: str) -> None:
    """One rank: train one model copy under DDP and one under FSDP2 (a unit per `_no_split_modules` class, then the
    root, activation checkpointing on) from the same weights on the same digits; rank 0 saves both, and the facts."""
    import torch.distributed as dist
    from sklearn.datasets import load_digits
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import FSDPModule, fully_shard
    from torch.nn.parallel import DistributedDataParallel

    from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = ViTScratchForImageClassification(ViTScratchConfig(**WORKER_MODEL))
    initial = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    ddp_model, fsdp_model = copy.deepcopy(model), copy.deepcopy(model)
    fsdp_model.activation_checkpointing_enable()
    units = [name for name, module in fsdp_model.named_modules() if type(module).__name__ in model._no_split_modules]
    for name in units:
        fully_shard(fsdp_model.get_submodule(name))
    fully_shard(fsdp_model)
    ddp = DistributedDataParallel(ddp_model)

    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16 * 2 - 1  # (n, 1, 8, 8) in [-1, 1]
    labels = torch.tensor(digits.target)
    per_rank = WORKER_GLOBAL_BATCH // world_size
    optimizers = [torch.optim.AdamW(m.parameters(), lr=3e-3) for m in (ddp, fsdp_model)]
    losses = {"ddp": [], "fsdp": []}
    for step in range(WORKER_STEPS):
        start = step * WORKER_GLOBAL_BATCH + rank * per_rank  # each rank its half of the global batch
        batch = dict(pixel_values=images[start : start + per_rank], labels=labels[start : start + per_rank])
        for name, wrapped, optimizer in zip(("ddp", "fsdp"), (ddp, fsdp_model), optimizers):
            loss = wrapped(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses[name].append(loss.item())

    local = sum(p.to_local().numel() for p in fsdp_model.parameters())  # DTensors: this rank's shard only
    full = sum(p.numel() for p in fsdp_model.parameters())
    fsdp_units = [name for name, module in fsdp_model.named_modules() if isinstance(module, FSDPModule)]
    held = get_model_state_dict(fsdp_model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        torch.save(
            dict(
                initial=initial,
                ddp=ddp_model.state_dict(),
                fsdp=held,
                fsdp_units=fsdp_units,
                losses=losses,
                local_fraction=local / full,
                world_size=world_size,
            ),
            output,
        )
    dist.destroy_process_group()


def run_worker(output: Path) -> subprocess.CompletedProcess:
    launcher = [*torchrun(), __file__, str(output)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{REPO}{os.pathsep}{SUPPORT}"}
    return subprocess.run(launcher, cwd=REPO, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT)


def test_fsdp2_sharded_at_no_split_modules_trains_like_ddp(tmp_path):
    """FSDP2 (torch's `fully_shard`, gloo) with one unit per `_no_split_modules` class: each rank holds half of the
    weights, and after 6 steps of a 16-digit global batch the weights are DDP's, up to float summation order (the
    same tolerance as DDP against one process). Activation checkpointing runs inside the FSDP units."""
    result = run_worker(tmp_path / "weights.pt")
    assert result.returncode == 0, result.stderr[-3000:]
    saved = torch.load(tmp_path / "weights.pt")
    assert saved["world_size"] == 2
    assert saved["fsdp_units"] == ["", "vit.embeddings", "vit.layers.0", "vit.layers.1"]  # the root, then the units
    assert 0.45 < saved["local_fraction"] < 0.55  # sharded: not every rank holds every weight
    torch.testing.assert_close(saved["losses"]["fsdp"], saved["losses"]["ddp"], atol=1e-5, rtol=1e-4)
    ddp, fsdp = saved["ddp"], saved["fsdp"]
    assert sorted(fsdp) == sorted(ddp)
    assert all(not torch.equal(ddp[name], tensor) for name, tensor in saved["initial"].items())  # every weight trained
    for name, tensor in ddp.items():
        torch.testing.assert_close(fsdp[name], tensor, atol=1e-5, rtol=1e-4, msg=name)


if __name__ == "__main__":
    fsdp_and_ddp_worker(sys.argv[1])


# Run under torchrun: each rank times bf16 differently (as two machines' noise might), chooses, and writes the result
# to its own file (two ranks printing to one pipe can interleave their lines).
CHOOSING_RANK = """
import json, os, sys
import torch
from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification
from modeling_vit_scratch.training import precision
from modeling_vit_scratch.training.arguments import parse_arguments
from modeling_vit_scratch.training.distributed import use_cpu_processes_without_accelerator
rank = int(os.environ["RANK"])
use_cpu_processes_without_accelerator()
precision.bf16_emulated = lambda device: False  # as on a machine with bf16 units
precision.bf16_training_step_seconds = lambda *args: (0.2, 0.1) if rank == 0 else (0.1, 0.2)  # rank 0: bf16 wins
*_, args = parse_arguments(["--output_dir", sys.argv[1], "--bf16_when_faster", "true"])
config = ViTScratchConfig(image_size=8, patch_size=4, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                          intermediate_size=8)
why = str(precision.choose_bf16(ViTScratchForImageClassification(config), (3, 8, 8), args))
choice = json.dumps(dict(rank=rank, world_size=args.world_size, bf16=args.bf16, why=why))
open(os.path.join(sys.argv[2], f"choice-{rank}.json"), "w").write(choice)
torch.distributed.destroy_process_group()
"""


def test_every_process_trains_in_the_precision_the_first_one_chose(tmp_path):
    script = tmp_path / "choose.py"
    script.write_text(CHOOSING_RANK)
    result = subprocess.run(
        [*torchrun(), str(script), str(tmp_path / "out"), str(tmp_path)],
        env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    choices = [json.loads(path.read_text()) for path in sorted(tmp_path.glob("choice-*.json"))]
    assert sorted(choice["rank"] for choice in choices) == [0, 1] and {c["world_size"] for c in choices} == {2}
    assert all(choice["bf16"] for choice in choices)  # rank 1 measured float32 faster, and follows rank 0
    assert len({choice["why"] for choice in choices}) == 1 and "2.00x as fast" in choices[0]["why"]


STALE = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29661"}


LAUNCHED_BY = ["TORCHELASTIC_RUN_ID", "ACCELERATE_MIXED_PRECISION", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"]


@pytest.mark.parametrize("launcher", [None, *LAUNCHED_BY, "ACCELERATE_USE_CPU"])
def test_launcher_variables_left_in_a_shell_without_a_launcher_are_one_line_before_joining(
    tmp_path, monkeypatch, launcher
):
    """`WORLD_SIZE=2 RANK=0 ... train` in a plain shell (before: waited for rank 1 with no line, until the group's
    timeout): one line naming the variables and the fix, before any argument is parsed; under a launcher (torchrun's,
    accelerate's, SLURM's srun or MPI's variables) the check lets the process join. ACCELERATE_USE_CPU, which the package sets itself,
    is no launcher."""
    from modeling_vit_scratch.training.distributed import check_launched

    environ = {**STALE, **({launcher: "x"} if launcher else {})}
    if launcher in LAUNCHED_BY:  # torchrun, accelerate launch, srun, mpirun: a job script may set WORLD_SIZE itself
        check_launched(environ)
        return
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    result = outcome("train", ["--output_dir", str(tmp_path / "out")])
    assert result.code == 1 and result.error == (
        "error: WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29661 is set, but no launcher "
        "started this process (no torchrun or accelerate launch), so the other 1 process it would wait for never "
        "comes: unset them (unset WORLD_SIZE RANK LOCAL_RANK MASTER_ADDR MASTER_PORT) to train in one process, or "
        "start the command through torchrun (python -m torch.distributed.run --nproc_per_node 2 ...)."
    ), result
    assert not (tmp_path / "out").exists()
    check_launched({"WORLD_SIZE": "1", "RANK": "0"})  # one process: nothing to join


def test_a_process_whose_others_never_join_says_so_in_one_line(tmp_path, monkeypatch):
    """Under a launcher, the first process's rendezvous timing out (`--ddp_timeout`; before: a DistStoreError
    traceback) is one line naming the cause and the fixes; another error is not taken for it."""
    import torch.distributed as dist

    def join(argv):
        raise dist.DistStoreError("Timed out after 5 seconds waiting for clients. 1/2 clients joined.")

    monkeypatch.setattr("modeling_vit_scratch.training.command.parse_arguments", join)
    result = outcome("train", ["--output_dir", str(tmp_path / "out")])
    assert result.code == 1 and result.error == (
        "error: this process could not join the run's other processes (Timed out after 5 seconds waiting for "
        "clients. 1/2 clients joined.): start them all through one launcher (python -m torch.distributed.run "
        "--nproc_per_node N ...), with MASTER_ADDR and MASTER_PORT reaching the first one; --ddp_timeout SECONDS "
        "sets how long a process waits for the others."
    ), result
    from modeling_vit_scratch.training.distributed import join_failed

    assert join_failed(RuntimeError("CUDA out of memory")) is None
