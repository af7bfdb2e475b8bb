"""What the ViT attends to: attention maps, attention rollout, gradient rollout and the paper's Fig. 7 diagnostics.

Attention maps come from the model's explicit attention path (`output_attentions=True` runs
softmax(QK^T/sqrt(d)) written out, whatever kernel the model was built or loaded with), so explaining works for SDPA
models too and changes neither the weights nor the configured kernel. Everything here is plain torch.

Shapes: B batch, H heads, T = P + N tokens, N = gh * gw patches, L layers. The P = config.num_prefix_tokens tokens
before the patches (the class token first, a distillation token, then the registers) are never drawn: every map on
the patch grid takes the last N tokens.
"""

import torch
from PIL import Image

from modeling_vit_scratch.configuration_vit_scratch import to_pair
from modeling_vit_scratch.image_processing_vit_scratch import to_model_mode

HEAD_FUSIONS = ("mean", "max", "min")


def model_inputs(image: Image.Image, processor, num_channels: int) -> tuple[torch.Tensor, Image.Image]:
    """`pixel_values` (1, num_channels, h, w) for a model of `num_channels`, and the image as the model sees it. Any
    processor works: it is fed the image in the channels it normalises (8-bit gray or RGB, `to_model_mode`), and its
    output brought to the model's (three equal channels averaged, or one repeated): transformers' RGB
    `ViTImageProcessor`, which converted checkpoints carry, serves a grayscale model."""
    image = to_model_mode(image, num_channels)
    mean = getattr(processor, "image_mean", None)
    wanted = len(mean) if isinstance(mean, (list, tuple)) and len(mean) in (1, 3) else num_channels
    pixel_values = processor(to_model_mode(image, wanted), return_tensors="pt")["pixel_values"]
    if pixel_values.shape[1] != num_channels:  # three equal channels averaged to one, or one repeated
        pixel_values = pixel_values.mean(dim=1, keepdim=True).expand(-1, num_channels, -1, -1)
    height, width = pixel_values.shape[-2:]
    return pixel_values, image.resize((width, height), Image.BILINEAR)


def attention_maps(model, pixel_values: torch.Tensor, **kwargs) -> tuple[torch.Tensor, ...]:
    """Per layer, the attention weights (B, H, T, T) of a `ViTScratchModel` or `ViTScratchForImageClassification`."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        outputs = model(pixel_values=pixel_values, output_attentions=True, **kwargs)
    model.train(was_training)
    return outputs.attentions


def fuse_heads(attention: torch.Tensor, head_fusion: str = "mean") -> torch.Tensor:
    """(B, H, T, T) -> (B, T, T) by the mean, max or min over heads."""
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"head_fusion must be one of {HEAD_FUSIONS}, got {head_fusion!r}.")
    if head_fusion == "mean":
        return attention.mean(dim=1)
    return attention.amax(dim=1) if head_fusion == "max" else attention.amin(dim=1)


def discard_lowest(attention: torch.Tensor, discard_ratio: float) -> torch.Tensor:
    """Zero the weakest `discard_ratio` of each map's weights (B, T, T); the class token's column always stays."""
    if discard_ratio <= 0:
        return attention
    threshold = attention.flatten(1).quantile(discard_ratio, dim=1)  # (B,)
    keep = attention >= threshold[:, None, None]
    keep[:, :, 0] = True
    return attention * keep


def attention_rollout(
    attentions: tuple[torch.Tensor, ...], head_fusion: str = "mean", discard_ratio: float = 0.0
) -> torch.Tensor:
    """Abnar & Zuidema (2020): how much each input token flows into each output token through all layers. Per layer:
    fuse heads, add the identity for the residual path, renormalise rows; multiply the layers from the first to the
    last. Returns (B, T, T) with non-negative rows that sum to 1."""
    rollout = None
    for attention in attentions:
        fused = discard_lowest(fuse_heads(attention.float(), head_fusion), discard_ratio)
        fused = fused + torch.eye(fused.shape[-1], dtype=fused.dtype, device=fused.device)  # the residual path
        fused = fused / fused.sum(dim=-1, keepdim=True)
        rollout = fused if rollout is None else fused @ rollout
    return rollout


def gradient_rollout(model, pixel_values: torch.Tensor, target_class: int | torch.Tensor, **kwargs) -> torch.Tensor:
    """Chefer et al. (2021): relevance of each token for `target_class`, (B, T, T). Each layer's attention is
    weighted by its gradient for the class logit, only the positive part kept, averaged over heads, and accumulated
    as R <- R + A_bar R from R = I. Parameters receive no gradient."""
    was_training = model.training
    model.eval()
    with torch.enable_grad():
        outputs = model(pixel_values=pixel_values, output_attentions=True, **kwargs)
        target = torch.as_tensor(target_class, device=outputs.logits.device).expand(outputs.logits.shape[0])
        score = outputs.logits.gather(1, target[:, None]).sum()
        gradients = torch.autograd.grad(score, outputs.attentions)
    model.train(was_training)
    tokens = outputs.attentions[0].shape[-1]
    relevance = torch.eye(tokens).expand(pixel_values.shape[0], tokens, tokens).clone()
    for attention, gradient in zip(outputs.attentions, gradients):
        weighted = (gradient * attention).clamp(min=0).mean(dim=1).detach().float()  # (B, T, T)
        relevance = relevance + weighted @ relevance
    return relevance


def token_to_patch_map(rollout: torch.Tensor, grid_size: tuple[int, int], pooling: str = "cls") -> torch.Tensor:
    """(B, T, T) -> (B, gh, gw): what the pooled output draws from each patch, scaled to a maximum of 1. The pooled
    output is the class token's row, or for `pooling="mean"` the mean of the patch tokens' rows. The prefix tokens
    (class, distillation, registers) are the T - gh*gw first: they feed the rows but are no patch of the map."""
    prefix = rollout.shape[-1] - grid_size[0] * grid_size[1]
    rows = rollout[:, 0] if pooling == "cls" else rollout[:, prefix:].mean(dim=1)  # (B, T)
    patches = rows[:, prefix:].reshape(-1, *grid_size)
    return patches / patches.amax(dim=(1, 2), keepdim=True).clamp(min=1e-12)


def patch_embedding_components(model, count: int = 28) -> torch.Tensor:
    """Fig. 7 (left): principal components of the patch-embedding filters, (count, C, P, P), largest first.
    A hybrid's filters read the stem's feature channels, not pixels: there is no picture of them to draw."""
    embeddings = model.base_model.embeddings.patch_embeddings
    if model.config.stem != "none":
        raise ValueError(
            f"a hybrid's (stem={model.config.stem!r}) patch embedding reads the stem's feature map, not pixels"
        )
    weight = embeddings.projection.weight.detach().float()
    filters = weight.reshape(weight.shape[0], -1)  # (D, C*P*P): conv kernel or linear rows, same order
    centred = filters - filters.mean(dim=0, keepdim=True)
    _, _, components = torch.linalg.svd(centred, full_matrices=False)  # rows: directions in patch space
    patch_h, patch_w = embeddings.patch_size
    count = min(count, components.shape[0])
    return components[:count].reshape(count, embeddings.num_channels, patch_h, patch_w)


def position_embedding_similarity(model) -> torch.Tensor:
    """Fig. 7 (centre): cosine similarity of each patch's position embedding with every other, (gh, gw, gh, gw)."""
    embeddings = model.base_model.embeddings
    positions = embeddings.position_embeddings[0, embeddings.num_class_tokens :].detach().float()  # (N, D), patches
    positions = torch.nn.functional.normalize(positions, dim=-1)
    grid_h, grid_w = embeddings.grid_size
    return (positions @ positions.T).reshape(grid_h, grid_w, grid_h, grid_w)


def patch_distances(grid_size: tuple[int, int], patch_size) -> torch.Tensor:
    """Pixel distance between the centres of every pair of patches, (N, N). `patch_size` is the pixels a token
    covers: a hybrid's `config.cell_size` (the patch size times the stem's stride)."""
    patch_h, patch_w = to_pair(patch_size)
    rows, cols = torch.meshgrid(torch.arange(grid_size[0]), torch.arange(grid_size[1]), indexing="ij")
    centres = torch.stack([rows.flatten() * patch_h, cols.flatten() * patch_w], dim=-1).double()  # (N, 2)
    return torch.cdist(centres, centres)


def mean_attention_distance(
    attentions: tuple[torch.Tensor, ...], grid_size: tuple[int, int], patch_size
) -> torch.Tensor:
    """Fig. 7 (right): per layer and head, the mean pixel distance between a patch and the patches it attends to:
    attention among patch tokens only (the prefix tokens have no place in the image), rows renormalised, averaged
    over query patches and the batch. Returns (L, H)."""
    distances = patch_distances(grid_size, patch_size)
    result = []
    for attention in attentions:
        prefix = attention.shape[-1] - distances.shape[0]  # the class, distillation and register tokens
        patches = attention[:, :, prefix:, prefix:].double()  # (B, H, N, N)
        patches = patches / patches.sum(dim=-1, keepdim=True).clamp(min=1e-12)
        result.append((patches * distances).sum(dim=-1).mean(dim=(0, 2)))  # (H,)
    return torch.stack(result).float()
