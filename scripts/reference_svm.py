"""The classical reference: scikit-learn's RBF SVM on the pixels of an imagefolder, C chosen on validation.

    python scripts/reference_svm.py DATASET_FOLDER --output_dir outputs/svm

Chooses C on a stratified tenth of train/ (see `lab.svm_reference`), fits on all of train/, tests on test/, prints
and writes `svm_results.json`. A ViT recipe worth using beats it.
"""

import argparse
import json
import sys

from lab.svm_reference import train_svm

from modeling_vit_scratch.errors import UserError


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("dataset", help="An imagefolder with train/ and test/ (e.g. from make_image_sets.py).")
    parser.add_argument("--seed", type=int, default=0, help="Draws the validation part that chooses C.")
    parser.add_argument("--output_dir", required=True)
    args = parser.parse_args(argv)
    try:
        results = train_svm(args.dataset, args.output_dir, seed=args.seed)
    except (ValueError, FileNotFoundError, UserError) as error:
        sys.exit(f"error: {error}")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
