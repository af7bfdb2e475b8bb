"""Convert ViT checkpoints to and from vit_scratch (`vit-scratch convert`, or `python scripts/convert_checkpoint.py`).

    vit-scratch convert --from transformers --input google/vit-base-patch16-224 --output DIR
    vit-scratch convert --from timm --timm_model vit_base_patch16_224 \
        --input weights.safetensors --output DIR
    vit-scratch convert --from timm --timm_model vit_base_r50_s16_224 \
        --input weights.safetensors --output DIR      # a hybrid: its ResNet-V2 stem converts too
    vit-scratch convert --from transformers --input facebook/deit-tiny-distilled-patch16-224 \
        --output DIR                                   # DeiT: distillation token and both heads
    vit-scratch convert --to transformers --input DIR --output DIR
                                                       # a distilled model (DeiT) is written as transformers' DeiT

The output folder is written beside its final place and moved in only when complete; an existing non-empty output
folder is refused unless --overwrite, which replaces it only once the new folder is complete.
timm is needed only for `--from timm` (to build the architecture, without weights, and read its hyper-parameters).
Once written, the folder is loaded back and its logits (final tokens for a model without a head) compared with the
source model's on random images, in `--dtype` (float32, or bfloat16 with the looser tolerance the check prints).
"""

import argparse
import json
import sys
from pathlib import Path

from transformers import AutoModel, AutoModelForImageClassification

from modeling_vit_scratch import (
    ViTScratchConfig,
    ViTScratchForImageClassification,
    ViTScratchForImageClassificationWithTeacher,
    ViTScratchImageProcessor,
)
from modeling_vit_scratch.common.dtypes import parse_dtype
from modeling_vit_scratch.common.folders import check_replaceable
from modeling_vit_scratch.common.overrides import parse_overrides
from modeling_vit_scratch.common.secrets import RedactingArgumentParser, error_line
from modeling_vit_scratch.common.weights import check_safetensors
from modeling_vit_scratch.conversion.convert import (
    check_convertible,
    from_timm,
    from_transformers,
    save_converted,
    to_transformers,
)
from modeling_vit_scratch.conversion.parity import check_parity


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = RedactingArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    direction = parser.add_mutually_exclusive_group(required=True)
    direction.add_argument("--from", dest="source", choices=["transformers", "timm"], help="convert into vit_scratch")
    direction.add_argument("--to", dest="target", choices=["transformers"], help="convert a vit_scratch folder out")
    parser.add_argument("--input", required=True, help="folder or hub repo id; a safetensors file for --from timm")
    parser.add_argument(
        "--output", required=True, help="folder to write: new or empty, or a model folder with --overwrite; not --input"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing model folder once the new one is complete"
    )
    parser.add_argument(
        "--timm_model", "--timm-model", help="timm architecture name, e.g. vit_base_patch16_224 (--from timm)"
    )
    parser.add_argument(
        "--timm_kwargs", "--timm-kwargs", help="extra timm.create_model arguments, e.g. 'global_pool=avg,img_size=384'"
    )
    parser.add_argument("--dtype", default="float32", help="precision of the parity check: float32 or bfloat16")
    return parser.parse_args(argv)


def convert(args: argparse.Namespace) -> None:
    dtype = parse_dtype(args.dtype)  # a typo is refused before any work
    check_replaceable(args.output, args.overwrite, {"--input": args.input})  # before any download or conversion
    if args.target == "transformers":
        check_convertible(args.input)
        model = saved_class(args.input).from_pretrained(args.input, trust_remote_code=False, use_safetensors=True)
        processor = ViTScratchImageProcessor.from_pretrained(args.input)
        written = to_transformers(model, args.output, processor, overwrite=args.overwrite)
        architecture = json.loads((written / "config.json").read_text())["architectures"][0]
        print(f"Wrote a transformers {architecture} folder to {args.output}")
        converted = AutoModelForImageClassification.from_pretrained(
            args.output, dtype=dtype, trust_remote_code=False, use_safetensors=True
        )
        print(check_parity(model, converted, model.config, dtype))
        return
    if args.source == "timm":
        if not args.timm_model:
            raise ValueError(
                "--from timm needs --timm_model NAME (e.g. vit_base_patch16_224) to know the architecture."
            )
        if not Path(args.input).is_file():
            raise FileNotFoundError(
                f"--input {args.input!r} is not a file: give the timm model's weights as safetensors."
            )
        check_safetensors(args.input)  # before timm or safetensors reads it
        import timm
        from safetensors.torch import load_file

        kwargs = {"num_classes": _num_classes(args.input), **parse_overrides(args.timm_kwargs)}
        reference = timm.create_model(args.timm_model, pretrained=False, **kwargs)
        model, processor = from_timm(reference, load_file(args.input))
        reference.load_state_dict(load_file(args.input))
    else:
        model, processor = from_transformers(args.input)
        reference_class = AutoModelForImageClassification if model.config.num_labels else AutoModel
        reference = reference_class.from_pretrained(args.input, trust_remote_code=False, use_safetensors=True)
    save_converted(model, processor, args.output, overwrite=args.overwrite)
    print(f"Wrote a vit_scratch folder to {args.output} ({model.num_parameters():,} parameters)")
    converted = type(model).from_pretrained(args.output, dtype=dtype, use_safetensors=True)  # one head, or DeiT's two
    print(check_parity(reference, converted, model.config, dtype))


def saved_class(folder: str):
    """Our class a saved folder names in `architectures`: DeiT's two-headed one, or the one-headed classifier."""
    architectures = ViTScratchConfig.from_pretrained(folder, trust_remote_code=False).architectures or []
    two_heads = ViTScratchForImageClassificationWithTeacher.__name__ in architectures
    return ViTScratchForImageClassificationWithTeacher if two_heads else ViTScratchForImageClassification


def _num_classes(path: str) -> int:
    """The head size stored in a timm state dict (0 when it has no head)."""
    from safetensors import safe_open

    with safe_open(path, framework="pt") as weights:
        names = weights.keys()  # a safe_open handle is no dict: `in` needs its list of keys
        return weights.get_slice("head.weight").get_shape()[0] if "head.weight" in names else 0


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    try:
        convert(args)
    except (ValueError, KeyError, OSError) as error:  # OSError: FileNotFoundError, FileExistsError, a corrupt file
        sys.exit(error_line(error))
