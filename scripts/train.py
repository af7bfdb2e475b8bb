"""Train a vit-scratch model: `python scripts/train.py [RECIPE.json|.yaml] [--any_argument value ...]`.

A recipe file in configs/ gives the arguments; any argument on the command line overrides it. Arguments are those
of `modeling_vit_scratch.training.ModelArguments`, `DataArguments` and transformers' `TrainingArguments`
(`python scripts/train.py --help` lists them). Runs unchanged under `torchrun` and `accelerate launch`.
"""

import sys

from transformers import HfArgumentParser, TrainingArguments

from modeling_vit_scratch.training import (
    DataArguments,
    ModelArguments,
    recipe_to_argv,
    train,
    use_cpu_processes_without_accelerator,
)


def main(argv: list[str]) -> None:
    use_cpu_processes_without_accelerator()
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    try:
        model_args, data_args, training_args = parser.parse_args_into_dataclasses(recipe_to_argv(argv))
        metrics = train(model_args, data_args, training_args)
    except (ValueError, FileNotFoundError) as error:  # bad input: one line that names the problem and the fix
        sys.exit(f"error: {error}")
    if training_args.process_index == 0:
        print(f"\nTest accuracy {metrics['test_accuracy']:.4f} ({metrics['wall_time_seconds']:.0f} s).")
        print(f"Model saved in {training_args.output_dir}; load it with\n"
              f"  AutoModelForImageClassification.from_pretrained({training_args.output_dir!r}, trust_remote_code=True)\n"
              f"  pipeline('image-classification', model={training_args.output_dir!r}, trust_remote_code=True)")


if __name__ == "__main__":
    main(sys.argv[1:])
