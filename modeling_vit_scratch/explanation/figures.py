"""Figures that explain a prediction or a model: patch grids, attention overlays, per-layer attention, embedding
filters, position-embedding similarity, attention distance, token norms. Images are PIL images at the model's input
size; maps are tensors. Each `plot_*` saves one PNG at `path` (a file in the output folder's private staging folder)
and returns it."""

from pathlib import Path

import matplotlib
import torch

matplotlib.use("Agg")  # files only, no screen
import matplotlib.pyplot as plt


def _save(figure, path: str | Path) -> Path:
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
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
    stretched = dict(extent=(-0.5, width - 0.5, height - 0.5, -0.5), interpolation="bilinear")  # over the image
    right.imshow(patch_map.numpy(), cmap="inferno", alpha=0.6, vmin=0, vmax=1, **stretched)
    right.set_title(title, parse_math=False)  # it may hold a class name: a `$` in one is text, not a formula
    return _save(figure, path)


def _panels(count: int, columns: int, inches: float):
    """A figure of `count` bare panels (no ticks, no frame) in rows of at most `columns`, each `inches` wide."""
    columns = min(count, columns)
    rows = -(-count // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(inches * columns, inches * rows + 0.5), dpi=100, squeeze=False)
    for axis in axes.flat:
        axis.axis("off")
    return figure, axes.flat[:count]


def plot_layer_attention(class_attention, path: str | Path) -> Path:
    """One panel per layer: the class token's attention to each patch (row 0 of the attention matrix, patch
    columns), averaged over heads. (L, gh, gw). The class token's row whatever the pooling: with pooling="mean" it
    is not the row the classifier reads."""
    figure, axes = _panels(class_attention.shape[0], 6, 2.2)
    for index, axis in enumerate(axes):
        axis.imshow(class_attention[index].numpy(), cmap="viridis")
        axis.set_title(f"layer {index + 1}")
    figure.suptitle("attention from the class token to each patch, per layer (mean over heads)")
    return _save(figure, path)


def plot_embedding_filters(components, path: str | Path) -> Path:
    """Fig. 7 left: principal components of the patch-embedding filters, (K, C, P, P), each scaled to [0, 1]."""
    figure, axes = _panels(components.shape[0], 7, 1.4)
    for component, axis in zip(components, axes):
        component = (component - component.min()) / (component.max() - component.min()).clamp(min=1e-12)
        gray = component.shape[0] == 1
        axis.imshow(
            (component[0] if gray else component.permute(1, 2, 0)[..., :3]).numpy(), cmap="gray" if gray else None
        )
    figure.suptitle("patch-embedding filters: principal components")
    return _save(figure, path)


def plot_position_similarity(similarity, path: str | Path) -> Path:
    """Fig. 7 centre: for each patch position (gh, gw), the cosine similarity of its embedding with all others."""
    figure, axes = _panels(similarity.shape[0] * similarity.shape[1], similarity.shape[1], 0.5)
    for panel, axis in zip(similarity.flatten(0, 1), axes):
        axis.imshow(panel.numpy(), cmap="viridis", vmin=-1, vmax=1)
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


def plot_token_norms(image, patch_norms, threshold: float, registers, path: str | Path) -> Path:
    """The registers paper's figure: beside the image, the last layer's patch-token norms on the patch grid (gh, gw)
    with the high-norm tokens (above `threshold`) circled, and their histogram with the threshold and the register
    tokens' norms (R,) marked."""
    figure, (left, centre, right) = plt.subplots(1, 3, figsize=(12, 4), dpi=100)
    _show_image(left, image)
    left.set_title("input")
    drawn = centre.imshow(patch_norms.numpy(), cmap="inferno", interpolation="nearest")
    figure.colorbar(drawn, ax=centre, fraction=0.046)
    rows, columns = (patch_norms > threshold).nonzero(as_tuple=True)
    size = (240 / max(patch_norms.shape)) ** 2 / 4  # a circle about a cell wide, whatever the grid
    centre.scatter(columns.numpy(), rows.numpy(), s=size, facecolors="none", edgecolors="cyan", linewidths=1)
    centre.set(xticks=[], yticks=[], title=f"patch-token norms: {len(rows)} of {patch_norms.numel()} high")
    right.hist(patch_norms.flatten().numpy(), bins=40, color="gray")
    right.axvline(threshold, color="red", linestyle="--", label=f"high-norm threshold {threshold:.3g}")
    for index, norm in enumerate(registers.tolist()):
        right.axvline(norm, color="tab:blue", linewidth=1, label="register tokens" if index == 0 else None)
    right.set(xlabel="L2 norm", ylabel="patch tokens", title="norm histogram")
    right.legend(fontsize=7)
    return _save(figure, path)


def plot_reconstructions(found, path: str | Path) -> Path:
    """The MAE paper's Fig. 2 from `reconstruction.Reconstructions`: a row per image of the masked input (hidden
    patches gray), the reconstruction and the original."""
    rows = found.masked.shape[0]
    figure, axes = plt.subplots(rows, 3, figsize=(7.5, 2.5 * rows + 0.4), dpi=100, squeeze=False)
    cell = (found.masked.shape[1] // found.hidden.shape[1], found.masked.shape[2] // found.hidden.shape[2])
    for row in range(rows):
        gray = found.hidden[row].repeat_interleave(cell[0], 0).repeat_interleave(cell[1], 1)[..., None].bool()
        masked = torch.where(gray, torch.full_like(found.masked[row], 0.5), found.masked[row])
        panels = (masked, found.reconstructed[row], found.original[row])
        for axis, panel, title in zip(axes[row], panels, ("masked", "reconstruction", "original"), strict=True):
            gray_image = panel.shape[-1] == 1
            axis.imshow(
                (panel[..., 0] if gray_image else panel).numpy(), cmap="gray" if gray_image else None, vmin=0, vmax=1
            )
            axis.set_xticks([])
            axis.set_yticks([])
            if row == 0:
                axis.set_title(title)
    figure.suptitle(f"masked autoencoder: {found.hidden.float().mean().item():.0%} of the patches hidden")
    return _save(figure, path)
