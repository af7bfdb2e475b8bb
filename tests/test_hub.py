"""Pushing to the Hub (a local Hub-compatible server, the unmodified client) and loading back without the package."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from huggingface_hub import HfApi, ModelCard, hf_hub_download

from conftest import tiny_config
from hub_server import local_hub  # noqa: F401  (the fixture)
from modeling_vit_scratch import ViTScratchForImageClassification, ViTScratchImageProcessor
from modeling_vit_scratch.hub import push_to_hub
from test_auto import run_fresh

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
        (path / "all_results.json").write_text(json.dumps({"test_accuracy": 0.91234, "eval_accuracy": 0.95,
                                                           "test_top5_accuracy": 1.0}))  # fmt: skip
        (path / "training_record.json").write_text(json.dumps(dict(
            command="python scripts/train.py configs/train_digits.json", dataset="digits", num_train=10,
            num_validation=2, num_test=3, epochs=2.0, learning_rate=1e-3, weight_decay=0.05, scheduler="cosine",
            total_batch=64, seed=seed, world_size=1, precision=None, augmentation=None, wall_time_seconds=12.0)))  # fmt: skip
        (path / "training_curves.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 100)
    return model


def test_push_uploads_everything_and_loads_back_without_the_package(local_hub, tmp_path):  # noqa: F811
    model = saved_folder(tmp_path / "run")
    first = push_to_hub(tmp_path / "run", REPO_ID, max_shard_size="40KB", commit_message="first model")
    assert len(first.commit_id) == 40 and first.repo_url.endswith(REPO_ID)
    files = set(HfApi().list_repo_files(REPO_ID))
    assert {"config.json", "modeling_vit_scratch.py", "configuration_vit_scratch.py", "image_processing_vit_scratch.py",
            "preprocessor_config.json", "README.md", "all_results.json", "training_curves.png",
            "model.safetensors.index.json"} <= files  # fmt: skip
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
    pinned = run_fresh(REPO_ID, pixel_values, tmp_path / "fresh3", env=local_hub.env(tmp_path / "hf_home3"),
                       revision=first.commit_id)  # fmt: skip
    with torch.no_grad():
        assert torch.equal(latest["logits"], newer(pixel_values).logits)
        assert torch.equal(pinned["logits"], model(pixel_values).logits)
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


def test_a_folder_that_does_not_reload_identically_is_not_pushed(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    code = tmp_path / "run" / "modeling_vit_scratch.py"
    code.write_text(code.read_text().replace("return self.fc_norm(pooled)", "return self.fc_norm(pooled) * 1.01"))
    with pytest.raises(RuntimeError, match="refusing to push"):
        push_to_hub(tmp_path / "run", REPO_ID)
    assert not HfApi().repo_exists(REPO_ID)  # the gate runs before anything is created


def test_push_script_prints_url_and_commit_and_never_the_token(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "push_to_hub.py"), str(tmp_path / "run"), REPO_ID,
         "--commit_message", "from the script"],
        env={**__import__("os").environ, **local_hub.env(tmp_path / "hf_home")}, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    commit = HfApi().list_repo_commits(REPO_ID)[0].commit_id
    assert f"commit: {commit}" in result.stdout and REPO_ID in result.stdout
    assert "hf_local_test_token" not in result.stdout + result.stderr
    missing = subprocess.run([sys.executable, str(REPO / "scripts" / "push_to_hub.py"), str(tmp_path / "nope"), REPO_ID],
                             env={**__import__("os").environ, **local_hub.env(tmp_path / "hf_home")},
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert missing.returncode != 0 and "has no config.json" in missing.stderr.strip().splitlines()[-1]
