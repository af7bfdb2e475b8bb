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
Source weights with NaN or infinity are refused before converting. Once written, and before it replaces anything,
the folder is loaded back and its logits (final tokens for a model without a head) compared with the source
model's on random images, in `--dtype` (float32, or bfloat16 with the looser tolerance the check prints): a folder
that fails the check never reaches --output.
"""

import argparse
import json
import sys
from pathlib import Path

from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForImageClassification

from modeling_vit_scratch import (
    ViTScratchConfig,
    ViTScratchForImageClassification,
    ViTScratchForImageClassificationWithTeacher,
    ViTScratchImageProcessor,
)
from modeling_vit_scratch.common.commands import entry_point, when_interrupted
from modeling_vit_scratch.common.dtypes import parse_dtype
from modeling_vit_scratch.common.folders import check_replaceable
from modeling_vit_scratch.common.provenance import input_history, public_name
from modeling_vit_scratch.common.secrets import (
    RedactingArgumentParser,
    error_line,
    known_secrets,
    refuse_secret,
    refuse_token_in_path,
)
from modeling_vit_scratch.common.sources import SENT_FIX, hub_misanswered, looks_like_local_path
from modeling_vit_scratch.common.user_paths import user_path
from modeling_vit_scratch.common.weights import check_safetensors, weight_files
from modeling_vit_scratch.conversion.convert import (
    check_convertible,
    check_finite,
    from_timm,
    from_transformers,
    save_converted,
    to_transformers,
)
from modeling_vit_scratch.conversion.inputs import check_input
from modeling_vit_scratch.conversion.parity import check_parity
from modeling_vit_scratch.conversion.timm_source import (
    check_architecture,
    check_not_pickle,
    check_weight_shapes,
    timm_kwargs,
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = RedactingArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    direction = parser.add_mutually_exclusive_group(required=True)
    direction.add_argument("--from", dest="source", choices=["transformers", "timm"], help="convert into vit_scratch")
    direction.add_argument("--to", dest="target", choices=["transformers"], help="convert a vit_scratch folder out")
    parser.add_argument(
        "--input", required=True, type=user_path, help="folder or hub repo id; a safetensors file for --from timm"
    )
    parser.add_argument("--revision", help="branch, tag or commit of a hub repo --input (default: main)")
    parser.add_argument(
        "--output",
        required=True,
        type=user_path,
        help="folder to write: new or empty, or a model folder with --overwrite; not --input",
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
    args = parser.parse_args(argv)
    refuse_unused_arguments(args, parser)
    return args


def refuse_token_arguments(args: argparse.Namespace) -> None:
    """A ValueError naming the argument (never its value) when any argument's text holds or looks like a Hub token:
    a path (--input, --output) would be printed and named in the folder's records, the rest is handed to timm or
    the Hub (--timm_model, --timm_kwargs, --revision) or written into the records. Every argument, checked before
    any work, so one added later is covered too."""
    secrets = known_secrets()
    for dest, value in vars(args).items():
        if not isinstance(value, str):
            continue
        option = f"--{dest}"  # each argument's first spelling
        if dest == "output" or (dest == "input" and (args.source == "timm" or is_local(value))):
            refuse_token_in_path(option, value, read=dest == "input")
        else:  # a hub repo id --input is sent, as the rest is sent or written
            refuse_secret(f"The {'repo id' if dest == 'input' else 'value'} of {option}", value, secrets, SENT_FIX)


def is_local(value: str) -> bool:
    """Whether --input names a local path (else a hub repo id, which is sent)."""
    return Path(value).exists() or looks_like_local_path(value)


# the arguments that only some directions read (a dest -> its option, and the directions that read it); every other
# argument is read by every direction
DIRECTION_ONLY = {
    "timm_model": ("--timm_model", ("--from timm",)),
    "timm_kwargs": ("--timm_kwargs", ("--from timm",)),
    "revision": ("--revision", ("--from transformers", "--to transformers")),
}


def refuse_unused_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """One line (argparse's, as for any other misuse) for an argument the chosen direction does not read: it would
    be ignored without a word. Names the argument and the direction that takes it."""
    direction = f"--from {args.source}" if args.source else f"--to {args.target}"
    for dest, (option, directions) in DIRECTION_ONLY.items():
        if getattr(args, dest) is not None and direction not in directions:
            parser.error(
                f"{option} is read by {' and '.join(directions)} only, and this is {direction}, so it would be "
                f"ignored: leave out {option}"
            )


def convert(args: argparse.Namespace) -> None:
    """Every check of the arguments first, then the source read and checked (finite weights), then the folder
    written beside --output and compared with its source; it replaces --output only once that check has passed."""
    refuse_token_arguments(args)  # first: no later line or check sees the token
    dtype = parse_dtype(args.dtype)  # a typo is refused before any work
    if args.source == "timm":
        check_timm_arguments(args)
    else:
        direction = "to transformers" if args.target == "transformers" else "from transformers"
        args.input_commit = check_input(args.input, direction, args.revision)  # a hub repo's: every read is of it
    check_replaceable(args.output, args.overwrite, {"--input": args.input})  # before any download or conversion
    try:
        model, processor, reference = read_source(args)
    except OSError as error:
        misanswered = hub_misanswered(f"Cannot read --input {args.input!r}", error)  # an answer no Hub gives
        if misanswered:
            raise ValueError(misanswered) from None
        if error.errno is None:  # one of ours, or a library's, that already says what is wrong
            raise
        raise ValueError(unreadable_source(args.input, error)) from None
    verdict = []

    def check(staged: Path) -> None:  # the written folder, before it replaces anything
        if args.target == "transformers":
            converted = AutoModelForImageClassification.from_pretrained(
                staged, dtype=dtype, trust_remote_code=False, use_safetensors=True
            )
        else:  # one head, or DeiT's two
            converted = type(model).from_pretrained(staged, dtype=dtype, use_safetensors=True)
        verdict.append(check_parity(reference, converted, model.config, dtype))

    source = conversion_source(args)
    if args.target == "transformers":
        written = to_transformers(model, args.output, processor, overwrite=args.overwrite, check=check, source=source)
        when_interrupted(f"Interrupted after the conversion was complete: {args.output} holds the new folder.")
        architecture = json.loads((written / "config.json").read_text())["architectures"][0]
        print(f"Wrote a transformers {architecture} folder to {args.output}")
    else:
        save_converted(model, processor, args.output, overwrite=args.overwrite, check=check, source=source)
        when_interrupted(f"Interrupted after the conversion was complete: {args.output} holds the new folder.")
        print(f"Wrote a vit_scratch folder to {args.output} ({model.num_parameters():,} parameters)")
    print(verdict[0])


def conversion_source(args: argparse.Namespace) -> dict:
    """What the conversion record of the written folder says it was converted from: the input by its public name
    (a local folder or file by its last part), the direction, and what the input's own records vouch for
    (`input_history`, a local folder's or a hub repo's: trained by vit-scratch, converted before), so a round trip's card still says it was trained.
    A hub repo is named with the full commit it was read at (`commit`) beside the revision given, if any."""
    source = {"input": public_name(args.input)}
    source.update({"to": "transformers"} if args.target == "transformers" else {"from": args.source})
    if args.source == "timm":
        source["timm_model"] = args.timm_model
    commit = getattr(args, "input_commit", None)
    if commit:  # the full commit of the hub repo that was read: a branch, a tag or a `refs/pr/N` moves
        source["commit"] = commit
    if args.revision is not None:  # the version as the user named it, kept beside its commit
        source["revision"] = args.revision
    if args.source != "timm":  # a timm file carries no records
        history = input_history(args.input, commit or args.revision)
        if history:
            source["history"] = history
    return source


def check_timm_arguments(args: argparse.Namespace) -> None:
    """`--from timm`'s own needs, before any work: an architecture name of timm's registry, a weights file that is no pickle and whose
    header holds, timm importable, and `--timm_kwargs` that build an architecture only."""
    if not args.timm_model:
        raise ValueError("--from timm needs --timm_model NAME (e.g. vit_base_patch16_224) to know the architecture.")
    if not Path(args.input).is_file():
        raise FileNotFoundError(f"--input {args.input!r} is not a file: give the timm model's weights as safetensors.")
    check_not_pickle(args.input)  # never unpickled
    check_safetensors(args.input)  # before timm or safetensors reads it
    timm_kwargs(args.timm_kwargs)  # before timm builds anything
    try:
        import timm  # noqa: F401
    except ImportError as error:
        raise ValueError(
            f"--from timm needs the timm package, which cannot be imported ({error}): install it with "
            "pip install 'vit-scratch[timm]'."
        ) from None
    check_architecture(args.timm_model)  # a name of timm's registry: no Hub repo, no local folder


def read_source(args: argparse.Namespace):
    """The model to write, its processor, and the reference its written folder must compute the same as. Weights
    that are not finite are refused here, before any conversion. A hub repo is read at the one commit its revision
    resolved to (`check_input`)."""
    revision = getattr(args, "input_commit", None) or args.revision
    if args.target == "transformers":
        check_convertible(args.input, revision)
        if Path(args.input).is_dir():
            for path in weight_files(args.input):
                check_finite(load_file(path), path)
        model = saved_class(args.input, revision).from_pretrained(
            args.input, trust_remote_code=False, use_safetensors=True, revision=revision
        )
        check_finite(model.state_dict(), args.input)  # a hub repo's, downloaded by from_pretrained
        return model, ViTScratchImageProcessor.from_pretrained(args.input, revision=revision), model
    if args.source == "timm":
        import timm

        kwargs = {"num_classes": _num_classes(args.input), **timm_kwargs(args.timm_kwargs)}
        reference = timm.create_model(args.timm_model, pretrained=False, **kwargs)  # the architecture, no weights
        check_weight_shapes(reference, args.input, args.timm_model)
        weights = check_finite(load_file(args.input), args.input)
        model, processor = from_timm(reference, weights)
        reference.load_state_dict(weights)
        return model, processor, reference
    model, processor = from_transformers(args.input, revision)  # its weights checked as they are read
    reference_class = AutoModelForImageClassification if model.config.num_labels else AutoModel
    reference = reference_class.from_pretrained(
        args.input, trust_remote_code=False, use_safetensors=True, revision=revision
    )
    return model, processor, reference


def unreadable_source(source: str, error: OSError) -> str:
    """The one line for a source that could not be read: a local folder, or a hub repo's copy in the cache."""
    what = f"Reading --input {source!r} failed ({error.strerror or error}: {error.filename})"
    if Path(source).exists() or looks_like_local_path(source):
        return f"{what}: check that the folder is complete and readable, or save it again."
    from huggingface_hub import constants

    cached = Path(constants.HF_HUB_CACHE) / f"models--{source.replace('/', '--')}"
    return (
        f"{what}: its copy in the Hugging Face cache is incomplete; remove {cached} and run again to download it "
        "afresh."
    )


def saved_class(folder: str, revision: str | None = None):
    """Our class a saved folder (or a repo at `revision`) names in `architectures`: DeiT's two-headed one, or the
    one-headed classifier."""
    config = ViTScratchConfig.from_pretrained(folder, trust_remote_code=False, revision=revision)
    architectures = config.architectures or []
    two_heads = ViTScratchForImageClassificationWithTeacher.__name__ in architectures
    return ViTScratchForImageClassificationWithTeacher if two_heads else ViTScratchForImageClassification


def _num_classes(path: str) -> int:
    """The head size stored in a timm state dict (0 when it has no head)."""
    from safetensors import safe_open

    with safe_open(path, framework="pt") as weights:
        names = weights.keys()  # a safe_open handle is no dict: `in` needs its list of keys
        return weights.get_slice("head.weight").get_shape()[0] if "head.weight" in names else 0


@entry_point()
def main(argv: list[str]) -> None:
    args = parse_args(argv)
    when_interrupted(  # the folder is written beside --output and moved in only when complete and checked
        f"Interrupted: nothing was moved into place, {args.output} is as it was (the partial folder beside it was "
        "removed); run the same command again to convert."
    )
    try:
        convert(args)
    except (ValueError, KeyError, OSError) as error:  # OSError: FileNotFoundError, FileExistsError, a corrupt file
        sys.exit(error_line(error))
