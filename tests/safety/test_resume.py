"""Resuming and stopping a run: a resumed run asks for what its checkpoint can continue, and Ctrl-C keeps everything
and says how to go on.

- A resume continues the same run. Every Trainer argument is compared or allowed to change (a new one fails a test). `--resume_from_checkpoint true` with an architecture other than the checkpoint's
  (`--config_overrides`, another `--model`) is one line naming the fields that differ, before any data is read
  (before: a size-mismatch traceback after the pre-flight); the architecture compared is the one the command resolves
  with its data (a grayscale set's one channel), so the command printed on Ctrl-C always resumes (before: 'num_channels:
  1 in it, 3 asked' with no override given). The settings that shape the run's course (seed, total batch, EMA,
  learning rate, augmentation, ...) are kept in each checkpoint and compared (before: a changed batch, seed or
  shuffle buffer accepted silently, an EMA dropped); what may change (cadence, reporting, processes at the same total
  batch) is no setting.
- `--resume_from_checkpoint true` into a folder that does not exist, or holds no checkpoint, says so (before: 'start
  a new run with --overwrite_output_dir true').
- `--resume_from_checkpoint true` with other `--num_train_epochs` or `--max_steps` (more or fewer) is one line before
  any data is read (before: more steps stretched the learning-rate schedule silently; fewer trained 0 steps), and a
  total of steps other than the one the schedule was built for, whatever set it, is one line before the pre-flight;
  the line says that a longer run is a new run from the checkpoint's weights. The same steps finish a run stopped
  after its last step (the command printed on Ctrl-C then works).
- `--resume_from_checkpoint true` with another `--dataset` (the same classes, other images), or other splits, is one
  line naming both before the pre-flight: each checkpoint keeps its data set and a fingerprint of its splits.
- SIGINT (Ctrl-C) or SIGTERM (`kill`, `timeout`, a cluster's scheduler) while training: one line naming the last
  complete checkpoint and the exact command that resumes from it, exit code 130 (143 for SIGTERM), every file kept;
  that command resumes. Under torchrun, a process whose run lost another (killed, interrupted, failed) says so in
  one line of the same kind (before: gloo's 'Connection closed by peer' traceback and no line); any other error is
  not taken for one.
"""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from entry_points import MODEL_FOLDER_READERS, Scenario, argv_reading, outcome, with_argument
from entry_points import outcome as run_in_process
from helpers import PROCESS_TIMEOUT, REPO, one_by_default, torchrun, write_imagefolder

from modeling_vit_scratch.common.folders import LOCK_FILE, RUN_FILE, checkpoints, is_complete_checkpoint
from modeling_vit_scratch.training.resumed_data import DATA_FILE


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished tiny run of 2 epochs with a checkpoint at each (8 images in batches of 8: one step an epoch), and
    its command line."""
    scenario = Scenario(tmp_path_factory.mktemp("resume"))
    argv = [*scenario.argv("train"), "--save_strategy", "epoch", "--max_train_samples", "8"]
    argv = with_argument(argv, "--num_train_epochs", 2)
    assert outcome("train", argv).code == 0
    assert not (scenario.root / "out-train" / RUN_FILE).exists()  # a finished run: its readers read its model
    return scenario, argv


def snapshot(folder, lock=False):
    """Every file under `folder` and its content, less the lock (each run that trains writes its process id into
    it) unless `lock`: a refused run leaves even the lock as it was."""
    return {
        path: path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and (lock or path.name != LOCK_FILE)
    }


ARCHITECTURE = "has another architecture than --model and --config_overrides ask for ("
SETTINGS = "belongs to a run trained with other settings ("


@pytest.mark.integration
@pytest.mark.parametrize(
    "change, said",
    [
        (("--config_overrides", "hidden_size=12"), [ARCHITECTURE, "hidden_size: 24 in it, 12 asked"]),
        (
            ("--model", "vit-tiny-patch16-224"),
            [ARCHITECTURE, "hidden_size: 24 in it, 192 asked; image_size: 8 in it, 224 asked"],
        ),
        (("--ema_decay", 0.9), [SETTINGS, "--ema_decay not given in it, 0.9 now)"]),
        (("--seed", 3), [SETTINGS, "--seed 42 in it, 3 now)"]),
        (("--per_device_train_batch_size", 4), [SETTINGS, "x --gradient_accumulation_steps) 8 in it, 4 now)"]),
        (("--learning_rate", 0.001), [SETTINGS, "--learning_rate 5e-05 in it, 0.001 now)"]),
    ],
)
def test_resuming_another_architecture_or_other_settings_is_one_line_naming_each(trained, change, said, monkeypatch):
    import modeling_vit_scratch.training.trainer as trainer_module

    scenario, argv = trained
    output = scenario.root / "out-train"
    before = snapshot(output)
    monkeypatch.setattr(trainer_module, "load_image_dataset", lambda *a, **k: pytest.fail("read the data"))
    argv = with_argument(argv, "--resume_from_checkpoint", "true")
    result = outcome("train", with_argument(argv, *change))
    assert result.code == 1 and result.one_line, result
    assert f"{output / 'checkpoint-2'}" in result.error and all(part in result.error for part in said), result
    fix = "drop the new overrides)" if said[0] == ARCHITECTURE else "drop the changes)"
    assert result.error.endswith(f"{fix}, or start a new run in another --output_dir.")
    assert snapshot(output) == before


@pytest.mark.integration
@pytest.mark.parametrize(
    "asked, shown",
    [
        (("--num_train_epochs", 3), "--num_train_epochs 2 in it, 3 now"),
        (("--num_train_epochs", 1), "--num_train_epochs 2 in it, 1 now"),
        (
            ("--max_steps", 5),
            (
                "--max_steps none (--num_train_epochs sets the steps) in it, 5 now; --num_train_epochs 2 in it, "
                "unused (--max_steps 5 sets the steps) now"
            ),
        ),
    ],
)
def test_resuming_with_other_steps_is_one_line_before_any_data_is_read(trained, asked, shown, monkeypatch):
    """More steps would stretch the learning-rate schedule the run is halfway through; fewer would train none."""
    import modeling_vit_scratch.training.trainer as trainer_module

    scenario, argv = trained
    output = scenario.root / "out-train"
    before = snapshot(output)
    monkeypatch.setattr(trainer_module, "load_image_dataset", lambda *a, **k: pytest.fail("read the data"))
    result = outcome("train", with_argument(with_argument(argv, *asked), "--resume_from_checkpoint", "true"))
    assert result.code == 1 and result.one_line, result
    checkpoint = output / "checkpoint-2"
    assert result.error == (
        f"error: --resume_from_checkpoint: {checkpoint} belongs to a run trained with other settings ({shown}): a "
        "resumed run goes on as it started; resume with the settings it was trained with (drop the changes), or "
        f"start a new run from its weights (--model {checkpoint}, without --resume_from_checkpoint) in another "
        "--output_dir: its learning-rate schedule was built for the steps it was given, so a run of another length "
        "is a new run."
    )
    assert snapshot(output) == before


@pytest.mark.parametrize("order", ["epochs then steps", "steps then epochs"])
def test_a_resume_that_sets_the_steps_another_way_names_only_true_differences(tmp_path, order):
    """A run of --num_train_epochs 200 resumed with --max_steps 30 --num_train_epochs 200 (and the other way round):
    the epochs were given both times, so no line calls them "not given"; each side says which argument set the steps."""
    from modeling_vit_scratch.training.resumed_data import DATA_FILE, check_resumed_settings

    by_epochs, by_steps = {"max_steps": None, "num_train_epochs": 200}, {"max_steps": 30, "num_train_epochs": None}
    saved, now = (by_epochs, by_steps) if order == "epochs then steps" else (by_steps, by_epochs)
    (tmp_path / DATA_FILE).write_text(json.dumps({"settings": saved}))
    with pytest.raises(ValueError) as refused:
        check_resumed_settings(str(tmp_path), now)
    words = {"epochs": "none (--num_train_epochs sets the steps)", "steps": "unused (--max_steps 30 sets the steps)"}
    first, second = (words["epochs"], "30") if order == "epochs then steps" else ("30", words["epochs"])
    epochs = ("200", words["steps"]) if order == "epochs then steps" else (words["steps"], "200")
    assert f"(--max_steps {first} in it, {second} now; --num_train_epochs {epochs[0]} in it, {epochs[1]} now)" in str(
        refused.value
    )
    assert "not given" not in str(refused.value)


def test_a_resume_planning_another_total_of_steps_is_one_line_whatever_set_it(tmp_path):
    """The total the schedule was built for (the checkpoint's `trainer_state.json`) against the total this run plans:
    a checkpoint that kept no settings, or a total set by something other than the steps and epochs, is compared."""
    from transformers import TrainingArguments

    from modeling_vit_scratch.training.trainer import check_resumed_steps

    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2, "max_steps": 4, "epoch": 2}))
    args = TrainingArguments("out", report_to="none", use_cpu=True, num_train_epochs=4, per_device_train_batch_size=8)
    check_resumed_steps(args, 8, str(checkpoint))  # 8 images in batches of 8 for 4 epochs: the 4 steps planned
    with pytest.raises(ValueError) as refused:
        check_resumed_steps(args, 16, str(checkpoint))  # twice the rows: 8 steps
    assert str(refused.value) == (
        f"--resume_from_checkpoint: {checkpoint} belongs to a run of 4 steps (it has trained 2), and "
        "--num_train_epochs 4 plans 8: its learning-rate schedule was built for 4, and a resumed run goes on as it "
        "started; resume with the steps it was given, or start a new run from its weights (--model "
        f"{checkpoint}, without --resume_from_checkpoint) in another --output_dir."
    )


@pytest.mark.integration
def test_the_command_printed_after_the_last_step_finishes_the_run(tmp_path, monkeypatch, capsys):
    """Ctrl-C after every step ran, before the model folder was written (before: its resume command was refused,
    'nothing is left to train'): that command evaluates, tests and writes the model folder, training no more."""
    from safetensors.torch import load_file
    from transformers import Trainer

    scenario = Scenario(tmp_path)
    output = tmp_path / "out"
    argv = [*scenario.argv("train", output), "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1"]
    argv += ["--max_train_samples", "8"]
    original = Trainer.train

    def train_then_interrupt(self, *args, **kwargs):
        original(self, *args, **kwargs)
        raise KeyboardInterrupt  # Ctrl-C once the last step is saved, before the model folder

    monkeypatch.setattr(Trainer, "train", train_then_interrupt)
    monkeypatch.setattr(sys, "argv", ["vit-scratch train", *argv])
    assert outcome("train", argv).code == 130
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert not (output / "model.safetensors").exists()
    resume = shlex.split(line.split("resume with: ", 1)[1])
    monkeypatch.setattr(Trainer, "train", original)
    monkeypatch.setattr(sys, "argv", ["vit-scratch train", *resume[resume.index("train") + 1 :]])
    resumed = outcome("train", resume[resume.index("train") + 1 :])  # the printed command, as printed
    assert resumed.code == 0, resumed
    # the record and the card tell the whole run: both legs, their commands and their summed wall time
    record = json.loads((output / "training_record.json").read_text())
    assert [leg["command"] for leg in record["legs"]] == [
        shlex.join(["vit-scratch", "train", *argv]),
        line.split("resume with: ", 1)[1],
    ]
    assert record["wall_time_seconds"] == round(sum(leg["wall_time_seconds"] for leg in record["legs"]), 1)
    card = (output / "README.md").read_text()
    assert "in 2 legs, each after the first resumed from a checkpoint." in card
    assert (
        card.index(record["legs"][0]["command"])
        < card.index("the run stopped, then resumed from step 2 with (")
        < card.index(line.split("resume with: ", 1)[1])
    )
    assert not (output / "checkpoint-3").exists()
    final, last = load_file(output / "model.safetensors"), load_file(output / "checkpoint-2" / "model.safetensors")
    assert final.keys() == last.keys() and all((final[name] == last[name]).all() for name in final)
    results = json.loads((output / "all_results.json").read_text())
    assert "test_accuracy" in results and "train_loss" not in results  # no step trained now: no loss of 0


@pytest.mark.integration
def test_resuming_a_finished_run_is_one_line_whose_command_runs_as_printed(trained, tmp_path, monkeypatch):
    """A resume that would train no step of a finished run is refused, changing nothing (before: its model was
    published again and the card said the run was stopped); the fix it prints, and the one printed for a finished
    run whose checkpoints were deleted, run as printed (before: 'start a new run', then refused). A resume from an
    earlier checkpoint trains on, and the record says the run had finished."""
    scenario, argv = trained
    finished = tmp_path / "finished"
    shutil.copytree(scenario.root / "out-train", finished)
    argv = with_argument(argv, "--output_dir", finished)
    before = snapshot(finished, lock=True)

    def outcome(name, argv):  # as the installed command runs it: the fixes printed name it
        monkeypatch.setattr(sys, "argv", ["vit-scratch train", *argv])
        return run_in_process(name, argv)

    for resume in ("true", str(finished / "checkpoint-2")):
        result = outcome("train", [*argv, "--resume_from_checkpoint", resume])
        assert result.code == 1 and result.one_line, result
        assert f"the run in {str(finished)!r} finished at step 2 (" in result.error
        assert snapshot(finished, lock=True) == before
    printed = shlex.split(result.error.split("start a new run (set --num_train_epochs or --max_steps to the ")[1])
    assert outcome("train", printed[printed.index("train") + 1 :]).code == 0
    assert (tmp_path / "finished-2" / "model.safetensors").is_file()
    bare = tmp_path / "bare"  # a finished run whose checkpoints were deleted
    shutil.copytree(finished, bare, ignore=shutil.ignore_patterns("checkpoint-*"))
    result = outcome("train", [*with_argument(argv, "--output_dir", bare), "--resume_from_checkpoint", "true"])
    assert result.code == 1 and "it holds a model: start a new run from its weights, vit-scratch train" in result.error
    printed = shlex.split(result.error.split("from its weights, ")[1].split("; or give")[0])
    assert outcome("train", printed[printed.index("train") + 1 :]).code == 0
    assert (tmp_path / "bare-2" / "model.safetensors").is_file()
    # the run's folder itself, not a checkpoint of it, into a new folder (before: "'.' has no complete checkpoint:
    # start a new run with --overwrite_output_dir true", which was false and refused in turn)
    fresh = with_argument(argv, "--output_dir", tmp_path / "o_new")
    result = outcome("train", [*fresh, "--resume_from_checkpoint", str(finished)])
    assert result.code == 1 and result.one_line, result
    assert result.error.startswith(
        f"error: --resume_from_checkpoint {str(finished)!r} is the folder of a finished run (its model is there), not "
        "a checkpoint: to train on from its model, start a new run from its weights"
    )
    printed = shlex.split(result.error.split("to the length you want): ")[1])
    assert outcome("train", printed[printed.index("train") + 1 :]).code == 0
    assert (tmp_path / "o_new-2" / "model.safetensors").is_file() and snapshot(finished, lock=True) == before
    # an older checkpoint while a newer one is in the folder: the resumed run would save over it, so one line
    # naming it and the fixes, and nothing changed; once the newer one is moved out, it trains on from there
    result = outcome("train", [*argv, "--resume_from_checkpoint", str(finished / "checkpoint-1")])
    assert result.code == 1 and result.one_line, result
    assert result.error == (
        f"error: --resume_from_checkpoint {str(finished / 'checkpoint-1')!r} is at step 1, but {str(finished)!r} "
        "holds newer checkpoints (checkpoint-2) that the resumed run would save over: resume from the newest with "
        f"--resume_from_checkpoint true, or move the newer ones out of {str(finished)!r} first."
    )
    assert snapshot(finished, lock=True) == before
    (tmp_path / "kept").mkdir()
    shutil.move(finished / "checkpoint-2", tmp_path / "kept" / "checkpoint-2")
    result = outcome("train", [*argv, "--resume_from_checkpoint", str(finished / "checkpoint-1")])
    assert result.code == 0, result
    leg = json.loads((finished / "training_record.json").read_text())["legs"][-1]
    assert leg["resumed_from_step"] == 1 and is_complete_checkpoint(finished / "checkpoint-2")
    assert (tmp_path / "kept" / "checkpoint-2" / "trainer_state.json").is_file()  # the moved one, as it was


def run_folder_with(folder: Path, steps: dict[int, bool], max_steps: int, model: bool) -> Path:
    """A run's folder holding a checkpoint-N for each step (complete or cut off mid-save), of a run that planned
    `max_steps`, and the run's model where it finished."""
    for step, complete in steps.items():
        checkpoint = folder / f"checkpoint-{step}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "model.safetensors").write_bytes(b"weights")
        if complete:
            (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step, "max_steps": max_steps}))
    if model:
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"weights")
    return folder


@pytest.mark.parametrize(
    ("steps", "max_steps", "model", "said"),
    [
        (
            {2: True, 4: True},
            4,
            True,
            (
                "finished run (its model is there), not a checkpoint: to train on from its model, "
                "start a new run from its weights (set --num_train_epochs or --max_steps to the length you want): --model "
                "{run} without --resume_from_checkpoint"
            ),
        ),
        (
            {2: True},
            4,
            True,
            (
                "finished run (its model is there), not a checkpoint: to train on from its model, start "
                "a new run from its weights (set --num_train_epochs or --max_steps to the length you want): --model {run} "
                "without --resume_from_checkpoint; to go on training it, give --resume_from_checkpoint {run}/checkpoint-2, "
                "its newest complete checkpoint"
            ),
        ),
        (
            {2: True, 4: False},
            6,
            False,
            (
                "interrupted run, not a checkpoint: resume it with --resume_from_checkpoint "
                "{run}/checkpoint-2, its newest complete checkpoint."
            ),
        ),
        (
            {2: False},
            6,
            False,
            (
                "interrupted run, not a checkpoint: it has no complete checkpoint (cut off mid-save: "
                "checkpoint-2): start the run anew without --resume_from_checkpoint."
            ),
        ),
    ],
)
def test_resuming_from_a_run_folder_names_what_it_is_and_a_way_on(tmp_path, steps, max_steps, model, said):
    """--resume_from_checkpoint naming a run's folder, not one of its checkpoints, says what the folder is: never
    "is incomplete (the run was stopped while saving it)", never '.'."""
    from modeling_vit_scratch.common.folders import resolve_checkpoint

    run = run_folder_with(tmp_path / "o2", steps, max_steps, model)
    with pytest.raises(ValueError) as refused:
        resolve_checkpoint(tmp_path / "o_new", str(run))
    assert str(refused.value) == (
        f"--resume_from_checkpoint {str(run)!r} is the folder of a{'' if model else 'n'} " + said.format(run=run)
    )


def test_an_incomplete_checkpoint_named_from_inside_its_run_names_the_run_by_its_path(tmp_path, monkeypatch):
    from modeling_vit_scratch.common.folders import resolve_checkpoint

    run_folder_with(tmp_path, {3: False}, 6, False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as refused:
        resolve_checkpoint("out", "checkpoint-3")
    assert str(refused.value) == (
        f"Checkpoint 'checkpoint-3' is incomplete (no readable trainer_state.json or weights: the run was stopped while "
        f"saving it); {str(tmp_path)!r} has no complete checkpoint: start the run anew without --resume_from_checkpoint "
        "(with --overwrite_output_dir true where --output_dir is that run's folder)."
    )


@pytest.mark.parametrize("name, argument", [("train", "--output_dir"), *MODEL_FOLDER_READERS])
def test_a_command_refused_on_a_folder_with_a_damaged_run_marker_changes_no_byte_of_it(
    trained, tmp_path, name, argument
):
    """A run folder whose run marker is damaged and whose model is gone: every command that reads or writes it
    leaves every byte as it was, the lock included, and never names its own process as the folder's run (before:
    train rewrote the lock with its own process id, then said that process's run was interrupted)."""
    scenario, _ = trained
    folder = tmp_path / "run"
    shutil.copytree(scenario.root / "out-train", folder, ignore=shutil.ignore_patterns("model.safetensors"))
    (folder / RUN_FILE).write_text("garbage{")
    before = snapshot(folder, lock=True)
    argv = argv_reading(Scenario(tmp_path), name, argument, folder)
    result = outcome(name, argv)
    assert result.code == 1 and result.one_line, result
    assert snapshot(folder, lock=True) == before
    assert f"process {os.getpid()}" not in result.error


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
    argv = with_argument(argv, "--resume_from_checkpoint", "true")
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
def test_a_data_set_moved_between_interrupt_and_resume_is_the_same_data_set(trained, tmp_path):
    """The splits' fingerprint names each image file by its path inside the data set folder: moving the folder (to
    another disk, another mount) does not make it another data set."""
    import shutil

    scenario, argv = trained
    moved, output = tmp_path / "elsewhere" / "images", tmp_path / "out"
    shutil.copytree(scenario.images(), moved)
    # the run's first checkpoint alone: a resume never saves over a newer checkpoint in its folder
    shutil.copytree(scenario.root / "out-train" / "checkpoint-1", output / "checkpoint-1")
    argv = with_argument(with_argument(argv, "--dataset", moved), "--output_dir", output)
    result = outcome("train", with_argument(argv, "--resume_from_checkpoint", str(output / "checkpoint-1")))
    assert result.code == 0, result


# SIGINT by default, SIGTERM in the slow tier: both reach the run through the same handler, which
# tests/safety/test_command_streams.py sends for real, and each of them stops training in process there
@pytest.mark.integration
@pytest.mark.parametrize(
    "sent, code", one_by_default([(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
)
def test_ctrl_c_keeps_everything_names_the_last_checkpoint_and_the_command_that_resumes(tmp_path, sent, code):
    scenario = Scenario(tmp_path)
    output = tmp_path / "out"
    argv = [*scenario.argv("train", output), "--max_steps", "100000", "--save_strategy", "steps", "--save_steps", "1"]
    argv += ["--overwrite_output_dir", "true"]  # starts afresh: the command that resumes must turn it off
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "modeling_vit_scratch.cli", "train", *argv]
    # a child inherits an ignored SIGINT (a test run in a background job has one): it gets Python's handler, so
    # the Ctrl-C reaches the run as a terminal's would
    ignored = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        run = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, ignored)
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
    found = checkpoints(output)  # one the signal cut off mid-save is named: a resume starts from `last`
    cut = ", ".join(path.name for path in found[found.index(last) + 1 :])
    said = f" ({cut} was cut off mid-save: a resume starts from the last complete one)" if cut else ""
    assert line.startswith(
        f"Interrupted: everything in {output} is kept{said}; the last checkpoint is {last}; resume with: "
    )
    resume = shlex.split(line.split("resume with: ", 1)[1])
    assert resume[-2:] == ["--resume_from_checkpoint", "true"] and resume.count("--resume_from_checkpoint") == 1
    assert resume[-4:-2] == ["--overwrite_output_dir", "false"] and resume.count("--overwrite_output_dir") == 1
    assert (output / ".vit-scratch-output").is_file() and last.is_dir()

    # the command as printed passes every check and trains on from that checkpoint (its 100000 steps are not run)
    from transformers import Trainer

    started = []

    def stop_at_once(self, *args, **kwargs):
        started.append(kwargs.get("resume_from_checkpoint"))
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Trainer, "train", stop_at_once)
        resumed = outcome("train", resume[resume.index("train") + 1 :])
    assert resumed.code == 130 and started == [str(last)], (resumed, started)


# what gloo raises on a process whose peer has gone (from the gradients' all-reduce, through autograd)
GLOO_PEER_GONE = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
    "[127.0.0.1]:5512. This is typically caused by a remote worker crashing. Check the logs of the remote worker."
)


@pytest.fixture
def two_processes(monkeypatch):
    """`enter()` makes this process look like one of two joined processes, from then on (torch.distributed's own
    answers): what a collective's error is read against."""
    import torch.distributed as dist

    def enter():
        monkeypatch.setattr(dist, "is_initialized", lambda: True)
        monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)

    return enter


def chained(error: BaseException, cause: BaseException) -> BaseException:
    error.__cause__ = cause
    return error


@pytest.mark.parametrize(
    "error, reason",
    [
        (RuntimeError(GLOO_PEER_GONE), "Connection closed by peer [127.0.0.1]:5512"),
        (
            RuntimeError("[pair.cc:589] Read error [10.0.0.2]:41000: Connection reset by peer"),
            "Read error [10.0.0.2]:41000: Connection reset by peer",
        ),
        (
            chained(ValueError("a gather failed"), RuntimeError(GLOO_PEER_GONE)),
            "Connection closed by peer [127.0.0.1]:5512",
        ),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)"), None),
    ],
    ids=["closed", "reset", "raised-from-it", "other"],
)
def test_only_an_error_that_says_another_process_is_gone_is_a_lost_peer(error, reason, two_processes):
    from modeling_vit_scratch.training.distributed import lost_peer

    assert lost_peer(error) is None  # one process: no peer to lose
    two_processes()
    assert lost_peer(error) == reason


@pytest.mark.parametrize("lost", [True, False], ids=["peer-gone", "other-error"])
def test_a_process_that_lost_another_says_so_in_one_line_with_how_to_resume(
    tmp_path, monkeypatch, capsys, lost, two_processes
):
    """In this process, the training's all-reduce failing as gloo fails when the other process is killed: one line,
    what was kept and how to go on; any other error is not taken for it (its traceback, as a bug's)."""
    from modeling_vit_scratch.training import command

    output = tmp_path / "out"

    def work(*args, **kwargs):
        two_processes()
        raise RuntimeError(GLOO_PEER_GONE if lost else "mat1 and mat2 shapes cannot be multiplied")

    monkeypatch.setattr(command, "train", work)
    done = outcome("train", Scenario(tmp_path).argv("train", output))
    if not lost:
        assert isinstance(done.traceback, RuntimeError) and "Another process" not in capsys.readouterr().err
        return
    assert done.code == command.OTHER_PROCESS_STOPPED and done.traceback is None
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "Another process of this run stopped (this one lost it: Connection closed by peer [127.0.0.1]:5512), and this "
        f"one with it before the first checkpoint: nothing in {output} was removed; run the same command again to "
        "start afresh."
    )


def rank_process(launcher: int, rank: int) -> int:
    """The process id of the training process of `rank` that torchrun (process `launcher`) started."""
    for child in Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split():
        environment = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        if f"RANK={rank}".encode() in environment:
            return int(child)
    raise AssertionError(f"torchrun started no process of rank {rank}")


@pytest.mark.integration
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds torchrun's processes through /proc (Linux)")
def test_a_process_whose_run_lost_another_under_torchrun_says_so_in_one_line(tmp_path):
    """torchrun, 2 processes, the second killed (SIGTERM) after a checkpoint: it says nothing (the first speaks for
    the run); the first, whose all-reduce lost its peer, prints the line naming the last checkpoint and the command
    that resumes (before: gloo's RuntimeError traceback and no line). What follows is torchrun's own summary."""
    output = tmp_path / "out"
    argv = [*Scenario(tmp_path).argv("train", output), "--max_steps", "100000", "--save_strategy", "steps"]
    argv += ["--save_steps", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    launcher = torchrun()
    command = [*launcher, str(REPO / "scripts" / "train.py"), *argv]
    run = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + PROCESS_TIMEOUT
        while not any(is_complete_checkpoint(path) for path in checkpoints(output)):
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.2)
        os.kill(rank_process(run.pid, 1), signal.SIGTERM)
        _, stderr = run.communicate(timeout=PROCESS_TIMEOUT)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode != 0
    ours = stderr.split("Traceback (most recent call last)")[0]  # torchrun's summary, its own traceback, follows
    assert "ChildFailedError" in stderr and "RuntimeError" not in stderr and "gloo" not in stderr, stderr[-3000:]
    lines = [line for line in ours.splitlines() if line.startswith(("Another process", "Interrupted"))]
    last = [path for path in checkpoints(output) if is_complete_checkpoint(path)][-1]
    assert len(lines) == 1, ours[-3000:]
    # torchrun may stop the first process (SIGTERM) before its all-reduce fails: it is then interrupted, as it says
    assert lines[0].startswith(
        (
            "Another process of this run stopped (this one lost it: Connection closed by peer",
            f"Interrupted: everything in {output} is kept; the last checkpoint is",
        )
    ), lines[0]
    assert f"the last checkpoint is {last}; resume with: " in lines[0]
    assert " -m torch.distributed.run --nproc_per_node 2 " in lines[0]
    assert lines[0].endswith("--resume_from_checkpoint true")


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


# A resume continues the same run: its settings are kept in each checkpoint and compared (resumed_data.py).
def default_settings(**changes) -> dict:
    """`run_settings` of the default arguments, with `changes` made to whichever group holds each."""
    from dataclasses import replace

    from transformers import TrainingArguments

    from modeling_vit_scratch.training.arguments import DataArguments, ModelArguments
    from modeling_vit_scratch.training.resumed_data import run_settings

    groups = [ModelArguments(model="tiny.json"), DataArguments(dataset="images"), None]
    training = {name: value for name, value in changes.items() if not any(hasattr(g, name) for g in groups[:2])}
    for index, group in enumerate(groups[:2]):
        groups[index] = replace(group, **{name: value for name, value in changes.items() if hasattr(group, name)})
    groups[2] = TrainingArguments("out", **{"report_to": "none", "use_cpu": True, **training})
    return run_settings(*groups)


def kept_settings(folder, settings: dict):
    """A checkpoint whose run was given `settings`, as `KeepDataIdentity` leaves it."""
    from modeling_vit_scratch.training.resumed_data import KeepDataIdentity

    checkpoint = folder / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    identity = KeepDataIdentity("images", "f00d", settings).identity
    (checkpoint / DATA_FILE).write_text(json.dumps(identity))
    return checkpoint


# each setting, and another value of it: every one is compared
CHANGED = {
    "ema_decay": 0.9,
    "layer_decay": 0.75,
    "teacher": "teacher-folder",
    "distillation": "soft",
    "max_train_samples": 64,
    "augmentation": "none",
    "max_shift": 0.2,
    "mixup": 0.5,
    "cutmix": 0.5,
    "rand_augment": "rand-m9-n2",
    "seed": 3,
    "data_seed": 5,
    "learning_rate": 1e-3,
    "lr_scheduler_type": "cosine",
    "warmup_steps": 10,
    "weight_decay": 0.05,
    "optim": "sgd",
    "max_grad_norm": 0.5,
    "label_smoothing_factor": 0.1,
    "per_device_train_batch_size": 4,
    "lr_scheduler_kwargs": {"min_lr": 4e-5},
    "optim_args": "momentum=0.9",
    "ignore_data_skip": True,
    "full_determinism": True,
    "train_sampling_strategy": "sequential",
    "accelerator_config": {"split_batches": True},
}


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_a_resume_with_any_setting_changed_names_it_both_ways(tmp_path, name):
    from modeling_vit_scratch.training.resumed_data import check_resumed_settings, shown_setting

    first, changed = default_settings(), default_settings(**{name: CHANGED[name]})
    shown = "the total batch" if name == "per_device_train_batch_size" else f"--{name}"
    key = "total_train_batch_size" if name == "per_device_train_batch_size" else name
    for kept, asked in ((first, changed), (changed, first)):
        checkpoint = kept_settings(tmp_path / f"{name}-{kept is first}", kept)
        with pytest.raises(ValueError) as refused:
            check_resumed_settings(str(checkpoint), asked)
        message = str(refused.value)
        assert f"{checkpoint} belongs to a run trained with other settings ({shown}" in message
        assert f" {shown_setting(kept[key])} in it, {shown_setting(asked[key])} now)" in message
        assert message.endswith("drop the changes), or start a new run in another --output_dir.")
        check_resumed_settings(str(checkpoint), kept)


@pytest.mark.parametrize(
    "allowed",
    [
        dict(logging_steps=3, eval_steps=3, save_steps=3, eval_strategy="steps", save_strategy="steps"),
        dict(report_to="tensorboard", run_name="again", disable_tqdm=True),
        dict(per_device_train_batch_size=4, gradient_accumulation_steps=2),  # the same total batch, shared otherwise
        dict(per_device_eval_batch_size=3, eval_flip=False, validation_views=3),
        dict(attn_implementation="eager", save_total_limit=2, dataloader_num_workers=1),
    ],
)
def test_what_may_change_on_resume_is_no_setting(allowed):
    base = dict(per_device_train_batch_size=8)
    assert default_settings(**{**base, **allowed}) == default_settings(**base)


def test_every_trainer_argument_is_compared_on_resume_or_allowed_to_change():
    """A field a new transformers adds fails here until it is put in one of the two lists."""
    from dataclasses import fields

    from transformers import TrainingArguments

    from modeling_vit_scratch.training.resumed_data import ALLOWED_TRAINING_CHANGES, TRAINING_SETTINGS

    names = {item.name for item in fields(TrainingArguments)}
    assert not set(TRAINING_SETTINGS) & set(ALLOWED_TRAINING_CHANGES)
    assert sorted(names - set(TRAINING_SETTINGS) - set(ALLOWED_TRAINING_CHANGES)) == []
    assert sorted((set(TRAINING_SETTINGS) | set(ALLOWED_TRAINING_CHANGES)) - names) == []


def test_every_model_and_data_argument_is_compared_on_resume_or_allowed_to_change():
    """Every argument that changes what is trained (the model and its revision, the teacher and its revision, the
    overrides, the data and how it is read) is compared on resume (before: --teacher_revision and --model_revision
    were not); a field added to the arguments fails here until it is put in a list."""
    from dataclasses import fields

    from modeling_vit_scratch.training import resumed_data as kept
    from modeling_vit_scratch.training.arguments import DataArguments, ModelArguments

    model = {item.name for item in fields(ModelArguments)}
    data = {item.name for item in fields(DataArguments)}
    assert sorted(model - set(kept.MODEL_SETTINGS) - set(kept.ALLOWED_MODEL_CHANGES)) == []
    compared = set(kept.DATA_SETTINGS) | set(kept.FINGERPRINTED) | set(kept.ALLOWED_DATA_CHANGES)
    assert sorted(data - compared) == []
    assert {"model_revision", "teacher_revision", "config_overrides", "model"} <= set(kept.MODEL_SETTINGS)


@pytest.mark.parametrize(
    "name, before, after", [("teacher_revision", "a" * 40, "b" * 40), ("model_revision", None, "c" * 40)]
)
def test_a_revision_changed_on_resume_is_one_line_naming_it(tmp_path, name, before, after):
    from modeling_vit_scratch.training.resumed_data import DATA_FILE, check_resumed_settings

    checkpoint = tmp_path / "checkpoint-1"
    checkpoint.mkdir()
    (checkpoint / DATA_FILE).write_text(json.dumps({"settings": {name: before}}))
    with pytest.raises(ValueError) as refused:
        check_resumed_settings(str(checkpoint), {name: after})
    shown = "not given" if before is None else before
    assert f"(--{name} {shown} in it, {after} now)" in str(refused.value)


def test_scheduler_arguments_are_compared_and_shown_as_given(tmp_path):
    from modeling_vit_scratch.training.resumed_data import check_resumed_settings

    first = default_settings(lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs={"min_lr": 1e-6})
    changed = default_settings(lr_scheduler_type="cosine_with_min_lr", lr_scheduler_kwargs='{"min_lr": 4e-5}')
    checkpoint = kept_settings(tmp_path, json.loads(json.dumps(first)))  # as the checkpoint's JSON keeps them
    with pytest.raises(ValueError) as refused:
        check_resumed_settings(str(checkpoint), changed)
    assert '(--lr_scheduler_kwargs {"min_lr":1e-06} in it, {"min_lr":4e-05} now)' in str(refused.value)
    check_resumed_settings(str(checkpoint), first)


def test_a_checkpoint_without_kept_settings_is_not_compared(tmp_path):
    from modeling_vit_scratch.training.resumed_data import check_resumed_settings

    checkpoint = kept_settings(tmp_path, {})  # written before the settings were kept
    check_resumed_settings(str(checkpoint), default_settings(seed=3))


def test_a_stream_keeps_its_source_and_shuffle_buffer_as_settings():
    streamed = default_settings(streaming=True)
    assert streamed["shuffle_buffer_size"] is not None and streamed["dataset"] == "images"
    assert default_settings(streaming=True, shuffle_buffer_size=7) != streamed
    assert "shuffle_buffer_size" not in default_settings()  # a set of known length: its splits' fingerprint


@pytest.mark.parametrize("made", [False, True])
def test_resuming_a_folder_that_holds_no_run_says_so_and_makes_nothing(tmp_path, made):
    scenario = Scenario(tmp_path)
    output = tmp_path / "new" / "out"
    if made:
        output.mkdir(parents=True)
    result = outcome("train", [*scenario.argv("train", output), "--resume_from_checkpoint", "true"])
    assert result.code == 1 and result.one_line, result
    said = "does not exist, so there is no run" if not made else "holds no checkpoint, so there is no run"
    assert said in result.error and "start a new run without --resume_from_checkpoint" in result.error
    assert output.is_dir() == made and (not made or not any(output.iterdir()))
    assert made or not (tmp_path / "new").exists()


@pytest.mark.integration
@pytest.mark.parametrize("channels", ["from the data", "given"])
def test_the_command_printed_on_interrupt_resumes_a_run_whose_architecture_took_fields_from_its_data(
    tmp_path, monkeypatch, capsys, caplog, channels
):
    """A grayscale set and an architecture file without num_channels: the first run takes 1 channel from the data,
    and its resume must compare with that (before: 'num_channels: 1 in it, 3 asked', no overrides given)."""
    from transformers import Trainer

    images = write_imagefolder(tmp_path / "gray", per_class=10, size=(8, 8), mode="L")
    scenario = Scenario(tmp_path)
    output = tmp_path / "out"
    argv = with_argument(scenario.argv("train", output), "--dataset", images)
    if channels == "given":  # written in the architecture file: the data fills nothing
        model = scenario.root / "tiny-gray.json"
        model.write_text(json.dumps({**json.loads(scenario.model_file().read_text()), "num_channels": 1}))
        argv = with_argument(argv, "--model", model)
    argv += ["--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1", "--max_train_samples", "16"]
    original = Trainer.train

    def train_then_interrupt(self, *args, **kwargs):
        original(self, *args, **kwargs)
        raise KeyboardInterrupt  # Ctrl-C once checkpoint-2 is saved

    monkeypatch.setattr(Trainer, "train", train_then_interrupt)
    monkeypatch.setattr(sys, "argv", ["vit-scratch train", *argv])
    assert outcome("train", argv).code == 130
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert json.loads((output / "checkpoint-2" / "config.json").read_text())["num_channels"] == 1
    resume = shlex.split(line.split("resume with: ", 1)[1])

    def train_then_rotate(self, *args, **kwargs):  # --save_total_limit 1 removes the checkpoint resumed from
        result = original(self, *args, **kwargs)
        shutil.rmtree(output / "checkpoint-2")
        return result

    monkeypatch.setattr(Trainer, "train", train_then_rotate)
    args = resume[resume.index("train") + 1 :]  # the printed command: it finishes the run
    # rotation may remove the checkpoint resumed from (before: its trainer_state.json read again, and no model)
    resumed = outcome("train", [*args, "--save_total_limit", "1"])
    assert resumed.code == 0, resumed
    assert (output / "model.safetensors").is_file()
    monkeypatch.setattr(Trainer, "train", original)
    assert "Trained no step: " in caplog.text  # said, whatever the run marker holds
    assert json.loads((output / "config.json").read_text())["num_channels"] == 1
    overridden = outcome("train", [*args, "--config_overrides", "num_channels=3"])
    assert overridden.one_line and "(num_channels: 1 in it, 3 asked)" in overridden.error, overridden


# A checkpoint that holds the weights only (--save_only_model) cannot continue its run exactly.
def weights_only_checkpoint(folder, states=()):
    """A complete checkpoint (state and weights) holding only the Trainer `states` named."""
    checkpoint = folder / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (checkpoint / "model.safetensors").write_bytes(b"")
    for name in states:
        (checkpoint / name).write_bytes(b"")
    return checkpoint


@pytest.mark.parametrize(
    "states, missing",
    [
        ((), "optimizer.pt, scheduler.pt, rng_state.pth"),
        (("optimizer.pt", "scheduler.pt"), "rng_state.pth"),
        (("optimizer.pt", "rng_state_0.pth", "rng_state_1.pth"), "scheduler.pt"),
    ],
)
def test_resuming_a_checkpoint_without_the_runs_states_is_one_line_naming_them(tmp_path, states, missing):
    from modeling_vit_scratch.common.folders import check_continuable

    checkpoint = weights_only_checkpoint(tmp_path, states)
    with pytest.raises(ValueError) as refused:
        check_continuable(checkpoint)
    assert str(refused.value) == (
        f"--resume_from_checkpoint: {checkpoint} has no {missing} (it was written with --save_only_model true, or "
        "they were removed), so the run cannot go on as it would have: fine-tune from its weights with --model "
        f"{checkpoint} (without --resume_from_checkpoint) into another --output_dir, or start a new run."
    )
    check_continuable(weights_only_checkpoint(tmp_path / "all", ("optimizer.pt", "scheduler.pt", "rng_state.pth")))


def test_the_interrupt_line_of_a_weights_only_checkpoint_says_how_to_start_from_its_weights(tmp_path):
    from types import SimpleNamespace

    from modeling_vit_scratch.training.command import interrupted_line

    checkpoint = weights_only_checkpoint(tmp_path)
    line = interrupted_line(SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace(overwrite_output_dir=False), 0)
    assert line == (
        f"Interrupted: everything in {tmp_path} is kept; the last checkpoint, {checkpoint}, holds the weights only "
        f"(--save_only_model true), so it cannot resume the run: start from its weights with --model {checkpoint} "
        "(without --resume_from_checkpoint) and another --output_dir."
    )
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth"):
        (checkpoint / name).write_bytes(b"")
    (tmp_path / "checkpoint-3").mkdir()  # cut off mid-save: a resume starts from checkpoint-2, as the line says
    (tmp_path / "checkpoint-3" / "model.safetensors").write_bytes(b"")
    assert interrupted_line(
        SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace(overwrite_output_dir=False), 0
    ).startswith(
        f"Interrupted: everything in {tmp_path} is kept (checkpoint-3 was cut off mid-save: a resume starts from the "
        f"last complete one); the last checkpoint is {checkpoint}; resume with: "
    )
    assert "resume with: " in interrupted_line(
        SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace(overwrite_output_dir=False), 0
    )


@pytest.mark.integration
def test_a_run_saved_with_save_only_model_is_refused_on_resume_before_any_data_is_read(tmp_path, monkeypatch):
    import modeling_vit_scratch.training.trainer as trainer_module

    scenario = Scenario(tmp_path)
    output = tmp_path / "out"
    argv = [*scenario.argv("train", output), "--max_steps", "1", "--save_strategy", "steps", "--save_steps", "1"]
    argv += ["--save_only_model", "true", "--max_train_samples", "8"]
    assert outcome("train", argv).code == 0
    before = snapshot(output)
    monkeypatch.setattr(trainer_module, "load_image_dataset", lambda *a, **k: pytest.fail("read the data"))
    result = outcome("train", [*argv, "--resume_from_checkpoint", "true"])
    assert result.code == 1 and result.one_line, result
    assert result.error.startswith(
        f"error: --resume_from_checkpoint: {output / 'checkpoint-1'} has no optimizer.pt, scheduler.pt, rng_state.pth"
    )
    assert snapshot(output) == before


@pytest.mark.integration
def test_a_trainer_that_stops_before_its_planned_steps_is_an_interrupted_run_and_publishes_no_model(
    tmp_path, monkeypatch, capsys
):
    """What --enable_jit_checkpoint does on SIGTERM: the Trainer saves, stops and returns as if done (before: exit 0,
    'Model saved', a barely trained model published)."""
    from transformers import Trainer, TrainerCallback

    class StopAtStepOne(TrainerCallback):  # the Trainer's own SIGTERM handling, after its checkpoint
        def on_step_end(self, args, state, control, **kwargs):
            control.should_save, control.should_training_stop = True, True

    original = Trainer.__init__

    def with_stop(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.add_callback(StopAtStepOne())

    monkeypatch.setattr(Trainer, "__init__", with_stop)
    scenario = Scenario(tmp_path)
    output = tmp_path / "out"
    argv = [*scenario.argv("train", output), "--max_steps", "3", "--save_strategy", "no", "--max_train_samples", "8"]
    result = outcome("train", argv)
    assert result.code == 143, result
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"Interrupted: everything in {output} is kept; the last checkpoint is ")
    assert line.split("resume with: ", 1)[1].endswith("--resume_from_checkpoint true")
    assert not (output / "model.safetensors").exists() and not (output / "config.json").exists()
    # every reader of the folder names the interrupted run, its last checkpoint and the same command that resumes it
    refused = outcome("push", [str(output), "local-user/interrupted"])
    assert refused.error.startswith(
        f"error: FOLDER {str(output)!r} holds no model: the training run of process {os.getpid()} into {str(output)!r} "
        "was interrupted before it saved its model; its last checkpoint is "
    )
    assert (
        f"; resume it with: {line.split('resume with: ', 1)[1]}, or push that checkpoint by naming it: "
        in refused.error
    )


def test_a_checkpoint_saved_outside_the_trainers_saving_keeps_the_runs_data_and_settings(tmp_path):
    """--enable_jit_checkpoint's checkpoint on SIGTERM is saved with no `on_save`: the file is written when training
    ends (before: a resume from it compared neither data nor settings)."""
    from types import SimpleNamespace

    from modeling_vit_scratch.training.resumed_data import KeepDataIdentity

    keep = KeepDataIdentity("images", "f00d", {"seed": 42})
    args, state = SimpleNamespace(output_dir=str(tmp_path)), SimpleNamespace(global_step=3, is_world_process_zero=True)
    keep.on_train_end(args, state, None)
    assert not (tmp_path / "checkpoint-3").exists()  # no checkpoint at the last step: nothing made
    (tmp_path / "checkpoint-3").mkdir()
    keep.on_train_end(args, state, None)
    assert json.loads((tmp_path / "checkpoint-3" / DATA_FILE).read_text()) == keep.identity
    assert sorted(path.name for path in (tmp_path / "checkpoint-3").iterdir()) == [DATA_FILE]


def test_a_stream_checkpoint_of_the_earlier_held_out_rule_is_refused_on_resume(tmp_path):
    """A stream's held-out rows were chosen by the images' absolute paths before they were chosen by the paths inside
    the set: a checkpoint of the earlier rule would go on training on other rows than it held out."""
    from modeling_vit_scratch.training.resumed_data import check_resumed_settings

    settings = default_settings(streaming=True, max_steps=4)
    earlier = {name: value for name, value in settings.items() if name != "held_out_rows"}
    checkpoint = kept_settings(tmp_path / "earlier", earlier)
    with pytest.raises(ValueError) as refused:
        check_resumed_settings(str(checkpoint), settings)
    assert str(refused.value) == (
        f"--resume_from_checkpoint: {checkpoint} belongs to a stream held out by an earlier rule (its images' "
        "absolute paths), and this version holds out other rows (by their paths inside the set), so the resumed run "
        f"could validate and test on rows it trained on: start a new run from its weights (--model {checkpoint}, "
        "without --resume_from_checkpoint) in another --output_dir."
    )
    check_resumed_settings(str(kept_settings(tmp_path / "now", settings)), settings)


@pytest.mark.integration
def test_resuming_with_a_teacher_added_names_the_teacher_not_the_overrides(trained, monkeypatch):
    """--teacher gives the model a distillation token: a run trained without one, resumed with --teacher, is refused
    naming --teacher (before: it blamed --model and --config_overrides, though none were given)."""
    import modeling_vit_scratch.training.trainer as trainer_module

    scenario, argv = trained
    output = scenario.root / "out-train"
    before = snapshot(output)
    monkeypatch.setattr(trainer_module, "load_image_dataset", lambda *a, **k: pytest.fail("read the data"))
    argv = with_argument(with_argument(argv, "--resume_from_checkpoint", "true"), "--teacher", scenario.model())
    result = outcome("train", argv)
    assert result.code == 1 and result.one_line, result
    assert result.error == (
        f"error: The checkpoint '{output / 'checkpoint-2'}' has another architecture than --teacher asks for "
        "(distillation_token: False in it, True asked; a distillation token comes from --teacher, and this run was "
        "trained without one): resume without --teacher, as it was trained, or start a new run in another --output_dir."
    )
    assert snapshot(output) == before


def test_resuming_a_run_trained_with_a_teacher_without_it_says_to_give_it(tmp_path):
    from modeling_vit_scratch import ViTScratchConfig
    from modeling_vit_scratch.training.model_source import check_resumed_architecture

    ViTScratchConfig(hidden_size=24, num_attention_heads=2, distillation_token=True).save_pretrained(tmp_path)
    with pytest.raises(ValueError) as refused:
        check_resumed_architecture(str(tmp_path), ViTScratchConfig(hidden_size=24, num_attention_heads=2))
    assert "has another architecture than --teacher asks for (distillation_token: True in it, False asked; " in str(
        refused.value
    )
    assert str(refused.value).endswith(
        "trained with one): resume with --teacher, as it was trained, or start a new run in another --output_dir."
    )


def test_a_checkpoint_without_its_data_record_is_never_resumed_as_nothing_to_compare(tmp_path):
    """A checkpoint cut off before its record (a full disk, a kill) or of an earlier version: a resume from it would
    compare neither data nor settings (before: it trained on a changed set with no word). The line names the newest
    checkpoint that holds one, or the fixes."""
    from modeling_vit_scratch.training.resumed_data import check_resumed_data, check_resumed_settings

    for step in (1, 2):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
        (tmp_path / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"weights")
    cut_off = tmp_path / "checkpoint-2"
    fixes = (
        f"fine-tune from its weights with --model {cut_off} (without --resume_from_checkpoint) into another "
        "--output_dir."
    )
    said = (
        f"--resume_from_checkpoint: {cut_off} has no {DATA_FILE} (it was cut off while saving, or written by an "
        "earlier version), so nothing shows that the resumed run would read the same data and settings: "
    )
    for check in (lambda: check_resumed_settings(str(cut_off), {}), lambda: check_resumed_data(str(cut_off), "x", "f")):
        with pytest.raises(ValueError) as refused:
            check()
        assert str(refused.value) == (
            f"{said}start the run anew with --overwrite_output_dir true in place of --resume_from_checkpoint, or {fixes}"
        )
    (tmp_path / "checkpoint-1" / DATA_FILE).write_text(json.dumps({"settings": {}}))
    with pytest.raises(ValueError) as refused:
        check_resumed_settings(str(cut_off), {})
    assert str(refused.value) == (
        f"{said}resume from the newest checkpoint that holds it, --resume_from_checkpoint "
        f"{tmp_path / 'checkpoint-1'}, or {fixes}"
    )
    check_resumed_settings(str(tmp_path / "checkpoint-1"), {})  # one that holds it is compared
