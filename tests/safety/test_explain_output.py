"""`explain --out` again into the folder of an earlier explain run: every figure left there is of the last run. The
earlier run's figures that this one does not write (another model's class) are removed, with a line; files explain
does not write are kept."""

import pytest
from entry_points import Scenario, outcome


@pytest.mark.integration
def test_figures_of_an_earlier_explain_run_are_removed_with_a_line(tmp_path, capsys):
    scenario = Scenario(tmp_path)
    argv = scenario.argv("explain")
    assert outcome("explain", argv).code == 0
    out = tmp_path / "out-explain"
    first = sorted(path.name for path in out.iterdir())
    from modeling_vit_scratch.common.folders import file_sha256, mark_as_ours

    stale = out / "gradient_rollout_class_another_model_s_class.png"  # as a run of another model leaves it:
    stale.write_bytes(next(out.glob("gradient_rollout_class_*.png")).read_bytes())
    mark_as_ours(out, {stale.name: file_sha256(stale)})  # written by explain, its digest in the marker
    (out / "training_curves.png").write_bytes(b"a training run's")  # not explain's: kept
    capsys.readouterr()
    assert outcome("explain", argv).code == 0
    assert f"Removed from {out} the figures of an earlier explain run that this one does not write: {stale.name}." in (
        capsys.readouterr().out.splitlines()
    )
    assert sorted(path.name for path in out.iterdir()) == sorted([*first, "training_curves.png"])


@pytest.mark.parametrize("held", [("config.json", "model.safetensors"), ("checkpoint-3",)])
def test_explain_into_another_model_s_folder_is_one_line_before_any_load(held, tmp_path, monkeypatch):
    from modeling_vit_scratch.common.folders import mark_as_ours
    from modeling_vit_scratch.explanation import prediction

    def loaded(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(prediction, "load_model", loaded)
    other = tmp_path / "m2c"  # another run's training folder: ours, holding its model
    other.mkdir()
    mark_as_ours(other)
    for name in held:
        (other / name).mkdir() if name.startswith("checkpoint-") else (other / name).write_text("{}")
    before = sorted(path.name for path in other.iterdir())
    result = outcome("explain", Scenario(tmp_path).argv("explain", output=other))
    assert result.error == (
        f"error: --out {str(other)!r} holds a model ({', '.join(held)}), and the figures written among its files would "
        f"read as that model's: give --out a folder of its own, e.g. {str(tmp_path / 'm2c-explain')!r}."
    )
    assert sorted(path.name for path in other.iterdir()) == before
