"""End to end: the training command with a recipe, as a user runs it (its whole data path: decoding, augmentation,
the image processor, evaluation and checkpoints as the recipe asks), against the same steps of its model alone, in
alternating order over rounds. What the run did is read from the files it wrote (all_results.json,
training_record.json)."""

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
    return dict(
        folder=folder,
        seconds=metrics["train_runtime"] + metrics.get("data_preparation_seconds", 0.0),
        batch=metrics.get("total_train_batch_size") or record["total_batch"],
        steps=steps or round(metrics["train_runtime"] * metrics["train_steps_per_second"]),
        bf16=str(record.get("precision")).startswith("bf16"),
    )


def model_only(trained: dict, args) -> float:
    """The model-alone seconds of a training run's steps, in a fresh worker process."""
    request = ("model_only", str(trained["folder"]), trained["steps"], trained["batch"], trained["bf16"])
    return once(f"the model alone of {trained['folder']}", request, args)


def end_to_end(args) -> list[dict]:
    """For each recipe, `args.rounds` rounds of the training command and the same steps of the same model alone,
    the model alone first every other round (built from the previous round's folder). A round's ratio is the two
    times' quotient; a row gives medians over rounds."""
    rows = []
    for recipe in args.end_to_end:
        samples, previous = [], None
        with tempfile.TemporaryDirectory() as scratch:
            for index in range(args.rounds):
                alone = model_only(previous, args) if index % 2 else None
                previous = training_run(recipe, args.end_to_end_steps, args.train_args, Path(scratch, str(index)), args)
                alone = model_only(previous, args) if alone is None else alone
                samples.append(dict(end_to_end_seconds=previous["seconds"], model_only_seconds=alone))
                print(f"  {recipe}: round {index + 1}/{args.rounds}", file=sys.stderr)
        rows.append(
            dict(
                recipe=recipe,
                train_args=" ".join(args.train_args),
                steps=previous["steps"],
                batch=previous["batch"],
                precision="bf16" if previous["bf16"] else "float32",
                end_to_end_seconds=statistics.median(s["end_to_end_seconds"] for s in samples),
                model_only_seconds=statistics.median(s["model_only_seconds"] for s in samples),
                ratio=statistics.median(s["end_to_end_seconds"] / s["model_only_seconds"] for s in samples),
                samples=samples,
            )
        )
    return rows
