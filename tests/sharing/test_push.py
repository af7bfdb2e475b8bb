"""The push gate against a local Hub: what passes reaches the Hub as one commit and reloads there, with its own code
and no package installed, to the same logits; what fails sends nothing; a second push changes nothing."""

import json
import sys

import pytest
import torch
from helpers import REPO, tiny_config
from hub_server import TOKEN, USER, local_hub  # noqa: F401  (local_hub is a fixture)
from huggingface_hub import HfApi, constants
from transformers import ViTImageProcessor

from modeling_vit_scratch import ViTScratchForImageClassification
from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.sharing import push
from modeling_vit_scratch.sharing.card import unedited, write_card
from modeling_vit_scratch.sharing.push import push_folder, stage_folder
from modeling_vit_scratch.sources import weights_sha256

pytestmark = pytest.mark.integration
PIXELS = torch.randn(2, 3, 20, 20, generator=torch.Generator().manual_seed(1))
RELOAD = """
import sys, torch
sys.modules["modeling_vit_scratch"] = None  # a user without the package: only the repo's code runs
from transformers import AutoModelForImageClassification
model = AutoModelForImageClassification.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
with torch.no_grad():
    torch.save(model(pixel_values=torch.load(sys.argv[2])).logits, sys.argv[3])
"""
FAKE_TOKEN = "hf_" + "Q" * 34


def trained_folder(path):
    """A folder as training leaves it: save_pretrained, its results and its record."""
    model = ViTScratchForImageClassification(tiny_config()).eval()
    model.save_pretrained(path)
    (path / "all_results.json").write_text(json.dumps({"test_accuracy": 0.8}))
    record = dict(command="train.py", dataset="digits", epochs=1, seed=0, weights_sha256=weights_sha256(path))
    (path / "training_record.json").write_text(json.dumps(record))
    (path / "notes.txt").write_text("my own notes: never sent")
    return model


def push_command(hub, tmp_path, *argv):
    return hub.run(REPO / "scripts/push_to_hub.py", *argv, hf_home=tmp_path / "home", env={"PYTHONPATH": str(REPO)})


def hub_logits(hub, tmp_path, repo_id):
    """Logits of `repo_id` loaded from the hub in a new process where the package cannot be imported."""
    torch.save(PIXELS, tmp_path / "pixels.pt")
    home = tmp_path / "reader"
    ran = hub.run(
        "-c", RELOAD, repo_id, tmp_path / "pixels.pt", tmp_path / "out.pt", hf_home=home, env={"PYTHONPATH": ""}
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    return torch.load(tmp_path / "out.pt")


@pytest.mark.slow
def test_a_trained_folder_pushes_reloads_from_the_hub_and_a_second_push_changes_nothing(local_hub, tmp_path):  # noqa: F811
    model = trained_folder(tmp_path / "run")
    first = push_command(local_hub, tmp_path, tmp_path / "run", f"{USER}/tiny")
    assert first.returncode == 0, first.stderr[-2000:]
    assert local_hub.url in first.stdout and f"{USER}/tiny" in first.stdout
    files = local_hub.files(f"{USER}/tiny")
    assert {"README.md", "model.safetensors", "modeling_vit_scratch.py", "training_record.json"} <= set(files)
    assert "notes.txt" not in files and "notes.txt" in first.stdout
    assert not any(TOKEN.encode() in content for content in files.values())
    with torch.no_grad():
        assert torch.equal(hub_logits(local_hub, tmp_path, f"{USER}/tiny"), model(pixel_values=PIXELS).logits)
    commits = local_hub.commits(f"{USER}/tiny")
    second = push_command(local_hub, tmp_path, tmp_path / "run", "tiny")  # a bare name: the token owner's
    assert second.returncode == 0, second.stderr[-2000:]
    assert local_hub.commits(f"{USER}/tiny") == commits and commits[0][0] in second.stdout


@pytest.fixture
def hub_here(local_hub, monkeypatch):  # noqa: F811
    """The local hub, reached from this process (push_folder called directly)."""
    monkeypatch.setattr(constants, "ENDPOINT", local_hub.url)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", local_hub.url + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return local_hub


def test_the_staged_record_names_no_local_folder(tmp_path):
    """The card shows a local path by its last part; the record sent beside it does too (its command, every leg's,
    its dataset), and keeps every other value as recorded."""
    trained_folder(tmp_path / "run")
    record = json.loads((tmp_path / "run" / "training_record.json").read_text())
    command = f"python scripts/train.py --dataset {tmp_path / 'data'} --output_dir {tmp_path / 'run'}"
    record |= dict(command=command, dataset=str(tmp_path / "data"), legs=[{"command": command, "wall_time_seconds": 3}])
    (tmp_path / "run" / "training_record.json").write_text(json.dumps(record))
    stage_folder(tmp_path / "run", tmp_path / "stage", None, allow_unmeasured_weights=False)
    staged = (tmp_path / "stage" / "training_record.json").read_text()
    assert str(tmp_path) not in staged
    public = "python scripts/train.py --dataset data --output_dir run"
    assert json.loads(staged) == record | dict(
        command=public, dataset="data", legs=[{**record["legs"][0], "command": public}]
    )


def test_a_plain_save_pretrained_folder_with_transformers_processor_and_no_code_pushes_sharded(hub_here, tmp_path):
    model = ViTScratchForImageClassification(tiny_config()).eval()
    model.save_pretrained(tmp_path / "plain")
    ViTImageProcessor(size={"height": 20, "width": 20}, image_mean=[0.4] * 3).save_pretrained(tmp_path / "plain")
    for code in (tmp_path / "plain").glob("*_vit_scratch.py"):
        code.unlink()
    result = push_folder(tmp_path / "plain", "someone/plain", token=TOKEN, max_shard_size="40KB", say=lambda _: None)
    files = hub_here.files("someone/plain")
    assert result.commit == hub_here.commits("someone/plain")[0][0]
    assert "model.safetensors.index.json" in files and "stems_vit_scratch.py" in files
    processor = json.loads(files["preprocessor_config.json"])
    assert processor["image_processor_type"] == "ViTScratchImageProcessor" and processor["image_mean"] == [0.4] * 3
    with torch.no_grad():
        assert torch.equal(hub_logits(hub_here, tmp_path, "someone/plain"), model(pixel_values=PIXELS).logits)


@pytest.mark.slow
def test_the_users_card_on_the_repo_is_kept_unless_overwrite_card(hub_here, tmp_path):
    trained_folder(tmp_path / "run")
    api = HfApi(endpoint=hub_here.url, token=TOKEN)
    api.create_repo("someone/carded")
    api.upload_file(path_or_fileobj=b"# my own card\n", path_in_repo="README.md", repo_id="someone/carded")
    result = push_folder(tmp_path / "run", "someone/carded", token=TOKEN, say=lambda _: None)
    assert hub_here.files("someone/carded")["README.md"] == b"# my own card\n" and result.notes
    push_folder(tmp_path / "run", "someone/carded", token=TOKEN, overwrite_card=True, say=lambda _: None)
    assert b"trust_remote_code" in hub_here.files("someone/carded")["README.md"]


def test_a_card_the_user_edited_in_the_folder_is_pushed_as_it_is(hub_here, tmp_path):
    trained_folder(tmp_path / "run")
    write_card(tmp_path / "run")
    card = tmp_path / "run" / "README.md"
    assert unedited(card.read_bytes())  # the package's own card: a push renews it with the repo id
    edited = card.read_bytes().replace(b"## Architecture", b"## My notes\n\n## Architecture")
    card.write_bytes(edited)
    assert not unedited(edited)
    said = []
    push_folder(tmp_path / "run", "someone/edited", token=TOKEN, say=said.append)
    assert hub_here.files("someone/edited")["README.md"] == edited and any("README.md" in line for line in said)


def foreign_code(folder):
    with (folder / "modeling_vit_scratch.py").open("a") as code:
        code.write("\nimport os  # anything else\n")


def pickle_only(folder):
    weights = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(weights)


def foreign_auto_map(folder):
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"]["AutoModelForImageClassification"] = "evil.Model"
    (folder / "config.json").write_text(json.dumps(config))


def token_in_a_file(folder):
    record = json.loads((folder / "training_record.json").read_text())
    (folder / "training_record.json").write_text(
        json.dumps({**record, "command": f"train.py --hub_token {FAKE_TOKEN}"})
    )


def other_weights(folder):
    record = json.loads((folder / "training_record.json").read_text())
    (folder / "training_record.json").write_text(json.dumps({**record, "weights_sha256": "0" * 64}))


@pytest.mark.parametrize("spoil", [foreign_code, pickle_only, foreign_auto_map, token_in_a_file, other_weights])
def test_a_folder_the_gate_refuses_sends_nothing_and_is_left_as_it_was(hub_here, tmp_path, spoil):
    trained_folder(tmp_path / "run")
    spoil(tmp_path / "run")
    before = {path.name: path.read_bytes() for path in (tmp_path / "run").iterdir()}
    with pytest.raises(UserError):
        push_folder(tmp_path / "run", "someone/refused", token=TOKEN, say=lambda _: None)
    assert not hub_here.repo_exists("someone/refused")
    assert {path.name: path.read_bytes() for path in (tmp_path / "run").iterdir()} == before


@pytest.mark.slow
def test_a_refusal_is_one_error_line_and_exit_1_and_a_bad_repo_id_too(local_hub, tmp_path):  # noqa: F811
    trained_folder(tmp_path / "run")
    foreign_code(tmp_path / "run")
    for repo_id, named in (("someone/tiny", "modeling_vit_scratch.py"), ("not a//repo", "repo")):
        ran = push_command(local_hub, tmp_path, tmp_path / "run", repo_id, "--token", TOKEN)
        assert ran.returncode == 1 and ran.stderr.strip().count("\n") == 0 and ran.stderr.startswith("error: ")
        assert named in ran.stderr and TOKEN not in ran.stderr + ran.stdout
    assert not local_hub.repo_exists("someone/tiny")


@pytest.mark.skipif(sys.platform != "linux", reason="the reload check's environment is tested on Linux")
def test_the_reload_runs_where_no_token_is_in_reach(hub_here, tmp_path, monkeypatch):
    """A token in the environment does not reach the reload: the staged code that runs there could send it."""
    trained_folder(tmp_path / "run")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    seen = tmp_path / "seen.txt"
    spy = f"import os; open({str(seen)!r}, 'w').write(os.environ.get('HF_TOKEN', ''))\n"
    monkeypatch.setattr(push, "RELOAD", spy + push.RELOAD)
    push_folder(tmp_path / "run", "someone/tokenless", say=lambda _: None)
    assert seen.read_text() == "" and hub_here.repo_exists("someone/tokenless")
