"""What the behaviour tests share: running a command as a user does (a script or the `vit-scratch` module in a new
process, or the `vit-scratch` function in this process where a new process would only cost time), the fake token
every run has in reach, and what a test reads back (a folder's contents by hash, where a string is in files or
output).

The tests pin what a user can see: exit status, files written, files left as they were, no token anywhere. Never
the wording of a message (at most a name it must hold: the argument, the file)."""

import hashlib
import json
import os
import random
import string
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from helpers import PROCESS_TIMEOUT, REPO

# a token shaped as the Hub's: "hf_" and 34 letters, the same in every worker of a run (made_once folders are shared)
SECRET = "hf_" + "".join(random.Random("vit-scratch behaviour").choices(string.ascii_letters, k=34))
# each `vit-scratch` sub-command's script in scripts/
SCRIPTS = {
    "train": "train.py",
    "explain": "explain.py",
    "push": "push_to_hub.py",
    "convert": "convert_checkpoint.py",
    "benchmark": "benchmark.py",
}
TRAINED_REPO = "local-user/behaviour-trained"  # where the `pushed` fixture pushes the trained folder
PUSHED_FILES = {"model.safetensors", "config.json", "README.md"}  # what a pushed repo holds at least
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN")


@dataclass
class Ran:
    """How a command ended: its exit status, and what it printed."""

    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def __str__(self) -> str:  # what an assertion shows
        return f"exit {self.code}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}"


def user_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's environment: offline, one thread, the checkout importable, SECRET in HF_TOKEN, a Hugging Face home of
    its own (no login of this machine in reach), then `extra`."""
    env = {key: value for key, value in os.environ.items() if key not in TOKEN_VARIABLES}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO), HF_TOKEN=SECRET, HF_HOME=str(home))
    env.update(HF_MODULES_CACHE=str(Path(home) / "modules"), HF_HUB_DISABLE_TELEMETRY="1")
    return {**env, **extra}


def run(command: str, *args, home: Path, module: bool = False, env: dict | None = None, cwd: Path = REPO) -> Ran:
    """`python scripts/<command's script> ARGS` (or `python -m modeling_vit_scratch.cli COMMAND ARGS` with `module`)
    in a new process, with `user_env(home)` and `env` on top."""
    line = ["-m", "modeling_vit_scratch.cli", command] if module else [str(REPO / "scripts" / SCRIPTS[command])]
    done = subprocess.run(
        [sys.executable, *line, *map(str, args)],
        cwd=cwd,
        env=user_env(home, **(env or {})),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    return Ran(done.returncode, done.stdout, done.stderr)


def in_process(capfd, command: str, *args) -> Ran:
    """`vit-scratch COMMAND ARGS` run in this process (refusals, and a command that changes no state of the process),
    its output captured at the file descriptors (pytest's `capfd`): the exit status the process would have (a message
    given to sys.exit is status 1 and a line on stderr), and what it printed."""
    from modeling_vit_scratch.cli import main

    capfd.readouterr()  # what came before is not this command's
    argv, code, message = list(sys.argv), 0, ""
    try:
        main([command, *map(str, args)])
    except SystemExit as stop:
        code, message = (1, f"{stop.code}\n") if isinstance(stop.code, str) else (stop.code or 0, "")
    finally:
        sys.argv[:] = argv
    printed = capfd.readouterr()
    return Ran(code, printed.out, printed.err + message)


def contents(folder: Path) -> dict[str, str]:
    """Every entry under `folder` (hidden ones too): a file's sha256, 'dir' for a folder, the target for a link."""
    found = {}
    for path in sorted(Path(folder).rglob("*")):
        name = str(path.relative_to(folder))
        if path.is_symlink():
            found[name] = "link to " + os.readlink(path)
        elif path.is_dir():
            found[name] = "dir"
        else:
            found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def missing(folder: Path, names) -> list[str]:
    return [name for name in names if not (Path(folder) / name).is_file()]


def forms(secret: str = SECRET) -> list[bytes]:
    """How a string may be stored: UTF-8 (for SECRET's letters also ASCII, Latin-1, JSON), UTF-16 either way."""
    return [secret.encode(), secret.encode("utf-16-le"), secret.encode("utf-16-be")]


def files_holding(root: Path, secret: str = SECRET) -> list[str]:
    """Every file under `root` (hidden ones, links not followed) whose bytes hold `secret` in any of its `forms`."""
    held = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                held += [str(path)] if any(form in data for form in forms(secret)) else []
    return held


def assert_no_secret(*runs: Ran, folders=()) -> None:
    """SECRET is in no output of `runs` and no file under `folders`."""
    for ran in runs:
        assert SECRET not in ran.output, "the token was printed"
    for folder in folders:
        assert not files_holding(folder), f"the token is in {files_holding(folder)}"


def save_run(ran: Ran, path: Path) -> None:
    """Keep a run's outcome beside a made_once folder, for the tests that read it (the secret scan reads it too)."""
    path.write_text(json.dumps(dict(code=ran.code, stdout=ran.stdout, stderr=ran.stderr)))


def saved_run(path: Path) -> Ran:
    return Ran(**json.loads(path.read_text()))


def train_args(root: Path, output: Path, *extra, dataset: Path | None = None) -> list[str]:
    """A 2-step run of the tiny model (root/tiny.json) on `dataset` (default root/images) into `output`, a checkpoint
    at each step."""
    args = ["--model", root / "tiny.json", "--dataset", dataset or root / "images", "--output_dir", output]
    args += ["--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1", "--per_device_train_batch_size", "8"]
    args += ["--report_to", "none", "--disable_tqdm", "true", *extra]
    return [str(arg) for arg in args]
