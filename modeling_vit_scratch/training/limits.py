"""The numbers `scripts/train.py` accepts: one table of allowed values per argument group (`common/numbers.py`'s
`Allowed`), checked once after the command line and recipe are parsed, before any argument object is built and
before any data is read.

Every float argument must be finite, whether or not a table names it (`nan`, `inf` are refused everywhere); the
tables add each argument's range. The bounds refuse what cannot train, not what is unusual: a learning rate above
`MAX_LEARNING_RATE` moves every weight by more than its own size at the first step under any optimizer the Trainer
builds (weights start near 0.02), so such a run only diverges. Why each bound is where it is: docs/training.md.
"""

from modeling_vit_scratch.common.numbers import Allowed

# Above this learning rate every optimizer the Trainer builds diverges at the first steps (see the module docstring).
MAX_LEARNING_RATE = 10.0
# numpy's and torch's seeds are unsigned 32-bit integers
MAX_SEED = 2**32 - 1

FRACTION = Allowed(0, 1, open_high=True, example="0.1")
COUNT = Allowed(1, integer=True)
SEED = Allowed(0, MAX_SEED, integer=True, example="0")
PROBABILITY = Allowed(0, 1, example="0.5")

MODEL_LIMITS = {
    "distillation_alpha": Allowed(0, 1, example="0.5"),
    "distillation_temperature": Allowed(0, 100, open_low=True, example="2"),
    "ema_decay": Allowed(0, 1, open_high=True, example="0.9998"),
    "layer_decay": Allowed(0, 1, open_low=True, example="0.75"),
}
DATA_LIMITS = {
    "validation_fraction": FRACTION,
    "test_fraction": FRACTION,
    "split_seed": SEED,
    "max_shift": Allowed(0, 1, example="0.1 (a tenth of the image side)"),
    "max_degrees": Allowed(0, 180, example="10"),
    "crop_scale": Allowed(0, 1, open_low=True, example="0.08 (the crop's least share of the area)"),
    "crop_ratio": Allowed(0, 1, open_low=True, example="0.75 (aspect ratios from 3/4 to 4/3)"),
    "hflip": PROBABILITY,
    "random_erasing": PROBABILITY,
    "mixup": Allowed(0, 1, example="0.5 (a share of the batches)"),
    "cutmix": Allowed(0, 1, example="0.5 (a share of the batches)"),
    "crop_pct": Allowed(0, 1, open_low=True, example="0.875 (the centre crop's share of the image)"),
    "validation_views": COUNT,
    "images_in_memory_mb": Allowed(0, example="2048"),
    "total_train_batch_size": COUNT,
    "max_train_samples": COUNT,
    "shuffle_buffer_size": COUNT,
    "max_bad_images": Allowed(0, integer=True, example="10"),
    "max_eval_samples": COUNT,
}
TRAINING_LIMITS = {
    "learning_rate": Allowed(0, MAX_LEARNING_RATE, open_low=True, example="3e-4"),
    "weight_decay": Allowed(0, 10, example="0.05"),
    "warmup_steps": Allowed(0, example="0.1 (a share of the steps) or 500"),
    "adam_beta1": Allowed(0, 1, open_high=True, example="0.9"),
    "adam_beta2": Allowed(0, 1, open_high=True, example="0.999"),
    "adam_epsilon": Allowed(0, 1, open_low=True, example="1e-8"),
    "max_grad_norm": Allowed(0, example="1.0"),
    "label_smoothing_factor": Allowed(0, 1, open_high=True, example="0.1"),
    "num_train_epochs": Allowed(0, 1e6, example="3"),
    "max_steps": Allowed(1, integer=True, unset=-1),
    "gradient_accumulation_steps": COUNT,
    "per_device_train_batch_size": COUNT,
    "per_device_eval_batch_size": COUNT,
    "eval_accumulation_steps": COUNT,
    "torch_empty_cache_steps": COUNT,
    "logging_steps": Allowed(0, open_low=True, example="50"),
    "eval_steps": Allowed(0, open_low=True, example="100"),
    "save_steps": Allowed(0, open_low=True, example="500"),
    "eval_delay": Allowed(0),
    "save_total_limit": Allowed(0, integer=True, example="2"),
    "seed": SEED,
    "data_seed": SEED,
    "dataloader_num_workers": Allowed(0, integer=True),
    "dataloader_prefetch_factor": COUNT,
    "neftune_noise_alpha": Allowed(0),
}
LIMITS = {**MODEL_LIMITS, **DATA_LIMITS, **TRAINING_LIMITS}
