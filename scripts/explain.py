"""Explain a prediction: `python scripts/explain.py --model FOLDER_OR_REPO --image PATH_OR_URL --out DIR`.

Prints the top-5 classes and writes PNGs to DIR: the patch grid, attention rollout, a class-specific gradient
rollout for the top class, the per-layer attention from the class token, and the paper's Fig. 7 panels.
A vit_scratch model loads with the installed package's code; code that travels with a model (a folder's or a
repo's `.py` files) runs only with --trust_remote_code. `--dtype bfloat16` loads and runs the model in bf16 (the maps
are combined in float32 either way).
"""

import sys

from modeling_vit_scratch.explanation.command import main

if __name__ == "__main__":
    main(sys.argv[1:])
