"""The timm model `convert --from timm` reads: timm's architecture (`--timm_model`, `--timm_kwargs`) built without
weights, then the weights of `--input`, a safetensors file, loaded into it.

timm reads files and downloads when asked to (`pretrained`, `checkpoint_path`, which unpickles, a `hf-hub:` or
`local-dir:` model name): so `--timm_model` must be an architecture of timm's registry, and `--timm_kwargs` takes the
arguments of timm's `VisionTransformer` that text can give (sizes, pooling, flags), nothing else. timm is imported
only here, and only for `--from timm`.
"""

import ast
import inspect
import json
import re
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import load_file

from ..errors import UserError
from ..secrets import shown
from ..sources import PICKLE_SUFFIXES

NOT_TEXT = {"self", "embed_layer", "embed_norm_layer", "norm_layer", "act_layer", "block_fn", "mlp_layer"}
NOT_TEXT |= {"attn_layer", "device", "dtype", "num_classes"}  # classes and devices; the head size is the file's
LIST_NAMES = "python -c \"import timm; print(timm.list_models('vit_*'))\""


def import_timm():
    try:
        import timm
    except ImportError:
        raise UserError("--from timm needs timm: pip install 'vit-scratch[timm]'") from None
    return timm


def timm_kwargs(text: str | None) -> dict:
    """`--timm_kwargs` ('global_pool=avg,img_size=384,img_size=[384,384]') as keyword arguments of timm's
    `VisionTransformer`; a value is read as JSON or a Python literal, else kept as text."""
    kwargs = {}
    for item in re.split(r",(?![^\[\(]*[\]\)])", text or ""):
        if not item.strip():
            continue
        key, equals, value = (part.strip() for part in item.partition("="))
        if not equals or not key.isidentifier():
            raise UserError(f"--timm_kwargs {shown(item)!r} is not key=value: give e.g. global_pool=avg,img_size=384")
        for read in (json.loads, ast.literal_eval):
            try:
                value = read(value)
                break
            except (ValueError, SyntaxError):
                continue
        kwargs[key] = value
    from timm.models.vision_transformer import VisionTransformer

    known = sorted(set(inspect.signature(VisionTransformer.__init__).parameters) - NOT_TEXT)
    if unknown := sorted(set(kwargs) - set(known)):
        raise UserError(
            f"--timm_kwargs {shown(unknown[0])} is not an architecture argument of timm's VisionTransformer (the "
            f"weights come from --input): give one of {', '.join(known)}"
        )
    return kwargs


def timm_model(name: str, path: str | Path, kwargs_text: str | None = None):
    """timm's `name` built with `--timm_kwargs` and the head size of the weights, holding the weights of `path`."""
    path = Path(path)
    if path.suffix in PICKLE_SUFFIXES or path.suffix != ".safetensors" or not path.is_file():
        raise UserError(
            f"--input {shown(path)} is not a .safetensors file: vit-scratch reads safetensors only (a pickle can run "
            "code when read); save the weights with safetensors.torch.save_file(state_dict, 'weights.safetensors')"
        )
    timm, kwargs = import_timm(), timm_kwargs(kwargs_text)
    if ":" in name or not timm.is_model(name):
        raise UserError(f"--timm_model {shown(name)} is no architecture timm knows: list them with {LIST_NAMES}")
    with safe_open(path, framework="pt") as weights:
        head = weights.get_slice("head.weight").get_shape()[0] if "head.weight" in weights.keys() else 0  # noqa: SIM118
    try:
        model = timm.create_model(name, pretrained=False, num_classes=head, **kwargs)
    except (RuntimeError, TypeError, ValueError, AssertionError) as error:
        raise UserError(f"timm cannot build --timm_model {shown(name)} with these --timm_kwargs: {error}") from None
    try:
        model.load_state_dict(load_file(path))
    except RuntimeError as error:
        lines = [line.strip() for line in str(error).splitlines()[1:] if line.strip()] or [str(error)]
        first = next((line for line in lines if line.startswith("size mismatch")), lines[0])[:300]
        raise UserError(
            f"--input {shown(path)} does not fit {shown(name)} as built ({shown(first)}): pass the --timm_kwargs the "
            "weights were made with, e.g. img_size=384"
        ) from None
    return model.eval()
