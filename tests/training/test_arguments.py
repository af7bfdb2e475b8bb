"""The command line and recipes as properties: any value a recipe gives arrives as given, JSON and YAML alike; the
command line beats the recipe; the last of a repeated option wins; an unknown key or a value out of range is a
non-zero exit naming it; shipped recipes are found by name from anywhere."""

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.training.arguments import argument_names, parse_arguments
from modeling_vit_scratch.training.command import main
from modeling_vit_scratch.training.model_source import model_plan, parse_overrides
from modeling_vit_scratch.training.recipes import load_recipe, shipped_recipe

FINITE = dict(allow_nan=False, allow_infinity=False)
RECIPE_VALUES = st.fixed_dictionaries(
    {},
    optional={
        "learning_rate": st.floats(1e-6, 10, **FINITE),
        "seed": st.integers(0, 2**32 - 1),
        "ema_decay": st.floats(0, 0.999, **FINITE),
        "layer_decay": st.floats(0.01, 1, **FINITE),
        "augment": st.booleans(),
        "augmentation": st.sampled_from(["digits", "photos", "none"]),
        "max_degrees": st.floats(0, 180, **FINITE),
        "validation_views": st.integers(1, 16),
        "label_column": st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=12),
        "report_to": st.just(["tensorboard"]),  # ["none"] is [] to TrainingArguments
        "lr_scheduler_type": st.sampled_from(["linear", "cosine", "constant"]),
        "config_overrides": st.sampled_from(["image_size=8", '{"hidden_size": 48}']),
    },
)


def values(groups) -> dict:
    return {name: getattr(group, name) for group in groups for name in vars(group) if not name.startswith("_")}


def as_given(value):
    return str(getattr(value, "value", value)) if not isinstance(value, (bool, int, float, list)) else value


@settings(max_examples=20)
@given(recipe=RECIPE_VALUES, as_yaml=st.booleans())
def test_any_recipe_value_arrives_as_given(tmp_path_factory, recipe, as_yaml):
    folder = tmp_path_factory.mktemp("recipe")
    path = folder / ("recipe.yaml" if as_yaml else "recipe.json")
    path.write_text(
        yaml.safe_dump({**recipe, "output_dir": "out"}) if as_yaml else json.dumps({**recipe, "output_dir": "out"})
    )
    parsed = values(parse_arguments([str(path)]))
    for key, value in recipe.items():
        got = parsed[key]
        if isinstance(value, float):
            assert got == pytest.approx(value, rel=1e-12), key
        elif key == "config_overrides":  # the fields, as JSON: the command line's may join them
            assert json.loads(got) == (value if isinstance(value, dict) else parse_overrides(value))
        else:
            assert as_given(got) == value, key


@settings(max_examples=15)
@given(recipe_seed=st.integers(0, 1000), typed=st.lists(st.integers(0, 1000), min_size=1, max_size=3))
def test_the_command_line_beats_the_recipe_and_the_last_repeat_wins(tmp_path_factory, recipe_seed, typed):
    path = tmp_path_factory.mktemp("recipe") / "recipe.json"
    path.write_text(json.dumps({"seed": recipe_seed, "output_dir": "out"}))
    repeated = [word for seed in typed for word in ("--seed", str(seed))]
    assert parse_arguments([str(path), *repeated])[3].seed == typed[-1]


@pytest.mark.parametrize("key", ["learning_rat", "hub_tokn", "no_such_argument"])
def test_an_unknown_key_is_a_non_zero_exit_naming_it(tmp_path, key):
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps({key: 1, "output_dir": str(tmp_path / "out")}))
    for argv in ([str(path)], ["--output_dir", str(tmp_path / "out"), f"--{key}", "1"]):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code != 0 and key in str(stop.value.code)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("name", "value"),
    [("learning_rate", "nan"), ("ema_decay", "1"), ("validation_fraction", "-0.1"), ("seed", "-1"), ("hflip", "2")],
)
def test_a_value_out_of_range_is_refused_naming_the_argument(tmp_path, name, value):
    with pytest.raises(UserError, match=f"--{name}"):
        parse_arguments(["--output_dir", str(tmp_path), f"--{name}", value])


def test_an_argument_that_needs_another_names_it(tmp_path):
    with pytest.raises(UserError, match="--max_steps"):
        parse_arguments(["--output_dir", str(tmp_path), "--streaming", "true"])


def test_no_output_folder_is_refused_naming_the_argument(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["--max_steps", "1"])
    assert "--output_dir" in str(stop.value.code)
    assert list(tmp_path.iterdir()) == []


def test_a_shipped_recipe_is_found_by_name_from_anywhere_with_its_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model_args, data_args, _, training_args = parse_arguments(["train_digits", "--output_dir", "out"])
    assert Path(model_args.model).is_file() and data_args.dataset == "digits"
    assert training_args.num_train_epochs == 200 and training_args.output_dir == "out"


def test_every_argument_has_help_and_the_groups_keep_their_names():
    names = argument_names()
    for name in ("model", "teacher", "ema_decay", "layer_decay", "bf16_when_faster", "streaming", "dataset"):
        assert name in names
    assert "overwrite_output_dir" in names and "resume_from_checkpoint" in names and "push_to_hub" in names


def test_fsdp_on_cpu_is_refused_before_any_folder_is_made(tmp_path):
    with pytest.raises(SystemExit) as stop:
        main(["--output_dir", str(tmp_path / "out"), "--fsdp", "full_shard", "--max_steps", "1"])
    assert "--fsdp" in str(stop.value.code) and not (tmp_path / "out").exists()


@pytest.mark.parametrize("recipe", ["pretrain_small_images", "pretrain_photos"])
def test_the_pretraining_recipes_parse_as_masked_image_modelling_of_a_buildable_model(tmp_path, recipe):
    model_args, data_args, _, training_args = parse_arguments([recipe, "--output_dir", str(tmp_path / "out")])
    plan = model_plan(model_args)
    assert model_args.objective == "masked_image_modeling" and 0 < plan.config.mask_ratio < 1
    assert plan.config.decoder_hidden_size % plan.config.decoder_num_attention_heads == 0
    assert training_args.num_train_epochs > 0 and not (data_args.mixup or data_args.cutmix)


def test_config_overrides_on_the_command_line_join_the_recipes_field_by_field(tmp_path):
    words = ["--output_dir", str(tmp_path / "out"), "--config_overrides", "num_channels=3,mask_ratio=0.5"]
    config = model_plan(parse_arguments(["pretrain_small_images", *words])[0]).config
    recipe = load_recipe(shipped_recipe("pretrain_small_images"))["config_overrides"]
    assert (config.num_channels, config.mask_ratio) == (3, 0.5)  # the command line's, and the recipe's others:
    assert all(getattr(config, name) == value for name, value in recipe.items() if name != "mask_ratio")
