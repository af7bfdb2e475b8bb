"""Pushing to the Hub (a local Hub-compatible server, the unmodified client) and loading back without the package."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers import run_fresh, tiny_config
from hub_server import TOKEN, local_hub  # noqa: F401  (the fixture)
from huggingface_hub import HfApi, ModelCard, hf_hub_download, snapshot_download

from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification, ViTScratchImageProcessor
from modeling_vit_scratch.hub import PushError, push_to_hub
from modeling_vit_scratch.model_card import render_model_card
from modeling_vit_scratch.reload_check import RELOAD_WITHOUT_PACKAGE
from modeling_vit_scratch.safety import TOKEN_VARIABLES, credential_free_env, weights_sha256

REPO = Path(__file__).resolve().parent.parent
REPO_ID = "local-user/vit-tiny-test"


def saved_folder(path: Path, seed: int = 0, with_training_files: bool = True) -> ViTScratchForImageClassification:
    """A model folder as scripts/train.py leaves it (weights, code, processor, metrics, record, curves)."""
    torch.manual_seed(seed)
    config = tiny_config(num_channels=1, id2label={i: f"digit {i}" for i in range(5)})
    model = ViTScratchForImageClassification(config).eval()
    model.save_pretrained(path)
    ViTScratchImageProcessor.for_config(config).save_pretrained(path)
    if with_training_files:
        (path / "all_results.json").write_text(
            json.dumps({"test_accuracy": 0.91234, "eval_accuracy": 0.95, "test_top5_accuracy": 1.0})
        )
        (path / "training_record.json").write_text(
            json.dumps(
                dict(
                    command="python scripts/train.py configs/train_digits.json",
                    dataset="digits",
                    num_train=10,
                    num_validation=2,
                    num_test=3,
                    epochs=2.0,
                    learning_rate=1e-3,
                    weight_decay=0.05,
                    scheduler="cosine",
                    total_batch=64,
                    seed=seed,
                    world_size=1,
                    precision=None,
                    augmentation=None,
                    wall_time_seconds=12.0,
                    weights_sha256=weights_sha256(path),
                )
            )
        )
        (path / "training_curves.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 100)
    return model


def test_push_uploads_everything_and_loads_back_without_the_package(local_hub, tmp_path):  # noqa: F811
    model = saved_folder(tmp_path / "run")
    first = push_to_hub(tmp_path / "run", REPO_ID, max_shard_size="40KB", commit_message="first model")
    assert len(first.commit_id) == 40 and first.repo_url.endswith(REPO_ID)
    files = set(HfApi().list_repo_files(REPO_ID))
    assert {
        "config.json",
        "modeling_vit_scratch.py",
        "configuration_vit_scratch.py",
        "image_processing_vit_scratch.py",
        "preprocessor_config.json",
        "README.md",
        "all_results.json",
        "training_curves.png",
        "model.safetensors.index.json",
    } <= files
    assert sum(name.startswith("model-") and name.endswith(".safetensors") for name in files) > 1  # sharded
    config = json.loads(Path(hf_hub_download(REPO_ID, "config.json")).read_text())
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForImageClassification"}

    pixel_values = torch.randn(2, 1, 20, 20)
    loaded = run_fresh(REPO_ID, pixel_values, tmp_path / "fresh1", env=local_hub.env(tmp_path / "hf_home1"))
    with torch.no_grad():
        assert torch.equal(loaded["logits"], model(pixel_values).logits)
    assert (loaded["config_class"], loaded["processor_class"]) == ("ViTScratchConfig", "ViTScratchImageProcessor")
    assert loaded["pipeline"][0]["label"].startswith("digit ")

    # a new model on the same repo: the new revision loads, and the old one, pinned, still does
    newer = saved_folder(tmp_path / "run2", seed=1)
    second = push_to_hub(tmp_path / "run2", REPO_ID)
    assert second.commit_id != first.commit_id
    latest = run_fresh(REPO_ID, pixel_values, tmp_path / "fresh2", env=local_hub.env(tmp_path / "hf_home2"))
    pinned = run_fresh(
        REPO_ID, pixel_values, tmp_path / "fresh3", env=local_hub.env(tmp_path / "hf_home3"), revision=first.commit_id
    )
    with torch.no_grad():
        assert torch.equal(latest["logits"], newer(pixel_values).logits)
        assert torch.equal(pinned["logits"], model(pixel_values).logits)
    files = set(HfApi().list_repo_files(REPO_ID))  # the first push's shards went with the new unsharded model
    assert "model.safetensors" in files and not any(name.startswith("model-") for name in files)
    assert "model.safetensors.index.json" not in files
    assert local_hub.unknown_routes == []


def test_model_card_is_valid_and_its_metrics_are_the_measured_ones(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    result = push_to_hub(tmp_path / "run", REPO_ID)
    card_text = Path(hf_hub_download(REPO_ID, "README.md", revision=result.commit_id)).read_text()
    assert "{{" not in card_text and "{%" not in card_text
    card = ModelCard(card_text)
    card.validate()  # posts the front matter to the hub's validate-yaml endpoint
    front = yaml.safe_load(card_text.split("---")[1])
    assert front["library_name"] == "transformers" and front["pipeline_tag"] == "image-classification"
    assert {"vision-transformer", "custom_code"} <= set(front["tags"]) and front["license"] == "apache-2.0"
    metrics = {m["type"]: m["value"] for m in front["model-index"][0]["results"][0]["metrics"]}
    assert metrics == {"accuracy": round(0.91234, 4), "top5_accuracy": 1.0}
    model_commit = HfApi().list_repo_commits(REPO_ID)[1].commit_id  # the card pins the commit holding the weights
    assert f'revision="{model_commit}"' in card_text and "dosovitskiy2021an" in card_text
    assert "hf_local_test_token" not in card_text


@pytest.mark.parametrize(
    "fields, name, stem",
    [
        (dict(stem="resnetv2", stem_depths=[3, 4, 9]), "R50+ViT-B/16", "stages of [3, 4, 9] post-activation"),
        (dict(stem="resnetv2", stem_preactivation=True, patch_size=4), "R+ViT-B/16", "root width 64 and no stages"),
        (dict(stem="conv", stem_channels=[24, 48]), "conv-stem ViT-B/16", "stride 2 with 24, 48 channels"),
    ],
)
def test_the_card_of_a_hybrid_names_its_stem_and_the_pixels_a_token_covers(fields, name, stem):
    stride = ViTScratchConfig(**{**fields, "patch_size": 1}).stem_stride
    card = str(render_model_card(ViTScratchConfig(**{"patch_size": 16 // stride, **fields}, num_labels=3)))
    assert f"A Vision Transformer ({name})" in card and stem in card
    assert "the feature map of a convolutional stem is cut into" in card and "each token covers 16x16 pixels" in card
    plain = str(render_model_card(ViTScratchConfig(num_labels=3)))
    assert "(ViT-B/16)" in plain and "the image is cut into 16x16 patches" in plain and "| stem |" not in plain


def test_card_of_a_folder_without_training_files_leaves_them_out(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run", with_training_files=False)
    push_to_hub(tmp_path / "run", REPO_ID)
    card_text = Path(hf_hub_download(REPO_ID, "README.md")).read_text()
    assert "## Training procedure" not in card_text and "## Results" not in card_text
    assert "model-index" not in card_text and "## Architecture" in card_text


def test_branch_private_and_pull_request(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    push_to_hub(tmp_path / "run", REPO_ID, private=True, revision="experiment")
    assert "config.json" in HfApi().list_repo_files(REPO_ID, revision="experiment")
    assert "config.json" not in HfApi().list_repo_files(REPO_ID)  # main untouched
    proposal = push_to_hub(tmp_path / "run", REPO_ID, create_pr=True)
    assert proposal.pull_request_url and "/discussions/" in proposal.pull_request_url
    with pytest.raises(ValueError, match="A pull request \\(create_pr\\) is opened against main: drop the revision"):
        push_to_hub(tmp_path / "run", REPO_ID, create_pr=True, revision="experiment")


def write_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def test_altered_model_code_is_refused_naming_the_file(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    code = tmp_path / "run" / "modeling_vit_scratch.py"
    code.write_text(code.read_text().replace("return self.fc_norm(pooled)", "return self.fc_norm(pooled) * 1.01"))
    with pytest.raises(ValueError, match=f"{code} differs from vit-scratch's own modeling_vit_scratch.py"):
        push_to_hub(tmp_path / "run", REPO_ID)
    assert not HfApi().repo_exists(REPO_ID)  # the gate runs before anything is created


EVIL = """
import os
from pathlib import Path
Path({marker!r}).write_text("ran with token " + str(os.environ.get("HF_TOKEN")))
from modeling_vit_scratch import ViTScratchForImageClassification as Evil
"""


@pytest.mark.parametrize(
    "attack",
    [
        "extra module in config auto_map",
        "extra module in processor auto_map",
        "module of another repo",
        "module without auto_map",
    ],
)
def test_code_other_than_the_package_s_never_runs_and_is_not_pushed(local_hub, tmp_path, attack):  # noqa: F811
    folder, marker = tmp_path / "run", tmp_path / "marker"
    saved_folder(folder)
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker)))
    expected = f"{folder / 'evil.py'} is not part of vit-scratch's model code"
    if attack == "extra module in config auto_map":
        config = json.loads((folder / "config.json").read_text())
        auto_map = {**config["auto_map"], "AutoModelForImageClassification": "evil.Evil"}
        write_json(folder / "config.json", auto_map=auto_map)
    elif attack == "extra module in processor auto_map":
        (folder / "evil.py").unlink()
        write_json(folder / "preprocessor_config.json", auto_map={"AutoImageProcessor": "evil.Evil"})
        expected = f"{folder / 'preprocessor_config.json'} maps AutoImageProcessor to 'evil.Evil'"
    elif attack == "module of another repo":
        (folder / "evil.py").unlink()
        write_json(folder / "config.json", auto_map={"AutoModelForImageClassification": "attacker/repo--evil.Evil"})
        expected = f"{folder / 'config.json'} maps AutoModelForImageClassification to 'attacker/repo--evil.Evil'"
    with pytest.raises(ValueError, match=re.escape(expected)):
        push_to_hub(folder, REPO_ID)
    assert not marker.exists() and not HfApi().repo_exists(REPO_ID)

    if attack == "extra module in config auto_map":  # the script, as a user runs it: one line, nothing ran
        result = subprocess.run(
            [sys.executable, str(REPO / "scripts" / "push_to_hub.py"), str(folder), REPO_ID],
            env={**os.environ, **local_hub.env(tmp_path / "hf_home")},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode != 0 and "Traceback" not in result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith(f"error: {expected}")
        assert not marker.exists()


def test_the_reload_check_reaches_no_credential(local_hub, tmp_path, monkeypatch):  # noqa: F811
    """The gate's child process sees no token: not in its environment, not in a saved login. Its own guard (it
    exits if huggingface_hub finds a token) passes, though this process has both, and trips when given one."""
    secret = "hf_saved_login_secret_0123"
    (tmp_path / "hf_home" / "token").write_text(secret)  # the saved login (HF_TOKEN_PATH of the fixture)
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_legacy_variable_secret")
    monkeypatch.setenv("MY_COPY_OF_THE_TOKEN", TOKEN)
    env = credential_free_env(tmp_path / "empty_home")
    assert not set(env) & set(TOKEN_VARIABLES) and "MY_COPY_OF_THE_TOKEN" not in env
    assert not any(value in text for value in (TOKEN, secret, "hf_legacy_variable_secret") for text in env.values())
    assert env["HF_HOME"] == str(tmp_path / "empty_home") and env["HF_HUB_OFFLINE"] == "1"
    assert env["HF_TOKEN_PATH"].startswith(str(tmp_path / "empty_home"))
    found = subprocess.run(
        [sys.executable, "-c", "from huggingface_hub import get_token; print(get_token())"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert found.stdout.strip() == "None", found.stderr[-2000:]

    saved_folder(tmp_path / "run")
    push_to_hub(tmp_path / "run", REPO_ID)  # the gate's reload ran, with its guard, while HF_TOKEN is set here
    leaked = subprocess.run(
        [sys.executable, "-c", RELOAD_WITHOUT_PACKAGE, str(tmp_path / "run"), "x", "y"],
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert leaked.returncode != 0 and "a Hub token reached the reload check" in leaked.stderr


def test_push_script_prints_url_and_commit_and_never_the_token(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "push_to_hub.py"),
            str(tmp_path / "run"),
            REPO_ID,
            "--commit_message",
            "from the script",
        ],
        env={**os.environ, **local_hub.env(tmp_path / "hf_home")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    commit = HfApi().list_repo_commits(REPO_ID)[0].commit_id
    assert f"commit: {commit}" in result.stdout and REPO_ID in result.stdout
    assert "hf_local_test_token" not in result.stdout + result.stderr
    missing = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "push_to_hub.py"), str(tmp_path / "nope"), REPO_ID],
        env={**os.environ, **local_hub.env(tmp_path / "hf_home")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert missing.returncode != 0 and "has no config.json" in missing.stderr.strip().splitlines()[-1]


def change_weights(folder: Path) -> ViTScratchForImageClassification:
    """The weights of `folder` changed after training (say, fine-tuned a little more), its training files kept."""
    model = ViTScratchForImageClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        model.classifier.bias.add_(0.5)
    model.save_pretrained(folder)
    return model


def test_weights_changed_after_training_are_refused_or_pushed_without_their_metrics(local_hub, tmp_path):  # noqa: F811
    folder = tmp_path / "run"
    saved_folder(folder)
    changed = change_weights(folder)
    refusal = (
        f"The weights in {folder} are not the ones the metrics in all_results.json were measured on "
        "(its training_record.json names other weights): retrain, or pass --allow_unmeasured_weights"
    )
    with pytest.raises(ValueError, match=re.escape(refusal)):
        push_to_hub(folder, REPO_ID)
    record = json.loads((folder / "training_record.json").read_text())
    del record["weights_sha256"]  # a record written before the digest existed proves nothing either
    (folder / "training_record.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match="it has no weights digest on record"):
        push_to_hub(folder, REPO_ID)
    assert not HfApi().repo_exists(REPO_ID)

    result = push_to_hub(folder, REPO_ID, allow_unmeasured_weights=True)
    card_text = Path(hf_hub_download(REPO_ID, "README.md", revision=result.commit_id)).read_text()
    assert "the metrics measured in training were not measured on them" in card_text
    assert "model-index" not in card_text and "## Results" not in card_text and "0.9123" not in card_text
    files = set(HfApi().list_repo_files(REPO_ID))
    assert "all_results.json" not in files and "training_curves.png" not in files and "training_record.json" in files
    pixel_values = torch.randn(2, 1, 20, 20)
    loaded = run_fresh(REPO_ID, pixel_values, tmp_path / "fresh", env=local_hub.env(tmp_path / "hf_home_fresh"))
    with torch.no_grad():
        assert torch.equal(loaded["logits"], changed(pixel_values).logits)  # the weights pushed are the changed ones

    # retrained (record and weights agree again): the metrics come back, and so does all_results.json
    record["weights_sha256"] = weights_sha256(folder)
    (folder / "training_record.json").write_text(json.dumps(record))
    result = push_to_hub(folder, REPO_ID)
    card_text = Path(hf_hub_download(REPO_ID, "README.md", revision=result.commit_id)).read_text()
    assert "0.9123" in card_text and "not measured on them" not in card_text
    assert "all_results.json" in HfApi().list_repo_files(REPO_ID)


GIVEN_TOKEN = "hf_given_by_argument_0123456789"


@pytest.mark.parametrize("secret", [TOKEN, GIVEN_TOKEN], ids=["HF_TOKEN", "token="])
def test_a_folder_holding_the_token_is_refused(local_hub, tmp_path, secret):  # noqa: F811
    folder = tmp_path / "run"
    saved_folder(folder)
    write_json(folder / "training_record.json", command=f"python scripts/train.py --hub_token {secret}")
    with pytest.raises(ValueError) as refused:
        push_to_hub(folder, REPO_ID, token=GIVEN_TOKEN)
    record = folder / "training_record.json"
    assert str(refused.value).startswith(
        f"A Hub token is in the model card README.md, {record} (as staged for upload from {folder}); refusing to push"
    )
    assert secret not in str(refused.value) and not HfApi().repo_exists(REPO_ID)


def test_the_token_is_in_no_pushed_file_and_no_output(local_hub, tmp_path, capfd, caplog):  # noqa: F811
    saved_folder(tmp_path / "run")
    result = push_to_hub(tmp_path / "run", REPO_ID, token=GIVEN_TOKEN)
    pushed = Path(snapshot_download(REPO_ID, revision=result.commit_id, cache_dir=tmp_path / "download"))
    files = [path for path in pushed.rglob("*") if path.is_file()]
    assert len(files) >= 10
    for path in files:
        assert TOKEN.encode() not in path.read_bytes() and GIVEN_TOKEN.encode() not in path.read_bytes(), path
    output = capfd.readouterr()
    for text in (output.out, output.err, caplog.text):
        assert TOKEN not in text and GIVEN_TOKEN not in text


def commits(revision: str = "main") -> list[str]:
    return [commit.title for commit in HfApi().list_repo_commits(REPO_ID, revision=revision)]


def test_failed_model_commit_leaves_no_commit_and_the_same_push_completes(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    local_hub.fail_commits.add(local_hub.commit_requests + 1)
    with pytest.raises(PushError) as failed:
        push_to_hub(tmp_path / "run", REPO_ID)
    assert str(failed.value) == (
        f"Uploading the model to {REPO_ID} failed (HTTP 500: Injected fault: commit request 1 fails): nothing was "
        f"committed and the repo {REPO_ID}, created by this push, is still empty; re-run the same command to push it."
    )
    assert commits() == ["initial commit"]
    push_to_hub(tmp_path / "run", REPO_ID)
    assert len(commits()) == 3 and commits()[1].startswith("Upload vit_scratch model")


def test_failed_pin_leaves_a_loadable_repo_and_the_same_push_only_pins_it(local_hub, tmp_path):  # noqa: F811
    model = saved_folder(tmp_path / "run")
    local_hub.fail_commits.add(local_hub.commit_requests + 2)
    with pytest.raises(PushError) as failed:
        push_to_hub(tmp_path / "run", REPO_ID)
    model_commit = HfApi().list_repo_commits(REPO_ID)[0].commit_id
    assert str(failed.value) == (
        f"The model is on {REPO_ID} at commit {model_commit} (complete and loadable, its card unpinned), but pinning "
        "the card's loading example to that commit failed (HTTP 500: Injected fault: commit request 2 fails); "
        "re-run the same command to pin it."
    )
    card_text = Path(hf_hub_download(REPO_ID, "README.md")).read_text()
    assert "revision=" not in card_text and f'model="{REPO_ID}", trust_remote_code=True)' in card_text
    pixel_values = torch.randn(2, 1, 20, 20)
    loaded = run_fresh(REPO_ID, pixel_values, tmp_path / "fresh", env=local_hub.env(tmp_path / "hf_home_fresh"))
    with torch.no_grad():
        assert torch.equal(loaded["logits"], model(pixel_values).logits)

    finished = push_to_hub(tmp_path / "run", REPO_ID)
    assert len(commits()) == 3 and commits()[0].startswith("Model card: pin")  # one model commit, then the pin
    card_text = Path(hf_hub_download(REPO_ID, "README.md", revision=finished.commit_id)).read_text()
    assert f'revision="{model_commit}"' in card_text
    again = push_to_hub(tmp_path / "run", REPO_ID)  # nothing left to do: no commit at all
    assert again.commit_id == finished.commit_id and len(commits()) == 3


def run_push_script(hub, tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, **hub.env(tmp_path / "hf_home"), **env}
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "push_to_hub.py"), *map(str, args)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """The script failed with one `error:` line, last, and no traceback or token anywhere in its output."""
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output and TOKEN not in output, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and result.stderr.strip().splitlines()[-1] == errors[0]
    return errors[0]


def test_push_script_faults_are_one_line_and_running_it_again_completes(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    unreachable = run_push_script(local_hub, tmp_path, tmp_path / "run", REPO_ID, HF_ENDPOINT="http://127.0.0.1:9")
    assert one_error_line(unreachable).startswith(f"error: Preparing {REPO_ID} on the Hub failed (")

    local_hub.fail_commits.add(local_hub.commit_requests + 2)
    failed = run_push_script(local_hub, tmp_path, tmp_path / "run", REPO_ID)
    model_commit = HfApi().list_repo_commits(REPO_ID)[0].commit_id
    assert one_error_line(failed) == (
        f"error: The model is on {REPO_ID} at commit {model_commit} (complete and loadable, its card unpinned), but "
        "pinning the card's loading example to that commit failed (HTTP 500: Injected fault: commit request 2 "
        "fails); re-run the same command to pin it."
    )
    finished = run_push_script(local_hub, tmp_path, tmp_path / "run", REPO_ID)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert f"commit: {HfApi().list_repo_commits(REPO_ID)[0].commit_id}" in finished.stdout and len(commits()) == 3

    change_weights(tmp_path / "run")
    refused = run_push_script(local_hub, tmp_path, tmp_path / "run", REPO_ID)
    assert one_error_line(refused).startswith(f"error: The weights in {tmp_path / 'run'} are not the ones the metrics")
    accepted = run_push_script(local_hub, tmp_path, tmp_path / "run", REPO_ID, "--allow_unmeasured_weights")
    assert accepted.returncode == 0 and len(commits()) == 5, accepted.stderr[-3000:]


def test_a_pull_request_whose_pin_failed_is_finished_on_its_ref(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    push_to_hub(tmp_path / "run", REPO_ID, commit_message="first model")
    main_before = commits()
    newer = tmp_path / "run2"
    saved_folder(newer, seed=1)
    local_hub.fail_commits.add(local_hub.commit_requests + 2)
    with pytest.raises(
        PushError,
        match=re.escape(
            "re-run the same command with --revision refs/pr/1 (Python: "
            "revision='refs/pr/1') instead of --create_pr to pin it."
        ),
    ):
        push_to_hub(newer, REPO_ID, create_pr=True)
    model_commit = HfApi().list_repo_commits(REPO_ID, revision="refs/pr/1")[0].commit_id
    finished = push_to_hub(newer, REPO_ID, revision="refs/pr/1")
    assert commits("refs/pr/1")[:2] == [
        f"Model card: pin the loading example to {model_commit[:12]}",
        "Upload vit_scratch model from run2",
    ]
    card_text = Path(hf_hub_download(REPO_ID, "README.md", revision=finished.commit_id)).read_text()
    assert f'revision="{model_commit}"' in card_text and commits() == main_before


def test_the_packages_own_pipeline_is_pushed_and_any_other_is_refused(local_hub, tmp_path):  # noqa: F811
    from modeling_vit_scratch.image_processing_vit_scratch import custom_pipelines

    saved_folder(tmp_path / "run")
    config_file = tmp_path / "run" / "config.json"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "custom_pipelines": custom_pipelines()}))
    result = push_to_hub(tmp_path / "run", REPO_ID)
    pushed = json.loads(Path(hf_hub_download(REPO_ID, "config.json", revision=result.commit_id)).read_text())
    assert pushed["custom_pipelines"] == custom_pipelines()
    evil = custom_pipelines()
    evil["image-classification"]["impl"] = "evil.Pipeline"
    config_file.write_text(json.dumps({**config, "custom_pipelines": evil}))
    with pytest.raises(ValueError, match="declares custom_pipelines other than vit-scratch's own pipeline"):
        push_to_hub(tmp_path / "run", REPO_ID)
