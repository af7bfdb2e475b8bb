"""Train a vit-scratch model: `python scripts/train.py [RECIPE.json|.yaml] [--any_argument value ...]`.

A recipe file in configs/ gives the arguments; any argument on the command line overrides it. Arguments are those
of `modeling_vit_scratch.training.arguments.ModelArguments`, `DataArguments`, `OutputArguments` and transformers'
`TrainingArguments` (`python scripts/train.py --help` lists them), matched exactly. Runs unchanged under `torchrun`
and `accelerate launch`. Bad input is one line, `error: ...`, before any long work; no token value is ever printed.
"""

# imported first, before the command's package (torch, transformers): Ctrl-C meanwhile is one line too
from vit_scratch_command import run

if __name__ == "__main__":
    run("modeling_vit_scratch.training.command")
