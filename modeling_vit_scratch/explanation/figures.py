"""Figures that explain a prediction or a model: patch grids, attention overlays, per-layer attention, embedding
filters, position-embedding similarity, attention distance. Images are PIL images at the model's input size; maps are
tensors."""

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no screen
import matplotlib.pyplot as plt

from modeling_vit_scratch.common.folders import write_file


def _save(figure, path: str | Path) -> Path:
    figure.tight_layout()
    picture = io.BytesIO()
    figure.savefig(picture, format=Path(path).suffix.lstrip(".") or "png")
    plt.close(figure)
    write_file(Path(path), picture.getvalue())  # never through a link
    return Path(path)


def _show_image(axis, image) -> None:
    axis.imshow(image, cmap="gray" if image.mode == "L" else None, vmin=0, vmax=255)
    axis.set_xticks([])
    axis.set_yticks([])


def plot_patch_grid(image, patch_size: tuple[int, int], path: str | Path) -> Path:
    """The image cut into its patch grid: the first step of the model, made visible."""
    figure, axis = plt.subplots(figsize=(5, 5), dpi=100)
    _show_image(axis, image)
    width, height = image.size
    for x in range(0, width + 1, patch_size[1]):
        axis.axvline(x - 0.5, color="yellow", linewidth=1)
    for y in range(0, height + 1, patch_size[0]):
        axis.axhline(y - 0.5, color="yellow", linewidth=1)
    axis.set_title(f"{height // patch_size[0]} x {width // patch_size[1]} patches of {patch_size[0]}x{patch_size[1]}")
    return _save(figure, path)


def plot_overlay(image, patch_map, title: str, path: str | Path) -> Path:
    """A (gh, gw) map in [0, 1] stretched over the image, beside the image itself."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(8, 4), dpi=100)
    _show_image(left, image)
    left.set_title("input")
    _show_image(right, image)
    width, height = image.size
    right.imshow(
        patch_map.numpy(),
        cmap="inferno",
        alpha=0.6,
        extent=(-0.5, width - 0.5, height - 0.5, -0.5),
        interpolation="bilinear",
        vmin=0,
        vmax=1,
    )
    right.set_title(title)
    return _save(figure, path)


def layer_attention_figure(class_attention):
    """One panel per layer: the class token's attention to each patch (row 0 of the attention matrix, patch
    columns), averaged over heads. (L, gh, gw). The class token's row whatever the pooling: with pooling="mean" it
    is not the row the classifier reads."""
    layers = class_attention.shape[0]
    columns = min(layers, 6)
    rows = (layers + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(2.2 * columns, 2.2 * rows), dpi=100, squeeze=False)
    for index, axis in enumerate(axes.flat):
        axis.set_xticks([])
        axis.set_yticks([])
        if index < layers:
            axis.imshow(class_attention[index].numpy(), cmap="viridis")
            axis.set_title(f"layer {index + 1}")
        else:
            axis.axis("off")
    figure.suptitle("attention from the class token to each patch, per layer (mean over heads)")
    return figure


def plot_layer_attention(class_attention, path: str | Path) -> Path:
    """`layer_attention_figure` saved to `path`. (L, gh, gw)."""
    return _save(layer_attention_figure(class_attention), path)


def plot_embedding_filters(components, path: str | Path) -> Path:
    """Fig. 7 left: principal components of the patch-embedding filters, (K, C, P, P)."""
    count = components.shape[0]
    columns = min(count, 7)
    rows = (count + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(1.4 * columns, 1.4 * rows + 0.4), dpi=100, squeeze=False)
    for index, axis in enumerate(axes.flat):
        axis.axis("off")
        if index < count:
            component = components[index]
            component = (component - component.min()) / (component.max() - component.min()).clamp(min=1e-12)
            picture = component[0] if component.shape[0] == 1 else component.permute(1, 2, 0)[..., :3]
            axis.imshow(picture.numpy(), cmap="gray" if component.shape[0] == 1 else None)
    figure.suptitle("patch-embedding filters: principal components")
    return _save(figure, path)


def plot_position_similarity(similarity, path: str | Path) -> Path:
    """Fig. 7 centre: for each patch position, the cosine similarity of its embedding with all others."""
    grid_h, grid_w = similarity.shape[:2]
    figure, axes = plt.subplots(grid_h, grid_w, figsize=(0.5 * grid_w + 1, 0.5 * grid_h + 0.6), dpi=100, squeeze=False)
    for row in range(grid_h):
        for column in range(grid_w):
            axis = axes[row, column]
            axis.imshow(similarity[row, column].numpy(), cmap="viridis", vmin=-1, vmax=1)
            axis.set_xticks([])
            axis.set_yticks([])
    figure.suptitle("position embedding similarity")
    return _save(figure, path)


def plot_attention_distance(distances, path: str | Path) -> Path:
    """Fig. 7 right: mean attention distance of every head against network depth. (L, H)."""
    figure, axis = plt.subplots(figsize=(5, 4), dpi=100)
    layers, heads = distances.shape
    for head in range(heads):
        axis.scatter(range(1, layers + 1), distances[:, head].numpy(), s=14, label=f"head {head + 1}")
    axis.set(xlabel="network depth (layer)", ylabel="mean attention distance (pixels)", title="Mean attention distance")
    axis.set_xticks(range(1, layers + 1))
    axis.grid(alpha=0.3)
    if heads <= 16:
        axis.legend(fontsize=6, ncol=2)
    return _save(figure, path)
