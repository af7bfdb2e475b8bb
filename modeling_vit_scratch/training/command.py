"""The training command, `vit-scratch train` and `python scripts/train.py`: the arguments (`arguments.py`: the
command line and a JSON/YAML recipe), `train`, and the lines a user reads at the end. Bad input is one line,
`error: ...`, before any long work; no token value is ever printed. Ctrl-C is one line too: the last checkpoint and the
command that resumes from it; so is SIGTERM (what `kill`, `timeout` and cluster schedulers send): `interrupted_line`,
printed by `common/commands.py`'s `entry_point`, which every command's `main` runs inside. Under torchrun, a process
whose run lost another of its processes (killed, interrupted, failed) says so in one line of the same kind."""

import os
import shlex
import sys
import time
from pathlib import Path

from modeling_vit_scratch.common.commands import entry_point, stopping, when_interrupted
from modeling_vit_scratch.common.folders import (
    CHECKPOINT,
    checkpoints,
    is_complete_checkpoint,
    missing_run_states,
)
from modeling_vit_scratch.common.secrets import redact
from modeling_vit_scratch.sharing.push import PushError
from modeling_vit_scratch.training.arguments import (
    command_secrets,
    parse_arguments,
    recipe_lines,
    resume_command,
    with_shipped_recipe,
)
from modeling_vit_scratch.training.data import ImageChanged
from modeling_vit_scratch.training.distributed import (
    first_process,
    join_failed,
    leave_process_group,
    lost_peer,
    use_cpu_processes_without_accelerator,
)
from modeling_vit_scratch.training.precision import precision_words, training_precision
from modeling_vit_scratch.training.saving import RunStopped
from modeling_vit_scratch.training.trainer import train
from vit_scratch_command import speaks_for_machine

OTHER_PROCESS_STOPPED = 1  # the exit code of a process whose run lost another of its processes


@entry_point(secrets=command_secrets)
def main(argv: list[str]) -> None:
    """Train as `argv` (the arguments after the command's name) says, and say where the model is."""
    use_cpu_processes_without_accelerator()
    started = time.time()
    argv, shipped = with_shipped_recipe(argv)
    if shipped and first_process():
        print(shipped)
    try:
        model_args, data_args, output_args, training_args = parse_arguments(argv)
    except (ValueError, FileNotFoundError) as error:  # every process of a launched run finds the same: said once
        sys.exit(f"error: {redact(' '.join(str(error).split()), command_secrets(argv))}" if speaks_for_machine() else 1)
    except RuntimeError as error:  # the processes join as the Trainer's arguments are made
        if (line := join_failed(error)) is None:
            raise
        sys.exit(f"error: {redact(line, command_secrets(argv))}")
    if training_args.process_index == 0:
        for line in recipe_lines(argv):  # which file a recipe's relative path named, which override it lost: said
            print(redact(line, command_secrets(argv)))
    removed = []  # what the run removed from the output folder once every check had passed
    # Ctrl-C or SIGTERM: one line on how to go on (printed by the first process only)
    when_interrupted(
        lambda: (
            interrupted_line(training_args, output_args, started, removed) if training_args.process_index == 0 else None
        )
    )
    try:
        metrics = train(model_args, data_args, training_args, output_args, removed)
    except ImageChanged as error:  # a file of the data set changed while the run read it: what, and how to go on
        what = (
            f"{' '.join(str(error).split())}, and the run stopped (restore it first: a resumed run reads the same data)"
        )
        line = interrupted_line(training_args, output_args, started, removed, stopped=f"error: {what}")
        sys.exit(redact(line, command_secrets(argv)))
    except (ValueError, FileNotFoundError, PushError) as error:  # bad input or a failed push: one line, what and how
        sys.exit(f"error: {redact(' '.join(str(error).split()), command_secrets(argv))}")
    except RunStopped as stop:  # its folder moved, or a write the system refused: what is kept and how to go on
        line = stopped_line(training_args, output_args, started, removed, stop)
        sys.exit(f"error: {redact(line, command_secrets(argv))}")
    except RuntimeError as error:  # several processes: one of them stopped, and this one cannot go on without it
        reason = lost_peer(error)
        if reason is None:
            raise
        stopping()  # the launcher stops the processes that are left: its signal does not cut this line short
        stopped = f"Another process of this run stopped (this one lost it: {reason}), and this one with it"
        line = interrupted_line(training_args, output_args, started, removed, stopped=stopped)
        print(redact(line, command_secrets(argv)), file=sys.stderr)
        sys.exit(OTHER_PROCESS_STOPPED)
    leave_process_group()
    if training_args.process_index == 0:
        print(f"\nTest accuracy {metrics['test_accuracy']:.4f} ({metrics['wall_time_seconds']:.0f} s).")
        precision = precision_words(training_precision(training_args), metrics.get("precision_choice"))
        print(f"Trained in {precision}.")  # why only where --bf16_when_faster chose it
        print(
            redact(
                f"Model saved in {training_args.output_dir}; load it with\n"
                "  AutoModelForImageClassification.from_pretrained("
                f"{training_args.output_dir!r}, trust_remote_code=True)\n"
                f"  pipeline('image-classification', model={training_args.output_dir!r}, trust_remote_code=True)",
                command_secrets(argv),
            )
        )  # a token in the folder's name is no reason to print it


def stopped_line(training_args, output_args, started: float, removed: list[str], stop: RunStopped) -> str:
    """The line of a run that stopped before its end (`RunStopped`): why, and the last checkpoint and the command
    that resumes from it, where its folder is now (moved: first move it back); a folder removed took its
    checkpoints with it."""
    if stop.folder is None:
        return f"{stop.why}; its checkpoints went with it: run the same command again to start afresh."
    return interrupted_line(
        training_args, output_args, started, removed, stopped=stop.why, folder=stop.folder, back=stop.back
    )


def interrupted_line(
    training_args,
    output_args,
    started: float,
    removed: list[str] = (),
    stopped: str = "Interrupted",
    folder: str | Path | None = None,
    back: str | None = None,
) -> str:
    """What a user reads after Ctrl-C (or, `stopped` saying why, on a process whose run lost another of its
    processes): what was removed (only what the run removed at the start, `removed`: the checkpoints of the run that
    --overwrite_output_dir replaces), the last complete checkpoint and the exact command
    that resumes from it (or, before the first checkpoint, that the same command starts afresh). A run that
    overwrites counts only the checkpoints it wrote since it `started`: the old ones belong to the run it replaces.
    A checkpoint that holds the weights only (--save_only_model) cannot resume: the line says how to start from them.
    `folder` is where the run's folder is now, when it was moved away from --output_dir while the run trained: the
    resume moves it back first (or `back` says how --output_dir leads to it again)."""
    named = training_args.output_dir
    folder = folder or named
    back = back or (
        f"move it back (mv {shlex.quote(str(folder))} {shlex.quote(str(named))}), then "
        if os.path.abspath(folder) != os.path.abspath(named)
        else ""
    )
    complete = [path for path in checkpoints(Path(folder)) if is_complete_checkpoint(path)]
    if output_args.overwrite_output_dir:
        complete = [path for path in complete if (path / "trainer_state.json").stat().st_mtime >= started]
    replaced = [name for name in removed if CHECKPOINT.match(name)]
    kept = (
        f"the earlier run's checkpoints ({', '.join(replaced)}) were removed at the start, as --overwrite_output_dir "
        f"asked, and nothing else in {folder}"
        if replaced
        else f"nothing in {folder} was removed"
    )
    if not complete:
        return f"{stopped} before the first checkpoint: {kept}; run the same command again to start afresh."
    kept = kept if replaced else f"everything in {folder} is kept"
    # a newer one cut off mid-save (the signal came while it was written): a resume skips it, so the line says so
    found = checkpoints(Path(folder))  # by step
    cut = [path.name for path in found[found.index(complete[-1]) + 1 :] if not is_complete_checkpoint(path)]
    if cut:
        kept += f" ({', '.join(cut)} was cut off mid-save: a resume starts from the last complete one)"
    if missing_run_states(complete[-1]):  # --save_only_model: its weights, but not the run's states, were kept
        return (
            f"{stopped}: {kept}; the last checkpoint, {complete[-1]}, holds the weights only (--save_only_model "
            f"true), so it cannot resume the run: start from its weights with --model {complete[-1]} (without "
            "--resume_from_checkpoint) and another --output_dir."
        )
    return (
        f"{stopped}: {kept}; the last checkpoint is {complete[-1]}; {back}resume with: "
        f"{resume_command(output_args.overwrite_output_dir)}"
    )
