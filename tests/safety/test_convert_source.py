"""What `convert --from transformers` reads, said before anything is written: a vit_scratch Hub repo names the
right direction (as a local folder does); a ViTModel's pooler, which has no counterpart, is said to be dropped."""

import pytest
from entry_points import Scenario, hub_repo, outcome, run_command
from hub_server import local_hub  # noqa: F401  (the fixture)
from transformers import ViTConfig, ViTModel


@pytest.mark.integration
def test_a_vit_scratch_hub_repo_given_to_from_transformers_names_to_transformers(local_hub, tmp_path):  # noqa: F811
    hub_repo(local_hub, "local-user/t1", Scenario(tmp_path).model())
    argv = ["--from", "transformers", "--input", "local-user/t1", "--output", str(tmp_path / "out")]
    result = run_command("convert", argv, env=local_hub.env(tmp_path / "hf_home"))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --input 'local-user/t1' is a vit_scratch model already: to make a transformers folder of it, use "
        "--to transformers instead of --from."
    )
    assert not (tmp_path / "out").exists()


def test_a_vit_model_s_pooler_is_said_to_be_dropped_before_the_folder_is_written(tmp_path, capsys):
    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=32)
    ViTModel(config, add_pooling_layer=True).save_pretrained(tmp_path / "base")
    result = outcome(
        "convert", ["--from", "transformers", "--input", str(tmp_path / "base"), "--output", str(tmp_path / "out")]
    )
    lines = capsys.readouterr().out.splitlines()
    assert result.code == 0, result
    said = [number for number, line in enumerate(lines) if line.startswith("Not converted: the pooler of ")]
    assert said and "pooler.dense.bias, pooler.dense.weight" in lines[said[0]]
    assert said[0] < next(number for number, line in enumerate(lines) if line.startswith("Wrote a vit_scratch folder"))


# (direction, an argument that direction does not read, the directions that read it)
NOT_READ = [
    (["--from", "transformers"], ["--timm_kwargs", "img_size=16"], "--from timm"),
    (["--to", "transformers"], ["--timm_model", "vit_base_patch16_224"], "--from timm"),
    (
        ["--from", "timm"],
        ["--timm_model", "vit_tiny_patch16_224", "--revision", "dev"],
        "--from transformers and --to transformers",
    ),
]


@pytest.mark.parametrize("direction, given, readers", NOT_READ, ids=[" ".join(d + g) for d, g, _ in NOT_READ])
def test_an_argument_the_direction_does_not_read_is_one_line_naming_the_direction_that_does(
    direction, given, readers, tmp_path
):
    """Every argument that only some directions read is refused in the one parser (`refuse_unused_arguments`)
    before anything is read: given to another direction it would be ignored without a word."""
    argv = [*direction, "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), *given]
    result = outcome("convert", argv)
    option = given[-2]
    assert result.one_line, result
    assert result.error.startswith(
        f"error: {option} is read by {readers} only, and this is {' '.join(direction)}, so it would be ignored: leave "
        f"out {option};"
    ), result.error
    assert list(tmp_path.iterdir()) == []
