"""Convert ViT checkpoints to and from vit_scratch (`vit-scratch convert`, or `python scripts/convert_checkpoint.py`).

    vit-scratch convert --from transformers --input google/vit-base-patch16-224 --output DIR
    vit-scratch convert --from timm --timm_model vit_base_patch16_224 \\
        --input weights.safetensors --output DIR
    vit-scratch convert --from timm --timm_model vit_base_r50_s16_224 \\
        --input weights.safetensors --output DIR      # a hybrid: its ResNet-V2 stem converts too
    vit-scratch convert --from transformers --input facebook/deit-tiny-distilled-patch16-224 \\
        --output DIR                                   # DeiT: distillation token and both heads
    vit-scratch convert --from transformers --input facebook/dinov2-with-registers-small \\
        --output DIR                                   # Dinov2: layer scale and registers (Dinov2Model too)
    vit-scratch convert --from timm --timm_model vit_small_patch14_reg4_dinov2 \\
        --input weights.safetensors --output DIR
    vit-scratch convert --to transformers --input DIR --output DIR
                                                       # a distilled model (DeiT) is written as transformers' DeiT,
                                                       # one with layer scale or registers as Dinov2(WithRegisters)
    vit-scratch convert --from transformers --input facebook/vit-mae-base --output DIR
                                                       # ViTMAEForPreTraining <-> our masked autoencoder, both ways

The folder is written in a private folder inside --output, loaded back and compared with its source on random
images (logits, or the final tokens of a model without a head; a masked autoencoder's loss, logits and mask with the
same patches hidden) in --dtype (float32, or bfloat16 with its looser
tolerance); only a folder that passes moves into place. A folder that already holds a model is replaced only with
--overwrite. Weights are read from safetensors only; timm is needed only for --from timm.
"""

import argparse
import importlib.metadata
import json
from pathlib import Path

import torch
from transformers import AutoModel, AutoModelForImageClassification, AutoModelForPreTraining

from ..configuration_vit_scratch import to_pair
from ..errors import UserError, command, on_interrupt
from ..folders import MODEL_NAMES, OutputFolder
from ..image_processing_vit_scratch import ViTScratchImageProcessor
from ..secrets import shown
from ..sources import check_model_folder, is_local, load_model, read_json, resolve, weights_sha256
from .convert import DINOV2_TYPES, from_transformers, to_transformers
from .timm_source import timm_model
from .timm_weights import from_timm

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
# Largest |difference| allowed, relative to the largest |output| (at least 1): float32 rounds at 2^-24, so 1e-4
# leaves room for another order of summation; bfloat16 keeps 8 bits of mantissa, over a few hundred operations.
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2**-4}
RECORD = "conversion_record.json"
# options that only some directions read: given to another, they would be ignored without a word
DIRECTION_ONLY = {"timm_model": ("timm",), "timm_kwargs": ("timm",), "revision": ("transformers", "to")}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    direction = parser.add_mutually_exclusive_group(required=True)
    direction.add_argument("--from", dest="source", choices=["transformers", "timm"], help="convert into vit_scratch")
    direction.add_argument("--to", dest="target", choices=["transformers"], help="convert a vit_scratch folder out")
    parser.add_argument("--input", required=True, help="folder or hub repo id; a .safetensors file for --from timm")
    parser.add_argument("--revision", help="branch, tag or commit of a hub repo --input (default: main)")
    parser.add_argument("--output", required=True, help="folder to write: new or empty, or a model folder to replace")
    parser.add_argument("--overwrite", action="store_true", help="replace the model --output holds, once checked")
    parser.add_argument("--timm_model", "--timm-model", help="timm architecture, e.g. vit_base_patch16_224")
    parser.add_argument("--timm_kwargs", "--timm-kwargs", help="timm architecture arguments, e.g. 'img_size=384'")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES), help="precision of the parity check")
    args = parser.parse_args(argv)
    side = args.source or "to"
    for name, sides in DIRECTION_ONLY.items():
        if getattr(args, name) is not None and side not in sides:
            parser.error(f"--{name} is not read by this direction: leave it out")
    if args.source == "timm" and not args.timm_model:
        parser.error("--from timm needs --timm_model, the architecture name (e.g. vit_base_patch16_224)")
    return args


def is_pretraining(model) -> bool:
    """A masked autoencoder: ours or transformers' ViTMAEForPreTraining."""
    return type(model).__name__.endswith("ForPreTraining")


def compared(model, pixel_values: torch.Tensor, tokens: bool) -> torch.Tensor:
    """What parity compares: logits (a timm model's pooled features without a head), or with `tokens` the final
    tokens (a transformers model without a head, and ours converted from or to one); for a masked autoencoder its
    logits, loss and mask, with the patches a fixed noise picks hidden."""
    with torch.inference_mode():
        if hasattr(model, "forward_features"):  # timm
            return model(pixel_values)
        if is_pretraining(model):
            (patch_h, patch_w), (height, width) = to_pair(model.config.patch_size), pixel_values.shape[2:]
            shape = (pixel_values.shape[0], (height // patch_h) * (width // patch_w))
            noise = torch.rand(shape, generator=torch.Generator().manual_seed(0))
            output = model(pixel_values=pixel_values, noise=noise)
            return torch.cat([output.logits.flatten().float(), output.loss.reshape(1).float(), output.mask.flatten()])
        if tokens:
            return model.base_model(pixel_values=pixel_values).last_hidden_state
        return model(pixel_values=pixel_values).logits


def check_parity(reference, converted, config, dtype: torch.dtype) -> str:
    """Both models in `dtype` on the same random images: the line saying how closely they agree, or a UserError. A
    grayscale model written as an RGB one gets each image as three equal channels."""
    height, width = (config.image_size,) * 2 if isinstance(config.image_size, int) else config.image_size
    pixels = torch.randn(2, config.num_channels, height, width, generator=torch.Generator().manual_seed(0))
    tokens = not config.num_labels and not hasattr(reference, "forward_features")
    expected = compared(reference.to(dtype).eval(), pixels.to(dtype), tokens).float()
    channels = converted.config.num_channels
    given = compared(converted.to(dtype).eval(), pixels.expand(-1, channels, -1, -1).to(dtype), tokens).float()
    if not expected.isfinite().all():
        raise UserError("the source model's outputs are not finite (NaN or infinity): nothing was written")
    tolerance = TOLERANCE[dtype] * max(1.0, expected.abs().max().item())
    difference = (expected - given).abs().max().item()
    verdict = f"max |difference| {difference:.2e}, tolerance {tolerance:.2e} for {str(dtype).removeprefix('torch.')}"
    if dtype != torch.float32:
        verdict += " (bf16 keeps 8 bits of mantissa: 2^-4 of the largest output, not float32's 1e-4)"
    if not difference <= tolerance:
        raise UserError(f"the written folder does not compute what its source computes ({verdict}): report this")
    return f"Parity with the source model: {verdict}."


def read_source(args: argparse.Namespace):
    """(the model to write, its processor, the reference it must compute the same as, the hub commit read)."""
    if args.source == "timm":
        reference = timm_model(args.timm_model, args.input, args.timm_kwargs)
        return *from_timm(reference), reference, None
    if args.revision is not None and is_local(args.input):
        raise UserError(
            f"--revision is for a hub repo --input, and {shown(args.input)} is a local folder: leave it out"
        )
    folder = resolve(args.input, revision=args.revision, argument="--input")
    settings = check_model_folder(folder, argument="--input")
    commit = None if is_local(args.input) else folder.name  # a snapshot's folder is named by its commit
    model_type = settings.get("model_type")
    if model_type not in (("vit_scratch",) if args.target else ("vit", "deit", "vit_mae", *DINOV2_TYPES)):
        fix = {"vit_scratch": "use --to transformers", "vit": "use --from transformers"}.get(
            "vit" if model_type in ("deit", "vit_mae", *DINOV2_TYPES) else model_type,
            "--from transformers reads a ViT, DeiT, Dinov2 or ViTMAE, --to transformers a vit_scratch folder",
        )
        raise UserError(f"--input {shown(args.input)} holds a {shown(model_type)!r} model: {fix}")
    architectures = settings.get("architectures") or []
    pretraining = any(name.endswith("ForPreTraining") for name in architectures)
    if args.target:
        model = load_model(folder, AutoModelForPreTraining if pretraining else None, argument="--input")
        has_processor = (folder / "preprocessor_config.json").is_file()
        processor = ViTScratchImageProcessor.from_pretrained(folder) if has_processor else None
        return *to_transformers(model, processor), model, commit
    headless = bool(architectures) and all(name.endswith("Model") for name in architectures)
    if model_type == "vit_mae" and not pretraining:
        raise UserError(
            f"--input {shown(args.input)} holds a ViTMAE encoder without its decoder ({', '.join(architectures)}): "
            "--from transformers converts a ViTMAEForPreTraining folder"
        )
    auto_class = AutoModelForPreTraining if pretraining else AutoModel if headless else AutoModelForImageClassification
    reference = load_model(folder, auto_class, argument="--input")
    processor_file = folder / "preprocessor_config.json"
    processor_settings = read_json(processor_file) if processor_file.is_file() else {}
    if getattr(reference, "pooler", None) is not None:
        print("Not converted: the pooler (a tanh layer no classification head uses, which vit_scratch has not).")
    if getattr(getattr(reference, "base_model", reference).embeddings, "mask_token", None) is not None:
        print("Not converted: the mask token (read only by masked-image pre-training, which vit_scratch has not).")
    return *from_transformers(reference, processor_settings), reference, commit


def record(args: argparse.Namespace, commit: str | None) -> dict:
    """What the folder's weights were converted from; a local input by its last part, never its path."""
    kept = {
        "input": Path(args.input).name if is_local(args.input) else args.input,
        **({"to": args.target} if args.target else {"from": args.source}),
        "timm_model": args.timm_model,
        "commit": commit,
        "revision": args.revision,
        "vit_scratch_version": importlib.metadata.version("vit-scratch"),
    }
    return {key: value for key, value in kept.items() if value is not None}


@command
def main(argv: list[str]) -> None:
    args = parse_args(argv)
    dtype = DTYPES[args.dtype]
    output = OutputFolder(args.output, "--output", replace=args.overwrite, fix="--overwrite", inputs=(args.input,))
    output.check()  # before any download or conversion
    model, processor, reference, commit = read_source(args)
    on_interrupt(f"Interrupted: {shown(args.output)} is as it was; run the same command again to convert.")
    with output, output.staging() as stage:
        model.save_pretrained(stage)
        if processor is not None:
            processor.save_pretrained(stage)
        if args.target:  # a Dinov2Model has no head: the base model class reads it
            if is_pretraining(model):
                auto_class = AutoModelForPreTraining
            else:
                auto_class = AutoModel if type(model).__name__.endswith("Model") else AutoModelForImageClassification
            written = auto_class.from_pretrained(stage, dtype=dtype, use_safetensors=True)
        else:
            written = type(model).from_pretrained(stage, dtype=dtype, use_safetensors=True)
        ours = reference if args.target else model  # the images are made for ours (a gray one: one channel)
        verdict = check_parity(reference, written, ours.config, dtype)
        kept = {**record(args, commit), "weights_sha256": weights_sha256(stage)}
        (stage / RECORD).write_text(json.dumps(kept, indent=2) + "\n")
        output.publish(stage, remove=MODEL_NAMES)
    on_interrupt(f"Interrupted after the conversion was complete: {shown(args.output)} holds the new folder.")
    kind = f"transformers {type(model).__name__}" if args.target else "vit_scratch"
    print(f"Wrote a {kind} folder to {shown(args.output)} ({model.num_parameters():,} parameters)")
    print(verdict)
