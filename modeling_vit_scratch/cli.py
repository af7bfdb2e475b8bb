"""The `vit-scratch` command: `vit-scratch COMMAND [arguments]`, one sub-command per script, with its arguments.

    vit-scratch train RECIPE.json --output_dir DIR      scripts/train.py
    vit-scratch explain --model DIR --image PNG --out DIR   scripts/explain.py
    vit-scratch push FOLDER REPO_ID                      scripts/push_to_hub.py
    vit-scratch convert --from timm ... --output DIR     scripts/convert_checkpoint.py
    vit-scratch benchmark [--configs ...]                scripts/benchmark.py

Installed by `pip install "vit-scratch[train]"`. Each sub-command is the same function its script calls, imported
only when asked for, so `vit-scratch --help` needs no training packages. Every command runs inside
`common/commands.py`'s `entry_point`: what it prints is redacted, and Ctrl-C or SIGTERM is one line.
"""

import importlib
import sys

from .common.commands import entry_point

COMMAND = "vit-scratch"  # the installed command's name, as pyproject.toml's [project.scripts] gives it
# sub-command -> (the module whose `main(argv)` runs it, what it does)
COMMANDS = {
    "train": ("modeling_vit_scratch.training.command", "train a model on an image folder, a saved data set or digits"),
    "explain": ("modeling_vit_scratch.explanation.command", "explain a prediction with attention maps and rollouts"),
    "push": ("modeling_vit_scratch.sharing.command", "push a saved model folder to the Hugging Face Hub"),
    "convert": ("modeling_vit_scratch.conversion.command", "convert timm and transformers checkpoints, both ways"),
    "benchmark": ("modeling_vit_scratch.benchmark.command", "speed and memory against transformers' ViT and timm"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()]
    return (
        "usage: vit-scratch COMMAND [arguments]\n\ncommands:\n"
        + "\n".join(lines)
        + ("\n\n`vit-scratch COMMAND --help` lists a command's arguments.")
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        sys.exit(f"error: unknown command {name!r}: choose one of {', '.join(COMMANDS)} (vit-scratch --help).")
    # argparse's usage line and the recorded command name the command as the user typed it, then its arguments
    sys.argv[:] = [f"{COMMAND} {name}", *rest]
    dispatch(argv)


@entry_point()
def dispatch(argv: list[str]) -> None:
    """Import the command's room and run its `main` (itself an `entry_point`: its own line on Ctrl-C); this one
    covers the import, which takes seconds (torch, transformers): Ctrl-C there is the line that nothing was done."""
    importlib.import_module(COMMANDS[argv[0]][0]).main(argv[1:])


if __name__ == "__main__":  # python -m modeling_vit_scratch.cli: the same signal handling as `vit-scratch` from here on
    from vit_scratch_command import run

    run("modeling_vit_scratch.cli")
