"""`modeling_vit_scratch.training.arguments`: what `scripts/train.py` refuses on its command line before any work."""

import pytest

from modeling_vit_scratch.training.arguments import parse_arguments


@pytest.mark.parametrize("given", ["hub_token", "environment"])
@pytest.mark.parametrize("argument", ["--teacher", "--dataset", "--run_name", "--model"])
def test_a_known_token_inside_any_other_argument_is_refused(tmp_path, monkeypatch, given, argument):
    """Not only token-shaped values: any token this process knows (here one no pattern would catch), inside a path
    or a name, would reach the card, the record or the checkpoints."""
    secret = "team-token-0f1e2d3c4b5a"
    monkeypatch.delenv("HF_TOKEN", raising=False)
    argv = ["--output_dir", str(tmp_path / "out"), argument, f"/data/{secret}/resnet"]
    if given == "hub_token":
        argv += ["--hub_token", secret]
    else:
        monkeypatch.setenv("HF_TOKEN", secret)
    with pytest.raises(ValueError) as refused:
        parse_arguments(argv)
    assert f"The value of {argument} holds or looks like a Hub token" in str(refused.value)
    assert secret not in str(refused.value)


def test_a_recipe_finds_the_model_file_beside_it_from_any_working_directory(tmp_path, monkeypatch):
    """`vit-scratch train /somewhere/configs/train_x.json` run from elsewhere: the recipe's relative model path is read
    from the recipe's folder; a path that exists from the working directory is taken as given, a preset is kept."""
    import json

    from modeling_vit_scratch.training.arguments import recipe_to_argv

    configs = tmp_path / "configs"
    (configs / "models").mkdir(parents=True)
    (configs / "models" / "tiny.json").write_text("{}")
    recipe = configs / "train_tiny.json"
    recipe.write_text(json.dumps({"model": "models/tiny.json", "dataset": "digits"}))
    monkeypatch.chdir(tmp_path / "configs" / "models")  # somewhere "models/tiny.json" does not exist
    assert recipe_to_argv([str(recipe)]) == ["--model", str(configs / "models" / "tiny.json"), "--dataset", "digits"]
    monkeypatch.chdir(configs)  # here it exists from the working directory: kept as given
    assert recipe_to_argv([str(recipe)])[:2] == ["--model", "models/tiny.json"]
    recipe.write_text(json.dumps({"model": "vit-tiny-patch16-224"}))
    assert recipe_to_argv([str(recipe)]) == ["--model", "vit-tiny-patch16-224"]
