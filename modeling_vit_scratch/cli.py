"""The `vit-scratch` command: `vit-scratch COMMAND [arguments]`, one sub-command per script, with its arguments.

    vit-scratch train RECIPE.json --output_dir DIR          scripts/train.py
    vit-scratch explain --model DIR --image PNG --out DIR   scripts/explain.py
    vit-scratch push FOLDER REPO_ID                         scripts/push_to_hub.py
    vit-scratch convert --from timm ... --output DIR        scripts/convert_checkpoint.py
    vit-scratch benchmark [--configs ...]                   scripts/benchmark.py

Installed by `pip install "vit-scratch[train]"`. Each sub-command is the same `main(argv)` its script calls, imported
only when asked for, so `vit-scratch --help` needs no training packages.
"""

import importlib
import sys

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
    return "\n".join(
        [
            "usage: vit-scratch COMMAND [arguments]",
            "",
            "commands:",
            *lines,
            "",
            "`vit-scratch COMMAND --help` lists a command's arguments.",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        sys.exit(f"error: unknown command {name!r}: choose one of {', '.join(COMMANDS)} (vit-scratch --help).")
    sys.argv[:] = [f"{COMMAND} {name}", *rest]  # argparse's usage line names the command as the user typed it
    importlib.import_module(COMMANDS[name][0]).main(rest)


# python -m modeling_vit_scratch.cli: the same signal handling as `vit-scratch` once the package is imported (Python
# imports it, and torch and transformers with it, before this runs: a library that cannot start is its traceback)
if __name__ == "__main__":
    from vit_scratch_command import run

    run("modeling_vit_scratch.cli")
