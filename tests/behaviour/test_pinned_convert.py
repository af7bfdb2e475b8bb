"""Conversion through scripts/convert_checkpoint.py: a trained folder to transformers' ViT and back, each folder
loading with transformers' Auto classes to the trained model's logits; --output holding a model is replaced only
with --overwrite."""

import shutil

import pytest
import torch
from pinned import assert_no_secret, contents
from transformers import AutoConfig, AutoModelForImageClassification

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
]  # the pins, end to end: `make test-slow`; the rooms' own tests keep each rule in `make test`


def logits(folder, **load) -> torch.Tensor:
    """The logits of the model in `folder` (loaded as a user does, without remote code) for 4 fixed images."""
    model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=False, **load).eval()
    size = model.config.image_size
    pixel_values = torch.randn(4, model.config.num_channels, size, size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return model(pixel_values=pixel_values).logits


def test_to_transformers_and_back_gives_the_trained_logits(converted, trained):
    assert converted.to.code == 0, converted.to
    assert converted.back_ran.code == 0, converted.back_ran
    expected = logits(trained.model)
    assert AutoConfig.from_pretrained(converted.hf).model_type == "vit"  # transformers' own ViT: no code of ours
    torch.testing.assert_close(logits(converted.hf), expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits(converted.back), expected, atol=1e-4, rtol=1e-4)
    assert_no_secret(converted.to, converted.back_ran, folders=[converted.hf, converted.back])


def existing_model(converted, folder):
    """A copy of the folder converted back: a vit_scratch model folder that a conversion wrote."""
    assert converted.back_ran.code == 0, converted.back_ran
    shutil.copytree(converted.back, folder, symlinks=True)
    return folder


def test_output_holding_a_model_is_refused_and_left_as_it_was_without_overwrite(cli, converted, trained, tmp_path):
    output = existing_model(converted, tmp_path / "existing")
    before = contents(output)
    ran = cli("convert", "--to", "transformers", "--input", trained.model, "--output", output)
    assert ran.code != 0, ran
    assert "--overwrite" in ran.stderr  # the way to replace it
    assert contents(output) == before


def test_output_holding_a_model_is_replaced_with_overwrite(cli, converted, trained, tmp_path):
    output = existing_model(converted, tmp_path / "existing")
    assert AutoConfig.from_pretrained(output).model_type == "vit_scratch"
    ran = cli("convert", "--to", "transformers", "--input", trained.model, "--output", output, "--overwrite")
    assert ran.code == 0, ran
    assert AutoConfig.from_pretrained(output).model_type == "vit"  # the new folder, in place of the old
    torch.testing.assert_close(logits(output), logits(trained.model), atol=1e-4, rtol=1e-4)
