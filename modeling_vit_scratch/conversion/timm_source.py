"""What `convert --from timm` hands timm, checked before timm builds anything: the architecture name
(`--timm_model`), the weights file and `--timm_kwargs`.

`--timm_model` names an architecture of timm's registry, optionally with a pretrained tag timm knows (the tag may
change the default config): never a model source (`hf-hub:` would reach the Hub, `local-dir:` would read a config
from disk and its path would be written into the folder's records), checked with timm's own registry.

timm's `create_model` reads files and downloads when asked (`pretrained`, `checkpoint_path`, `pretrained_cfg*`, a
cache folder), and `checkpoint_path` unpickles its file. The conversion builds timm's architecture only, without
weights, and reads the weights itself from safetensors: so `--timm_kwargs` takes architecture arguments of timm's
`VisionTransformer` only, each refused key is one line naming it, and a pickle given as `--input` is never opened
past its first bytes. Weights saved for another size (image size, class count) are one line naming the
`--timm_kwargs` that builds their size, read from the file's header before any tensor is loaded.
"""

import difflib
import inspect
import math
from pathlib import Path

from modeling_vit_scratch.common.commands import printed_python
from modeling_vit_scratch.common.overrides import parse_overrides
from modeling_vit_scratch.common.weights import PICKLE_SUFFIXES, weights_format

FLAG = "--timm_kwargs"
# create_model's and timm's builder's own arguments: each loads weights or a config, reads a file or downloads, or
# changes what the conversion builds (the weights are given by --input, the head size read from them)
REFUSED = {
    "pretrained": "downloads or reads pretrained weights",
    "checkpoint_path": "makes timm unpickle that file",
    "cache_dir": "is where timm downloads weights",
    "pretrained_cfg": "points timm at weights to download or read",
    "pretrained_cfg_overlay": "points timm at weights to download or read",
    "pretrained_strict": "is an argument of timm's weight loading",
    "pretrained_filter_fn": "is an argument of timm's weight loading",
    "pretrained_model_args": "is an argument of timm's weight loading",
    "features_only": "builds a feature extractor, not the classifier converted",
    "feature_cfg": "builds a feature extractor, not the classifier converted",
    "model_cfg": "replaces the architecture that --timm_model names",
    "kwargs_filter": "is an argument of timm's builder",
    "scriptable": "is an export setting, not part of the architecture",
    "exportable": "is an export setting, not part of the architecture",
    "no_jit": "is an export setting, not part of the architecture",
}
# VisionTransformer arguments that take a class or a device, which key=value text cannot give
NOT_TEXT = {"self", "embed_layer", "embed_norm_layer", "norm_layer", "act_layer", "block_fn", "mlp_layer"}
NOT_TEXT |= {"attn_layer", "device", "dtype"}


def timm_kwargs(text: str | None) -> dict:
    """`--timm_kwargs` as keyword arguments for timm's `create_model`: architecture arguments only. A key that would
    load weights or files is a ValueError naming it, decided without timm; with timm importable, so is a key its
    `VisionTransformer` does not take."""
    kwargs = parse_overrides(text, FLAG)
    for key in kwargs:
        if key in REFUSED or key.startswith("pretrained"):
            why = REFUSED.get(key, "is an argument of timm's weight loading")
            raise ValueError(
                f"{FLAG} {key}=... is refused: it {why}; the conversion builds timm's architecture without weights "
                "and reads the weights from --input (safetensors): remove it and give the weights as --input."
            )
    try:
        from timm.models.vision_transformer import VisionTransformer
    except ImportError:
        return kwargs  # the command says that timm is missing
    known = sorted(set(inspect.signature(VisionTransformer.__init__).parameters) - NOT_TEXT)
    for key in kwargs:
        if key not in known:
            raise ValueError(
                f"{FLAG} {key!r} is not an argument of timm's VisionTransformer: give architecture arguments only, "
                f"e.g. img_size=384 (known: {', '.join(known)})."
            )
    return kwargs


def check_architecture(name: str) -> None:
    """Refuse, with timm importable and before timm builds anything, a `--timm_model` that is no architecture of
    timm's registry: a model source or path (`hf-hub:owner/name`, `local-dir:DIR`), an unknown name (the closest
    names timm knows), or a pretrained tag timm does not know for it (the tags it knows). Each is a ValueError naming
    the value and the fix: the architecture name, with the weights in --input."""
    import timm
    from timm.models import split_model_name_tag

    fix = "give timm's architecture name (e.g. vit_tiny_patch16_224) and the weights as --input (safetensors)"
    if any(mark in name for mark in ":/\\"):  # timm reads `source:id` and a path as a model source
        raise ValueError(
            f"--timm_model {name!r} is a model source or a path, which timm would download or read (a Hub repo, a "
            f"local folder's config.json), not an architecture name: {fix}."
        )
    architecture, tag = split_model_name_tag(name)
    if not timm.is_model(architecture):
        close = difflib.get_close_matches(architecture, timm.list_models(), n=3)
        hint = f" (closest: {', '.join(close)})" if close else " (`timm.list_models()` lists them)"
        raise ValueError(f"--timm_model {name!r} is not an architecture timm knows{hint}: {fix}.")
    known = timm.list_models(architecture, include_tags=True)  # the architecture with each tag it has
    if tag and name not in known:
        tags = [model.partition(".")[2] for model in known if "." in model]
        close = difflib.get_close_matches(tag, tags, n=3) or tags
        hint = f"its tags: {', '.join(close)}" if close else "it has none"
        raise ValueError(
            f"--timm_model {name!r}: timm knows no pretrained tag {tag!r} for {architecture} ({hint}): give "
            f"{architecture} or one of its tags, with the weights as --input."
        )


def check_not_pickle(path: str | Path) -> None:
    """A weights file shaped as a pickle (torch.save's zip, a bare pickle; `weights_format`), or named as one and
    not safetensors, is a ValueError saying it was not read, with the command that converts it to safetensors (into
    another file), for whoever trusts it. Only its first bytes are read."""
    path = Path(path)
    found = weights_format(path)
    if found != "pickle" and (found == "safetensors" or path.suffix not in PICKLE_SUFFIXES):
        return
    target = path.with_suffix(".safetensors")
    if target == path:  # a pickle named .safetensors: never convert a file onto itself
        target = path.with_name(f"{path.stem}-converted.safetensors")
    command = (
        f'{printed_python()} -c "import timm.models as m, safetensors.torch as s; '
        f"s.save_file(m.load_state_dict('{path}'), '{target}')\""
    )
    raise ValueError(
        f"--input {str(path)!r} is a pickle, which vit-scratch never reads (unpickling a file can run code): if you "
        f"trust that file, convert it to safetensors with {command} (this unpickles it: do it only for a file you "
        f"trust), then pass --input {target}."
    )


def check_weight_shapes(model, path: str | Path, timm_model: str) -> None:
    """Compare the shapes in the weights' header with the model timm built (no tensor loaded): weights of another
    size are a ValueError naming the `--timm_kwargs` that builds theirs (img_size from the position embeddings), and
    weights without a classifier head (`head.weight`) are refused before anything is written: the package's models
    classify, and one of no labels would fail in the pipeline."""
    from safetensors import safe_open

    built = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    with safe_open(path, framework="pt") as weights:
        saved = {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}  # noqa: SIM118
    if "head.weight" not in saved:
        raise ValueError(
            f"--input {str(path)!r} holds no classifier head (no head.weight; a feature extractor's weights): "
            "vit-scratch models classify, and a model without a head would convert with no labels and fail in the "
            f"pipeline: give {timm_model}'s weights with their head (a classifier, num_classes > 0)."
        )
    differ = sorted(name for name in saved.keys() & built.keys() if saved[name] != built[name])
    if not differ:
        return
    image = _image_size(model, saved["pos_embed"][1]) if len(saved.get("pos_embed", ())) == 3 else None
    kwargs = f"'img_size={image}' (and any other argument" if image else "the arguments"
    name = differ[0]
    raise ValueError(
        f"--input {str(path)!r} holds weights of another size than {timm_model} as built ({name} is "
        f"{list(saved[name])} in the file, {list(built[name])} in the model; {len(differ)} tensors differ): pass "
        f"{FLAG} {kwargs} the weights were made with{')' if image else ''}."
    )


def _image_size(model, tokens: int) -> int | None:
    """The square image size whose grid of patches, with the model's prefix tokens, makes `tokens` positions."""
    prefix = 0 if getattr(model, "no_embed_class", False) else getattr(model, "num_prefix_tokens", 1)
    side = math.isqrt(max(tokens - prefix, 0))
    grid, image = model.patch_embed.grid_size, model.patch_embed.img_size
    if side * side != tokens - prefix or not side:
        return None
    return side * image[0] // grid[0]
