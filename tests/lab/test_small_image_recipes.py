"""The small-image recipes in configs/: each parses, names an architecture file beside it, and that model is no
larger than the reference it is measured against (transformers' ViT of the reference size, `lab.reference`) at the
same input side and channels; the model of the small-images recipes takes the data's channels, gray or colour."""

import json

import pytest
from helpers import REPO, write_imagefolder
from lab.reference import reference_model

from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig
from modeling_vit_scratch.modeling_vit_scratch import ViTScratchForImageClassification
from modeling_vit_scratch.training.command import main
from modeling_vit_scratch.training.recipes import load_recipe

SMALL_IMAGE_RECIPES = ("configs/train_small_images.json", "configs/train_color_images.json")


def parameter_count(model) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


@pytest.mark.parametrize("recipe_path", SMALL_IMAGE_RECIPES)
@pytest.mark.parametrize("num_labels", [9, 26])
@pytest.mark.parametrize("channels", [1, 3])
def test_recipe_names_a_model_no_larger_than_the_reference(recipe_path, num_labels, channels):
    recipe = load_recipe(REPO / recipe_path)
    model_file = (REPO / recipe_path).parent / recipe["model"]  # a recipe's model path is read beside the recipe
    fields = {"num_channels": channels, **json.loads(model_file.read_text())}  # the data's, where the file names none
    ours = ViTScratchForImageClassification(ViTScratchConfig(**fields, num_labels=num_labels))
    geometry = dict(image_size=fields["image_size"], num_channels=fields["num_channels"])
    reference = reference_model("transformers", num_labels, seed=0, **geometry)
    assert (ours.config.hidden_size, ours.config.num_attention_heads, ours.config.intermediate_size) == (64, 4, 128)
    assert parameter_count(ours) <= parameter_count(reference)


@pytest.mark.parametrize(
    "recipe, mode, channels",
    [("train_small_images", "L", 1), ("pretrain_small_images", "RGB", 3)]
    + [pytest.param("train_small_images", "RGB", 3, marks=pytest.mark.slow)]
    + [pytest.param("pretrain_small_images", "L", 1, marks=pytest.mark.slow)],
)
def test_the_small_images_recipes_take_the_channels_of_the_data(tmp_path, recipe, mode, channels):
    images = write_imagefolder(tmp_path / "images", per_class=4, size=(28, 28), mode=mode)
    run = ["--dataset", images, "--output_dir", tmp_path / "run", "--max_steps", "1", "--save_strategy", "no"]
    main([str(word) for word in [recipe, *run, "--validation_fraction", "0.25", "--test_fraction", "0.25"]])
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["num_channels"] == channels
