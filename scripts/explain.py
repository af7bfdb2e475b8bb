"""Explain a prediction: `python scripts/explain.py --model FOLDER_OR_REPO --image PATH_OR_URL --out DIR`.

Prints the top-5 classes and writes PNGs to DIR: the patch grid, attention rollout, a class-specific gradient
rollout for the top class, the per-layer attention from the class token, and the paper's Fig. 7 panels.
A vit_scratch model loads with the installed package's code; code that travels with a model (a folder's or a
repo's `.py` files) runs only with --trust_remote_code. `--dtype bfloat16` loads and runs the model in bf16 (the maps
are combined in float32 either way).
"""

# imported first, before the command's package (torch, transformers): Ctrl-C meanwhile is one line too
from vit_scratch_command import run

if __name__ == "__main__":
    run("modeling_vit_scratch.explanation.command")
