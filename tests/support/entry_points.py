"""Every command a user runs, as one list, for the safety tests (tests/safety): each rule is tried over every entry
point that the rule concerns, so a new command is covered by adding it here, not by a new hand-written case.

`ENTRY_POINTS` maps a command's name to the module whose `main(argv)` runs it (the same function `vit-scratch NAME`
and `scripts/*.py` call). `outcome` runs one in this process and says how it ended: the exit code, the one line it
printed as an error (or None), and whether a traceback escaped. `run_command` runs it in a new process, as a user
would, for what needs one (a prompt on a terminal, a lock held by another process, a kill).

Scenarios (`Scenario`) give, for each entry point, a working command line over files made in a temporary folder: a
tiny saved model, an image folder, a picture. A rule's test takes the working line and breaks one thing.
"""

import importlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from helpers import PROCESS_TIMEOUT, REPO, TINY_MODEL, write_imagefolder
from hub_server import Store
from PIL import Image

# command -> the module whose main(argv) runs it (modeling_vit_scratch/cli.py's table)
ENTRY_POINTS = {
    "train": "modeling_vit_scratch.training.command",
    "explain": "modeling_vit_scratch.explanation.command",
    "push": "modeling_vit_scratch.sharing.command",
    "convert": "modeling_vit_scratch.conversion.command",
    "benchmark": "modeling_vit_scratch.benchmark.command",
}
# which entry points write a folder of the user's choosing, and the argument that names it
OUTPUT_ARGUMENT = {"train": "--output_dir", "explain": "--out", "convert": "--output"}
# which entry points read a model folder, and the argument that names it (push takes it as its first argument)
MODEL_ARGUMENT = {"train": "--model", "explain": "--model", "convert": "--input", "push": None}


@dataclass
class Outcome:
    code: int | str | None  # the exit code (0: it finished), or the message sys.exit was given
    error: str | None  # the message of `sys.exit("error: ...")`, the one line a user reads
    traceback: BaseException | None = None  # an exception that escaped: a user would see a traceback

    @property
    def one_line(self) -> bool:
        """Refused with one clear line: `error: ...` on one line, no traceback."""
        return self.traceback is None and self.error is not None and "\n" not in self.error.strip()

    def refused(self, *unwritten: Path) -> str:
        """The one line of a refusal that wrote none of `unwritten` (the paths a working run would write)."""
        assert self.one_line, self
        assert not [path for path in unwritten if path.exists()], (self, unwritten)
        return self.error


def outcome(name: str, argv: list[str]) -> Outcome:
    """Run entry point `name` with `argv` in this process; never raises."""
    main = importlib.import_module(ENTRY_POINTS[name]).main
    try:
        main(list(argv))
    except SystemExit as stop:
        message = stop.code if isinstance(stop.code, str) else None
        return Outcome(stop.code if message is None else 1, message)
    except BaseException as escaped:  # noqa: BLE001 - a test reports what escaped
        return Outcome(None, None, escaped)
    return Outcome(0, None)


def run_command(
    name: str, argv: list[str], *, cwd: Path | None = None, env: dict | None = None, timeout: int = PROCESS_TIMEOUT
):
    """`python -m modeling_vit_scratch.cli NAME ...` in a new process, offline, one thread: a CompletedProcess."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "modeling_vit_scratch.cli", name, *argv],
        cwd=cwd or REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@dataclass
class Scenario:
    """Files for a working command line of each entry point, under `root`."""

    root: Path
    made: dict = field(default_factory=dict)

    def model(self) -> Path:
        """A tiny saved vit_scratch classifier with its processor (8x8 RGB, 3 labels)."""
        if "model" not in self.made:
            from modeling_vit_scratch import (
                ViTScratchConfig,
                ViTScratchForImageClassification,
                ViTScratchImageProcessor,
            )

            config = ViTScratchConfig(**TINY_MODEL, num_labels=3)
            folder = self.root / "model"
            ViTScratchForImageClassification(config).save_pretrained(folder)
            ViTScratchImageProcessor.for_config(config).save_pretrained(folder)
            self.made["model"] = folder
        return self.made["model"]

    def images(self) -> Path:
        """An image folder: 3 classes of 10 small PNGs."""
        if "images" not in self.made:
            self.made["images"] = write_imagefolder(self.root / "images", per_class=10)
        return self.made["images"]

    def picture(self) -> Path:
        """One 40x30 RGB PNG."""
        if "picture" not in self.made:
            path = self.root / "picture.png"
            Image.fromarray(np.random.default_rng(0).integers(0, 255, (30, 40, 3), dtype=np.uint8)).save(path)
            self.made["picture"] = path
        return self.made["picture"]

    def model_file(self) -> Path:
        """A JSON architecture for `--model`: the fastest model training can build."""
        path = self.root / "tiny.json"
        path.write_text(json.dumps(TINY_MODEL))
        return path

    def argv(self, name: str, output: Path | None = None) -> list[str]:
        """A working command line of `name`, writing to `output` (default: ROOT/out-NAME) where it writes."""
        output = output or self.root / f"out-{name}"
        if name == "train":
            return [
                "--dataset",
                str(self.images()),
                "--model",
                str(self.model_file()),
                "--output_dir",
                str(output),
                "--num_train_epochs",
                "1",
                "--test_fraction",
                "0.2",
                "--validation_fraction",
                "0.2",
                "--per_device_train_batch_size",
                "8",
                "--report_to",
                "none",
                "--disable_tqdm",
                "true",
            ]
        if name == "explain":
            return ["--model", str(self.model()), "--image", str(self.picture()), "--out", str(output)]
        if name == "convert":
            return ["--to", "transformers", "--input", str(self.model()), "--output", str(output)]
        if name == "push":
            return [str(self.model()), "local-user/scenario"]
        if name == "benchmark":
            return ["--configs", "digits", "--rounds", "1", "--json", str(output.with_suffix(".json"))]
        raise KeyError(name)


# every argument through which a command reads a model folder: MODEL_ARGUMENT's, and the teacher of a training run
MODEL_FOLDER_READERS = [*MODEL_ARGUMENT.items(), ("train", "--teacher")]


def argv_reading(scenario: Scenario, name: str, argument: str | None, folder: Path) -> list[str]:
    """A working command line of `name` whose model folder (`argument`; None: push's first argument) is `folder`."""
    argv = scenario.argv(name)
    if argument is None:
        return [str(folder), *argv[1:]]
    if argument not in argv:
        return [*argv, argument, str(folder)]
    argv[argv.index(argument) + 1] = str(folder)
    return argv


def with_argument(argv: list[str], argument: str, value) -> list[str]:
    """`argv` with `argument` set to `value`: replaced where it is given, added where it is not."""
    argv = list(argv)
    if argument in argv:
        argv[argv.index(argument) + 1] = str(value)
        return argv
    return [*argv, argument, str(value)]


def command_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a command run as a user would, offline unless `extra` says otherwise, with its own
    folder for the code transformers copies out of a model (where a run of foreign code would leave it)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO), **extra}
    return {**env, "HF_MODULES_CACHE": str(tmp_path / "modules")}


def hub_repo(hub, repo_id: str, folder: Path) -> None:
    """Put `folder`'s files on the local hub as `repo_id` (straight into its store: no client, no push gate)."""
    repo = Store(hub.root).create(repo_id, False, f"{hub.url}/{repo_id}")
    files = {path.name: repo.add_blob(path.read_bytes()) for path in folder.iterdir() if path.is_file()}
    repo.commit("refs/heads/main", "a model", "", {**repo.files(repo.refs["refs/heads/main"]), **files})
    repo.save()


def with_arguments(argv: list[str], extra: list[str]) -> list[str]:
    """`argv` with each `--argument value` pair of `extra` set (`with_argument`): a command line names an argument
    once; anything else in `extra` is added at the end."""
    argv, extra, index = list(argv), list(extra), 0
    while index < len(extra):
        pair = extra[index : index + 2]
        if len(pair) == 2 and pair[0].startswith("--") and "=" not in pair[0] and not pair[1].startswith("--"):
            argv, index = with_argument(argv, *pair), index + 2
        else:
            argv, index = [*argv, extra[index]], index + 1
    return argv
