"""Explain a prediction: `vit-scratch explain --model FOLDER_OR_REPO --image PATH_OR_URL --out DIR` (or
`python scripts/explain.py` with the same arguments).

Prints the top-5 classes and the share of high-norm patch tokens (norm above 2 x the median patch-token norm; with
registers, each register's norm too), and writes PNGs to DIR: the patch grid, attention rollout, a class-specific
gradient rollout for the top class, the per-layer attention from the class token, the paper's Fig. 7 panels and the
last layer's token norms (the registers paper's figure). The maps are of the patches only (never the class,
distillation or register tokens). A model without a classification head (a converted DINOv2 backbone) has no classes
to rank and no gradient rollout; a masked autoencoder's folder (pretraining) is explained by its encoder, and its
reconstruction of the image is drawn beside the masked input and the original (the MAE paper's Fig. 2).
A vit_scratch model loads with the installed package's code; code that travels with a model (a folder's or a
repo's `.py` files) runs only with --trust_remote_code. `--dtype bfloat16` loads and runs the model in bf16 (the maps
are combined in float32 either way).
"""

import argparse
import os

from modeling_vit_scratch.errors import command
from modeling_vit_scratch.explanation.attention import HEAD_FUSIONS
from modeling_vit_scratch.explanation.norms import HIGH_NORM_MULTIPLE, high_norm_share, high_norm_threshold
from modeling_vit_scratch.explanation.prediction import DTYPES, explain_image
from modeling_vit_scratch.secrets import shown


class Parser(argparse.ArgumentParser):
    """argparse whose refusals are one `error:` line through `errors.command` (redacted), not its usage block."""

    def error(self, message: str):
        raise argparse.ArgumentError(None, message)


def ratio(text: str) -> float:
    value = float(text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below 1 (e.g. 0.9), not {text}")
    return value


@command
def main(argv: list[str]) -> None:
    parser = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument("--model", required=True, help="saved folder or hub repo id of a vit_scratch model")
    parser.add_argument("--revision", help="branch, tag or commit of a hub repo --model (default: main)")
    parser.add_argument("--image", required=True, type=os.path.expanduser, help="image file or http(s) URL")
    parser.add_argument("--out", required=True, type=os.path.expanduser, help="folder for the PNGs: new or explain's")
    parser.add_argument("--head_fusion", default="mean", choices=HEAD_FUSIONS)
    parser.add_argument("--discard_ratio", type=ratio, default=0.0, help="share of weakest attention to drop")
    parser.add_argument("--dtype", default="float32", choices=DTYPES, help="run the model in float32 or bfloat16")
    parser.add_argument("--trust_remote_code", action="store_true", help="run code the model brings (its auto_map)")
    found = explain_image(**vars(parser.parse_args(argv)))
    if found.reconstruction_loss is not None:
        print(f"masked autoencoder: reconstruction loss {found.reconstruction_loss:.4f} on the hidden patches")
    print("top classes:" if found.ranking else "top classes: none (the model has no classification head)")
    for label, score in found.ranking:
        print(f"  {shown(label):>20}  {score:.4f}")
    patches = found.patch_norms[None]  # (1, gh, gw)
    share, threshold = high_norm_share(patches)[0].item(), high_norm_threshold(patches)[0].item()
    print(
        f"high-norm patch tokens: {share:.1%} ({round(share * patches.numel())} of {patches.numel()}; norm above "
        f"{HIGH_NORM_MULTIPLE:g} x the median patch-token norm = {threshold:.4g})"
    )
    if found.register_norms.numel():
        print("register token norms: " + ", ".join(f"{norm:.4g}" for norm in found.register_norms.tolist()))
    print("wrote:\n" + "\n".join(f"  {shown(path)}" for path in found.written))
