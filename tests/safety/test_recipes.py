"""Recipes: every error in a recipe file is one line naming the file and, where the text has one, the line: a
syntax error at any line, an unknown key, a key given twice (never the last value kept without a word), a YAML tag that would build
a Python object; an empty recipe or one that is not a mapping is one line too. Only `train` takes a recipe."""

import json

import pytest
from entry_points import outcome
from hypothesis import given, settings
from hypothesis import strategies as st

from modeling_vit_scratch.common.overrides import parse_overrides
from modeling_vit_scratch.training.arguments import PATH_ARGUMENTS, parse_arguments
from modeling_vit_scratch.training.recipes import load_recipe

# plain arguments and values a recipe may hold
POOL = {
    "seed": 3,
    "learning_rate": 0.001,
    "weight_decay": 0.05,
    "max_shift": 0.1,
    "max_degrees": 10,
    "num_train_epochs": 2,
    "report_to": "none",
    "split_seed": 1,
    "augment": True,
}
SUFFIXES = (".json", ".yaml")
# a broken line in each syntax, which its parser reports at that very line
BROKEN = {".json": '  "{key}" 1,', ".yaml": "{key}: 1: 2"}


def recipe_lines(pairs: list[tuple[str, object]], suffix: str) -> list[str]:
    """One key per line: JSON's braces on lines of their own, YAML's `key: value`."""
    if suffix == ".yaml":
        return [f"{key}: {json.dumps(value)}" for key, value in pairs]
    body = [f"  {json.dumps(key)}: {json.dumps(value)}," for key, value in pairs]
    body[-1] = body[-1].rstrip(",")
    return ["{", *body, "}"]


def refusal(tmp_path, suffix: str, lines: list[str]) -> str:
    """The one line `train` prints for the recipe `lines`, which must also name the file."""
    path = tmp_path / f"recipe{suffix}"
    path.write_text("\n".join(lines) + "\n")
    result = outcome("train", [str(path)])
    assert result.one_line, result
    assert f"Recipe {path}" in result.error or f"the recipe {path}" in result.error, result.error
    return result.error


keys = st.lists(st.sampled_from(sorted(POOL)), min_size=1, max_size=len(POOL), unique=True)


@settings(max_examples=25)
@given(names=keys, data=st.data(), suffix=st.sampled_from(SUFFIXES))
def test_a_key_given_twice_is_refused_naming_the_file_line_and_key(tmp_path_factory, names, data, suffix):
    tmp_path = tmp_path_factory.mktemp("recipe")
    twice = data.draw(st.sampled_from(names))
    where = data.draw(st.integers(names.index(twice) + 1, len(names)))  # after its first place
    pairs = [(key, POOL[key]) for key in names]
    pairs.insert(where, (twice, POOL[twice]))
    lines = recipe_lines(pairs, suffix)
    line = where + 1 + (suffix == ".json")  # JSON's first line is the brace
    error = refusal(tmp_path, suffix, lines)
    assert f"line {line}: key {twice!r} is given twice" in error, error
    assert "keep one" in error


@settings(max_examples=25)
@given(names=keys, data=st.data(), suffix=st.sampled_from(SUFFIXES))
def test_a_broken_line_is_named_by_its_number(tmp_path_factory, names, data, suffix):
    tmp_path = tmp_path_factory.mktemp("recipe")
    lines = recipe_lines([(key, POOL[key]) for key in names], suffix)
    first = 1 if suffix == ".json" else 0
    index = data.draw(st.integers(first, first + len(names) - 1))
    lines[index] = BROKEN[suffix].format(key=names[index - first])
    error = refusal(tmp_path, suffix, lines)
    assert f"line {index + 1}: " in error and f"fix the {suffix[1:].upper()} there" in error, error


@pytest.mark.parametrize(
    ("suffix", "text", "says"),
    [
        (".json", "", "line 1"),
        (".yaml", "", "is empty"),
        (".yml", "# nothing but a comment\n", "is empty"),
        (".json", "{}", "is empty"),
        (".json", "[1, 2]", "holds a list, not a mapping"),
        (".yaml", "- seed\n- 3\n", "holds a list, not a mapping"),
        (".yaml", "just words\n", "holds a str, not a mapping"),
        (".yaml", 'seed: 1\nx: !!python/object/apply:os.system ["true"]\n', "line 2"),
        (".yaml", "seed: 1\ny: !!python/name:os.system\n", "would build a Python object"),
    ],
)
def test_a_recipe_that_is_no_mapping_of_arguments_is_one_line(tmp_path, suffix, text, says):
    path = tmp_path / f"recipe{suffix}"
    path.write_text(text)
    result = outcome("train", [str(path)])
    assert result.one_line, result
    assert f"Recipe {path}" in result.error and says in result.error, result.error


def test_a_recipe_that_is_not_text_is_one_line(tmp_path):
    path = tmp_path / "recipe.json"
    path.write_bytes(b"\xff\xfe\x00{")
    result = outcome("train", [str(path)])
    assert result.one_line and "UTF-8" in result.error, result


@settings(max_examples=25)
@given(names=keys, data=st.data(), suffix=st.sampled_from(SUFFIXES))
def test_an_unknown_key_is_named_with_its_line(tmp_path_factory, names, data, suffix):
    tmp_path = tmp_path_factory.mktemp("recipe")
    where = data.draw(st.integers(0, len(names)))
    pairs = [(key, POOL[key]) for key in names]
    pairs.insert(where, ("learnig_rate", 0.1))
    error = refusal(tmp_path, suffix, recipe_lines(pairs, suffix))
    line = where + 1 + (suffix == ".json")
    assert "Unknown key 'learnig_rate' in the recipe " in error, error
    assert f"line {line} (did you mean 'learning_rate'?)" in error, error


# A recipe holds plain values: what each argument takes, and nothing a parser multiplies or nests past that


ALIAS_BOMB = "\n".join(  # nine times nine times nine values from three short lines: nine levels reach gigabytes
    f"{name}: &{name} [{', '.join([source] * 9)}]" for name, source in (("a", '"x"'), ("b", "*a"), ("c", "*b"))
)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (ALIAS_BOMB, 1),
        ("seed: 1\nreport_to: &r none\nlogging_dir: *r\n", 2),
        ("seed: 1\nlearning_rate: 0.1\nlabel_names: &names [a, b]\n", 3),
        ("seed: &s 1\n", 1),
    ],
)
def test_yaml_anchors_and_aliases_are_refused_naming_their_line(tmp_path, text, line):
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    result = outcome("train", [str(path)])
    assert result.one_line, result
    assert f"Recipe {path} line {line}: YAML anchors and aliases are not allowed in a recipe" in result.error
    assert "write the value out" in result.error


# arguments that take a list of plain values, and plain values of another kind nested inside one
LIST_KEYS = ("report_to", "label_names", "include_for_metrics")
NESTED = st.one_of(
    st.lists(st.sampled_from(["none", "a"]), max_size=2), st.dictionaries(st.sampled_from("ab"), st.integers())
)


@settings(max_examples=25)
@given(names=keys, data=st.data(), suffix=st.sampled_from(SUFFIXES))
def test_a_list_inside_a_list_is_refused_naming_the_key_and_line(tmp_path_factory, names, data, suffix):
    tmp_path = tmp_path_factory.mktemp("recipe")
    key, inner = data.draw(st.sampled_from(LIST_KEYS)), data.draw(NESTED)
    where = data.draw(st.integers(0, len(names)))
    pairs = [(name, POOL[name]) for name in names if name != "report_to"]
    pairs.insert(min(where, len(pairs)), (key, ["none", inner]))
    line = [name for name, _ in pairs].index(key) + 1 + (suffix == ".json")
    error = refusal(tmp_path, suffix, recipe_lines(pairs, suffix))
    kind = "list" if isinstance(inner, list) else "mapping"
    assert f"Key {key!r} in the recipe " in error and f"line {line} holds a {kind} inside its list" in error, error
    assert "give it a list of plain values" in error


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize(("value", "kind"), [([1, 2], "list"), ({"a": 1}, "mapping")])
def test_a_list_or_mapping_for_a_one_value_argument_is_refused(tmp_path, suffix, value, kind):
    error = refusal(tmp_path, suffix, recipe_lines([("learning_rate", 0.1), ("seed", value)], suffix))
    assert f"line {2 + (suffix == '.json')} holds a {kind}, which --seed does not take: give it one value" in error


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_values_nested_past_what_a_parser_follows_are_one_line(tmp_path, suffix):
    error = refusal(tmp_path, suffix, [f'{{"seed": {"[" * 100_000}{"]" * 100_000}}}'])
    assert "nested too deep to read: a recipe holds plain values" in error, error


@settings(max_examples=25)
@given(
    value=st.dictionaries(st.text("abcdefghij_", min_size=1, max_size=8), st.floats(0, 1), min_size=1, max_size=4),
    suffix=st.sampled_from(SUFFIXES),
)
def test_a_mapping_reaches_an_argument_that_takes_json_as_that_mapping(tmp_path_factory, value, suffix):
    from modeling_vit_scratch.training.arguments import parse_arguments

    tmp_path = tmp_path_factory.mktemp("recipe")
    path = tmp_path / f"recipe{suffix}"
    path.write_text("\n".join(recipe_lines([("seed", 1), ("lr_scheduler_kwargs", value)], suffix)))
    *_, training_args = parse_arguments([str(path), "--output_dir", str(tmp_path / "out")])
    assert training_args.lr_scheduler_kwargs == value


# what a user may give first instead of a recipe: a file named otherwise (its text a good recipe), a folder
@pytest.mark.parametrize("first", [True, False], ids=["first", "after-an-argument"])
@pytest.mark.parametrize("name", ["r.txt", "recipe", "configs/", "empty/"])
def test_a_folder_or_a_file_not_named_as_a_recipe_is_named_so(tmp_path, name, first):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "train_x.json").write_text('{"seed": 1}')
    (tmp_path / "empty").mkdir()
    given = tmp_path / name
    if not name.endswith("/"):
        given.write_text('{"seed": 1}')
    before = sorted(tmp_path.rglob("*"))
    result = outcome("train", [str(given)] if first else ["--seed", "3", str(given)])
    assert result.one_line, result
    assert "a recipe is a .json, .yaml or .yml file" in result.error or "named .json, .yaml or .yml" in result.error
    if name == "configs/":
        assert f"{given} is a folder" in result.error and "e.g. " in result.error and "train_x.json" in result.error
    elif name == "empty/":
        assert "give a recipe file in it." in result.error
    else:
        assert f"{given} is not named .json, .yaml or .yml" in result.error and "rename it" in result.error
    assert sorted(tmp_path.rglob("*")) == before


# a file given first (or bare) that holds no recipe (a model card, an architecture, an image): renaming it is no fix
@pytest.mark.parametrize(
    "name, text", [("README.md", "# My model\n\nTrained on cats.\n"), ("arch.txt", '{"image_size": 8}'), ("x.png", "")]
)
def test_a_file_that_holds_no_recipe_is_told_to_follow_its_argument_name(tmp_path, name, text):
    given = tmp_path / name
    given.write_text(text)
    result = outcome("train", [str(given), "--output_dir", str(tmp_path / "out")])
    assert result.one_line, result
    assert result.error == (
        f"error: {given} is a file given without an argument name, and no recipe (a .json, .yaml or .yml file of "
        "argument names and values): give it after the argument it is for, e.g. --model takes a saved model folder, "
        "a preset name or an architecture .json file; --dataset an image folder."
    )


# Trainer arguments the package replaces with its own way, given with another value
OVERRIDDEN = [
    (["--push_to_hub", "true", "--hub_strategy", "all_checkpoints"], "hub_strategy", "pushes the final, checked model"),
    (["--hub_strategy", "every_save"], "hub_strategy", "pushes the final, checked model"),
    (["--hub_always_push", "true"], "hub_always_push", "pushes the final, checked model"),
    (["--remove_unused_columns", "true"], "remove_unused_columns", "keeps every column"),
]


@pytest.mark.parametrize("in_recipe", [False, True], ids=["command-line", "recipe"])
@pytest.mark.parametrize(("argv", "name", "instead"), OVERRIDDEN)
def test_an_argument_the_package_overrides_is_refused_saying_what_it_does(tmp_path, argv, name, instead, in_recipe):
    if in_recipe:
        path = tmp_path / "recipe.json"
        path.write_text(json.dumps(dict(zip([arg[2:] for arg in argv[::2]], argv[1::2]))))
        argv = [str(path)]
    result = outcome("train", [*argv, "--dataset", str(tmp_path / "no-data"), "--output_dir", str(tmp_path / "out")])
    assert result.one_line, result
    assert f"--{name} " in result.error and f"is not used: vit-scratch {instead}" in result.error, result.error
    assert f"leave out --{name}" in result.error
    assert not (tmp_path / "out").exists()


# Trainer arguments that would break the package's data path, found only after training
DATA_PATH_BREAKERS = [
    (["--label_names", "foo"], "label_names foo", "carry the labels as `labels`"),
    (["--prediction_loss_only", "true"], "prediction_loss_only true", "must return predictions"),
    (["--eval_do_concat_batches", "false"], "eval_do_concat_batches false", "over the whole split at once"),
    (["--batch_eval_metrics", "true"], "batch_eval_metrics true", "over the whole split at once"),
]


@pytest.mark.parametrize(("argv", "shown", "why"), DATA_PATH_BREAKERS)
def test_an_argument_that_breaks_the_data_path_is_refused_before_work(tmp_path, argv, shown, why):
    result = outcome("train", [*argv, "--dataset", str(tmp_path / "no-data"), "--output_dir", str(tmp_path / "out")])
    assert result.one_line, result
    name = shown.split()[0]
    assert result.error.startswith(f"error: --{shown} would break training here: "), result.error
    assert why in result.error and result.error.endswith(f"leave out --{name}.")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("in_recipe", [False, True], ids=["command-line", "recipe"])
@pytest.mark.parametrize(
    ("name", "value", "needs"),
    [
        ("max_eval_samples", "1", "streaming true"),
        ("shuffle_buffer_size", "10", "streaming true"),
        ("max_bad_images", "0", "streaming true"),
        ("distillation_alpha", "0.7", "teacher TEACHER"),
        ("distillation", "soft", "teacher TEACHER"),
        ("hub_model_id", "me/vit", "push_to_hub true"),
        ("hub_private_repo", "true", "push_to_hub true"),
        ("hub_revision", "dev", "push_to_hub true"),
    ],
)
def test_an_argument_given_without_the_one_it_works_with_is_refused(tmp_path, name, value, needs, in_recipe):
    argv = [f"--{name}", value]
    if in_recipe:
        (tmp_path / "recipe.json").write_text(json.dumps({name: value}))
        argv = [str(tmp_path / "recipe.json")]
    result = outcome("train", [*argv, "--dataset", str(tmp_path / "no-data"), "--output_dir", str(tmp_path / "out")])
    assert result.one_line, result
    where = f"Key {name!r} in the recipe {tmp_path / 'recipe.json'} line 1" if in_recipe else f"--{name}"
    assert result.error == (
        f"error: {where} is used only with --{needs}, which is not given, so it would be ignored: add --{needs}, or "
        f"drop {f'{name!r} from the recipe' if in_recipe else f'--{name}'}."
    )
    assert not (tmp_path / "out").exists()


def test_an_argument_given_with_the_one_it_works_with_is_accepted(tmp_path):
    from modeling_vit_scratch.training.arguments import parse_arguments

    parse_arguments(["--streaming", "true", "--max_eval_samples", "1", "--output_dir", str(tmp_path / "out")])
    parse_arguments(["--teacher", "t", "--distillation", "soft", "--output_dir", str(tmp_path / "out")])


@pytest.mark.parametrize(
    "argv",
    [
        ["--hub_strategy", "end"],
        ["--remove_unused_columns", "false"],
        ["--prediction_loss_only", "false"],
        ["--eval_do_concat_batches", "true"],
        [],
    ],
)
def test_the_value_the_package_uses_is_accepted(tmp_path, argv):
    from modeling_vit_scratch.training.arguments import parse_arguments

    parse_arguments([*argv, "--output_dir", str(tmp_path / "out")])


@pytest.mark.parametrize(
    "key, word, read_as",
    [("save_strategy", "no", "false"), ("logging_strategy", "no", "false"), ("run_name", "yes", "true")],
)
def test_a_yaml_boolean_word_for_an_argument_that_takes_it_as_text_says_to_quote_it(tmp_path, key, word, read_as):
    error = refusal(tmp_path, ".yaml", ["seed: 3", f"{key}: {word}  # a comment"])
    assert error == (
        f"error: Key {key!r} in the recipe {tmp_path / 'recipe.yaml'} line 2 is {word}, which YAML reads as "
        f'{read_as}, but --{key} takes text: quote it ({key}: "{word}").'
    )
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(f'seed: 3\n{key}: "{word}"\n')
    parse_arguments([str(fixed), "--output_dir", str(tmp_path / "out")])  # the fix offered works


@pytest.mark.parametrize(
    "program, hint", [("vit-scratch train", "vit-scratch train"), ("scripts/train.py", "python scripts/train.py")]
)
def test_the_help_hint_names_the_command_the_user_ran(monkeypatch, program, hint):
    import shutil
    import sys

    monkeypatch.setattr(sys, "argv", [program])
    monkeypatch.setattr(shutil, "which", lambda name: sys.executable)  # `python` is this interpreter
    result = outcome("train", ["--learning_rate", "fast"])
    assert result.one_line and result.error.endswith(f"; `{hint} --help` lists the arguments."), result


@pytest.mark.parametrize(
    "suffix, lines, key, written, shown",
    [
        (".yaml", ["seed: 3", "hub_revision: 1.10  # a branch"], "hub_revision", "1.10", "1.1"),
        (".yaml", ["seed: 3", "run_name: 010"], "run_name", "010", "8"),
        (".yaml", ["seed: 3", "dataset_config: 2024"], "dataset_config", "2024", "2024"),
        (".json", ['{"seed": 3,', ' "hub_revision": 1.10}'], "hub_revision", "1.10", "1.1"),
    ],
)
def test_a_number_for_an_argument_that_takes_text_says_to_quote_it(tmp_path, suffix, lines, key, written, shown):
    """YAML and JSON read an unquoted 1.10 as the number 1.1: the text the user wrote would be lost (a push to
    branch 1.1), so every argument typed as text refuses a number, naming the key, its line and the value read."""
    quoted = f'"{key}": "{written}"' if suffix == ".json" else f'{key}: "{written}"'
    error = refusal(tmp_path, suffix, lines)
    assert error == (
        f"error: Key {key!r} in the recipe {tmp_path / f'recipe{suffix}'} line 2 is {written}, which "
        f"{'JSON' if suffix == '.json' else 'YAML'} reads as the number {shown}, but --{key} takes text: quote it "
        f"({quoted})."
    )


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("given", ["--config_overrides", "--config-overrides="])
def test_config_overrides_of_the_recipe_and_the_command_line_are_merged_key_by_key(tmp_path, suffix, given):
    """argparse keeps the last --config_overrides: the recipe's keys would be dropped without a word. Both are kept,
    the command line winning on a shared key, which one printed line names."""
    from modeling_vit_scratch.training.arguments import parse_arguments, recipe_lines

    recipe = tmp_path / f"r{suffix}"
    overrides = {"num_hidden_layers": 1, "qkv_bias": False}
    recipe.write_text(
        json.dumps({"config_overrides": overrides})
        if suffix == ".json"
        else "config_overrides: {num_hidden_layers: 1, qkv_bias: false}\n"
    )
    command = "hidden_size=12,num_hidden_layers=3"
    words = [given + command] if given.endswith("=") else [given, command]
    argv = [str(recipe), *words, "--output_dir", str(tmp_path / "out")]
    model_args = parse_arguments(argv)[0]
    assert parse_overrides(model_args.config_overrides) == {
        "num_hidden_layers": 3,
        "qkv_bias": False,
        "hidden_size": 12,
    }
    replaced = "--config_overrides on the command line replaces the recipe's num_hidden_layers (1 -> 3)"
    assert recipe_lines(argv) == [f"{replaced}; its other keys are kept."]
    alone = parse_arguments([str(recipe), "--output_dir", str(tmp_path / "out")])[0]
    assert parse_overrides(alone.config_overrides) == overrides
    assert recipe_lines([str(recipe), "--config_overrides", "hidden_size=12"]) == []


# a value of another type for each kind of argument: as written in YAML and JSON, what the argument takes, the fix
OTHER_TYPES = [
    ("seed", "true", "true", "an integer in [0, 4294967295], e.g. 0", "write one there"),
    ("max_steps", "yes", None, "an integer >= 1 (or -1: not set)", "write one there"),
    ("per_device_train_batch_size", "8.0", "8.0", "an integer >= 1", "write 8"),
    ("split_seed", "2.5", "2.5", "an integer in [0, 4294967295], e.g. 0", "write one there"),
    ("learning_rate", "fast", '"fast"', "a number in (0, 10], e.g. 3e-4", "write one there"),
    ("augment", "maybe", '"maybe"', "true or false", "write one there"),
    ("eval_strategy", "off", None, "one of no, steps, epoch", "write one there"),
    ("save_strategy", "sometimes", '"sometimes"', "one of no, steps, epoch, best", "write one there"),
]


@pytest.mark.parametrize(
    ("suffix", "key", "yaml", "written", "takes", "fix"),
    [
        (suffix, key, yaml, written, *rest)
        for key, yaml, json_text, *rest in OTHER_TYPES
        for suffix, written in ((".yaml", yaml), (".json", json_text))
        if written is not None
    ],
)
def test_a_value_of_another_type_names_the_file_line_key_and_what_the_argument_takes(
    tmp_path, suffix, key, yaml, written, takes, fix
):
    """Checked as the recipe is read, by the converter and choices argparse applies (which would name no file or
    line); a YAML word read as a boolean is said so, and quoting is offered only where the argument takes it."""
    lines = ["report_to: none", f"{key}: {written}"]
    lines = lines if suffix == ".yaml" else ['{"report_to": "none",', f' "{key}": {written}}}']
    error = refusal(tmp_path, suffix, lines)
    read = f", which YAML reads as {str(yaml in ('yes', 'on')).lower()}" if yaml in ("yes", "no", "off", "on") else ""
    assert error == (
        f"error: Key {key!r} in the recipe {tmp_path / f'recipe{suffix}'} line 2 is {written}{read}, but --{key} "
        f"takes {takes}: {fix}."
    )
    if fix == "write 8":  # the fix offered works
        (tmp_path / "fixed.json").write_text(json.dumps({key: 8}))
        parse_arguments([str(tmp_path / "fixed.json"), "--output_dir", str(tmp_path / "out")])


def test_every_argument_refuses_a_value_of_another_type_from_a_recipe_naming_the_key(tmp_path):
    """Every argument with a converter or choices: a value it cannot read, in a recipe, is the recipe's line."""
    from modeling_vit_scratch.training.arguments import accepts, argument_actions, argument_names

    names = argument_names()
    checked = 0
    for key, action in sorted(argument_actions().items()):
        if key not in names or action.nargs == 0:
            continue
        bad = next((word for word in ("8.5", "maybe", "bogus") if not accepts(action, word)), None)
        if bad is None:
            continue
        recipe = tmp_path / f"{key}.yaml"
        recipe.write_text(f"{key}: '{bad}'\n")
        with pytest.raises(ValueError, match=rf"^Key '{key}' in the recipe {recipe} line 1 is '{bad}', but --{key} "):
            parse_arguments([str(recipe), "--output_dir", str(tmp_path / "out")])
        checked += 1
    assert checked > 50


def test_config_overrides_given_as_a_list_names_both_forms_that_work(tmp_path):
    error = refusal(tmp_path, ".yaml", ["config_overrides: [hidden_size=12]"])
    assert error == (
        f"error: Key 'config_overrides' in the recipe {tmp_path / 'recipe.yaml'} line 1 holds a list, which "
        '--config_overrides does not take: write it as one text, config_overrides: "hidden_size=12,'
        'num_hidden_layers=6", or as a mapping, config_overrides: {hidden_size: 12, num_hidden_layers: 6}.'
    )
    for form in ('"hidden_size=12,num_hidden_layers=6"', "{hidden_size: 12, num_hidden_layers: 6}"):
        (tmp_path / "fixed.yaml").write_text(f"config_overrides: {form}\n")
        model_args = parse_arguments([str(tmp_path / "fixed.yaml"), "--output_dir", str(tmp_path / "out")])[0]
        assert parse_overrides(model_args.config_overrides) == {"hidden_size": 12, "num_hidden_layers": 6}


@pytest.mark.parametrize("key", ["model", "teacher", "dataset"])
@pytest.mark.parametrize(("value", "kind"), [({"image_size": 8, "patch_size": 4}, "mapping"), (["a", "b"], "list")])
def test_a_mapping_or_list_for_a_path_key_is_named_as_such_not_read_as_a_path(tmp_path, key, value, kind):
    """Shape is checked before a recipe's path is resolved: the value is never turned into text and read as a name
    (a `model:` mapping was refused as "JSON text", naming no file or line)."""
    error = refusal(tmp_path, ".json", [json.dumps({key: value})])
    instead = (
        "an architecture is read from a JSON file, checked as such: write these fields to one (e.g. "
        "configs/models/NAME.json) and give its path, model: configs/models/NAME.json"
        if (key, kind) == ("model", "mapping")
        else "give it one value"
    )
    assert error == (
        f"error: Key {key!r} in the recipe {tmp_path / 'recipe.json'} line 1 holds a {kind}, which --{key} does not "
        f"take: {instead}."
    )


def test_an_architecture_mapping_moved_to_a_file_as_the_line_says_builds_that_model(tmp_path):
    from modeling_vit_scratch.training.model_source import named_config

    fields = {"image_size": 8, "patch_size": 4, "hidden_size": 24, "num_hidden_layers": 2, "num_attention_heads": 2}
    (tmp_path / "arch.json").write_text(json.dumps(fields))
    (tmp_path / "r.yaml").write_text("model: arch.json\n")
    config, new = named_config(parse_arguments([str(tmp_path / "r.yaml"), "--output_dir", str(tmp_path / "o")])[0])
    assert new and {name: getattr(config, name) for name in fields} == fields


@settings(max_examples=10)
@given(names=st.lists(st.sampled_from(sorted(POOL)), min_size=2, max_size=len(POOL), unique=True), data=st.data())
def test_a_second_yaml_document_names_the_line_of_its_separator(tmp_path_factory, names, data):
    """A `---` inside a recipe starts a second document: the line names that `---`, and removing it, as it says,
    leaves a recipe that reads."""
    tmp_path = tmp_path_factory.mktemp("recipe")
    lines = recipe_lines([(key, POOL[key]) for key in names], ".yaml")
    at = data.draw(st.integers(1, len(lines) - 1))
    lines.insert(at, "---")
    error = refusal(tmp_path, ".yaml", lines)
    assert error == (
        f"error: Recipe {tmp_path / 'recipe.yaml'} line {at + 1}: a second YAML document starts here, and a recipe is "
        f"one document (one mapping of arguments): remove the '---' at line {at + 1} and keep one mapping, its keys "
        "each given once."
    )
    del lines[at]
    (tmp_path / "fixed.yaml").write_text("\n".join(lines) + "\n")
    assert load_recipe(tmp_path / "fixed.yaml") == {key: POOL[key] for key in names}


def test_text_after_the_end_of_a_yaml_document_says_to_remove_the_end_marker(tmp_path):
    error = refusal(tmp_path, ".yaml", ["seed: 1", "...", "learning_rate: 0.001"])
    assert error == (
        f"error: Recipe {tmp_path / 'recipe.yaml'} line 3: text follows the end of the YAML document (a '...' line "
        "above it), and a recipe is one document: remove the '...' and keep one mapping, its keys each given once."
    )


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("in_recipe", [False, True], ids=["command-line", "recipe"])
def test_epochs_given_beside_max_steps_are_named_as_unused_in_one_warning(
    tmp_path, capsys, monkeypatch, in_recipe, streaming
):
    """--max_steps sets the run's length, streamed or not: epochs given beside it (typed, or a recipe's, with
    --max_steps added on the command line: a legitimate override) are named in one warning line, never ignored
    without a word (before: `--streaming true --max_steps 5 --num_train_epochs 3` trained 5 steps silently)."""
    argv = ["--num_train_epochs", "3"]
    if in_recipe:
        (tmp_path / "recipe.json").write_text(json.dumps({"num_train_epochs": 3}))
        argv = [str(tmp_path / "recipe.json")]
    argv += ["--max_steps", "5", "--output_dir", str(tmp_path / "out")] + (["--streaming", "true"] * streaming)
    parse_arguments(argv)
    where = (
        f"Key 'num_train_epochs' (3) in the recipe {tmp_path / 'recipe.json'} line 1"
        if in_recipe
        else "--num_train_epochs 3"
    )
    assert capsys.readouterr().err == (
        f"warning: {where} has no effect: --max_steps 5 sets the length of the run (the Trainer stops at that step, "
        "whatever the epochs, streamed or not).\n"
    )
    parse_arguments(["--num_train_epochs", "3", "--max_steps", "-1", "--output_dir", str(tmp_path / "out")])
    assert capsys.readouterr().err == ""  # the epochs set the length
    monkeypatch.setenv("RANK", "1")  # another process of the run (torchrun): said once, by the first (before: by each)
    parse_arguments(argv)
    assert capsys.readouterr().err == ""


def test_a_benchmark_runs_warning_names_the_steps_the_user_gave(tmp_path, capsys, monkeypatch):
    """`benchmark --end_to_end r.yaml --end_to_end_steps 3` with the recipe's `num_train_epochs`: the training
    command's warning names --end_to_end_steps 3, what the user gave (before: `--max_steps 3`, which the benchmark
    added), as the benchmark runs it (its arguments and environment)."""
    from types import SimpleNamespace

    from modeling_vit_scratch.benchmark.end_to_end import training_arguments, training_environment
    from modeling_vit_scratch.training.arguments import GIVEN_AS_ENV

    (tmp_path / "r.yaml").write_text("num_train_epochs: 1\n")
    argv = training_arguments(str(tmp_path / "r.yaml"), 3, [], tmp_path / "out")
    workers = SimpleNamespace(glibc_malloc_defaults=True)
    monkeypatch.setenv(GIVEN_AS_ENV, training_environment(3, workers)[GIVEN_AS_ENV])
    parse_arguments(argv)
    assert capsys.readouterr().err == (
        f"warning: Key 'num_train_epochs' (1) in the recipe {tmp_path / 'r.yaml'} line 1 has no effect: "
        "--end_to_end_steps 3 sets the length of the run (the Trainer stops at that step, whatever the epochs, "
        "streamed or not).\n"
    )
    monkeypatch.setenv(GIVEN_AS_ENV, training_environment(None, workers)[GIVEN_AS_ENV])
    parse_arguments(training_arguments(str(tmp_path / "r.yaml"), None, [], tmp_path / "out"))
    assert capsys.readouterr().err == ""  # the whole recipe: its epochs set the length


# each path argument once, in turn with each spelling of a variable and each recipe syntax
VARIABLES = [(".yaml", "$HOME/x"), (".json", "${HOME}/x"), (".yaml", "runs/$RUN")]


@pytest.mark.parametrize(
    ("key", "suffix", "written"),
    [(key, *VARIABLES[index % len(VARIABLES)]) for index, key in enumerate(PATH_ARGUMENTS)],
)
def test_a_variable_in_a_recipe_path_is_refused_naming_the_key_and_line(tmp_path, monkeypatch, key, suffix, written):
    """A recipe is read by no shell: `output_dir: $HOME/x` trained into a folder literally named '$HOME'. Every path
    argument of a recipe holding `$NAME` or `${NAME}` is one line naming the file, key and line, and the fix."""
    monkeypatch.chdir(tmp_path)
    error = refusal(tmp_path, suffix, recipe_lines([("seed", 3), (key, written)], suffix))
    line = 2 if suffix == ".yaml" else 3
    assert error == (
        f"error: Key {key!r} in the recipe {tmp_path / f'recipe{suffix}'} line {line} ({written!r}) holds '$' before a "
        "name, which a recipe keeps as written (no shell reads it), so it would name a path of that very name, not the "
        "variable's value: write the path out, or use ~ for your home folder."
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == [f"recipe{suffix}"]


@pytest.mark.parametrize(
    ("text", "fix"),
    [
        (
            '{ // my first recipe\n  "num_train_epochs": 1\n}',
            "JSON holds no comments: remove it, or write the recipe as YAML",
        ),
        ('{"num_train_epochs": 1 /* one */}', "JSON holds no comments"),
        ('{\n  "num_train_epochs": 1,\n}', "JSON allows no comma before a closing bracket: remove it."),
        ('{"num_train_epochs" 1}', "fix the JSON there."),
    ],
)
def test_json_a_recipe_lacks_is_named_as_such(tmp_path, text, fix):
    """Comments and trailing commas, which people write and JSON lacks, are named with their fix, not only where
    the parser stopped."""
    recipe = tmp_path / "r.json"
    recipe.write_text(text)
    with pytest.raises(ValueError) as refused:
        load_recipe(recipe)
    line = str(refused.value)
    assert line.startswith(f"Recipe {recipe} line ") and fix in line and "\n" not in line
