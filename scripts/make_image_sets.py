"""Write the image sets of `lab.image_sets` as imagefolders that `scripts/train.py --dataset` reads.

    python scripts/make_image_sets.py data/            # the sets to tune on: ~4,000 train / ~1,000 test each
    python scripts/make_image_sets.py data/ --sets glyphs --train_per_class 20 --test_per_class 5 --seed 1
    python scripts/make_image_sets.py data/ --sets held_back_color_2 held_back_gray   # only for a recipe's final check

Deterministic: the same seed and sizes give the same images. The held-back sets are built only when named: never
train on or evaluate against them while tuning. Needs the [image_sets] extra.
"""

import argparse
import sys
from pathlib import Path

from lab.image_sets import IMAGE_SETS, TUNING_SETS, build_image_set


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("root", help="Folder to write the sets in, one sub-folder per set.")
    parser.add_argument(
        "--sets",
        nargs="+",
        choices=sorted(IMAGE_SETS),
        default=sorted(TUNING_SETS),
        help="Default: the sets to tune on; a held-back or spent set only when named.",
    )
    parser.add_argument("--train_per_class", type=int, default=None, help="Default: ~4,000 train images per set.")
    parser.add_argument("--test_per_class", type=int, default=None, help="Default: ~1,000 test images per set.")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for name in args.sets:
        folder = Path(args.root) / name
        try:
            classes = build_image_set(name, folder, args.train_per_class, args.test_per_class, args.seed)
        except (ValueError, ImportError) as error:
            sys.exit(f"error: {error}")
        print(f"{name}: {len(classes)} classes in {folder} (train/ and test/)")


if __name__ == "__main__":
    main(sys.argv[1:])
