"""Split an imagefolder for few-label experiments: a labelled share of train/, and every training image unlabelled.

    python scripts/few_labels.py data/glyphs data/glyphs_10pc --fraction 0.1 --seed 0

Writes OUT/labelled/ (train/: `--fraction` of each class's training images, at least one; test/: all of test/), an
imagefolder for `scripts/train.py --dataset` or `scripts/reference_vit.py`, and OUT/unlabelled/ (every training
image, flat, names without labels) to pretrain on. See `lab.few_labels`.
"""

import argparse
import sys

from lab.few_labels import split_few_labels


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("dataset", help="An imagefolder with train/<class>/ and test/<class>/.")
    parser.add_argument("output", help="A new or empty folder for labelled/ and unlabelled/.")
    parser.add_argument("--fraction", type=float, default=0.1, help="Share of each class's training images labelled.")
    parser.add_argument("--seed", type=int, default=0, help="Draws the labelled images.")
    args = parser.parse_args(argv)
    try:
        counts = split_few_labels(args.dataset, args.output, fraction=args.fraction, seed=args.seed)
    except (ValueError, OSError) as error:
        sys.exit(f"error: {error}")
    labelled, test = counts["labelled_train"], counts["test"]
    print(f"labelled train: {sum(labelled.values())} images in {len(labelled)} classes ({args.output}/labelled/train)")
    print("  " + ", ".join(f"{name} {count}" for name, count in labelled.items()))
    print(f"test: {sum(test.values())} images in {len(test)} classes ({args.output}/labelled/test)")
    print(f"unlabelled: {counts['unlabelled']} images ({args.output}/unlabelled)")


if __name__ == "__main__":
    main(sys.argv[1:])
