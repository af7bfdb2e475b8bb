"""`scripts/train.py` in new processes: two CPU processes under torchrun train one model (gloo) and write one folder;
Ctrl-C is one line naming the last checkpoint and the command that resumes, and that command resumes."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import MODEL_FOLDER_FILES, REPO, run_script, tiny_model_file, write_imagefolder
from hub_server import TOKEN, USER, local_hub  # noqa: F401 (local_hub is a fixture)

pytestmark = pytest.mark.integration


def arguments(tmp_path, *extra: str) -> list[str]:
    data = tmp_path / "images"
    if not data.exists():
        write_imagefolder(data, per_class=8)
    return [
        "--model", tiny_model_file(tmp_path), "--dataset", str(data), "--output_dir", str(tmp_path / "run"),
        "--save_steps", "1", "--per_device_train_batch_size", "2", "--report_to", "none", "--disable_tqdm", "true",
        "--validation_fraction", "0.2", "--test_fraction", "0.2", *extra,
    ]  # fmt: skip


def test_two_processes_train_one_model_into_one_folder(tmp_path):
    done = run_script(*arguments(tmp_path, "--max_steps", "2"), nproc=2)
    assert done.returncode == 0, done.stderr[-3000:]
    assert all((tmp_path / "run" / name).is_file() for name in MODEL_FOLDER_FILES)
    assert json.loads((tmp_path / "run" / "training_record.json").read_text())["world_size"] == 2
    assert done.stdout.count("Test accuracy") == 1  # said once, by the first process


@pytest.mark.slow
def test_ctrl_c_names_the_last_checkpoint_and_the_command_that_resumes(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    args = arguments(tmp_path, "--max_steps", "100000")
    process = subprocess.Popen(
        [sys.executable, str(REPO / "scripts" / "train.py"), *args],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 600
    while not (tmp_path / "run" / "checkpoint-2" / "trainer_state.json").exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-3000:]
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-3000:]
    line = stderr.strip().splitlines()[-1]
    assert "checkpoint-" in line and "--resume_from_checkpoint true" in line
    assert not (tmp_path / "run" / "model.safetensors").exists()
    command = line.split("resume with: ", 1)[1].split()
    assert command[command.index("--max_steps") + 1] == "100000"
    step = int(line.split("checkpoint-")[1].split(";")[0].split()[0].rstrip("/"))
    resumed = run_script(*command[2:], "--max_steps", str(step + 1))  # the printed command; the last repeat wins
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    record = json.loads((tmp_path / "run" / "training_record.json").read_text())
    assert record["finished_at_step"] == step + 1 and len(record["legs"]) == 2


@pytest.mark.slow
def test_push_to_hub_sends_the_trained_folder_through_the_gate(tmp_path, local_hub):  # noqa: F811
    repo_id = f"{USER}/tiny-run"
    env = {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = local_hub.run(
        REPO / "scripts" / "train.py", *arguments(tmp_path, "--max_steps", "1"), "--push_to_hub", "true",
        "--hub_model_id", repo_id, hf_home=tmp_path / "home", env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    files = local_hub.files(repo_id)
    assert {"model.safetensors", "config.json", "README.md", "training_record.json"} <= set(files)
    assert TOKEN not in done.stdout + done.stderr and all(TOKEN.encode() not in data for data in files.values())


@pytest.mark.slow
def test_two_processes_pretrain_one_masked_autoencoder_on_images_without_labels(tmp_path):
    flat = tmp_path / "flat"
    write_imagefolder(tmp_path / "images", per_class=8)
    flat.mkdir()
    for index, image in enumerate(sorted((tmp_path / "images").rglob("*.png"))):
        image.rename(flat / f"{index:03}.png")
    decoder = '{"decoder_hidden_size": 8, "decoder_num_hidden_layers": 1, "decoder_num_attention_heads": 2}'
    extra = ["--objective", "masked_image_modeling", "--config_overrides", decoder, "--max_steps", "2"]
    done = run_script(
        *arguments(tmp_path, *extra)[:2], "--dataset", str(flat), *arguments(tmp_path, *extra)[4:], nproc=2
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "reconstruction.png").is_file()
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["architectures"] == ["ViTScratchForPreTraining"]
    assert json.loads((tmp_path / "run" / "training_record.json").read_text())["world_size"] == 2
    assert done.stdout.count("reconstruction loss") == 1
