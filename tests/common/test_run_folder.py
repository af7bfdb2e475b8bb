"""The output folder of a run: claimed (writable, locked, not holding a model), resumed from complete checkpoints
only, written beside its destination and moved into place."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from modeling_vit_scratch.common.folders import (
    LOCK_FILE,
    MARKER_FILE,
    changed_since_written,
    check_place,
    claim_output_folder,
    file_sha256,
    mark_as_ours,
    publish,
    refuse_a_model,
    resolve_checkpoint,
    staging_inside,
)


def fake_checkpoint(folder: Path, step: int, complete: bool = True) -> Path:
    """A checkpoint folder as the Trainer leaves it, or as a run killed before `trainer_state.json` leaves it."""
    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"weights")
    if complete:
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return path


def test_a_folder_holding_a_model_is_refused_naming_both_ways_on(tmp_path):
    (tmp_path / "training_record.json").write_text("{}")  # a training run's folder
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "vit_scratch"}))
    (tmp_path / "model.safetensors").write_bytes(b"old weights")
    with pytest.raises(ValueError) as refused, claim_output_folder(tmp_path, overwrite=False, resume=False):
        pass
    message = str(refused.value)
    assert str(tmp_path) in message and "config.json" in message
    assert "--overwrite_output_dir true" in message and "--resume_from_checkpoint true" in message
    assert (tmp_path / "model.safetensors").read_bytes() == b"old weights"


def test_overwrite_drops_old_checkpoints_only_when_asked_to_and_keeps_the_model_until_replaced(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"old weights")
    mark_as_ours(tmp_path, {"model.safetensors": file_sha256(tmp_path / "model.safetensors")})  # a run wrote it
    fake_checkpoint(tmp_path, 10)
    with claim_output_folder(tmp_path, overwrite=True, resume=False) as claimed:
        assert (tmp_path / "checkpoint-10").is_dir()  # nothing goes before the run's checks have passed
        assert claimed.remove_leftovers() == ["checkpoint-10"]
        assert (tmp_path / "model.safetensors").read_bytes() == b"old weights"
    with claim_output_folder(tmp_path, overwrite=False, resume=True) as claimed:  # resuming keeps all
        assert claimed.remove_leftovers() == []


def test_a_folder_in_use_is_refused_and_freed_when_the_run_ends(tmp_path):
    in_use = f"in use by another training run \\(process {os.getpid()}\\)"
    with (
        claim_output_folder(tmp_path, overwrite=False, resume=False),
        pytest.raises(ValueError, match=in_use),
        claim_output_folder(tmp_path, overwrite=False, resume=False),
    ):
        pass
    with claim_output_folder(tmp_path, overwrite=False, resume=False):
        pass


@pytest.mark.integration
def test_a_killed_run_leaves_no_lock_and_its_staging_leftovers_are_removed(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from modeling_vit_scratch.common.folders import claim_output_folder\n"
                "with claim_output_folder(sys.argv[1], False, False):\n    print('held', flush=True); time.sleep(60)"
            ),
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    (tmp_path / ".saving-abc123").mkdir()  # what a run killed while writing its model folder leaves
    with pytest.raises(ValueError, match="in use"), claim_output_folder(tmp_path, overwrite=False, resume=False):
        pass
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    with claim_output_folder(tmp_path, overwrite=False, resume=False) as claimed:
        assert claimed.remove_leftovers() == [".saving-abc123"] and not (tmp_path / ".saving-abc123").exists()
    assert (tmp_path / LOCK_FILE).exists()


def test_an_unwritable_output_folder_is_one_line_naming_it(tmp_path):
    (tmp_path / "a_file").write_text("")
    with (
        pytest.raises(
            ValueError, match="--output_dir '.*a_file/out' cannot be made: '.*a_file' above it is a file, not a folder"
        ),
        claim_output_folder(tmp_path / "a_file" / "out", overwrite=False, resume=False),
    ):
        pass


def test_resume_true_picks_the_last_complete_checkpoint(tmp_path):
    fake_checkpoint(tmp_path, 5)
    fake_checkpoint(tmp_path, 10)
    fake_checkpoint(tmp_path, 15, complete=False)  # killed mid-save
    assert resolve_checkpoint(tmp_path, "true") == str(tmp_path / "checkpoint-10")
    assert resolve_checkpoint(tmp_path, None) is None and resolve_checkpoint(tmp_path, "false") is None
    with pytest.raises(ValueError) as refused:
        resolve_checkpoint(tmp_path, str(tmp_path / "checkpoint-15"))
    assert "checkpoint-15' is incomplete" in str(refused.value)
    assert f"the last complete one is {tmp_path / 'checkpoint-10'}" in str(refused.value)


@pytest.mark.parametrize("elsewhere", [False, True])
def test_a_resume_from_an_older_checkpoint_never_saves_over_the_newer_ones(tmp_path, elsewhere):
    """Resuming from checkpoint-6 while checkpoint-12 is in the output folder would write the new leg's checkpoints
    over it: one line naming the newer ones and both fixes, whether the checkpoint lies in the output folder or not.
    A checkpoint cut off mid-save is no run's state: it is not named."""
    output = tmp_path / "out"
    older = fake_checkpoint(tmp_path / "other" if elsewhere else output, 6)
    fake_checkpoint(output, 12)
    fake_checkpoint(output, 18)
    fake_checkpoint(output, 24, complete=False)
    with pytest.raises(ValueError) as refused:
        resolve_checkpoint(output, str(older))
    assert str(refused.value) == (
        f"--resume_from_checkpoint {str(older)!r} is at step 6, but {str(output)!r} holds newer checkpoints "
        "(checkpoint-12, checkpoint-18) that the resumed run would save over: resume from the newest with "
        f"--resume_from_checkpoint true, or move the newer ones out of {str(output)!r} first."
    )
    assert resolve_checkpoint(output, str(output / "checkpoint-18")) == str(output / "checkpoint-18")  # the newest
    assert resolve_checkpoint(output, "true") == str(output / "checkpoint-18")


def test_a_checkpoint_named_relative_to_the_output_folder_is_offered_there(tmp_path, monkeypatch):
    """`--resume_from_checkpoint checkpoint-20` from a working folder where it does not exist, OUT/checkpoint-20
    does: it does not exist, and the one in OUT is offered; a path that exists nowhere, or a file, says what it is."""
    monkeypatch.chdir(tmp_path)
    fake_checkpoint(tmp_path / "out", 20)
    with pytest.raises(ValueError) as refused:
        resolve_checkpoint("out", "checkpoint-20")
    assert str(refused.value) == (
        "--resume_from_checkpoint 'checkpoint-20' does not exist: resume with --resume_from_checkpoint "
        "out/checkpoint-20 (paths are read from the working folder, not --output_dir)."
    )
    assert resolve_checkpoint("out", "out/checkpoint-20") == "out/checkpoint-20"  # the offer resumes
    with pytest.raises(ValueError, match="'checkpoint-30' does not exist: give a checkpoint-N folder or true.$"):
        resolve_checkpoint("out", "checkpoint-30")
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ValueError, match="'a_file' is not a folder"):
        resolve_checkpoint("out", "a_file")


def test_a_checkpoint_is_known_by_its_content_not_its_name(tmp_path):
    """`cp -r OUT/checkpoint-80 ck80`: a complete checkpoint under another name (it holds config.json, as a model
    folder does) resumes; one whose weights are a pickle is told so, never called a finished run or cut off."""
    copied = fake_checkpoint(tmp_path, 80).rename(tmp_path / "ck80")
    (copied / "config.json").write_text("{}")
    assert resolve_checkpoint(tmp_path / "out", str(copied)) == str(copied)
    pickled = fake_checkpoint(tmp_path, 40).rename(tmp_path / "ck40")
    (pickled / "config.json").write_text("{}")
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    with pytest.raises(ValueError) as refused:
        resolve_checkpoint(tmp_path / "out", str(pickled))
    assert str(refused.value) == (
        f"--resume_from_checkpoint {str(pickled)!r} holds its weights as a pickle (pytorch_model.bin, no "
        "model.safetensors), and pickles are never read (they can run code): resume from a checkpoint this package "
        "wrote (safetensors), or start the run anew without --resume_from_checkpoint."
    )


def test_a_stray_checkpoint_never_makes_its_folder_a_model_folder(tmp_path):
    """`cp -r o/checkpoint-80 .` left in the working folder: a relative --output_dir there is no place inside a model
    folder; a folder is a model folder by its own files (weights, a run's marker, lock or record beside its
    checkpoints)."""
    stray = fake_checkpoint(tmp_path, 80)
    (stray / "config.json").write_text("{}")
    check_place(str(tmp_path / "o"), "--output_dir", "o")
    (tmp_path / LOCK_FILE).write_text("")  # a run's folder: its checkpoints are its model's
    with pytest.raises(ValueError, match=f"--output_dir 'o' is inside the model folder {str(tmp_path)!r} "):
        check_place(str(tmp_path / "o"), "--output_dir", "o")


def test_resume_true_without_a_complete_checkpoint_names_the_incomplete_ones(tmp_path):
    fake_checkpoint(tmp_path, 7, complete=False)
    (tmp_path / "checkpoint-8").mkdir()
    (tmp_path / "checkpoint-8" / "trainer_state.json").write_text('{"global_st')  # cut off while writing it
    with pytest.raises(
        ValueError, match="no complete checkpoint \\(incomplete, cut off mid-save: checkpoint-7, checkpoint-8\\)"
    ):
        resolve_checkpoint(tmp_path, "true")


def test_staged_writes_reach_the_folder_only_when_published(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"old")
    with pytest.raises(RuntimeError), staging_inside(tmp_path) as staging:
        (staging / "model.safetensors").write_bytes(b"new")
        raise RuntimeError("killed before publishing")
    assert (tmp_path / "model.safetensors").read_bytes() == b"old"
    assert [path.name for path in tmp_path.iterdir()] == ["model.safetensors"]


def test_publish_moves_the_weights_first_and_what_describes_them_last(tmp_path, monkeypatch):
    moved, real_replace = [], os.replace
    monkeypatch.setattr(
        os, "replace", lambda source, target: (moved.append(Path(source).name), real_replace(source, target))
    )
    with staging_inside(tmp_path) as staging:
        for name in ("README.md", "training_record.json", "model.safetensors", "config.json"):
            (staging / name).write_text(name)
        publish(staging, tmp_path)
    assert moved.index("model.safetensors") < moved.index("training_record.json") < moved.index("README.md")
    assert moved.index("config.json") < moved.index("training_record.json")
    assert (tmp_path / "model.safetensors").read_text() == "model.safetensors"
    assert (tmp_path / "config.json").stat().st_mode & 0o777 == 0o644
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        MARKER_FILE,  # now with the digest of each file published
        "README.md",
        "config.json",
        "model.safetensors",
        "training_record.json",
    ]


def test_an_incomplete_checkpoint_named_by_path_points_to_the_way_on(tmp_path):
    incomplete = fake_checkpoint(tmp_path / "run", 4, complete=False)
    with pytest.raises(ValueError) as refused:
        resolve_checkpoint(tmp_path / "elsewhere", str(incomplete))
    assert (
        f"'{tmp_path / 'run'}' has no complete checkpoint: start the run anew without --resume_from_checkpoint ("
        in (str(refused.value))
    )
    complete = fake_checkpoint(tmp_path / "run", 2)
    with pytest.raises(ValueError, match=f"resume with --resume_from_checkpoint {complete}"):
        resolve_checkpoint(tmp_path / "elsewhere", str(incomplete))


@pytest.mark.parametrize("edit", ["changed", "removed", "unchanged"])
@pytest.mark.parametrize("overwrite", [True, False], ids=["overwrite", "resume"])
def test_a_file_the_run_wrote_and_the_user_changed_since_is_never_replaced(tmp_path, edit, overwrite):
    with staging_inside(tmp_path) as staging:
        for name in ("README.md", "all_results.json", "model.safetensors", "config.json"):
            (staging / name).write_text(name)
        publish(staging, tmp_path)
    # a later publish keeps the digests of the files it does not write again
    with staging_inside(tmp_path) as staging:
        (staging / "model.safetensors").write_text("new weights")
        publish(staging, tmp_path)
    assert changed_since_written(tmp_path) == []
    if edit == "changed":
        (tmp_path / "README.md").write_text("my own notes on this model")
        (tmp_path / "all_results.json").write_text("{}")
    if edit == "removed":
        (tmp_path / "README.md").unlink()
    if edit != "changed":
        refuse_a_model(tmp_path, overwrite, not overwrite)
        return
    with pytest.raises(ValueError) as refused:
        refuse_a_model(tmp_path, overwrite, not overwrite)
    how = "--overwrite_output_dir true" if overwrite else "--resume_from_checkpoint (its model folder, at the end)"
    assert str(refused.value) == (
        f"--output_dir '{tmp_path}': README.md, all_results.json changed since vit-scratch wrote them (edited by "
        f"hand?), and {how} would replace them: nothing was changed; move them out of the folder to keep your "
        "version (or delete it to let vit-scratch write its own), then run again."
    )
    assert (tmp_path / "README.md").read_text() == "my own notes on this model"
