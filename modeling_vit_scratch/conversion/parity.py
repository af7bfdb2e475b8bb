"""The parity check of a conversion: the written folder and its source model on the same random images, in one dtype,
within the tolerance of `common.dtypes.logits_agree`."""

import torch

from modeling_vit_scratch.common.dtypes import dtype_name, logits_agree


def compared_output(model, pixel_values: torch.Tensor) -> torch.Tensor:
    """What the parity check compares: logits, or the final tokens of a model without a classification head (ours,
    transformers' ViTModel or a timm model with `num_classes=0`)."""
    with torch.inference_mode():
        if hasattr(model, "forward_features"):  # timm
            return model(pixel_values) if model.num_classes else model.forward_features(pixel_values)
        if getattr(model.config, "num_labels", 0) and "ForImageClassification" in type(model).__name__:
            return model(pixel_values=pixel_values).logits
        return model.base_model(pixel_values=pixel_values).last_hidden_state


def check_parity(reference, converted, config, dtype: torch.dtype) -> str:
    """Both models in `dtype` on the same random images: one line saying how closely they agree, or a ValueError.
    A grayscale source written as an RGB model (`luma_kernel`) gets each image as three equal channels."""
    generator = torch.Generator().manual_seed(0)
    height, width = (config.image_size,) * 2 if isinstance(config.image_size, int) else config.image_size
    pixel_values = torch.randn(2, config.num_channels, height, width, generator=generator).to(dtype)
    expected = compared_output(reference.to(dtype).eval(), pixel_values)
    channels = getattr(getattr(converted, "config", None), "num_channels", config.num_channels)
    given = pixel_values.expand(-1, channels, -1, -1) if channels != config.num_channels else pixel_values
    agree, difference, tolerance = logits_agree(expected, compared_output(converted.eval(), given), dtype)
    verdict = f"max |difference| {difference:.2e}, tolerance {tolerance:.2e} for {dtype_name(dtype)}"
    if dtype != torch.float32:
        verdict += " (bf16 keeps 8 bits of mantissa: 2^-4 of the largest output, not float32's 1e-4)"
    if not agree:
        raise ValueError(f"The written folder does not compute what its source computes ({verdict}): report this.")
    return f"Parity with the source model: {verdict}."
