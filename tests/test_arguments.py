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
