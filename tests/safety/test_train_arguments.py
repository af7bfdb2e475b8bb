"""What train's command line and recipe name is what it uses, said or refused in one line before any work:

- a value that follows no --argument is named (a second recipe file gets its own line: a run takes one recipe);
- the output folder is always one the user named: absent, null in a recipe or empty is one line, never
  ./trainer_output in the working folder; every recipe in configs/ and `make train` name one;
- a recipe's relative input (model, teacher, dataset) that exists both from the working folder and beside the recipe,
  as two different files or folders, is refused naming both; where it exists in one place only (or both are one
  file), the path read is printed at the start; a recipe given through a symbolic link finds it beside the file it
  links to as well, and one found nowhere names the recipe, the key and every place looked.
"""

import json
import re
from pathlib import Path

import pytest
from entry_points import Scenario, outcome
from helpers import REPO, write_imagefolder

import modeling_vit_scratch.training.trainer as trainer_module
from modeling_vit_scratch.training.arguments import RECIPE_PATH_KEYS, recipe_inputs_read, recipe_to_argv


@pytest.fixture
def never_trains(monkeypatch):
    """A refusal comes before the data set is read: reading it fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("the data set was read")

    monkeypatch.setattr(trainer_module, "load_image_dataset", refuse)


def write_recipe(path: Path, recipe: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(recipe) if path.suffix == ".json" else "".join(f"{k}: {v}\n" for k, v in recipe.items()))
    return path


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_a_second_recipe_file_is_one_line_saying_a_run_takes_one(tmp_path, suffix, never_trains):
    first = write_recipe(tmp_path / "r1.json", {"seed": 1})
    second = write_recipe(tmp_path / f"r2{suffix}", {"seed": 2})
    result = outcome("train", [str(first), str(second), *Scenario(tmp_path).argv("train")])
    assert result.code == 1 and result.one_line, result
    assert result.error == (
        f"error: {second} is a second recipe file, and a run takes one recipe ({first}, given first): merge them "
        "into one, or pass the second's values as --arguments."
    )


def test_a_recipe_after_other_arguments_is_told_to_go_first(tmp_path, never_trains):
    recipe = write_recipe(tmp_path / "r.json", {"seed": 1})
    result = outcome("train", [*Scenario(tmp_path).argv("train"), str(recipe)])
    assert result.code == 1 and result.one_line, result
    assert result.error.startswith(f"error: {recipe} is a recipe file given after other arguments, and a recipe goes")


@pytest.mark.parametrize("stray", [["4"], ["4", "5"], ["a b", "c", "d", "e"]])
def test_values_that_follow_no_argument_are_named(tmp_path, stray, never_trains):
    result = outcome("train", [*Scenario(tmp_path).argv("train")[:-2], "--seed", "3", *stray])
    assert result.code == 1 and result.one_line, result
    assert result.error.startswith(f"error: {', '.join(map(repr, stray[:3]))}")
    assert ("and 1 more" in result.error) == (len(stray) == 4)
    assert "each value goes right after the --argument it is for" in result.error


def without_output_dir(argv: list[str]) -> list[str]:
    at = argv.index("--output_dir")
    return argv[:at] + argv[at + 2 :]


@pytest.mark.parametrize("how", ["absent", "empty", "json null", "yaml null", "yaml empty string"])
def test_an_output_folder_not_named_is_one_line_and_nothing_is_written_here(tmp_path, monkeypatch, how, never_trains):
    monkeypatch.chdir(tmp_path)
    argv = without_output_dir(Scenario(tmp_path).argv("train"))
    if how == "empty":
        argv += ["--output_dir", ""]
    elif how != "absent":
        suffix = ".json" if how == "json null" else ".yaml"
        value = None if how == "json null" else ('""' if how == "yaml empty string" else "")
        argv = [str(write_recipe(tmp_path / f"r{suffix}", {"seed": 1, "output_dir": value})), *argv]
    result = outcome("train", argv)
    assert result.code == 1 and result.one_line, result
    if how in ("empty", "yaml empty string"):
        assert result.error.startswith("error: --output_dir is empty: give the folder to write the model to")
    else:
        line = 1 if how == "json null" else 2  # JSON written on one line, YAML one key a line
        null = "" if how == "absent" else f" (the recipe {argv[0]} line {line} leaves output_dir empty)"
        assert result.error == (
            f"error: No output folder is given{null}: name the folder to train into with --output_dir DIR, or "
            "output_dir in the recipe, e.g. --output_dir outputs/vit-digits."
        )
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        ["images", "tiny.json", *(["r.json"] if how == "json null" else []), *(["r.yaml"] if "yaml" in how else [])]
    )


def test_every_recipe_in_configs_and_make_train_name_an_output_folder():
    recipes = sorted((REPO / "configs").glob("train_*.json"))
    assert recipes
    for recipe in recipes:
        assert json.loads(recipe.read_text()).get("output_dir"), recipe
    makefile = (REPO / "Makefile").read_text().replace("\\\n", " ")  # continued lines as one
    for line in re.findall(r"^\t.*scripts/train\.py.*$", makefile, re.MULTILINE):
        assert "--output_dir $(" in line, line


def two_places(tmp_path: Path, key: str, same: bool) -> tuple[Path, Path, Path]:
    """A recipe in rdir/ naming `key` relatively, and the working folder cwd/ holding an input of that name too
    (the same bytes or other ones): (recipe, working folder's input, recipe folder's input)."""
    name = "digits_set" if key == "dataset" else "arch.json"
    recipe = write_recipe(tmp_path / "rdir" / "r.json", {key: name, "output_dir": str(tmp_path / "out")})
    here, beside = tmp_path / "cwd" / name, tmp_path / "rdir" / name
    here.parent.mkdir()
    if key == "dataset":
        write_imagefolder(beside, per_class=2)
        write_imagefolder(here, classes=("cat", "dog") if not same else ("cat", "dog", "fox"), per_class=2)
    else:
        beside.write_text(json.dumps({"image_size": 8, "patch_size": 4, "hidden_size": 12}))
        here.write_text(beside.read_text() if same else json.dumps({"image_size": 8, "patch_size": 2}))
    return recipe, here, beside


@pytest.mark.parametrize("key", RECIPE_PATH_KEYS)
def test_a_recipe_input_found_both_here_and_beside_the_recipe_and_different_is_refused(
    tmp_path, monkeypatch, key, never_trains
):
    recipe, here, beside = two_places(tmp_path, key, same=False)
    monkeypatch.chdir(here.parent)
    result = outcome("train", [str(recipe)])
    assert result.code == 1 and result.one_line, result
    assert result.error == (
        f"error: Key {key!r} in the recipe {recipe} line 1 is {here.name!r}, which names two different inputs: "
        f"{here} (from the working folder) and {beside} (beside the recipe): write the one you mean as an absolute "
        f"path in the recipe, or give --{key} on the command line."
    )
    assert not (tmp_path / "out").exists()
    assert recipe_to_argv([str(recipe), f"--{key}", str(here)])  # overridden on the command line: not read, no refusal


@pytest.mark.parametrize("where", ["beside the recipe", "from the working folder", "both, the same file"])
def test_the_recipe_input_read_is_printed_at_the_start(tmp_path, monkeypatch, capsys, where, never_trains):
    recipe, here, beside = two_places(tmp_path, "model", same=True)
    if where == "beside the recipe":
        here.unlink()
    if where == "from the working folder":
        beside.unlink()
    monkeypatch.chdir(here.parent)
    outcome("train", [str(recipe), *Scenario(tmp_path).argv("train")[:2]])  # the data set: refused when read
    read = beside if where == "beside the recipe" else here
    found = "beside the recipe" if where == "beside the recipe" else "from the working folder"
    line = f"--model from the recipe: {read} (found {found})."
    assert line in capsys.readouterr().out.splitlines()
    assert recipe_inputs_read([str(recipe)]) == [line]
    assert recipe_inputs_read([str(recipe), "--model", "vit-tiny-patch16-224"]) == []


@pytest.mark.parametrize("where", ["beside the linked file", "in both, different", "nowhere"])
def test_a_recipe_given_through_a_link_reads_beside_the_file_it_links_to(tmp_path, monkeypatch, capsys, where):
    """`rl/link.yaml -> ../recipes/real.yaml` with `model: arch2.json` beside the real file: before, "Config file
    'arch2.json' does not exist", naming neither the recipe nor where it looked."""
    real = tmp_path / "recipes" / "real.yaml"
    real.parent.mkdir()
    real.write_text(f"output_dir: {tmp_path / 'out'}\nmodel: arch2.json\n")
    link = tmp_path / "rl" / "link.yaml"
    link.parent.mkdir()
    link.symlink_to("../recipes/real.yaml")
    beside_real, beside_link = tmp_path / "recipes" / "arch2.json", tmp_path / "rl" / "arch2.json"
    if where != "nowhere":
        beside_real.write_text(json.dumps({"image_size": 8, "patch_size": 4, "hidden_size": 12}))
    if where == "in both, different":
        beside_link.write_text(json.dumps({"image_size": 8, "patch_size": 2}))
    monkeypatch.chdir(tmp_path)
    linked = f"beside {real}, which the recipe links to"
    if where == "beside the linked file":
        assert recipe_inputs_read([str(link)]) == [f"--model from the recipe: {beside_real} (found {linked})."]
        assert recipe_to_argv([str(link)])[-2:] == ["--model", str(beside_real)]
        return
    result = outcome("train", [str(link)])
    assert result.code == 1 and result.one_line, result
    said = f"error: Key 'model' in the recipe {link} line 2 is 'arch2.json', which "
    if where == "in both, different":
        assert result.error == (
            f"{said}names two different inputs: {beside_link} (beside the recipe) and {beside_real} ({linked}): write "
            "the one you mean as an absolute path in the recipe, or give --model on the command line."
        )
    else:
        assert result.error == (
            f"{said}is in none of the places a recipe's path is read from: {tmp_path / 'arch2.json'} (from the working "
            f"folder), {beside_link} (beside the recipe) and {beside_real} ({linked}): write the path of an existing "
            "file or folder, or give --model on the command line."
        )
    assert not (tmp_path / "out").exists()
