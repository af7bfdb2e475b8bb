"""What a masked autoencoder sees and makes (the MAE paper's Fig. 2): each image with its hidden patches blanked, the
model's reconstruction (its predicted patches where they were hidden, the visible ones as they were), and the
original, as pictures in [0, 1]."""

from typing import NamedTuple

import torch

from modeling_vit_scratch.modeling_vit_scratch import patchify, unpatchify
from modeling_vit_scratch.training.augmentation import per_channel

RECONSTRUCTION_FILE = "reconstruction.png"


class Reconstructions(NamedTuple):
    """(B, H, W, C) pictures in [0, 1]; `hidden` (B, gh, gw): 1 where a patch was hidden; `loss`: the model's."""

    masked: torch.Tensor
    reconstructed: torch.Tensor
    original: torch.Tensor
    hidden: torch.Tensor
    loss: float


@torch.no_grad()
def reconstructions(model, pixel_values: torch.Tensor, processor, seed: int = 0) -> Reconstructions:
    """`model`'s reconstructions of `pixel_values` (B, C, H, W, the processor's units), the patches hidden drawn from
    `seed` (the caller's random state left as it was). A model trained with `norm_pix_loss` predicts each patch
    normalised: it is shown at the true patch's mean and spread, as MAE's own visualisation does."""
    was_training = model.training
    model.eval()
    with torch.random.fork_rng(devices=[pixel_values.device] if pixel_values.device.type == "cuda" else []):
        torch.manual_seed(seed)
        output = model(pixel_values=pixel_values)
    model.train(was_training)
    cell = model.config.cell_size
    grid = (pixel_values.shape[2] // cell[0], pixel_values.shape[3] // cell[1])
    target = patchify(pixel_values.float(), cell)  # (B, N, P*P*C)
    predicted = output.logits.float()
    if model.config.norm_pix_loss:
        mean, var = target.mean(dim=-1, keepdim=True), target.var(dim=-1, keepdim=True)
        predicted = predicted * (var + 1.0e-6) ** 0.5 + mean
    hidden = output.mask[..., None].float()  # (B, N, 1)
    pictures = [
        for_display(unpatchify(patches, grid, cell), processor)
        for patches in (target * (1 - hidden), predicted * hidden + target * (1 - hidden), target)
    ]
    return Reconstructions(*pictures, output.mask.reshape(-1, *grid).cpu(), output.loss.item())


def for_display(pixel_values: torch.Tensor, processor) -> torch.Tensor:
    """(B, C, H, W) in the processor's normalised units -> (B, H, W, C) in [0, 1]."""
    channels = pixel_values.shape[1]
    mean = per_channel(getattr(processor, "image_mean", 0.5), channels).reshape(1, -1, 1, 1)
    std = per_channel(getattr(processor, "image_std", 0.5), channels).reshape(1, -1, 1, 1)
    return (pixel_values.float().cpu() * std + mean).clamp(0, 1).permute(0, 2, 3, 1)
