"""The small-image recipes in configs/: each parses, names an architecture file beside it, and that model is no
larger than the reference it is measured against (transformers' ViT of the reference size, `lab.reference`) at the
same input side and channels."""

import json

import pytest
from helpers import REPO
from lab.reference import reference_model

from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig
from modeling_vit_scratch.modeling_vit_scratch import ViTScratchForImageClassification
from modeling_vit_scratch.training.recipes import load_recipe

SMALL_IMAGE_RECIPES = ("configs/train_small_images.json", "configs/train_color_images.json")


def parameter_count(model) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


@pytest.mark.parametrize("recipe_path", SMALL_IMAGE_RECIPES)
@pytest.mark.parametrize("num_labels", [9, 26])
def test_recipe_names_a_model_no_larger_than_the_reference(recipe_path, num_labels):
    recipe = load_recipe(REPO / recipe_path)
    model_file = (REPO / recipe_path).parent / recipe["model"]  # a recipe's model path is read beside the recipe
    fields = json.loads(model_file.read_text())
    ours = ViTScratchForImageClassification(ViTScratchConfig(**fields, num_labels=num_labels))
    geometry = dict(image_size=fields["image_size"], num_channels=fields["num_channels"])
    reference = reference_model("transformers", num_labels, seed=0, **geometry)
    assert (ours.config.hidden_size, ours.config.num_attention_heads, ours.config.intermediate_size) == (64, 4, 128)
    assert parameter_count(ours) <= parameter_count(reference)
