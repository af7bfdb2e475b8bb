"""Training: arguments, data, pre-flight checks, augmentation, distillation, the precision choice, the trainer, the
output folder and its curves. `scripts/train.py` and `vit-scratch train` call `trainer.train`."""
