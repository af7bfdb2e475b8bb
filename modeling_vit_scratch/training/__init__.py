"""Training: arguments, data, pre-flight checks, augmentation, distillation, the model source, several processes, the
precision choice, the trainer, the output folder and its curves. `vit-scratch train` and `scripts/train.py` call
`command.main`, which calls `trainer.train`."""
