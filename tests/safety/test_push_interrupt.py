"""Ctrl-C during `train --push_to_hub true`'s final push: training is done, so the line says so and gives the push
that finishes, never a resume that has nothing left to train. In this process."""

from types import SimpleNamespace

import pytest

from modeling_vit_scratch.common.commands import entry_point
from modeling_vit_scratch.sharing import push
from modeling_vit_scratch.training import output


@pytest.mark.parametrize("stage", ["preparing", "sending", "committed"])
def test_ctrl_c_in_the_final_push_gives_the_push_that_finishes(stage, tmp_path, monkeypatch, capsys):
    def stopped_push(folder, repo_id, reached, **kwargs):
        reached(stage, "0123abcd")
        raise KeyboardInterrupt

    monkeypatch.setattr(push, "push_to_hub", stopped_push)
    args = SimpleNamespace(
        output_dir=str(tmp_path / "out"), hub_model_id="local-user/x", hub_revision="exp", hub_private_repo=True
    )
    monkeypatch.setattr(output, "push_repo_id", lambda training_args: training_args.hub_model_id)

    @entry_point(secrets=lambda argv: [])
    def main(argv):
        output.push_trained_folder(args, None)

    with pytest.raises(SystemExit) as stop:
        main([])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 130
    assert line.startswith(f"Training is done and the model is saved in {tmp_path / 'out'} (nothing is left to train).")
    assert f"finish with: vit-scratch push {tmp_path / 'out'} local-user/x --revision exp --private" in line
    assert "resume" not in line
