"""The training script's save path with a sharded model: torch's FSDP2 (`fully_shard`) over two CPU processes (gloo)
under torchrun, the model trained a few steps, then `write_model_folder` called on every process as `train` calls it.
The folder must hold the whole model, reload in one process and give the logits the sharded model gave.

accelerate shards only on GPUs (the script refuses --fsdp on CPU: tests/training/test_distributed.py), so the worker
wraps the model itself, as accelerate's FSDP2 does, and hands the package's save function a stand-in for the Trainer
that holds what it reads. Run as a script under torchrun, this file is that worker.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import PROCESS_TIMEOUT, REPO, SUPPORT, TINY_MODEL, torchrun
from safetensors.torch import load_file

STEPS, PER_RANK_BATCH = 3, 8

pytestmark = pytest.mark.integration  # a torchrun of two processes


def save_worker(output_dir: str) -> None:
    """One rank: the digits, a tiny model sharded with `fully_shard` per `_no_split_modules` unit and at the root,
    a few AdamW steps on this rank's images, then the save. Rank 0 also writes the sharded model's logits on the
    check batch and how much of the weights it held."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from transformers import TrainerState

    from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification, ViTScratchImageProcessor
    from modeling_vit_scratch.sharing.reload_check import model_logits
    from modeling_vit_scratch.training.arguments import DataArguments
    from modeling_vit_scratch.training.data import ImageTransform, collate_images, digits_dataset, prepare_splits
    from modeling_vit_scratch.training.distributed import use_cpu_processes_without_accelerator
    from modeling_vit_scratch.training.output import write_model_folder

    use_cpu_processes_without_accelerator()
    from helpers import training_args

    args = training_args(Path(output_dir))
    rank = args.process_index  # joins the gloo processes, as the Trainer's arguments do
    data = prepare_splits(digits_dataset())
    processor = ViTScratchImageProcessor(
        size={"height": 8, "width": 8}, num_channels=1, image_mean=[0.5], image_std=[0.5]
    )
    torch.manual_seed(0)
    config = ViTScratchConfig(**TINY_MODEL, num_channels=1, num_labels=10, id2label=data.id2label)
    model = ViTScratchForImageClassification(config)
    for name, module in list(model.named_modules()):
        if type(module).__name__ in model._no_split_modules:
            fully_shard(module)
    fully_shard(model)

    rows = data.splits["train"].with_transform(ImageTransform(processor))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(STEPS):
        start = (step * args.world_size + rank) * PER_RANK_BATCH
        model(**collate_images([rows[i] for i in range(start, start + PER_RANK_BATCH)])).loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    local = sum(parameter.to_local().numel() for parameter in model.parameters())  # before a forward unshards the root
    test_rows = data.splits["test"].with_transform(ImageTransform(processor))
    batch = collate_images([test_rows[i] for i in range(8)])  # the batch write_model_folder checks the reload on
    logits = model_logits(model, batch["pixel_values"])  # every rank: the forward gathers the shards
    trainer = SimpleNamespace(
        args=args,
        model=model,
        model_wrapped=model,
        state=TrainerState(),
        is_world_process_zero=lambda: rank == 0,
    )
    metrics = dict(test_accuracy=0.5, world_size=args.world_size)
    write_model_folder(trainer, processor, data, DataArguments(dataset="digits"), metrics, [])
    if rank == 0:
        facts = dict(world_size=args.world_size, local_fraction=local / model.num_parameters())
        (Path(output_dir) / "facts.json").write_text(json.dumps(facts))
        torch.save(dict(pixel_values=batch["pixel_values"], logits=logits), Path(output_dir) / "logits.pt")
    dist.barrier()
    dist.destroy_process_group()  # an open group at exit can abort a process after its work is done


def test_a_sharded_model_is_saved_whole_and_reloads_to_its_logits(tmp_path):
    output_dir = tmp_path / "model"
    launcher = [*torchrun(), __file__, str(output_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": f"{REPO}{os.pathsep}{SUPPORT}"}
    result = subprocess.run(launcher, cwd=REPO, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]

    facts = json.loads((output_dir / "facts.json").read_text())
    assert facts["world_size"] == 2 and 0.45 < facts["local_fraction"] < 0.55  # each rank held half of the weights
    from transformers import AutoModelForImageClassification

    from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification

    saved = load_file(output_dir / "model.safetensors")
    torch.manual_seed(0)  # the worker's initial weights
    whole = ViTScratchForImageClassification(ViTScratchConfig(**TINY_MODEL, num_channels=1, num_labels=10))
    assert {name: tuple(t.shape) for name, t in saved.items()} == {
        name: tuple(t.shape) for name, t in whole.state_dict().items()
    }  # every weight, at its full shape: no shard, no wrapper prefix
    reloaded = AutoModelForImageClassification.from_pretrained(output_dir, trust_remote_code=True).eval()
    expected = torch.load(output_dir / "logits.pt")
    with torch.no_grad():
        logits = reloaded(pixel_values=expected["pixel_values"]).logits
    torch.testing.assert_close(logits, expected["logits"], atol=1e-5, rtol=1e-4)
    with torch.no_grad():
        untrained = whole.eval()(pixel_values=expected["pixel_values"]).logits
    assert (logits - untrained).abs().max() > 1e-2  # the trained weights were saved, not the initial ones
    assert json.loads((output_dir / "training_record.json").read_text())["world_size"] == 2
    assert not list(output_dir.glob("_fsdp*"))  # the model's code only, not that of the class FSDP2 makes


if __name__ == "__main__":
    save_worker(sys.argv[1])
