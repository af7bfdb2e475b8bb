"""End to end: the training command with a recipe as a user runs it (its whole data path, evaluation and checkpoints
as the recipe asks) against the same steps of its model alone; what the run did is read from the files it wrote."""

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import UserError
from ..secrets import shown
from ..sources import read_json
from .measure import environment, once

TRAINING = [sys.executable, "-m", "modeling_vit_scratch.cli", "train"]  # the package's own command, as a user runs it


def training_run(recipe: str, steps: int | None, extra: list[str], folder: Path, args) -> dict:
    """The training command with `recipe` into `folder`, for `steps` steps or (None) the whole recipe: the Trainer's
    `train_runtime` plus the seconds the run spent processing the splits it keeps in memory, its total batch, the
    number of steps and whether it trained in bf16."""
    # the benchmark's arguments come after the user's (the last value wins): a scratch folder, the steps asked for,
    # no logger's time measured, and never a push of a model of a few steps
    own = ["--max_steps", str(steps)] * bool(steps) + ["--output_dir", str(folder), "--report_to", "none"]
    command = [*TRAINING, recipe, *extra, *own, "--disable_tqdm", "true", "--push_to_hub", "false"]
    done = subprocess.run(
        command, check=False, capture_output=True, text=True, env=environment(args), start_new_session=True
    )
    if done.returncode != 0:
        sys.stderr.write(shown(done.stdout[-1000:] + done.stderr[-3000:], keep="\n\t"))
        raise UserError(f"the training command with {recipe} failed (exit code {done.returncode}): see its lines above")
    metrics = read_json(folder / "all_results.json")
    record = read_json(folder / "training_record.json")
    steps = steps or round(metrics["train_runtime"] * metrics["train_steps_per_second"])
    batch, bf16 = metrics.get("total_train_batch_size") or record["total_batch"], record["precision"].startswith("bf16")
    seconds = metrics["train_runtime"] + metrics.get("data_preparation_seconds", 0.0)
    return dict(folder=folder, seconds=seconds, fit=(steps, batch, bf16))  # what the model alone runs again


def end_to_end(args) -> list[dict]:
    """Per recipe, `args.rounds` rounds of the training command and of the same steps of its model alone (in a fresh
    process, first every other round: built from the previous round's folder); a row holds medians over rounds."""
    rows, alone = [], lambda run: once("the model alone", ("model_only", str(run["folder"]), *run["fit"]), args)
    for recipe in args.end_to_end:
        samples, run = [], None
        with tempfile.TemporaryDirectory() as scratch:
            for index in range(args.rounds):
                before = alone(run) if index % 2 else None
                run = training_run(recipe, args.end_to_end_steps, args.train_args, Path(scratch, str(index)), args)
                samples.append(dict(end_to_end_seconds=run["seconds"], model_only_seconds=before or alone(run)))
                print(f"  {recipe}: round {index + 1}/{args.rounds}", file=sys.stderr)
        median = {key: statistics.median(sample[key] for sample in samples) for key in samples[0]}
        ratio = statistics.median(s["end_to_end_seconds"] / s["model_only_seconds"] for s in samples)
        steps, batch, bf16 = run["fit"]
        row = dict(recipe=recipe, train_args=" ".join(args.train_args), steps=steps, batch=batch)
        rows.append(dict(row, precision="bf16" if bf16 else "float32", **median, ratio=ratio, samples=samples))
    return rows
