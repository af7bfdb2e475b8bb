"""Values that train would otherwise read as something else, said in one line before any work (or, where the data
decides, before any image is decoded): a key given twice in --config_overrides, an architecture file that is a saved
model's config.json or names channels no image can fill, a recipe or architecture file saved with a byte-order mark
(accepted), a held-out split a fraction of 0 would leave out, a class the training split has no image of."""

import json

import pytest
from entry_points import Scenario, outcome, with_argument

import modeling_vit_scratch.training.trainer as trainer_module
from modeling_vit_scratch.common.overrides import SET_BY_PACKAGE, check_config_overrides, parse_overrides

BOM = b"\xef\xbb\xbf"
CLASSES = ("cat", "dog", "fox")  # the scenario's image folder: its classes, in label order


def missing(labels: list[int]) -> list[str]:
    """The classes that the first of `labels` is not: those one training image leaves out."""
    return [CLASSES[index] for index in sorted(set(labels) - {labels[0]})]


@pytest.fixture
def never_decodes(monkeypatch):
    """A refusal comes before any image is decoded (or the data set read): getting there fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("the images were decoded")

    monkeypatch.setattr(trainer_module, "check_images_together", refuse)


@pytest.mark.parametrize(
    ("overrides", "key", "first", "then"),
    [
        ("image_size=8,image_size=16", "image_size", "image_size=8", "image_size=16"),
        ("a=1, b=2, a = 3", "a", "a=1", "a = 3"),
    ],
)
def test_a_config_override_given_twice_is_one_line(tmp_path, overrides, key, first, then, never_decodes):
    result = outcome("train", with_argument(Scenario(tmp_path).argv("train"), "--config_overrides", overrides))
    assert result.code == 1 and result.one_line, result
    assert result.error == f"error: --config_overrides gives {key} twice ({first}, then {then}): keep one."


def test_a_timm_keyword_given_twice_is_one_line(tmp_path):
    from modeling_vit_scratch.conversion.timm_source import timm_kwargs

    with pytest.raises(ValueError, match=r"^--timm_kwargs gives img_size twice \(img_size=384, then img_size=224\)"):
        timm_kwargs("img_size=384,img_size=224")


def test_a_saved_models_config_file_says_to_give_its_folder(tmp_path, never_decodes):
    scenario = Scenario(tmp_path)
    config = scenario.model() / "config.json"
    result = outcome("train", with_argument(scenario.argv("train"), "--model", config))
    assert result.code == 1 and result.one_line, result
    assert result.error.startswith(
        f"error: --model {config} is the config.json of a saved model (it holds architectures"
    )
    assert f"give its folder, --model {scenario.model()};" in result.error


@pytest.mark.parametrize("key", sorted(SET_BY_PACKAGE))
def test_a_key_the_package_sets_is_one_line_saying_where_it_comes_from(tmp_path, key, never_decodes):
    result = outcome("train", with_argument(Scenario(tmp_path).argv("train"), "--config_overrides", f"{key}=5"))
    assert result.code == 1 and result.one_line, result
    assert result.error == (
        f"error: --config_overrides gives {key}, which {SET_BY_PACKAGE[key]}, not by --config_overrides: remove it."
    )


def test_an_architecture_file_with_labels_says_labels_come_from_the_data(tmp_path, never_decodes):
    scenario = Scenario(tmp_path)
    path = tmp_path / "labelled.json"
    path.write_text(json.dumps({**json.loads(scenario.model_file().read_text()), "id2label": {"0": "x"}}))
    result = outcome("train", with_argument(scenario.argv("train"), "--model", path))
    assert result.error == (
        f"error: The architecture file {path}: the file gives id2label, which is set from the data set's classes "
        "(one label per class), not by the file: remove it."
    )


def test_a_saved_config_copied_without_weights_is_not_sent_to_its_folder(tmp_path, monkeypatch, never_decodes):
    scenario = Scenario(tmp_path)
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "config.json").write_bytes((scenario.model() / "config.json").read_bytes())
    monkeypatch.chdir(copy)
    result = outcome("train", with_argument(scenario.argv("train"), "--model", "config.json"))
    assert result.code == 1 and result.one_line, result
    assert result.error.endswith(
        f"not an architecture file: {copy} holds no weights beside it, so there is no model to fine-tune; to build "
        "a new model from its architecture, remove architectures, auto_map, transformers_version, id2label, label2id "
        "from it (labels come from the data set)."
    )


@pytest.mark.parametrize("where", ["file", "overrides"])
@pytest.mark.parametrize("channels", [2, 4])
def test_channels_no_image_can_fill_are_refused_naming_where_before_data_is_read(tmp_path, where, channels):
    scenario = Scenario(tmp_path)
    argv = scenario.argv("train")
    if where == "file":
        path = tmp_path / "arch4.json"
        path.write_text(json.dumps({**json.loads(scenario.model_file().read_text()), "num_channels": channels}))
        argv, named = with_argument(argv, "--model", path), f"The architecture file {path}"
    else:
        argv, named = with_argument(argv, "--config_overrides", f"num_channels={channels}"), "--config_overrides"
    argv = with_argument(argv, "--dataset", tmp_path / "not-read")  # a data set read would be named missing
    result = outcome("train", argv)
    assert result.code == 1 and result.one_line, result
    assert result.error == (
        f"error: {named} gives num_channels {channels}, but training feeds images as grayscale (1) or RGB (3): "
        "write num_channels 1 or 3, or leave it out to take the data set's."
    )


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_recipe_and_an_architecture_file_with_a_byte_order_mark_are_read(tmp_path, suffix, never_decodes):
    scenario = Scenario(tmp_path)
    recipe = tmp_path / f"r{suffix}"
    text = json.dumps({"seed": 3}) if suffix == ".json" else "seed: 3\n"
    recipe.write_bytes(BOM + text.encode())
    architecture = tmp_path / "bom.json"
    architecture.write_bytes(BOM + scenario.model_file().read_bytes())
    result = outcome("train", [str(recipe), *with_argument(scenario.argv("train"), "--model", architecture)])
    assert isinstance(result.traceback, AssertionError), result  # read, checked, and on to the images


@pytest.mark.parametrize("name", ["test", "validation"])
def test_a_fraction_of_0_for_a_split_the_data_set_lacks_says_a_split_is_needed(tmp_path, name, never_decodes):
    result = outcome("train", with_argument(Scenario(tmp_path).argv("train"), f"--{name}_fraction", "0"))
    assert result.code == 1 and result.one_line, result
    assert result.error == (
        f"error: --{name}_fraction 0 makes no {name} split, and the data set has no {name} split of its own: a run "
        f"needs one; give a share of the training images in (0, 1), e.g. --{name}_fraction 0.1."
    )


def test_max_train_samples_that_leaves_a_class_without_images_is_one_line_with_the_least_that_does_not(
    tmp_path, monkeypatch, never_decodes
):
    from modeling_vit_scratch.training import preflight

    scenario = Scenario(tmp_path)
    seen = {}
    check = preflight.check_training_classes

    def spy(splits, names, max_train_samples=None):  # the training split's labels, in the order it is cut
        seen["labels"] = list(splits["train"]["label"])
        return check(splits, names, max_train_samples)

    monkeypatch.setattr(trainer_module, "check_training_classes", spy)
    result = outcome("train", with_argument(scenario.argv("train"), "--max_train_samples", "1"))
    assert result.code == 1 and result.one_line, result
    least = max(seen["labels"].index(label) for label in set(seen["labels"])) + 1
    assert least > 1
    assert result.error == (
        "error: --max_train_samples 1 keeps 1 training images, with no image of 2 of the 3 classes the run is scored "
        f"on ({', '.join(repr(n) for n in missing(seen['labels']))}): give --max_train_samples {least} or more "
        "(the least that keeps every class), or leave it out."
    )
    monkeypatch.setattr(trainer_module, "check_training_classes", check)
    result = outcome("train", with_argument(scenario.argv("train"), "--max_train_samples", str(least)))
    assert isinstance(result.traceback, AssertionError), result  # every class kept: on to the images


def test_a_class_only_the_held_out_splits_hold_is_one_line_naming_it():
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

    from modeling_vit_scratch.training.preflight import check_training_classes

    features = Features({"label": ClassLabel(names=list(CLASSES)), "n": Value("int64")})
    split = lambda labels: Dataset.from_dict({"label": labels, "n": labels}, features=features)
    splits = DatasetDict(train=split([0, 1, 0, 1]), validation=split([0, 1]), test=split([0, 2]))
    with pytest.raises(ValueError) as refused:
        check_training_classes(splits, list(CLASSES))
    assert str(refused.value) == (
        "The training split holds no image of 1 class that the validation or test split scores ('fox'): add "
        "training images of them, or remove them from the held-out splits."
    )
    check_training_classes(DatasetDict(train=split([2, 0, 1]), validation=split([0]), test=split([2])), list(CLASSES))


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_a_recipes_config_overrides_mapping_builds_the_model_it_names(tmp_path, suffix):
    from modeling_vit_scratch.training.arguments import parse_arguments
    from modeling_vit_scratch.training.model_source import model_config

    scenario = Scenario(tmp_path)
    recipe = tmp_path / f"r{suffix}"
    recipe.write_text(json.dumps({"config_overrides": {"hidden_size": 32, "pooling": "mean"}}))  # JSON is YAML too
    model_arguments = parse_arguments([str(recipe), *scenario.argv("train")])[0]
    config, _ = model_config(model_arguments)
    assert (config.hidden_size, config.pooling) == (32, "mean")


@pytest.mark.parametrize("item", ["hiden_size=4", "num_labels=5", "model_type=vit"])
def test_a_recipes_config_overrides_mapping_is_checked_as_the_text_form_is(tmp_path, item, never_decodes):
    scenario = Scenario(tmp_path)
    key, value = item.split("=")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"config_overrides:\n  {key}: {value}\n")
    from_recipe = outcome("train", [str(recipe), *scenario.argv("train")])
    from_text = outcome("train", with_argument(scenario.argv("train"), "--config_overrides", item))
    assert from_recipe.code == 1 and from_recipe.one_line and from_recipe.error == from_text.error, from_recipe


def test_a_non_finite_number_in_a_recipes_config_overrides_mapping_is_one_line(tmp_path, never_decodes):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("config_overrides: {drop_path_rate: .nan}\n")
    result = outcome("train", [str(recipe), *Scenario(tmp_path).argv("train")])
    assert result.error == (
        'error: --config_overrides holds NaN, which is not a finite number: give e.g. {"drop_path_rate": 0.1}.'
    )


# an override of another type than its field, the line's end: what the field takes and a fix that works
OTHER_TYPES = [
    ("qkv_bias=no", "qkv_bias 'no', but qkv_bias takes true or false: write true or false.", "qkv_bias=true"),
    ("hidden_size=12.0", "hidden_size 12.0, but hidden_size takes an integer: write 12.", "hidden_size=12"),
    ("layer_norm_eps=1", "layer_norm_eps 1, but layer_norm_eps takes a number written with a point: write 1.0.", None),
    ("pooling=max", "pooling 'max', but pooling takes one of 'cls', 'mean': write one of them.", "pooling=mean"),
    (
        "stem_depths=3",
        (
            "stem_depths 3, but stem_depths takes a list of integers, in the JSON form: write --config_overrides "
            """'{"stem_depths": [3, 4, 9]}'."""
        ),
        '{"stem_depths": [3, 4, 9]}',
    ),
    (
        "image_size=big",
        (
            "image_size 'big', but image_size takes an integer or a list of integers, in the JSON form: write e.g. "
            """224, or --config_overrides '{"image_size": [224, 224]}'."""
        ),
        '{"image_size": [224, 224]}',
    ),
]


@pytest.mark.parametrize(("overrides", "says", "fixed"), OTHER_TYPES)
def test_an_override_of_another_type_names_how_its_type_is_written(overrides, says, fixed):
    with pytest.raises(ValueError) as refused:
        check_config_overrides(parse_overrides(overrides))
    assert str(refused.value) == f"--config_overrides gives {says}"
    check_config_overrides(parse_overrides(fixed or "layer_norm_eps=1.0"))  # the fix offered works


def test_every_config_field_given_another_type_is_refused_with_a_fix():
    """Every field of the model's own: a value of no type it takes names the field and how that type is written."""
    from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig

    for name in sorted(ViTScratchConfig.__annotations__):
        with pytest.raises(ValueError, match=rf"^--config_overrides gives {name} 'zzz', but {name} takes .+: write "):
            check_config_overrides({name: "zzz"})


def test_an_override_of_another_type_is_one_line_before_the_data_is_read(tmp_path, never_decodes):
    result = outcome("train", with_argument(Scenario(tmp_path).argv("train"), "--config_overrides", "qkv_bias=no"))
    assert result.code == 1 and result.one_line, result
    assert (
        result.error
        == "error: --config_overrides gives qkv_bias 'no', but qkv_bias takes true or false: write true or false."
    )


@pytest.mark.parametrize("flag", ["--config_overrides", "--timm_kwargs"])
def test_a_list_in_the_key_value_form_is_named_with_its_json_form(flag):
    """Its commas split the items (`stem_channels=[8` and `16]`): the line gives the whole in the JSON form, which
    then reads as meant."""
    with pytest.raises(ValueError) as refused:
        parse_overrides("hidden_size=12, stem_channels=[8, 16],stem=conv", flag)
    json_form = '{"hidden_size": 12, "stem_channels": [8, 16], "stem": "conv"}'
    assert str(refused.value) == (
        f"{flag} gives stem_channels a list in the key=value form (stem_channels=[8, 16]), whose commas split the "
        f"items: write it in the JSON form, {flag} '{json_form}'."
    )
    assert parse_overrides(json_form, flag) == {"hidden_size": 12, "stem_channels": [8, 16], "stem": "conv"}
    assert parse_overrides("stem_depths=[3]", flag) == {"stem_depths": [3]}  # one value: no comma to split it
