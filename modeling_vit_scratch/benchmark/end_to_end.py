"""End to end: a training run of a recipe (the Trainer with the real data path: decoding, augmentation, the image
processor, evaluation and checkpoints as the recipe asks) against the same steps of its model alone, in alternating
order over rounds."""

import contextlib
import io
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from modeling_vit_scratch.common.children import module_command
from modeling_vit_scratch.training.arguments import GIVEN_AS_ENV, mask_token_values, parse_arguments
from modeling_vit_scratch.training.precision import training_steps_seconds

from .measure import package_command, worker_environment
from .report import bar_text

# How a training run starts: the package's own `train` command, so it runs from an installed package too
TRAINING_COMMAND = module_command("modeling_vit_scratch.cli", "train")  # dies with the benchmark
TRAINING_COMMAND_NAME = "vit-scratch train"  # in messages


def model_only_seconds(folder: str, steps: int, batch: int, bf16: bool) -> float:
    """Seconds for `steps` training steps (forward, loss, backward, AdamW) of a fresh model built from the config
    saved in `folder`, on random inputs of the shape its image processor makes: the work no data path can save."""
    from PIL import Image
    from transformers import AutoConfig, AutoImageProcessor, AutoModelForImageClassification

    import modeling_vit_scratch  # noqa: F401 (registers vit_scratch with the Auto classes)

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    processor = AutoImageProcessor.from_pretrained(folder, trust_remote_code=False)
    shape = processor(Image.new("RGB", (32, 32)), return_tensors="pt")["pixel_values"].shape[1:]
    model = AutoModelForImageClassification.from_config(config, trust_remote_code=False).train()
    images, labels = torch.randn(batch, *shape), torch.randint(0, config.num_labels, (batch,))
    return training_steps_seconds(model, images, labels, steps, bf16)


# the options `training_run` gives the training command itself, and why a --train_args one would break the run
SET_BY_BENCHMARK = {
    "--output_dir": "the benchmark chooses the training command's output folder itself (a temporary folder, removed "
    "after each round)",
    "--max_steps": "the benchmark sets the steps itself, from --end_to_end_steps N (the whole recipe without it)",
    "--report_to": "the benchmark sets --report_to none itself, so no logger's time is measured",
    "--disable_tqdm": "the benchmark sets --disable_tqdm true itself (the training command's output is captured)",
}


# what a benchmark run never does, given in a recipe or in --train_args: it trains a few steps into a temporary folder
NEVER_IN_BENCHMARK = {
    "push_to_hub": "the benchmark never pushes (its runs are a few steps into a temporary folder)",
    "hub_": "the benchmark never pushes (its runs are a few steps into a temporary folder)",
    "resume_from_checkpoint": "the benchmark never resumes (each round trains afresh into a temporary folder)",
}
OFF_VALUES = (False, None, "false", "False", "none", "None", "")


def never_in_benchmark(name: str) -> str | None:
    """Why the argument `name` (without dashes) has no place in a benchmark run, or None."""
    for key, why in NEVER_IN_BENCHMARK.items():
        if name == key or (key.endswith("_") and name.startswith(key)):
            return why
    return None


def check_never_in_benchmark(recipes: list[str], extra: list[str]) -> None:
    """One line for a recipe key or a --train_args option that would push the benchmark's model to the hub or resume
    a run (`NEVER_IN_BENCHMARK`), set to anything but false/null: the run would push a model of a few steps to the
    user's repository without a word. Said before any run, naming the key and where it is."""
    from modeling_vit_scratch.training.recipes import load_recipe

    for index, arg in enumerate(extra):
        name, _, inline = arg.partition("=")
        if not name.startswith("--") or not never_in_benchmark(name[2:]):
            continue
        following = extra[index + 1] if index + 1 < len(extra) and not extra[index + 1].startswith("--") else "true"
        if (inline if "=" in arg else following) not in OFF_VALUES:
            raise ValueError(f"--train_args {name}: {never_in_benchmark(name[2:])}: drop {name} from --train_args.")
    for recipe in recipes:
        try:
            values = load_recipe(Path(recipe))
        except (OSError, ValueError):
            continue  # the recipe's own line, as train says it
        for key, value in values.items():
            why = never_in_benchmark(str(key))
            if why and value not in OFF_VALUES:
                raise ValueError(
                    f"--end_to_end {recipe} sets {key!r}: {why}: drop {key!r} from the recipe (or benchmark a copy "
                    "without it)."
                )


def check_train_args(recipes: list[str], steps: int | None, extra: list[str]) -> None:
    """One line (ValueError) for `--train_args` that the training command would refuse, before any run (the
    training command runs only once measuring has begun): an option `training_run` sets itself (`SET_BY_BENCHMARK`),
    said as such; a push or a resume, in a recipe or in --train_args (`check_never_in_benchmark`); anything else as
    train's own parser says it of the very command each recipe runs. A recipe's own output_dir, report_to, ... are
    overridden by the benchmark's (given after it), as in the shipped recipes."""
    check_never_in_benchmark(recipes, extra)
    for arg in extra:
        name = arg.split("=", 1)[0]
        if name in SET_BY_BENCHMARK:
            steps_fix = ", and give --end_to_end_steps N instead" if name == "--max_steps" else ""
            raise ValueError(
                f"--train_args {name}: {SET_BY_BENCHMARK[name]}: drop {name} from --train_args{steps_fix}."
            )
    for recipe in recipes:
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # its notes
                parse_arguments(training_arguments(recipe, steps, extra, Path(tempfile.gettempdir(), "unused")))
        except (ValueError, FileNotFoundError) as error:
            raise ValueError(f"--train_args with --end_to_end {recipe}: {' '.join(str(error).split())}") from None


def training_arguments(recipe: str, steps: int | None, extra: list[str], folder: Path) -> list[str]:
    """The arguments of the training command for `recipe` into `folder`: the user's `extra`, then the benchmark's."""
    steps_given = ["--max_steps", str(steps)] if steps else []
    return [recipe, *extra, *steps_given, "--output_dir", str(folder), "--report_to", "none", "--disable_tqdm", "true"]


def training_environment(steps: int | None, args) -> dict[str, str]:
    """The training command's environment: the workers', and that its `--max_steps` is the user's
    `--end_to_end_steps`, so a line of it names what the user gave (`GIVEN_AS_ENV`)."""
    given = {"--max_steps": f"--end_to_end_steps {steps}"} if steps else {}
    return {**worker_environment(args), GIVEN_AS_ENV: json.dumps(given)}


def training_run(recipe: str, steps: int | None, extra: list[str], folder: Path, args) -> dict:
    """The training command with `recipe` into `folder`, for `steps` steps or (None) the whole recipe: the Trainer's
    `train_runtime` with the run's `data_preparation_seconds`, the global batch and the number of steps."""
    command = [*TRAINING_COMMAND, *training_arguments(recipe, steps, extra, folder)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, env=training_environment(steps, args))
    if done.returncode != 0:
        raise RuntimeError(f"{TRAINING_COMMAND_NAME} {recipe} failed:\n{done.stderr[-3000:]}")
    metrics = json.loads((folder / "all_results.json").read_text())
    record = json.loads((folder / "training_record.json").read_text())
    batch = metrics["total_train_batch_size"]
    steps = steps or math.ceil(record["num_train"] / batch) * round(record["epochs"])  # one process, no accumulation
    bf16 = record["precision"] == "bf16 mixed precision"  # from the recipe or the command line, as the run recorded
    # the Trainer's clock, plus the images processed once before it started (splits kept in memory)
    seconds = metrics["train_runtime"] + metrics.get("data_preparation_seconds", 0.0)
    return dict(folder=folder, seconds=seconds, batch=batch, steps=steps, bf16=bf16)


def model_only_run(trained: dict, args) -> float:
    """`model_only_seconds` of a `training_run` (its folder, steps, batch and precision) in a fresh process set
    up as the workers."""
    command = package_command("--model_only", str(trained["folder"]), str(trained["steps"]))
    command += [str(trained["batch"]), "bf16" if trained["bf16"] else "float32"]
    done = subprocess.run(command, check=False, capture_output=True, text=True, env=worker_environment(args))
    if done.returncode != 0:
        raise RuntimeError(f"The model-only steps of {trained['folder']} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])["seconds"]


def end_to_end(args) -> list[dict]:
    """For each recipe, `args.rounds` rounds of: the training command for `args.end_to_end_steps` steps, and the same
    steps of the same model alone (`model_only_seconds`, in a fresh process), the model alone first every other
    round (built from the previous round's folder). A round's ratio is the two times' quotient; the row gives
    medians."""
    rows = []
    for recipe in args.end_to_end:
        samples = []
        with tempfile.TemporaryDirectory() as scratch:
            previous = None
            for round_index in range(args.rounds):
                folder = Path(scratch) / f"round-{round_index}"
                alone = model_only_run(previous, args) if round_index % 2 else None
                trained = training_run(recipe, args.end_to_end_steps, args.train_args, folder, args)
                if alone is None:
                    alone = model_only_run(trained, args)
                previous = trained
                samples.append(dict(end_to_end_seconds=trained["seconds"], model_only_seconds=alone))
                print(f"  {recipe}: round {round_index + 1}/{args.rounds}", file=sys.stderr)
        rows.append(
            dict(
                recipe=recipe,
                train_args=" ".join(mask_token_values(args.train_args)),  # a token given to train: ***
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


def end_to_end_markdown(rows: list[dict]) -> str:
    lines = [
        "| recipe | extra arguments | steps | batch | train_runtime + data preparation s | model alone s | ratio |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row['recipe']} | {row['train_args']} | {row['steps']} | {row['batch']} | "
            f"{row['end_to_end_seconds']:.1f} | {row['model_only_seconds']:.1f} | {row['ratio']:.2f}x |"
        )
    return "\n".join(lines)


def end_to_end_bars(rows: list[dict], max_overhead: float | None) -> list[str]:
    """The verdict per recipe on `--max_end_to_end_ratio` (None: no verdict)."""
    if max_overhead is None:
        return []
    return [
        f"{row['recipe']} {row['train_args']}".strip()
        + f": end to end {row['ratio']:.3f}x the model alone (bar <= {bar_text(max_overhead)}): "
        + ("met" if row["ratio"] <= max_overhead else "NOT met")
        for row in rows
    ]
