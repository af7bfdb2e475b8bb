"""Removals: a command removes only what the package (or the Trainer under it) wrote, and refuses before removing
anything else.

One test, `common/folders.py` `not_written_by_a_run`, decides whether a run's folder (a `checkpoint-N`, a staging
leftover) holds anything else; train (`--overwrite_output_dir true`: the old checkpoints and staging leftovers;
`--save_total_limit`: the Trainer's rotation of checkpoints) and convert (`--overwrite`: the whole folder) both ask
it, before any data is read or any model loaded. Before: `train --overwrite_output_dir true` removed a user's
`notes.txt` inside an old checkpoint, which `convert --overwrite` refused.
"""

import json
from pathlib import Path

import pytest
from entry_points import Scenario, outcome, with_argument
from hypothesis import given, settings
from hypothesis import strategies as st

from modeling_vit_scratch.common.folders import (
    LOCK_FILE,
    MARKER_FILE,
    STAGING_PREFIX,
    claim_output_folder,
    file_sha256,
    mark_as_ours,
    not_written_by_a_run,
)

# Every file a run of the package leaves in a checkpoint: the Trainer's (also FSDP's), the model's, the package's
WRITTEN_BY_A_RUN = [
    "config.json",
    "model.safetensors",
    "preprocessor_config.json",
    "modeling_vit_scratch.py",
    "configuration_vit_scratch.py",
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
    "rng_state.pth",
    "rng_state_1.pth",
    "trainer_state.json",
    "training_args.bin",
    "optimizer.bin",
    "pytorch_model_fsdp.bin",
    "pytorch_model_fsdp_0/__0_0.distcp",
    "pytorch_model_fsdp_0/.metadata",
    "optimizer_0/__1_0.distcp",
    "precision_choice.json",
    "stream_state_0.json",
    "vit_scratch_data.json",
    "ema.safetensors",
]
# What a user may leave there, and the name the refusal gives it
USERS_FILES = {
    "notes.txt": "notes.txt",
    "photos/a.jpg": "photos/",
    "optimizer_0/mine.txt": "optimizer_0/mine.txt",
    "model.safetensors.bak": "model.safetensors.bak",
}


def run_folder(root: Path, files: list[str]) -> Path:
    """A training output whose `checkpoint-3` holds `files` (paths inside it), beside the package's marker."""
    checkpoint = root / "checkpoint-3"
    checkpoint.mkdir(parents=True)
    for name in files:
        (checkpoint / name).parent.mkdir(parents=True, exist_ok=True)
        (checkpoint / name).write_bytes(b"x")
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 3}))
    (root / MARKER_FILE).write_text("")
    return checkpoint


def snapshot(folder: Path) -> dict:
    return {path: path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file() and path.name != LOCK_FILE}


def test_everything_a_run_writes_in_a_checkpoint_is_its_own(tmp_path):
    checkpoint = run_folder(tmp_path, WRITTEN_BY_A_RUN)
    assert not_written_by_a_run(checkpoint) == []


@pytest.mark.parametrize("users", sorted(USERS_FILES))
@pytest.mark.parametrize("where", ["checkpoint", "staging"])
def test_an_overwriting_run_refuses_before_removing_a_users_file(tmp_path, users, where):
    folder = tmp_path / "out"
    run_folder(folder, WRITTEN_BY_A_RUN[:3])
    holder = folder / "checkpoint-3" if where == "checkpoint" else folder / f"{STAGING_PREFIX}abc"
    (holder / users).parent.mkdir(parents=True, exist_ok=True)
    (holder / users).write_text("mine")
    before = snapshot(folder)
    with pytest.raises(ValueError) as refused, claim_output_folder(folder, overwrite=True, resume=False):
        pytest.fail("claimed")
    assert f"{holder.name}/{USERS_FILES[users]}" in str(refused.value)
    assert "nothing was removed; move them out of the output folder" in str(refused.value)
    assert snapshot(folder) == before


def test_a_file_put_in_a_checkpoint_after_the_claim_is_refused_before_any_removal(tmp_path):
    folder = tmp_path / "out"
    run_folder(folder, WRITTEN_BY_A_RUN[:3])
    run_folder(folder / "other", [])  # another checkpoint-3 elsewhere: not this run's
    (folder / "checkpoint-9").mkdir()
    (folder / "checkpoint-9" / "config.json").write_text("{}")
    with claim_output_folder(folder, overwrite=True, resume=False) as claimed:
        (folder / "checkpoint-9" / "notes.txt").write_text("mine")  # while the run read its data
        with pytest.raises(ValueError, match="checkpoint-9/notes.txt"):
            claimed.remove_leftovers()
    assert (folder / "checkpoint-3" / "config.json").is_file() and (folder / "checkpoint-9" / "notes.txt").is_file()


def test_a_run_whose_trainer_rotates_checkpoints_refuses_one_holding_a_users_file(tmp_path):
    folder = tmp_path / "out"
    run_folder(folder, [*WRITTEN_BY_A_RUN[:3], "notes.txt"])
    with (
        pytest.raises(ValueError, match=r"--save_total_limit .*\(checkpoint-3/notes.txt\)"),
        claim_output_folder(folder, overwrite=False, resume=True, rotating=True),
    ):
        pass
    with claim_output_folder(folder, overwrite=False, resume=True):  # nothing removed: nothing to refuse
        pass


@pytest.mark.parametrize("overwrite, resume", [(False, True), (True, False)])
def test_an_entry_named_like_a_checkpoint_that_no_run_wrote_is_refused_before_any_work(tmp_path, overwrite, resume):
    """`echo notes > OUT/checkpoint-150` in an interrupted run, then the resume (before: the file moved to a hidden
    `.replaced-checkpoint-150-PID` when the run saved that step, with no word); a folder of that name holding the
    user's files, without `trainer_state.json`, alike. A checkpoint cut off mid-save (the run's files only), an
    empty one and a complete one holding a user's file (never replaced: a run saves only later steps) are the
    run's."""
    folder = tmp_path / "out"
    run_folder(folder, [*WRITTEN_BY_A_RUN[:3], "notes.txt"])
    (folder / "checkpoint-4").mkdir()
    (folder / "checkpoint-4" / "model.safetensors").write_bytes(b"half")  # cut off mid-save
    (folder / "checkpoint-5").mkdir()
    with claim_output_folder(folder, overwrite=False, resume=True):
        pass
    (folder / "checkpoint-150").write_text("notes\n")
    (folder / "checkpoint-7").mkdir()
    (folder / "checkpoint-7" / "mine.txt").write_text("mine")
    before = snapshot(folder)
    with pytest.raises(ValueError) as refused, claim_output_folder(folder, overwrite=overwrite, resume=resume):
        pytest.fail("claimed")
    assert str(refused.value) == (
        f"--output_dir {str(folder)!r}: checkpoint-150, checkpoint-7/mine.txt are named like a checkpoint the run "
        "saves but not written by vit-scratch, and a run never moves or replaces what it did not write: nothing was "
        "changed; move them out of the output folder, or choose another --output_dir."
    )
    assert snapshot(folder) == before and not list(folder.glob(".replaced-*"))


@settings(max_examples=20, deadline=None)
@given(name=st.text(st.characters(codec="ascii", categories=["L", "N"], include_characters="._-"), min_size=1))
def test_a_name_is_a_runs_own_only_if_a_run_writes_it(tmp_path_factory, name):
    checkpoint = run_folder(tmp_path_factory.mktemp("names"), [])
    if name in (".", "..") or (checkpoint / name).exists():
        return
    (checkpoint / name).write_text("mine")
    assert not_written_by_a_run(checkpoint) == ([] if name in WRITTEN_BY_A_RUN else [f"checkpoint-3/{name}"])


@pytest.mark.parametrize("command", ["train", "convert"])
def test_every_command_that_replaces_a_run_refuses_a_users_file_in_its_checkpoint(tmp_path, command, monkeypatch):
    import modeling_vit_scratch.training.trainer as trainer_module

    monkeypatch.setattr(trainer_module, "load_image_dataset", lambda *a, **k: pytest.fail("read the data"))
    scenario = Scenario(tmp_path)
    folder = tmp_path / "run"
    run_folder(folder, [*WRITTEN_BY_A_RUN, "notes.txt"])
    (folder / "config.json").write_text(json.dumps({"model_type": "vit_scratch"}))
    (folder / "model.safetensors").write_bytes(b"weights")
    mark_as_ours(folder, {name: file_sha256(folder / name) for name in ("config.json", "model.safetensors")})
    before = snapshot(folder)
    if command == "train":
        argv = [*scenario.argv("train", folder), "--overwrite_output_dir", "true"]
    else:
        argv = [*with_argument(scenario.argv("convert"), "--output", folder), "--overwrite"]
    result = outcome(command, argv)
    assert result.code == 1 and result.one_line, result
    assert "checkpoint-3/notes.txt" in result.error
    assert snapshot(folder) == before


@pytest.mark.integration
def test_the_trainers_rotation_keeps_a_checkpoint_given_a_users_file_during_the_run(tmp_path, monkeypatch, caplog):
    import modeling_vit_scratch.training.trainer as trainer_module

    class UserWritesIntoTheFirstCheckpoint(trainer_module.KeepDataIdentity):
        def on_save(self, args, state, control, **kwargs):
            super().on_save(args, state, control, **kwargs)
            if state.global_step == 1:
                (Path(args.output_dir) / "checkpoint-1" / "notes.txt").write_text("mine")

    monkeypatch.setattr(trainer_module, "KeepDataIdentity", UserWritesIntoTheFirstCheckpoint)
    scenario = Scenario(tmp_path)
    output = tmp_path / "out"
    argv = [*scenario.argv("train", output), "--max_steps", "3", "--save_strategy", "steps", "--save_steps", "1"]
    assert outcome("train", [*argv, "--save_total_limit", "1"]).code == 0
    assert (output / "checkpoint-1" / "notes.txt").read_text() == "mine" and (output / "checkpoint-3").is_dir()
    assert "Kept every checkpoint in" in caplog.text and "(checkpoint-1/notes.txt)" in caplog.text
