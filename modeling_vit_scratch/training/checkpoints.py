"""A run's checkpoints: which one `--resume_from_checkpoint` names, that it resumes into the same model and data,
the commands of the run kept in each (`RUN_FILE`), and what Ctrl-C prints (the last checkpoint and the command that
resumes from it). Training glue, never imported by the model files."""

import json
import os
import shlex
import sys
import time
from pathlib import Path

from safetensors import safe_open
from transformers import TrainerCallback

from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.secrets import shown

RUN_FILE = "vit_scratch_run.json"  # in each checkpoint: the data's identity and the commands of the run so far


class KeepRun(TrainerCallback):
    """Keeps the data's identity and the run's commands so far in each checkpoint (`RUN_FILE`): the earlier `legs`
    and this one, `command`, with the wall time it took up to that checkpoint since `started` (a run resumed from it
    adds it up with its own: the time after the checkpoint went into no weights kept)."""

    def __init__(self, identity: str, legs: list[dict], command: str, started: float):
        self.identity, self.legs, self.command, self.started = identity, legs, command, started

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir, f"checkpoint-{state.global_step}")
        if state.is_world_process_zero and folder.is_dir():
            leg = {"command": self.command, "wall_time_seconds": round(time.time() - self.started, 1)}
            (folder / RUN_FILE).write_text(json.dumps({"identity": self.identity, "legs": [*self.legs, leg]}) + "\n")


def last_checkpoint(folder: Path, since: float = 0.0) -> str | None:
    """The last complete checkpoint in `folder` (its `trainer_state.json` is written last) saved `since` then: one
    cut off mid-save by a stop is passed over, and so is an earlier run's that an overwriting run replaces."""
    steps = [(int(path.name.split("-")[1]), path) for path in folder.glob("checkpoint-*") if path.name[11:].isdigit()]
    states = [path / "trainer_state.json" for _, path in sorted(steps)]
    complete = [state.parent for state in states if written_whole(state) and state.stat().st_mtime >= since]
    return str(complete[-1]) if complete else None


def written_whole(state: Path) -> bool:
    """Whether a checkpoint's `trainer_state.json` is there and whole (a stop may cut it off while it is written)."""
    try:
        json.loads(state.read_text())
    except (OSError, ValueError):
        return False
    return True


def resolved_checkpoint(resume: str | None, output_dir: Path) -> str | None:
    """The checkpoint --resume_from_checkpoint names: `true` is the last one in --output_dir; None for none."""
    if resume is None or str(resume).strip().lower() in ("", "false", "none"):
        return None
    if str(resume).strip().lower() == "true":
        last = last_checkpoint(output_dir)
        if last is None:
            raise UserError(
                f"--resume_from_checkpoint true: --output_dir {shown(output_dir)} holds no checkpoint: run without "
                "--resume_from_checkpoint to start afresh"
            )
        return last
    if not (Path(resume) / "trainer_state.json").is_file():
        raise UserError(f"--resume_from_checkpoint {shown(resume)} is no checkpoint folder: give one, or true")
    return str(resume)


def check_same_model(checkpoint: str | None, model) -> None:
    """A checkpoint resumes only into the model it was saved from (the same tensors, the same shapes): one line here,
    where the Trainer would fail deep inside its load."""
    path = Path(checkpoint or "", "model.safetensors")
    if not checkpoint or not path.is_file():
        return
    with safe_open(str(path), framework="pt") as weights:
        stored = {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}  # noqa: SIM118
    built = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    differing = sorted(name for name in stored.keys() | built.keys() if stored.get(name) != built.get(name))
    if differing:
        raise UserError(
            f"--resume_from_checkpoint {shown(checkpoint)} holds another model than these arguments build "
            f"({shown(differing[0])}: {stored.get(differing[0])} saved, {built.get(differing[0])} built): resume "
            "with the run's own --model and --config_overrides, or start afresh with --overwrite_output_dir true"
        )


def resumed_legs(checkpoint: str | None, identity: str) -> list[dict]:
    """The commands of the run before this one, kept in `checkpoint`; one line where its data has changed since."""
    kept = Path(checkpoint or "", RUN_FILE)
    if not checkpoint or not kept.is_file():
        return []
    run = json.loads(kept.read_text())
    if run.get("identity") != identity:
        raise UserError(
            f"--resume_from_checkpoint {shown(checkpoint)}: the data set differs from the one that run trained on: "
            "restore it, or start afresh with --overwrite_output_dir true"
        )
    return run.get("legs", [])


def plain_command(args: list[str] | None = None) -> str:
    """The command that started this run, as a user can paste it again (tokens masked by `shown`)."""
    program, args = sys.argv[0], sys.argv[1:] if args is None else args
    words = program.split() if program.startswith("vit-scratch ") else ["python", program]
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    launcher = ["torchrun", "--nproc_per_node", str(processes), *(["--no-python"] if words[0] != "python" else [])]
    words = [*(launcher if processes > 1 else []), *(words[1:] if processes > 1 and words[0] == "python" else words)]
    return shown(shlex.join([*words, *args]))


def resume_command() -> str:
    """This command without the arguments that start afresh or name a checkpoint, with --resume_from_checkpoint true."""
    kept, skip = [], False
    for word in sys.argv[1:]:
        name, equals, _ = word.partition("=")
        if skip or name[2:].replace("-", "_") in ("overwrite_output_dir", "resume_from_checkpoint"):
            skip = not skip and not equals
            continue
        kept.append(word)
    return plain_command([*kept, "--resume_from_checkpoint", "true"])


def interrupted_line(output_dir: Path, since: float = 0.0) -> str:
    """What Ctrl-C prints: the last checkpoint and the command that resumes from it, or that there is none yet."""
    last = last_checkpoint(output_dir, since)
    if last is None:
        return "Interrupted before the first checkpoint: run the same command again to start afresh."
    return f"Interrupted: the last checkpoint is {shown(last)}; resume with: {resume_command()}"
