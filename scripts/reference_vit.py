"""The reference for the training defaults: transformers' ViT (or ours, or a small ConvNet) in a plain Trainer loop.

    python scripts/reference_vit.py DATASET_FOLDER --model_kind transformers --seed 0 --output_dir outputs/ref
    python scripts/reference_vit.py SPLIT/labelled --model_kind convnet --output_dir outputs/convnet  # few_labels.py's

Trains on every image of the imagefolder's train/ with the reference budget (see `lab.reference`),
tests the last epoch on test/, prints and writes `reference_results.json`. It is what `scripts/train.py`'s defaults
are compared with.
"""

import argparse
import json
import sys

from lab.reference import MODEL_KINDS, REFERENCE_BUDGET, train_plain

from modeling_vit_scratch.errors import UserError


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("dataset", help="An imagefolder with train/ and test/ (e.g. from make_image_sets.py).")
    parser.add_argument("--model_kind", choices=MODEL_KINDS, default="transformers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--num_train_epochs", type=float, default=REFERENCE_BUDGET["num_train_epochs"])
    args = parser.parse_args(argv)
    try:
        results = train_plain(
            args.dataset, args.model_kind, args.output_dir, seed=args.seed, num_train_epochs=args.num_train_epochs
        )
    except (ValueError, FileNotFoundError, UserError) as error:
        sys.exit(f"error: {error}")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
