"""The training command, `vit-scratch train` and `python scripts/train.py [RECIPE] [--argument value ...]`: parse
the arguments (`arguments.py`), train (`trainer.py`), and say where the model is. Bad input is one line, `error: ...`;
Ctrl-C (or SIGTERM) is one line too: the last checkpoint and the command that resumes from it."""

from modeling_vit_scratch.errors import command, speaks
from modeling_vit_scratch.secrets import shown
from modeling_vit_scratch.training.arguments import parse_arguments
from modeling_vit_scratch.training.precision import precision_words, training_precision
from modeling_vit_scratch.training.trainer import train


@command
def main(argv: list[str]) -> None:
    """Train as `argv` says, and say where the model is and how to load it."""
    model_args, data_args, output_args, training_args = parse_arguments(argv)
    metrics = train(model_args, data_args, training_args, output_args)
    if training_args.process_index == 0 and speaks():
        folder = shown(training_args.output_dir)
        if "test_accuracy" not in metrics:  # pretrained: a masked autoencoder
            print(f"\nTest reconstruction loss {metrics['test_loss']:.4f} ({metrics['wall_time_seconds']:.0f} s).")
            print(
                f"Pretrained model saved in {folder}; fine-tune it on labelled images with a recipe, e.g.\n"
                f"  python scripts/train.py configs/train_small_images.json --model {folder} --dataset FOLDER "
                "--output_dir OUT\n(configs/train_small_images.json for small images; docs/training.md for photos)"
            )
            return
        print(f"\nTest accuracy {metrics['test_accuracy']:.4f} ({metrics['wall_time_seconds']:.0f} s).")
        print(f"Trained in {precision_words(training_precision(training_args), metrics.get('precision_choice'))}.")
        print(
            f"Model saved in {folder}; load it with\n"
            f"  AutoModelForImageClassification.from_pretrained({folder!r}, trust_remote_code=True)\n"
            f"  pipeline('image-classification', model={folder!r}, trust_remote_code=True)"
        )
