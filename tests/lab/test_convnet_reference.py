"""The reference ConvNet: any side and channels, the Trainer's calling convention, the plain loop trains it; the
reference script's refusals."""

import itertools

import pytest
import torch
from lab.reference import CONVNET_WIDTHS, MODEL_KINDS, reference_model, train_plain
from test_image_sets import write_colour_set


@pytest.mark.parametrize(("side", "channels", "labels"), [(28, 1, 26), (32, 3, 9), (13, 2, 5)])
def test_the_convnet_takes_the_sets_side_and_channels_and_every_parameter_learns(side, channels, labels):
    model = reference_model("convnet", labels, seed=0, image_size=side, num_channels=channels)
    pixels, targets = torch.randn(3, channels, side, side), torch.tensor([0, labels - 1, 1])
    output = model(pixel_values=pixels, labels=targets)
    assert output.logits.shape == (3, labels)
    torch.testing.assert_close(output.loss, torch.nn.functional.cross_entropy(output.logits, targets))
    output.loss.backward()
    assert all(parameter.grad is not None and parameter.grad.abs().sum() > 0 for parameter in model.parameters())
    assert model(pixel_values=pixels).loss is None
    # four bias-free 3x3 convolutions, a BatchNorm (scale, shift) after each, a linear head
    widths = (channels, *CONVNET_WIDTHS)
    convolutions = sum(9 * before * after + 2 * after for before, after in itertools.pairwise(widths))
    assert sum(parameter.numel() for parameter in model.parameters()) == convolutions + (widths[-1] + 1) * labels


def test_the_convnet_refuses_a_side_it_cannot_halve_twice():
    assert "convnet" in MODEL_KINDS
    with pytest.raises(ValueError, match="image_size is 3"):
        reference_model("convnet", 2, seed=0, image_size=3, num_channels=1)


def test_the_plain_reference_loop_trains_the_convnet_on_a_colour_set(tmp_path):
    write_colour_set(tmp_path / "data", train_per_class=24, test_per_class=6)
    results = train_plain(str(tmp_path / "data"), "convnet", tmp_path / "out", seed=0, num_train_epochs=8)
    assert (results["model_kind"], results["image_size"], results["num_channels"]) == ("convnet", 32, 3)
    assert results["test_accuracy"] == 1.0


def test_the_reference_script_ends_with_one_line_for_a_folder_that_is_not_there(tmp_path):
    import reference_vit

    with pytest.raises(SystemExit, match="^error: --dataset .*: no such folder"):
        reference_vit.main([str(tmp_path / "absent"), "--model_kind", "convnet", "--output_dir", str(tmp_path / "out")])
