"""Push a saved model folder to the Hugging Face Hub: `python scripts/push_to_hub.py FOLDER REPO_ID [options]`.

Nothing is pushed unless the folder's code is vit-scratch's own, it reloads identically through the Auto classes
with that code, its weights are the ones its metrics were measured on (or --allow_unmeasured_weights) and no file
holds a token. The token comes from HF_TOKEN or `hf auth login`; it is never printed. A push that fails half-way is
finished by running the same command again.
"""

# imported first, before the command's package (torch, transformers): Ctrl-C meanwhile is one line too
from vit_scratch_command import run

if __name__ == "__main__":
    run("modeling_vit_scratch.sharing.command")
