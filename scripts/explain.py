"""Explain a prediction: `python scripts/explain.py --model FOLDER_OR_REPO --image PATH_OR_URL --out DIR`.

Prints the top-5 classes and writes PNGs to DIR: the patch grid, attention rollout, a class-specific gradient
rollout for the top class, the per-layer attention from the class token, and the paper's Fig. 7 panels.
A vit_scratch model loads with the installed package's code; code that travels with a model (a folder's or a
repo's `.py` files) runs only with --trust_remote_code. `--dtype bfloat16` loads and runs the model in bf16 (the maps
are combined in float32 either way).
"""

import argparse
import io
import sys
import urllib.request
from pathlib import Path

import torch
from PIL import Image, UnidentifiedImageError
from transformers import AutoImageProcessor, AutoModelForImageClassification

from modeling_vit_scratch.common.dtypes import parse_dtype
from modeling_vit_scratch.explanation import attention as explain
from modeling_vit_scratch.explanation import figures as plots


def load_image(source: str) -> Image.Image:
    """A local file or an http(s) URL, as a PIL image; a clear error if it cannot be read as one."""
    try:
        if source.startswith(("http://", "https://")):
            with urllib.request.urlopen(source, timeout=30) as response:
                image = Image.open(io.BytesIO(response.read()))
        else:
            if not Path(source).is_file():
                raise FileNotFoundError(f"Image {source!r} does not exist: give an image file or an http(s) URL.")
            image = Image.open(source)
        image.load()
        return image
    except (UnidentifiedImageError, OSError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise ValueError(
            f"Cannot read {source!r} as an image ({error}): give a PNG, JPEG or other image file."
        ) from None


def load_model(model_source: str, trust_remote_code: bool = False, dtype: torch.dtype = torch.float32):
    """Model (in `dtype`) and image processor of a folder or repo; its own code runs only if `trust_remote_code`."""
    try:
        model = AutoModelForImageClassification.from_pretrained(
            model_source, trust_remote_code=trust_remote_code, dtype=dtype
        )
        processor = AutoImageProcessor.from_pretrained(model_source, trust_remote_code=trust_remote_code)
    except ValueError as error:
        if trust_remote_code or "trust_remote_code" not in str(error):
            raise
        raise ValueError(
            f"{model_source} is not a vit_scratch model and needs its own code to load, which runs "
            "only if you trust it: read that code, then pass --trust_remote_code."
        ) from None
    return model.eval(), processor


def explain_image(
    model_source: str,
    image_source: str,
    out_dir: str,
    head_fusion: str = "mean",
    discard_ratio: float = 0.0,
    trust_remote_code: bool = False,
    dtype: str = "float32",
) -> list[Path]:
    """Everything the script does, with the model in `dtype` ("float32" or "bfloat16"); returns the paths of the
    pictures written."""
    model, processor = load_model(model_source, trust_remote_code, parse_dtype(dtype))
    config = model.config
    pixel_values, shown = explain.model_inputs(load_image(image_source), processor, config.num_channels)
    pixel_values = pixel_values.to(model.dtype)
    embeddings = model.base_model.embeddings

    with torch.no_grad():
        probabilities = model(pixel_values=pixel_values).logits.float().softmax(-1)[0]
    top = probabilities.topk(min(5, probabilities.numel()))
    print("top classes:")
    for score, index in zip(top.values.tolist(), top.indices.tolist()):
        print(f"  {config.id2label[index]:>20}  {score:.4f}")

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    attentions = explain.attention_maps(model, pixel_values)
    grid = embeddings.grid_size
    rollout = explain.attention_rollout(attentions, head_fusion, discard_ratio)
    rollout_map = explain.token_to_patch_map(rollout, grid, config.pooling)[0]
    best = top.indices[0].item()
    relevance = explain.gradient_rollout(model, pixel_values, best)
    relevance_map = explain.token_to_patch_map(relevance, grid, config.pooling)[0]
    prefix = embeddings.num_prefix_tokens  # the class token's row, patch columns
    per_layer = torch.stack([a[0].float().mean(0)[0, prefix:].reshape(grid) for a in attentions])  # (L, gh, gw)
    label = config.id2label[best]
    safe_label = "".join(c if c.isalnum() or c in "-_" else "_" for c in str(label))
    cell_size = embeddings.patch_embeddings.cell_size  # pixels per token: the patch size times a stem's stride
    filters = []  # Fig. 7 left: a hybrid's projection reads feature maps, not pixels, so it has no such picture
    if config.stem == "none":
        filters.append(
            plots.plot_embedding_filters(
                explain.patch_embedding_components(model), out / "fig7_patch_embedding_pca.png"
            )
        )
    return [
        plots.plot_patch_grid(shown, cell_size, out / "patch_grid.png"),
        plots.plot_overlay(shown, rollout_map, f"attention rollout ({head_fusion})", out / "attention_rollout.png"),
        plots.plot_overlay(
            shown, relevance_map, f"gradient rollout for {label!r}", out / f"gradient_rollout_class_{safe_label}.png"
        ),
        plots.plot_layer_attention(per_layer, out / "attention_per_layer.png"),
        *filters,
        plots.plot_position_similarity(
            explain.position_embedding_similarity(model), out / "fig7_position_embedding_similarity.png"
        ),
        plots.plot_attention_distance(
            explain.mean_attention_distance(attentions, grid, cell_size),
            out / "fig7_mean_attention_distance.png",
        ),
    ]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="saved folder or hub repo id of a vit_scratch model")
    parser.add_argument("--image", required=True, help="image file or http(s) URL")
    parser.add_argument("--out", required=True, help="folder for the PNG files")
    parser.add_argument("--head_fusion", default="mean", choices=explain.HEAD_FUSIONS)
    parser.add_argument("--discard_ratio", type=float, default=0.0, help="share of weakest attention to drop")
    parser.add_argument("--dtype", default="float32", help="run the model in float32 or bfloat16")
    parser.add_argument(
        "--trust_remote_code",
        action="store_true",
        help="run the code that comes with the model (only models other than vit_scratch need it)",
    )
    args = parser.parse_args(argv)
    try:
        paths = explain_image(
            args.model, args.image, args.out, args.head_fusion, args.discard_ratio, args.trust_remote_code, args.dtype
        )
    except (ValueError, FileNotFoundError) as error:
        sys.exit(f"error: {error}")
    print("wrote:\n" + "\n".join(f"  {path}" for path in paths))


if __name__ == "__main__":
    main(sys.argv[1:])
