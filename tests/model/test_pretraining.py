"""The masked autoencoder (ViTScratchForPreTraining): parity with transformers' ViTMAEForPreTraining, masking, the
loss, saving and loading, and a classifier built from its folder. Tiny odd-sized configs."""

import pytest
import torch
from helpers import tiny_config
from transformers import AutoModelForImageClassification, AutoModelForPreTraining, ViTMAEConfig, ViTMAEForPreTraining

from modeling_vit_scratch import ViTScratchForImageClassification, ViTScratchForPreTraining
from modeling_vit_scratch.conversion.convert import from_transformers
from modeling_vit_scratch.modeling_vit_scratch import mae_position_table, patchify, unpatchify

# 20x20 images of 4x4 patches: a 5x5 grid, 25 patch tokens; odd widths everywhere
DECODER = dict(decoder_hidden_size=20, decoder_num_hidden_layers=2, decoder_num_attention_heads=2)
DECODER |= dict(decoder_intermediate_size=23)
MAE_SIZES = dict(image_size=20, patch_size=4, hidden_size=36, num_hidden_layers=2, num_attention_heads=3)
MAE_SIZES |= dict(intermediate_size=37, layer_norm_eps=1e-6, **DECODER)


def pretraining_config(**overrides):
    return tiny_config(**DECODER, **overrides)


def images(batch: int = 2, size: int = 20, channels: int = 3) -> torch.Tensor:
    return torch.randn(batch, channels, size, size, generator=torch.Generator().manual_seed(1))


def noise_for(batch: int = 2, patches: int = 25) -> torch.Tensor:
    return torch.rand(batch, patches, generator=torch.Generator().manual_seed(2))


def reference_mae(**overrides) -> ViTMAEForPreTraining:
    """A random transformers ViTMAE holding MAE's fixed tables (a pretrained checkpoint's; built from a config,
    transformers leaves them zero)."""
    config = ViTMAEConfig(**{**MAE_SIZES, **overrides})
    model = ViTMAEForPreTraining(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.normal_(0, 0.1)
        model.vit.embeddings.position_embeddings.copy_(mae_position_table((5, 5), config.hidden_size))
        model.decoder.decoder_pos_embed.copy_(mae_position_table((5, 5), config.decoder_hidden_size))
    return model


@pytest.mark.parametrize("norm_pix_loss", [False, True])
@pytest.mark.parametrize("mask_ratio", [0.75, 0.6])
def test_same_weights_and_noise_give_transformers_vitmae_loss_logits_and_mask(norm_pix_loss, mask_ratio):
    reference = reference_mae(norm_pix_loss=norm_pix_loss, mask_ratio=mask_ratio)
    ours, _ = from_transformers(reference)
    assert isinstance(ours, ViTScratchForPreTraining) and ours.config.norm_pix_loss == norm_pix_loss
    pixels, noise = images(), noise_for()
    with torch.no_grad():
        expected, got = reference(pixel_values=pixels, noise=noise), ours(pixel_values=pixels, noise=noise)
    assert torch.equal(got.mask, expected.mask) and torch.equal(got.ids_restore, expected.ids_restore)
    assert got.mask.sum().item() == 2 * (25 - int(25 * (1 - mask_ratio)))
    torch.testing.assert_close(got.logits, expected.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(got.loss, expected.loss, atol=1e-5, rtol=0)


def test_the_decoder_sees_only_the_visible_patches_pixels():
    model = ViTScratchForPreTraining(pretraining_config()).eval()
    pixels, noise = images(), noise_for()
    with torch.no_grad():
        output = model(pixels, noise=noise)
        hidden = output.mask[0].reshape(5, 5).bool().repeat_interleave(4, 0).repeat_interleave(4, 1)  # (20, 20)
        changed_hidden = pixels.clone()
        changed_hidden[0, :, hidden] += 5.0
        changed_visible = pixels.clone()
        changed_visible[0, :, ~hidden] += 5.0
        assert torch.equal(model(changed_hidden, noise=noise).logits, output.logits)
        assert not torch.allclose(model(changed_visible, noise=noise).logits[0], output.logits[0])


def test_masking_keeps_the_patches_of_lowest_noise_and_draws_its_own_without():
    model = ViTScratchForPreTraining(pretraining_config(mask_ratio=0.6)).eval()
    noise = noise_for()
    with torch.no_grad():
        output = model(images(), noise=noise)
        kept = noise.argsort(dim=1)[:, :10]  # 25 * (1 - 0.6) = 10 kept
        assert torch.equal(output.mask.gather(1, kept), torch.zeros(2, 10))
        assert output.mask.sum(dim=1).tolist() == [15.0, 15.0]
        assert torch.equal(output.ids_restore, noise.argsort(dim=1).argsort(dim=1))
        first, second = model(images()).mask, model(images()).mask
    assert first.sum(dim=1).tolist() == [15.0, 15.0] and not torch.equal(first, second)


@pytest.mark.parametrize("norm_pix_loss", [False, True])
def test_the_loss_is_the_mean_squared_error_over_hidden_patches(norm_pix_loss):
    model = ViTScratchForPreTraining(pretraining_config(norm_pix_loss=norm_pix_loss)).eval()
    pixels = images()
    with torch.no_grad():
        output = model(pixels, noise=noise_for())
    target = patchify(pixels, (4, 4))  # (2, 25, 48)
    if norm_pix_loss:
        target = (target - target.mean(-1, keepdim=True)) / (target.var(-1, keepdim=True) + 1e-6) ** 0.5
    errors = ((output.logits - target) ** 2).mean(-1)  # (2, 25)
    torch.testing.assert_close(output.loss, errors[output.mask.bool()].mean())


def test_patchify_is_unpatchified_and_orders_each_patch_by_row_column_channel():
    pixels = images(size=12)
    patches = patchify(pixels, (4, 6))
    assert patches.shape == (2, 6, 4 * 6 * 3)
    assert torch.equal(patches[1, 4, :3], pixels[1, :, 8, 0])  # patch (row 2, column 0), its first pixel's channels
    assert torch.equal(unpatchify(patches, (3, 2), (4, 6)), pixels)


def test_every_parameter_learns_from_the_loss():
    """No unused module (which would break DDP): the encoder's, the decoder's and the final norm in either slot."""
    for fields in ({}, {"pooling": "mean", "fc_norm": True}, {"position_embedding": "sincos"}):
        model = ViTScratchForPreTraining(pretraining_config(**fields)).train()
        model(images(), noise=noise_for()).loss.backward()
        silent = [
            name for name, parameter in model.named_parameters() if parameter.grad is None or not parameter.grad.any()
        ]
        assert not silent, (fields, silent)


def test_other_resolutions_embed_on_their_own_grid():
    model = ViTScratchForPreTraining(pretraining_config()).eval()
    with torch.no_grad():
        output = model(torch.randn(2, 3, 28, 24), interpolate_pos_encoding=True)
    assert output.logits.shape == (2, 7 * 6, 48) and output.mask.shape == (2, 42) and output.loss.isfinite()
    assert torch.equal(model.decoder.position_embeddings_for((7, 6)), mae_position_table((7, 6), 20))


def test_misshapen_noise_is_refused():
    with pytest.raises(ValueError, match=r"noise must have shape \(batch, num_patches\) = \(2, 25\)"):
        ViTScratchForPreTraining(pretraining_config())(images(), noise=torch.rand(2, 24))


def test_with_a_stem_the_kept_tokens_never_see_a_hidden_pixel():
    """A conv stem of stride 2 before patches of 2: 4x4-pixel cells, whose receptive fields cross cell borders. The
    latent of the kept tokens is the same whatever the hidden cells hold, and the loss scores cells of 4x4 pixels."""
    model = ViTScratchForPreTraining(pretraining_config(stem="conv", stem_channels=[8], patch_size=2)).eval()
    pixels, noise = images(), noise_for()
    hidden = model.masking.hidden(noise).reshape(2, 1, 5, 5).repeat_interleave(4, 2).repeat_interleave(4, 3)
    changed = pixels + hidden * torch.randn_like(pixels) * 5
    with torch.no_grad():
        latent, mask, _ = model.encode(pixels, noise, False)
        latent_changed, mask_changed, _ = model.encode(changed, noise, False)
        output = model(pixels, noise=noise)
    assert torch.equal(mask, mask_changed) and torch.equal(mask, model.masking.hidden(noise))
    torch.testing.assert_close(latent_changed, latent, atol=1e-5, rtol=0)
    assert output.logits.shape == (2, 25, 4 * 4 * 3) and output.loss.isfinite()
    visible = pixels + (1 - hidden) * torch.randn_like(pixels)  # a change where the stem may look: the latent moves
    with torch.no_grad():
        assert not torch.allclose(model.encode(visible, noise, False)[0], latent, atol=1e-3)


@pytest.mark.parametrize("position_embedding", ["learned", "sincos"])
def test_a_saved_folder_reloads_by_the_auto_class_computing_the_same(tmp_path, position_embedding):
    """The fixed tables (decoder's, and the encoder's sincos) are not saved and come back filled."""
    model = ViTScratchForPreTraining(pretraining_config(position_embedding=position_embedding)).eval()
    model.save_pretrained(tmp_path)
    loaded = AutoModelForPreTraining.from_pretrained(tmp_path).eval()
    assert type(loaded) is ViTScratchForPreTraining
    with torch.no_grad():
        expected, got = model(images(), noise=noise_for()), loaded(images(), noise=noise_for())
    assert torch.equal(got.logits, expected.logits) and torch.equal(got.loss, expected.loss)


def test_a_classifier_from_a_pretraining_folder_holds_its_encoder_and_a_new_head(tmp_path):
    model = ViTScratchForPreTraining(pretraining_config(num_labels=3))
    model.save_pretrained(tmp_path)
    for load in (ViTScratchForImageClassification.from_pretrained, AutoModelForImageClassification.from_pretrained):
        classifier = load(tmp_path)
        assert type(classifier) is ViTScratchForImageClassification and classifier.classifier.out_features == 3
        encoder = model.vit.state_dict()
        assert classifier.vit.state_dict().keys() == encoder.keys()
        assert all(torch.equal(tensor, encoder[key]) for key, tensor in classifier.vit.state_dict().items())
        assert not any(key.startswith("decoder") for key in classifier.state_dict())
    pretrained = AutoModelForPreTraining.from_pretrained(tmp_path)
    assert torch.equal(pretrained.decoder.mask_token, model.decoder.mask_token)


def test_a_classifier_folder_is_not_a_masked_autoencoder(tmp_path):
    """The decoder cannot come from a classifier's folder: refused by name, never filled at random."""
    ViTScratchForImageClassification(pretraining_config()).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="has no tensor 'decoder"):
        ViTScratchForPreTraining.from_pretrained(tmp_path)
