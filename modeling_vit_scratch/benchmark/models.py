"""What the benchmark measures: the configurations, how each implementation builds them, the modes and precisions
of a step, and the matrix-multiply FLOPs of a forward pass.

Every implementation is built with the same hyper-parameters and random weights, as a user gets it by default.
`digits` is the model `make train` trains (configs/models/model_digits_convstem.json, its fields written out here
because an installed package has no configs/; a test keeps the two equal): the transformer reads a small
convolutional stem's feature map (Xiao et al.) in 1x1 patches. transformers' ViT has no stem, so `digits` is
measured against timm alone, whose model is built from timm's own `ConvStem` and `HybridEmbed` to the same
architecture (a test checks their parameter counts agree). `digits-plain` (configs/models/model_digits.json) is the
same transformer on the same images with the plain patch projection instead of the stem: the small config that all
implementations build, so that our model is judged against transformers' ViT at that size too. Hybrids with a
ResNet stem name their timm model (`timm_model`), which transformers cannot build either.
"""

import importlib
import importlib.util
import tempfile
from functools import partial

import torch

# Same hyper-parameters for every implementation. Inference batch sizes are lists (base224: latency and batch 8).
# ViT-Ti/16 is tiny224, ViT-B/16 base224. A config's "stem" holds its stem's fields (and `timm_model`, the timm
# model of that hybrid, where timm names one).
CONFIGS = {
    "digits": dict(  # configs/models/model_digits_convstem.json; batches as configs/train_digits.json evaluates/trains
        image_size=16,
        patch_size=1,
        num_channels=1,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        drop_path_rate=0.0,
        qkv_bias=True,
        layer_norm_eps=1e-6,
        pooling="cls",
        position_embedding="learned",
        patch_embedding="conv",
        stem=dict(stem="conv", stem_channels=[32, 64]),
        batch=[256],
        train_batch=64,
    ),
    "digits-plain": dict(  # configs/models/model_digits.json: the same transformer, 4x4 patches, no stem
        image_size=16,
        patch_size=4,
        num_channels=1,
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        drop_path_rate=0.0,
        qkv_bias=True,
        layer_norm_eps=1e-6,
        pooling="cls",
        position_embedding="learned",
        patch_embedding="conv",
        batch=[256],
        train_batch=256,
    ),
    "mnist28": dict(
        image_size=28,
        patch_size=4,
        num_channels=1,
        hidden_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        intermediate_size=128,
        batch=[128],
        train_batch=128,
    ),
    "tiny224": dict(
        image_size=224,
        patch_size=16,
        num_channels=3,
        hidden_size=192,
        num_hidden_layers=12,
        num_attention_heads=3,
        intermediate_size=768,
        batch=[8],
        train_batch=16,
    ),
    "base224": dict(
        image_size=224,
        patch_size=16,
        num_channels=3,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        batch=[1, 8],
        train_batch=16,  # the largest training processes here (docs/performance.md): --modes inference where short
    ),
    # The paper's R26+S/32 hybrid (timm's vit_small_r26_s32_224): a ResNet-V2 stem, then 1x1 patches of its 7x7
    # map. transformers 5 has no ViT hybrid: measured against timm only.
    "r26s32_224": dict(
        image_size=224,
        patch_size=1,
        num_channels=3,
        hidden_size=384,
        num_hidden_layers=12,
        num_attention_heads=6,
        intermediate_size=1536,
        stem=dict(stem="resnetv2", stem_depths=[2, 2, 2, 2], timm_model="vit_small_r26_s32_224"),
        batch=[8],
        train_batch=8,
    ),
}
# The fields every implementation is given; the others of a config are ViTScratchConfig fields at which all
# implementations agree by default.
DIMENSIONS = (
    "image_size",
    "patch_size",
    "num_channels",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
)
NOT_ARCHITECTURE = ("batch", "train_batch", "stem")  # how a config is measured, or its stem (flattened apart)
IMPLEMENTATIONS = ("vit_scratch", "transformers-sdpa", "transformers-eager", "timm")
COMPILED = "-compiled"  # an implementation's name + this: the same model under torch.compile (on request)
ALL_IMPLEMENTATIONS = (
    *IMPLEMENTATIONS,
    "vit_scratch-eager",  # ours with the explicit attention, on request
    *(name + COMPILED for name in (*IMPLEMENTATIONS, "vit_scratch-eager")),
)
OURS = "vit_scratch"
BASELINE = "transformers-sdpa"  # transformers' ViT as a user gets it by default
PEERS = ("transformers-eager", "timm")  # the fastest of these, round by round, is the other bar
# an implementation that needs a package the package does not depend on -> that package, and how to install it
PACKAGES = {"timm": ("timm", "pip install 'vit-scratch[timm]'")}
MODES = ("inference", "train")
# How a step computes: in float32; under bf16 autocast (float32 weights, matrix products in bf16); with the weights
# loaded in bf16 (inference only: training needs float32 master weights); with int8 weights and dynamic int8
# activations in the linear layers (torchao, inference only, on request: --int8)
PRECISIONS = ("float32", "bf16-autocast", "bf16-weights")
INT8 = "int8"
DTYPE_OF = {"float32": torch.float32, "bf16-autocast": torch.bfloat16, "bf16-weights": torch.bfloat16, INT8: torch.int8}
NUM_LABELS = 10


def importable(implementation: str) -> bool:
    """Whether the package an implementation needs beyond the package's own dependencies (timm's) can be imported."""
    package, _ = PACKAGES.get(implementation.removesuffix(COMPILED), (None, None))
    return package is None or importlib.util.find_spec(package) is not None


def default_implementations() -> tuple[list[str], list[str]]:
    """The implementations measured when none are named: every one of IMPLEMENTATIONS whose package is installed, and
    the ones left out (a user without timm still gets the benchmark of the others, told what is missing)."""
    kept = [name for name in IMPLEMENTATIONS if importable(name)]
    return kept, [name for name in IMPLEMENTATIONS if name not in kept]


def missing_install(implementations: list[str]) -> str:
    """The pip commands that bring the packages of `implementations`."""
    return ", ".join(dict.fromkeys(PACKAGES[name.removesuffix(COMPILED)][1] for name in implementations))


def check_packages(implementations: list[str]) -> None:
    """A ValueError naming the first implementation whose package cannot be imported, and the pip command that
    brings it: checked before anything is measured (each is imported only in the worker that builds it)."""
    for implementation in implementations:
        base = implementation.removesuffix(COMPILED)
        package, install = PACKAGES.get(base, (None, None))
        if package is None:
            continue
        try:
            importlib.import_module(package)
        except ImportError as error:
            others = " ".join(name for name in implementations if name.removesuffix(COMPILED) != base)
            raise ValueError(
                f"--implementations {implementation} needs the {package} package, which cannot be imported ({error}): "
                f"install it with {install}, or measure without it: --implementations {others}."
            ) from None


def architecture(config: dict) -> dict:
    """The ViTScratchConfig fields of a benchmark config: its dimensions, any other architecture field it sets, and
    its stem's fields (not the timm model's name)."""
    fields = {key: value for key, value in config.items() if key not in NOT_ARCHITECTURE}
    return {**fields, **build_stem_fields(config)}


def build_stem_fields(config: dict) -> dict:
    return {key: value for key, value in config.get("stem", {}).items() if key != "timm_model"}


def build(implementation: str, config: dict, dtype: torch.dtype | None = None):
    """The model, built with random weights and the same hyper-parameters, as a user gets it by default; in `dtype`
    as `from_pretrained(dtype=...)` loads it (None: float32). A "-compiled" name builds the same model (the
    Measurement compiles it)."""
    implementation = implementation.removesuffix(COMPILED)
    dims = {key: config[key] for key in DIMENSIONS}
    if implementation.startswith("vit_scratch"):
        from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification

        kernel = {"vit_scratch": None, "vit_scratch-eager": "eager"}[implementation]  # None: the default kernel
        model_config = ViTScratchConfig(**architecture(config), num_labels=NUM_LABELS, attn_implementation=kernel)
        return ViTScratchForImageClassification._from_config(model_config, dtype=dtype)
    if not builds(implementation, config):
        raise ValueError(f"{implementation} has no hybrid ViT: measure {timm_name(config)} with timm.")
    if implementation.startswith("transformers"):
        from transformers import ViTConfig, ViTForImageClassification

        kernel = implementation.split("-")[1]
        return ViTForImageClassification._from_config(
            ViTConfig(**dims, num_labels=NUM_LABELS), attn_implementation=kernel, dtype=dtype
        )
    if implementation == "timm":
        return build_timm(config, dims).to(dtype)
    raise ValueError(f"Unknown implementation {implementation!r}: choose from {ALL_IMPLEMENTATIONS}.")


def build_timm(config: dict, dims: dict):
    """timm's ViT at `config` (timm is imported here only: the package does not depend on it): its hybrid preset
    where the config names one, a ViT over timm's `ConvStem` for a conv stem, else its plain VisionTransformer."""
    import timm
    from timm.models.vision_transformer import VisionTransformer

    shared = dict(
        img_size=dims["image_size"],
        in_chans=dims["num_channels"],
        num_classes=NUM_LABELS,
        embed_dim=dims["hidden_size"],
        depth=dims["num_hidden_layers"],
        num_heads=dims["num_attention_heads"],
        mlp_ratio=dims["intermediate_size"] / dims["hidden_size"],
    )
    stem = config.get("stem", {})
    if "timm_model" in stem:
        return timm.create_model(stem["timm_model"], pretrained=False, **shared)
    if stem.get("stem") == "conv":
        return VisionTransformer(patch_size=1, embed_layer=timm_conv_stem(stem["stem_channels"], dims), **shared)
    return VisionTransformer(patch_size=dims["patch_size"], **shared)


def timm_conv_stem(stem_channels: list[int], dims: dict):
    """timm's patch embedding for our conv stem: its `ConvStem` of 3x3 stride-2 convolutions, each with BatchNorm
    and ReLU, and a last convolution (with a bias) over `patch_size` patches that is the projection."""
    from timm.layers import HybridEmbed
    from timm.models.vision_transformer_hybrid import ConvStem

    depth, patch = len(stem_channels), dims["patch_size"]
    backbone = ConvStem(
        in_chans=dims["num_channels"],
        depth=depth + 1,
        channels=(*stem_channels, dims["hidden_size"]),
        kernel_size=(*[3] * depth, patch),
        stride=(*[2] * depth, patch),
        padding=(*[1] * depth, 0),
    )
    return partial(HybridEmbed, backbone=backbone, proj=False)  # the stem's last convolution projects


def timm_name(config: dict) -> str:
    """How the error for a hybrid that transformers cannot build names timm's model of it."""
    return config["stem"].get("timm_model", f"its {config['stem']['stem']} stem")


def builds(implementation: str, config: dict) -> bool:
    """Whether `implementation` has the architecture of `config`: a hybrid (a config with a stem) has no
    transformers counterpart."""
    return "stem" not in config or not implementation.startswith("transformers")


def stem_stride(config: dict) -> int:
    """Pixels per feature-map cell of a hybrid's stem (1 without one)."""
    from modeling_vit_scratch import ViTScratchConfig

    return ViTScratchConfig(patch_size=1, image_size=config["image_size"], **build_stem_fields(config)).stem_stride


def forward_flops(config: dict) -> float:
    """Matrix-multiply FLOPs of one forward pass for one image (2 per multiply-add), of the transformer: a hybrid's
    stem convolutions are not counted, and its projection is counted as if it read image channels."""
    tokens = 1 + (config["image_size"] // (config["patch_size"] * stem_stride(config))) ** 2
    dim, mlp, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    patch_dim = config["num_channels"] * config["patch_size"] ** 2
    per_layer = 2 * tokens * (4 * dim * dim + 2 * dim * mlp) + 4 * tokens * tokens * dim
    return layers * per_layer + 2 * (tokens - 1) * patch_dim * dim


def weights_dtype(precision: str) -> torch.dtype | None:
    """The dtype the model is built in for `precision` (None: torch's default, float32)."""
    return torch.bfloat16 if precision == "bf16-weights" else None


def precisions_for(mode: str, dtypes: list[torch.dtype], int8: bool = False) -> list[str]:
    """The precisions measured for `mode`, the dtypes asked for and `int8`: bf16 weights and int8 for inference
    only."""
    wanted = [p for p in PRECISIONS if DTYPE_OF[p] in dtypes] + ([INT8] if int8 else [])
    return [p for p in wanted if not (mode == "train" and p in ("bf16-weights", INT8))]


def int8_config():
    """torchao's dynamic int8 activations and int8 weights, per row (transformers' and torchao's name for it:
    `Int8DynamicActivationInt8WeightConfig`)."""
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig

    return Int8DynamicActivationInt8WeightConfig()


def to_int8(model):
    """`model` with its linear layers in int8, as a user gets it: a transformers model (ours, transformers' ViT)
    saved and loaded back through `from_pretrained(folder, quantization_config=TorchAoConfig(...))`, timm's through
    torchao's `quantize_`, which that route calls."""
    from transformers import PreTrainedModel, TorchAoConfig

    if not isinstance(model, PreTrainedModel):
        from torchao.quantization import quantize_

        quantize_(model, int8_config())
        return model
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        return type(model).from_pretrained(
            folder, quantization_config=TorchAoConfig(int8_config()), use_safetensors=True, trust_remote_code=False
        )


def modes_for(config: dict, args) -> list[str]:
    """Inference for every config; training where the config has a training batch."""
    modes = ["inference"] + (["train"] if config["train_batch"] else [])
    return [mode for mode in modes if mode in args.modes]
