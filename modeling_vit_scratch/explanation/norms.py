"""The registers paper's diagnostic (Darcet et al., "Vision Transformers Need Registers", 2023, Figs. 3-4): the L2 norm
of each token the last layer outputs. Large ViTs trained without registers turn a few background patches into
high-norm "artifact" tokens that carry global information; registers give that information a place of its own.

The rule for a high-norm patch token: its norm is above `HIGH_NORM_MULTIPLE` (2) times the median of the same image's
patch-token norms (the median of an even count being the mean of the two middle norms). A multiple of the median,
not the paper's absolute 150 (for DINOv2-L), holds for a model of any width and any final LayerNorm: docs/design.md
("Explanation") says why 2.

Shapes: B batch, P = config.num_prefix_tokens (class, distillation, registers), N = gh * gw patches, R registers.
"""

import torch

HIGH_NORM_MULTIPLE = 2.0


def token_norms(model, pixel_values: torch.Tensor) -> torch.Tensor:
    """(B, P + N): the L2 norm of each output token of the last layer, as `ViTScratchModel` returns them
    (`last_hidden_state`: after the final LayerNorm, or the last block's output for an `fc_norm` model, whose norm
    reads only the pooled vector). Works for every head: the encoder (`base_model`) is run alone."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        tokens, _, _ = model.base_model.forward_features(pixel_values)
    model.train(was_training)
    return tokens.float().norm(dim=-1)


def patch_norm_map(norms: torch.Tensor, grid_size: tuple[int, int]) -> torch.Tensor:
    """(B, P + N) -> (B, gh, gw): the patch tokens' norms on the patch grid, every prefix token left out."""
    return norms[:, -grid_size[0] * grid_size[1] :].reshape(-1, *grid_size)


def register_norms(norms: torch.Tensor, config) -> torch.Tensor:
    """(B, P + N) -> (B, R): the register tokens' norms (they sit after the class and distillation tokens)."""
    return norms[:, config.num_class_tokens : config.num_prefix_tokens]


def high_norm_threshold(patch_norms: torch.Tensor, multiple: float = HIGH_NORM_MULTIPLE) -> torch.Tensor:
    """(B, ...) patch norms -> (B,): `multiple` times each image's median patch-token norm."""
    return multiple * patch_norms.flatten(1).quantile(0.5, dim=1)


def high_norm_share(patch_norms: torch.Tensor, multiple: float = HIGH_NORM_MULTIPLE) -> torch.Tensor:
    """(B, ...) patch norms -> (B,): the share of each image's patch tokens whose norm is above the threshold."""
    flat = patch_norms.flatten(1)
    return (flat > high_norm_threshold(flat, multiple)[:, None]).float().mean(dim=1)
