"""Explain a prediction: `vit-scratch explain --model FOLDER_OR_REPO --image PATH_OR_URL --out DIR` (or
`python scripts/explain.py` with the same arguments).

Prints the top-5 classes and writes PNGs to DIR: the patch grid, attention rollout, a class-specific gradient
rollout for the top class, the per-layer attention from the class token, and the paper's Fig. 7 panels.
A vit_scratch model loads with the installed package's code; code that travels with a model (a folder's or a
repo's `.py` files) runs only with --trust_remote_code. `--dtype bfloat16` loads and runs the model in bf16 (the maps
are combined in float32 either way).
"""

import argparse
import sys
import time
from pathlib import Path

from modeling_vit_scratch.common.commands import entry_point, when_interrupted
from modeling_vit_scratch.common.numbers import Allowed, check_numbers
from modeling_vit_scratch.common.secrets import RedactingArgumentParser, error_line, refuse_token_in_path
from modeling_vit_scratch.common.user_paths import user_path
from modeling_vit_scratch.explanation.attention import HEAD_FUSIONS
from modeling_vit_scratch.explanation.prediction import explain_image

EXPLAIN_LIMITS = {"discard_ratio": Allowed(0, 1, open_high=True, example="0.9")}


@entry_point()
def main(argv: list[str]) -> None:
    parser = RedactingArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", required=True, type=user_path, help="saved folder or hub repo id of a vit_scratch model"
    )
    parser.add_argument("--revision", help="branch, tag or commit of a hub repo --model (default: main)")
    parser.add_argument(  # several are taken here only to be refused with the way to explain each
        "--image", required=True, nargs="+", type=user_path, help="image file or http(s) URL (one per run)"
    )
    parser.add_argument(
        "--out",
        required=True,
        type=user_path,
        help="folder for the PNG files: new, empty, or one explain or training wrote",
    )
    parser.add_argument("--head_fusion", default="mean", choices=HEAD_FUSIONS)
    parser.add_argument("--discard_ratio", type=float, default=0.0, help="share of weakest attention to drop")
    parser.add_argument("--dtype", default="float32", help="run the model in float32 or bfloat16")
    parser.add_argument(
        "--trust_remote_code",
        action="store_true",
        help="run the code that comes with the model (a model whose auto_map names code of its own)",
    )
    args = parser.parse_args(argv)
    started = time.time()
    when_interrupted(lambda: interrupted_line(Path(args.out), started))
    try:
        for image in args.image:
            refuse_token_in_path("--image", image, read=True)  # read, and named in every line
        args.image = one_image(args.image)
        check_numbers(vars(args), EXPLAIN_LIMITS)
        paths = explain_image(
            args.model,
            args.image,
            args.out,
            args.head_fusion,
            args.discard_ratio,
            args.trust_remote_code,
            args.dtype,
            args.revision,
        )
    except (ValueError, FileNotFoundError) as error:
        sys.exit(error_line(error))
    print("wrote:\n" + "\n".join(f"  {path}" for path in paths))


def one_image(images: list[str]) -> str:
    """The one image a run explains: each run writes one set of pictures into its --out, so several images are one
    line saying how to explain each (a shell loop, one --out per image), before any work."""
    if len(images) == 1:
        return images[0]
    raise ValueError(
        f"--image takes one image per run, and {len(images)} were given ({', '.join(map(repr, images))}): explain "
        "each in its own run with its own --out, e.g. for image in a.png b.png; do vit-scratch explain --model M "
        '--image "$image" --out "figs/${image%.*}"; done.'
    )


def interrupted_line(out: Path, started: float) -> str:
    """What Ctrl-C prints: the pictures this run wrote (they are written one by one, straight into --out), and that
    the same command writes them all."""
    written = sorted(
        path.name for path in (out.glob("*.png") if out.is_dir() else []) if path.stat().st_mtime >= started
    )
    if not written:
        return f"Interrupted before any picture was written: {out} is as it was; run the same command again."
    return (
        f"Interrupted: {len(written)} picture(s) written to {out} ({', '.join(written)}), the others not (a picture "
        "there from an earlier explain may be stale); run the same command again to write them all."
    )
