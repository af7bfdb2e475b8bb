"""Resuming and stopping a run: a resumed run asks for what its checkpoint can continue, and Ctrl-C keeps everything
and says how to go on.

- `--resume_from_checkpoint true` with an architecture other than the checkpoint's (`--config_overrides`, another
  `--model`) is one line naming the fields that differ, before any data is read (before: a size-mismatch traceback
  after the pre-flight).
- `--resume_from_checkpoint true` with `--num_train_epochs` or `--max_steps` that end at or before the checkpoint's
  step is one line before training (before: 0 steps trained, and a card that contradicted the command).
- `--resume_from_checkpoint true` with another `--dataset` (the same classes, other images), or other splits, is one
  line naming both before the pre-flight: each checkpoint keeps its data set and a fingerprint of its splits.
- SIGINT (Ctrl-C) or SIGTERM (`kill`, `timeout`, a cluster's scheduler) while training: one line naming the last
  complete checkpoint and the exact command that resumes from it, exit code 130 (143 for SIGTERM), every file kept;
  that command resumes.
"""

import json
import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
from entry_points import Scenario, outcome, run_command, with_argument
from helpers import PROCESS_TIMEOUT, REPO, write_imagefolder

from modeling_vit_scratch.common.folders import LOCK_FILE, checkpoints, is_complete_checkpoint
from modeling_vit_scratch.training.resumed_data import DATA_FILE


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished tiny run of 2 epochs with a checkpoint at each (8 images in batches of 8: one step an epoch), and
    its command line."""
    scenario = Scenario(tmp_path_factory.mktemp("resume"))
    argv = [*scenario.argv("train"), "--save_strategy", "epoch", "--max_train_samples", "8"]
    argv = with_argument(argv, "--num_train_epochs", 2)
    assert outcome("train", argv).code == 0
    return scenario, argv


def snapshot(folder):
    """Every file under `folder` and its content, less the lock (each run writes its process id into it)."""
    return {path: path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file() and path.name != LOCK_FILE}


@pytest.mark.integration
@pytest.mark.parametrize(
    "change, differ",
    [
        (("--config_overrides", "hidden_size=12"), "hidden_size: 24 in it, 12 asked"),
        (("--model", "vit-tiny-patch16-224"), "hidden_size: 24 in it, 192 asked; image_size: 8 in it, 224 asked"),
    ],
)
def test_resuming_another_architecture_is_one_line_naming_the_fields(trained, change, differ, monkeypatch):
    import modeling_vit_scratch.training.trainer as trainer_module

    scenario, argv = trained
    output = scenario.root / "out-train"
    before = snapshot(output)
    monkeypatch.setattr(trainer_module, "load_image_dataset", lambda *a, **k: pytest.fail("read the data"))
    argv = with_argument(with_argument(argv, "--num_train_epochs", 3), "--resume_from_checkpoint", "true")
    result = outcome("train", with_argument(argv, *change))
    assert result.code == 1 and result.one_line, result
    assert f"The checkpoint '{output / 'checkpoint-2'}' has another architecture" in result.error
    assert (
        differ in result.error and "drop the new overrides), or start a new run in another --output_dir" in result.error
    )
    assert snapshot(output) == before


@pytest.mark.integration
@pytest.mark.parametrize("asked", [("--num_train_epochs", 1), ("--num_train_epochs", 2), ("--max_steps", 2)])
def test_resuming_with_no_steps_left_is_one_line_before_training(trained, asked):
    scenario, argv = trained
    output = scenario.root / "out-train"
    before = snapshot(output)
    result = outcome("train", with_argument(with_argument(argv, *asked), "--resume_from_checkpoint", "true"))
    assert result.code == 1 and result.one_line, result
    checkpoint = output / "checkpoint-2"
    assert f"--resume_from_checkpoint: {checkpoint} has trained 2 steps (epoch 2), and " in result.error
    assert f"{asked[0]} {asked[1]} ends at step {asked[1]}: nothing is left to train" in result.error
    assert snapshot(output) == before


@pytest.mark.integration
@pytest.mark.parametrize("change", ["dataset", "split_seed"])
def test_resuming_on_other_data_is_one_line_naming_both_data_sets(trained, change, monkeypatch):
    import modeling_vit_scratch.training.trainer as trainer_module

    scenario, argv = trained
    output = scenario.root / "out-train"
    kept = json.loads((output / "checkpoint-2" / DATA_FILE).read_text())
    assert kept["dataset"] == str(scenario.images())
    before = snapshot(output)
    monkeypatch.setattr(trainer_module, "check_images_together", lambda *a, **k: pytest.fail("ran the pre-flight"))
    argv = with_argument(with_argument(argv, "--num_train_epochs", 3), "--resume_from_checkpoint", "true")
    if change == "dataset":  # the same classes and file names, other images
        other = write_imagefolder(scenario.root / f"other-{change}", per_class=10, size=(12, 11))
        argv = with_argument(argv, "--dataset", other)
    else:
        argv, other = with_argument(argv, "--split_seed", 7), scenario.images()
    result = outcome("train", argv)
    assert result.code == 1 and result.one_line, result
    assert result.error.startswith(
        f"error: --resume_from_checkpoint: {output / 'checkpoint-2'} was trained on --dataset "
        f"'{scenario.images()}' (splits {kept['splits_fingerprint']}), and this run reads --dataset '{other}' whose "
        "splits differ ("
    )
    assert result.error.endswith(
        "resume with the same --dataset and split arguments, or start a new run in another --output_dir."
    )
    assert snapshot(output) == before


@pytest.mark.integration
@pytest.mark.parametrize("sent, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_keeps_everything_names_the_last_checkpoint_and_the_command_that_resumes(tmp_path, sent, code):
    scenario = Scenario(tmp_path)
    output = tmp_path / "out"
    argv = [*scenario.argv("train", output), "--max_steps", "100000", "--save_strategy", "steps", "--save_steps", "1"]
    argv += ["--overwrite_output_dir", "true"]  # starts afresh: the command that resumes must turn it off
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "modeling_vit_scratch.cli", "train", *argv]
    run = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + PROCESS_TIMEOUT
        while not any(is_complete_checkpoint(path) for path in checkpoints(output)):
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.2)
        run.send_signal(sent)
        stdout, stderr = run.communicate(timeout=PROCESS_TIMEOUT)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == code, stderr[-3000:]
    assert f"Output folder: {output}" in stdout
    line = stderr.strip().splitlines()[-1]
    assert "Traceback" not in stderr
    last = [path for path in checkpoints(output) if is_complete_checkpoint(path)][-1]
    assert line.startswith(f"Interrupted: everything in {output} is kept; the last checkpoint is {last}; resume with: ")
    resume = shlex.split(line.split("resume with: ", 1)[1])
    assert resume[-2:] == ["--resume_from_checkpoint", "true"] and resume.count("--resume_from_checkpoint") == 1
    assert resume[-4:-2] == ["--overwrite_output_dir", "false"] and resume.count("--overwrite_output_dir") == 1
    assert (output / ".vit-scratch-output").is_file() and last.is_dir()

    step = json.loads((last / "trainer_state.json").read_text())["global_step"]
    args = resume[resume.index("train") + 1 :]  # the command as printed, with fewer steps to go
    args[args.index("--max_steps") + 1] = str(step + 2)
    resumed = run_command("train", args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    record = json.loads((output / "training_record.json").read_text())
    assert (output / "model.safetensors").is_file() and "--resume_from_checkpoint true" in record["command"]


@pytest.mark.parametrize(
    "given, overwrite, expected",
    [
        (["r.json", "--seed", "3"], False, ["r.json", "--seed", "3"]),
        (["--overwrite_output_dir", "true", "--seed", "3"], True, ["--seed", "3", "--overwrite_output_dir", "false"]),
        (
            ["--overwrite-output-dir=true", "--resume_from_checkpoint", "out/checkpoint-2"],
            True,
            ["--overwrite_output_dir", "false"],
        ),
        (["r.json"], True, ["r.json", "--overwrite_output_dir", "false"]),  # the recipe asks to overwrite
    ],
)
def test_the_command_that_resumes_drops_what_starts_afresh(monkeypatch, given, overwrite, expected):
    from modeling_vit_scratch.training.arguments import resume_command

    monkeypatch.setattr(sys, "argv", ["vit-scratch train", *given])
    words = shlex.split(resume_command(overwrite))
    assert words == ["vit-scratch", "train", *expected, "--resume_from_checkpoint", "true"]


@pytest.mark.integration
def test_ctrl_c_before_the_first_checkpoint_of_an_overwriting_run_names_the_checkpoints_it_replaced(
    tmp_path, monkeypatch, capsys
):
    from transformers import Trainer

    from modeling_vit_scratch.common.folders import MARKER_FILE

    scenario = Scenario(tmp_path)
    output = tmp_path / "out"
    for name in ("checkpoint-3", "checkpoint-6"):  # an earlier run's checkpoints
        (output / name).mkdir(parents=True)
        (output / name / "trainer_state.json").write_text("{}")
    (output / MARKER_FILE).write_text("")
    (output / "notes.txt").write_text("kept")

    def interrupt(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "train", interrupt)
    result = outcome("train", [*scenario.argv("train", output), "--overwrite_output_dir", "true"])
    assert result.code == 130, result
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        "Interrupted before the first checkpoint: the earlier run's checkpoints (checkpoint-3, checkpoint-6) were "
        f"removed at the start, as --overwrite_output_dir asked, and nothing else in {output}; run the same command "
        "again to start afresh."
    )
    assert "leftovers" not in err
    assert not checkpoints(output) and (output / "notes.txt").read_text() == "kept"
