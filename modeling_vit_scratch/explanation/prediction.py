"""Explain one prediction: read the image, load the model and its processor from one folder, rank the classes, and
write the pictures into the output folder, staged and published together. The folder is new, empty or explain's
own (rewritten: an earlier run's figures that this one does not write are removed); one holding a model is refused,
untouched: figures among its files would read as that model's."""

import http.client
import io
import sys
import urllib.request
from pathlib import Path
from typing import NamedTuple

import torch
from transformers import AutoImageProcessor, AutoModelForPreTraining

from modeling_vit_scratch.configuration_vit_scratch import is_masked_autoencoder
from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.explanation import attention as explain
from modeling_vit_scratch.explanation import figures as plots
from modeling_vit_scratch.explanation import norms as explain_norms
from modeling_vit_scratch.explanation.reconstruction import RECONSTRUCTION_FILE, reconstructions
from modeling_vit_scratch.folders import OutputFolder
from modeling_vit_scratch.image_processing_vit_scratch import read_image_file
from modeling_vit_scratch.secrets import shown
from modeling_vit_scratch.sources import check_model_folder, load_model, resolve

# The names explain writes: in a folder of its own, these are replaced or removed, nothing else.
FIGURES = ("patch_grid.png", "attention_*.png", "gradient_rollout_class_*.png", "fig7_*.png", "token_norms.png")
FIGURES += (RECONSTRUCTION_FILE,)
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
DOWNLOAD_BYTES = 128 << 20  # the most an --image URL may send: far above any photo, far below the memory it takes
DOWNLOAD_SECONDS = 30  # the longest a server may stay silent
LABEL_IN_FILE_NAME = 48  # the most bytes (UTF-8) of a label in a file name, far below a name's 255


class Explanation(NamedTuple):
    """What explain found: the top-5 (label, probability), the paths of the pictures written, the last layer's
    token norms (`norms.py`): the patch tokens' on the grid (gh, gw) and the register tokens' (R,); and a masked
    autoencoder's reconstruction loss on the image (None for other models)."""

    ranking: list[tuple[str, float]]
    written: list[Path]
    patch_norms: torch.Tensor
    register_norms: torch.Tensor
    reconstruction_loss: float | None = None


def read_image(source: str):
    """The picture `--image` names (a file, or an http(s) URL read whole), turned upright by its EXIF orientation;
    of an animation or a multi-page file, frame 1, said once on stderr."""
    name = f"--image {shown(source)}"
    if source.lower().startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=DOWNLOAD_SECONDS) as response:
                body = response.read(DOWNLOAD_BYTES + 1)
        except (OSError, ValueError, http.client.HTTPException) as error:
            raise UserError(f"downloading {name} failed ({error}): check the URL, or download it and give the file")
        if len(body) > DOWNLOAD_BYTES:
            raise UserError(f"{name} sends more than {DOWNLOAD_BYTES:,} bytes: download it and give the file")
        source = io.BytesIO(body)
    image, frames = read_image_file(source, name)  # an unreadable one is its own line (`errors.describe`)
    if frames > 1:
        print(f"{name} has {frames} frames: explained frame 1", file=sys.stderr)
    return image


def load(spec: str, revision: str | None, trust_remote_code: bool, dtype: torch.dtype):
    """The model (in `dtype`), its image processor, and for a masked autoencoder's folder that model (its encoder is
    then explained as a model without a head), all from the one folder `spec` resolves to."""
    folder = resolve(spec, revision=revision, trust_remote_code=trust_remote_code)
    settings = check_model_folder(folder, trust_remote_code=trust_remote_code)
    kind = settings.get("model_type")
    if kind != "vit_scratch":  # only vit_scratch models have the patch grid and attention drawn here
        raise UserError(
            f"--model {shown(spec)} is a {shown(kind)} model, not vit_scratch: convert it first "
            "(`vit-scratch convert --from transformers`) and explain the converted folder"
        )
    pretraining = is_masked_autoencoder(settings)  # its encoder explained, and its reconstruction
    try:
        model = load_model(
            folder, trust_remote_code=trust_remote_code, dtype=dtype, **({"num_labels": 0} if pretraining else {})
        )
        autoencoder = pretraining and load_model(
            folder, AutoModelForPreTraining, trust_remote_code=trust_remote_code, dtype=dtype
        )
    except ValueError as error:  # the config's own checks (a plain ValueError) as the loader builds it: one line
        raise UserError(f"--model {shown(spec)}: {error}") from None
    processor = AutoImageProcessor.from_pretrained(folder, trust_remote_code=trust_remote_code)
    return model.eval(), processor, autoencoder and autoencoder.eval()


def file_name_part(text: str) -> str:
    """`text` as part of a file name: letters, digits, - and _ (others become _), at most `LABEL_IN_FILE_NAME`
    bytes cut at a whole character; never a path separator, never empty, never a token (`shown` masks it)."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in shown(text))
    return safe.encode()[:LABEL_IN_FILE_NAME].decode(errors="ignore") or "_"


def rank(logits: torch.Tensor, config) -> list[tuple[int, str, float]]:
    """The top-5 (index, label, probability) of one image's logits (num_labels,); none for a model without a
    classifier (a backbone, as a converted `Dinov2Model`: `num_labels` 0, its "logits" the pooled features)."""
    if not config.num_labels:
        return []
    top = logits.softmax(-1).topk(min(5, logits.numel()))
    return [(i, config.id2label[i], score) for score, i in zip(top.values.tolist(), top.indices.tolist())]


def explain_image(
    model: str,
    image: str,
    out: str,
    head_fusion: str = "mean",
    discard_ratio: float = 0.0,
    trust_remote_code: bool = False,
    dtype: str = "float32",
    revision: str | None = None,
) -> Explanation:
    """Everything `vit-scratch explain` does (its arguments, by name). The output folder is checked first, then the
    image read, then the model loaded. Every map is of the patch tokens only: the class, distillation and register
    tokens (`config.num_prefix_tokens`) come before them and are left out."""
    folder = OutputFolder(out, "--out", replace=True, inputs=(model, image), writes=FIGURES)
    folder.check()  # a folder holding a model (a training run's, a conversion's) is refused: explain's own is not
    picture = read_image(image)
    network, processor, autoencoder = load(model, revision, trust_remote_code, DTYPES[dtype])
    config, embeddings = network.config, network.base_model.embeddings
    try:  # the model's own checks: an image its processor does not bring to the model's size or channels
        pixel_values, seen = explain.model_inputs(picture, processor, config.num_channels)
        pixel_values = pixel_values.to(network.dtype)
        with torch.no_grad():
            logits = network(pixel_values=pixel_values).logits.float()[0]
    except ValueError as error:
        raise UserError(f"--image {shown(image)} does not fit --model {shown(model)}: {error}") from None
    ranked = rank(logits, config)

    attentions = explain.attention_maps(network, pixel_values)
    grid, prefix, cell = embeddings.grid_size, embeddings.num_prefix_tokens, embeddings.patch_embeddings.cell_size
    rollout = explain.attention_rollout(attentions, head_fusion, discard_ratio)
    rollout_map = explain.token_to_patch_map(rollout, grid, config.pooling)[0]
    if ranked:  # the top class's relevance; a backbone has no class to explain
        relevance = explain.gradient_rollout(network, pixel_values, ranked[0][0])
        relevance_map = explain.token_to_patch_map(relevance, grid, config.pooling)[0]
    # per layer, the class token's row over the patch columns, mean over heads: (L, gh, gw)
    per_layer = torch.stack([a[0].float().mean(0)[0, prefix:].reshape(grid) for a in attentions])
    norms = explain_norms.token_norms(network, pixel_values)
    patch_norms = explain_norms.patch_norm_map(norms, grid)[0]  # (gh, gw): the patches only
    registers = explain_norms.register_norms(norms, config)[0]  # (R,)
    threshold = explain_norms.high_norm_threshold(patch_norms[None])[0].item()
    found = reconstructions(autoencoder, pixel_values, processor) if autoencoder else None
    with folder, folder.staging() as stage:
        if found is not None:
            plots.plot_reconstructions(found, stage / RECONSTRUCTION_FILE)
        if config.stem == "none":  # a hybrid's projection reads the stem's feature maps: no filters to picture
            plots.plot_embedding_filters(
                explain.patch_embedding_components(network), stage / "fig7_patch_embedding_pca.png"
            )
        plots.plot_patch_grid(seen, cell, stage / "patch_grid.png")
        plots.plot_overlay(seen, rollout_map, f"attention rollout ({head_fusion})", stage / "attention_rollout.png")
        if ranked:
            label = str(ranked[0][1])
            name = f"gradient_rollout_class_{file_name_part(label)}.png"
            plots.plot_overlay(seen, relevance_map, f"gradient rollout for {shown(label)!r}", stage / name)
        plots.plot_layer_attention(per_layer, stage / "attention_per_layer.png")
        similarity = explain.position_embedding_similarity(network)
        plots.plot_position_similarity(similarity, stage / "fig7_position_embedding_similarity.png")
        distances = explain.mean_attention_distance(attentions, grid, cell)
        plots.plot_attention_distance(distances, stage / "fig7_mean_attention_distance.png")
        plots.plot_token_norms(seen, patch_norms, threshold, registers, stage / "token_norms.png")
        names = folder.publish(stage, remove=FIGURES)
    ranking = [(label, score) for _, label, score in ranked]
    written = [folder.path / name for name in names]
    return Explanation(ranking, written, patch_norms, registers, found.loss if found is not None else None)
