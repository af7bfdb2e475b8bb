"""Pushing to the Hub and loading back without the package, as users do: the push (scripts/push_to_hub.py, or
push_to_hub from Python) and the load run in new processes that find a local Hub-compatible server through the
environment (HF_ENDPOINT); the tests read what they left from the server's store. Refusals of the push gate, which
come before any request, run in this process, which is offline."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from entry_points import outcome
from helpers import made_once, pushed_card, run_fresh, run_fresh_revisions, tiny_config
from hub_server import TOKEN, LocalHub, Store, local_hub  # noqa: F401  (the fixture)
from huggingface_hub import ModelCard, constants

from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification, ViTScratchImageProcessor
from modeling_vit_scratch.common.secrets import TOKEN_VARIABLES, weights_sha256
from modeling_vit_scratch.configuration_vit_scratch import MODEL_FILES
from modeling_vit_scratch.sharing import hub_arguments
from modeling_vit_scratch.sharing.card import render_model_card
from modeling_vit_scratch.sharing.push import push_to_hub
from modeling_vit_scratch.sharing.reload_check import RELOAD_WITHOUT_PACKAGE

REPO = Path(__file__).resolve().parents[2]
REPO_ID = "local-user/vit-tiny-test"
BARE_REPO_ID = "local-user/vit-tiny-bare"
GIVEN_TOKEN = "hf_given_by_argument_0123456789"


# new processes, scripts or whole suites: `make test` runs them, `make test-fast` leaves them out
pytestmark = pytest.mark.integration


def saved_folder(path: Path, seed: int = 0, with_training_files: bool = True) -> ViTScratchForImageClassification:
    """A model folder as scripts/train.py leaves it (weights, code, processor, metrics, record, pictures)."""
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
        for picture in ("training_curves.png", "confusion_matrix.png"):
            (path / picture).write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 100)
    return model


# Run with `python -c`: a JSON list of push_to_hub keyword arguments; prints one JSON outcome per push.
PUSHES = """
import json, sys
from huggingface_hub import HfApi
from huggingface_hub.errors import RepositoryNotFoundError
from modeling_vit_scratch.sharing.push import push_to_hub
outcomes = []
for call in json.loads(sys.argv[1]):
    try:
        result = push_to_hub(**call)
        outcome = dict(commit_id=result.commit_id, repo_url=result.repo_url, pull_request_url=result.pull_request_url)
    except (ValueError, RuntimeError) as error:  # the gate's refusals, and PushError
        outcome = dict(error=type(error).__name__, message=str(error))
    try:
        history = HfApi().list_repo_commits(call["repo_id"])
        outcome.update(commits=[commit.title for commit in history], head=history[0].commit_id)
    except RepositoryNotFoundError:
        outcome.update(commits=None, head=None)
    outcomes.append(outcome)
print(json.dumps(outcomes))
"""


def push(hub, tmp_path: Path, *calls: dict, env: dict | None = None) -> list[dict]:
    """`push_to_hub(**call)` for each call (folder tmp_path/"run" and REPO_ID unless given), in order, in one new
    process that reaches `hub` through the environment, as a user's Python does. Per call: `commit_id`, `repo_url`,
    `pull_request_url`, or the `error` class and its `message`; then main's history as the client reads it after
    the call (`commits`, newest title first, and `head`; None if the repo does not exist). No token in any output."""
    calls = [{"folder": str(tmp_path / "run"), "repo_id": REPO_ID, **call} for call in calls]
    calls = [{key: str(value) if isinstance(value, Path) else value for key, value in c.items()} for c in calls]
    result = hub.run(
        "-c", PUSHES, json.dumps(calls), hf_home=tmp_path / "hf_home", env={"PYTHONPATH": str(REPO), **(env or {})}
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert TOKEN not in result.stdout + result.stderr and GIVEN_TOKEN not in result.stdout + result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def card_at(hub, revision: str = "main") -> str:
    return hub.files(REPO_ID, revision)["README.md"].decode()


def titles(hub, revision: str = "main") -> list[str]:
    return [title for _, title in hub.commits(REPO_ID, revision)]


@pytest.fixture(scope="module")
def pushed(tmp_path_factory):
    """One hub and one pushing process for the tests that read a first push: a trained folder (sharded, with a commit
    message), then a newer model to the same repo, then a bare saved folder (no training files) to another repo. The
    token is given to each push (the one the Hub accepts), and another one is in HF_TOKEN: neither may be shown.
    Pushed once per test run (`made_once`): each worker serves the pushed store with a hub of its own."""

    def make(root: Path) -> None:
        saved_folder(root / "run")
        saved_folder(root / "run2", seed=1)
        saved_folder(root / "bare", with_training_files=False)
        with LocalHub(root / "hub") as hub:
            outcomes = push(
                hub,
                root,
                dict(max_shard_size="40KB", commit_message="first model\n\nwhy it was trained\nand how", token=TOKEN),
                dict(folder=root / "run2", token=TOKEN),
                dict(folder=root / "bare", repo_id=BARE_REPO_ID, token=TOKEN),
                env={"HF_TOKEN": GIVEN_TOKEN},  # push() checks that no output holds either token
            )
            (root / "pushes.json").write_text(json.dumps(dict(outcomes=outcomes, unknown_routes=hub.unknown_routes)))

    root = made_once(tmp_path_factory, "test_hub-pushed", make)
    pushes = json.loads((root / "pushes.json").read_text())
    first, second, bare = pushes["outcomes"]
    own = tmp_path_factory.mktemp("pushed")  # the pushed models again (the same seeds), as objects in this worker
    model, newer = saved_folder(own / "run"), saved_folder(own / "run2", seed=1)
    with LocalHub(root / "hub") as hub:
        yield SimpleNamespace(
            hub=hub,
            model=model,
            newer=newer,
            first=first,
            second=second,
            bare=bare,
            push_unknown_routes=pushes["unknown_routes"],
        )


def test_push_uploads_everything_and_loads_back_without_the_package(pushed, tmp_path):
    hub, first, second = pushed.hub, pushed.first, pushed.second
    assert len(first["commit_id"]) == 40 and first["repo_url"].endswith(REPO_ID)
    model_commit = Store(hub.root).open(REPO_ID).history(first["commit_id"])[1][1]  # before the card's pin
    assert (model_commit["title"], model_commit["message"]) == ("first model", "why it was trained\nand how")
    files = hub.files(REPO_ID, first["commit_id"])
    assert {
        "config.json",
        "modeling_vit_scratch.py",
        "configuration_vit_scratch.py",
        "image_processing_vit_scratch.py",
        "preprocessor_config.json",
        "README.md",
        "all_results.json",
        "training_curves.png",
        "confusion_matrix.png",
        "model.safetensors.index.json",
    } <= set(files)
    assert sum(name.startswith("model-") and name.endswith(".safetensors") for name in files) > 1  # sharded
    assert set(json.loads(files["config.json"])["auto_map"]) == {
        "AutoConfig",
        "AutoModel",
        "AutoModelForImageClassification",
    }
    # vit-scratch never writes a pipeline of its own (a folder that declares one is refused: see below)
    assert "custom_pipelines" not in json.loads(files["config.json"])

    # a new model on the same repo: the new revision loads, and the old one, pinned, still does
    assert second["commit_id"] != first["commit_id"]
    pixel_values = torch.randn(2, 1, 20, 20)
    env = hub.env(tmp_path / "hf_home_fresh")
    pinned, latest = run_fresh_revisions(REPO_ID, pixel_values, tmp_path / "fresh", env, [first["commit_id"], None])
    with torch.no_grad():
        assert torch.equal(pinned["logits"], pushed.model(pixel_values).logits)
        assert torch.equal(latest["logits"], pushed.newer(pixel_values).logits)
    assert (pinned["config_class"], pinned["processor_class"]) == ("ViTScratchConfig", "ViTScratchImageProcessor")
    assert pinned["pipeline"][0]["label"].startswith("digit ")
    files = set(hub.files(REPO_ID, second["commit_id"]))  # the first push's shards went with the new model
    assert "model.safetensors" in files and not any(name.startswith("model-") for name in files)
    assert "model.safetensors.index.json" not in files
    assert pushed.push_unknown_routes == [] and hub.unknown_routes == []


def test_model_card_is_valid_and_its_metrics_are_the_measured_ones_or_absent(pushed):
    """The card of a training output holds its measured metrics; that of a bare saved folder leaves them out."""
    hub, result, bare = pushed.hub, pushed.first, pushed.bare
    card_text = card_at(hub, result["commit_id"])  # the push's commits posted it to validate-yaml first
    assert "{{" not in card_text and "{%" not in card_text
    assert ModelCard(card_text).data.license == "apache-2.0"
    front = yaml.safe_load(card_text.split("---")[1])
    assert front["library_name"] == "transformers" and front["pipeline_tag"] == "image-classification"
    assert {"vision-transformer", "custom_code"} <= set(front["tags"]) and front["license"] == "apache-2.0"
    metrics = {m["type"]: m["value"] for m in front["model-index"][0]["results"][0]["metrics"]}
    assert metrics == {"accuracy": round(0.91234, 4), "top5_accuracy": 1.0}
    model_commit = hub.commits(REPO_ID, result["commit_id"])[1][0]  # the card pins the commit holding the weights
    assert f'revision="{model_commit}"' in card_text and "dosovitskiy2021an" in card_text
    assert TOKEN not in card_text

    card_text = hub.files(BARE_REPO_ID, bare["commit_id"])["README.md"].decode()
    assert "## Training procedure" not in card_text and "## Results" not in card_text
    assert "model-index" not in card_text and "## Architecture" in card_text
    assert "of unknown origin: its folder holds no training or conversion record" in card_text


def test_the_card_of_a_converted_folder_says_what_it_was_converted_from_while_the_weights_are_those(tmp_path):
    """convert's record names the source; weights changed after the conversion make it claim nothing. The card is
    the one a push renders from what it reads (`pushed_card`); that the Hub gets that card is tried above."""
    for name, digest in (("converted", None), ("edited", "0" * 64)):
        saved_folder(tmp_path / name, with_training_files=False)
        record = {"input": "google/vit-base-patch16-224", "from": "transformers"}
        record["weights_sha256"] = digest or weights_sha256(tmp_path / name)
        (tmp_path / name / "conversion_record.json").write_text(json.dumps(record))
    card_text = pushed_card(tmp_path / "converted")
    assert "converted by vit-scratch from `google/vit-base-patch16-224` (a transformers model)" in card_text
    assert "trained with" not in card_text and "## Training procedure" not in card_text
    card_text = pushed_card(tmp_path / "edited")
    assert "converted by" not in card_text and "of unknown origin" in card_text


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


def test_branch_private_and_pull_request(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    on_branch, proposal, refused = push(
        local_hub,
        tmp_path,
        dict(private=True, revision="experiment"),
        dict(create_pr=True),
        dict(create_pr=True, revision="experiment"),
    )
    assert "config.json" in local_hub.files(REPO_ID, "experiment") and local_hub.private(REPO_ID)
    assert on_branch["commits"] == ["initial commit"]  # main untouched
    assert proposal["pull_request_url"] and proposal["pull_request_url"].endswith("/discussions/1")
    assert "config.json" in local_hub.files(REPO_ID, "refs/pr/1") and "config.json" not in local_hub.files(REPO_ID)
    assert refused["error"] == "ValueError"
    assert refused["message"].startswith("A pull request (create_pr) is opened against main: drop the revision")


def write_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


EVIL = """
import os
from pathlib import Path
Path({marker!r}).write_text("ran with token " + str(os.environ.get("HF_TOKEN")))
from modeling_vit_scratch import ViTScratchForImageClassification as Evil
"""
ATTACKS = (
    "altered model code",
    "extra module in config auto_map",
    "extra module in processor auto_map",
    "module of another repo",
    "module without auto_map",
)


def attacked_folder(folder: Path, attack: str, marker: Path) -> str:
    """A saved folder holding code other than the package's own; the start of the refusal that names it."""
    saved_folder(folder)
    if attack == "altered model code":
        code = folder / "modeling_vit_scratch.py"
        code.write_text(code.read_text().replace("return self.fc_norm(pooled)", "return self.fc_norm(pooled) * 1.01"))
        return f"{code} differs from vit-scratch's own modeling_vit_scratch.py"
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker)))
    if attack == "extra module in config auto_map":
        config = json.loads((folder / "config.json").read_text())
        write_json(
            folder / "config.json", auto_map={**config["auto_map"], "AutoModelForImageClassification": "evil.Evil"}
        )
    elif attack == "extra module in processor auto_map":
        (folder / "evil.py").unlink()
        write_json(folder / "preprocessor_config.json", auto_map={"AutoImageProcessor": "evil.Evil"})
        return f"{folder / 'preprocessor_config.json'} maps AutoImageProcessor to 'evil.Evil'"
    elif attack == "module of another repo":
        (folder / "evil.py").unlink()
        write_json(folder / "config.json", auto_map={"AutoModelForImageClassification": "attacker/repo--evil.Evil"})
        return f"{folder / 'config.json'} maps AutoModelForImageClassification to 'attacker/repo--evil.Evil'"
    return f"{folder / 'evil.py'} is not part of vit-scratch's model code"


def refusal(folder: Path, **kwargs) -> str:
    """The refusal (a ValueError) of `push_to_hub(folder, REPO_ID, **kwargs)` run in this process, which is offline
    (conftest): had the push made any request before refusing, it would have failed with OfflineModeIsEnabled (a
    PushError) instead. So a refusal here is one that nothing on any hub came before."""
    assert constants.HF_HUB_OFFLINE, "the test process must be offline (HF_HUB_OFFLINE=1)"
    with pytest.raises(ValueError) as refused:
        push_to_hub(folder, REPO_ID, **kwargs)
    return str(refused.value)


@pytest.mark.parametrize("attack", ATTACKS)
def test_code_other_than_the_package_s_never_runs_and_is_not_pushed(local_hub, tmp_path, attack):  # noqa: F811
    """Refused, naming the file, before anything runs or reaches the hub."""
    folder, marker = tmp_path / "run", tmp_path / "marker"
    expected = attacked_folder(folder, attack, marker)
    assert expected in refusal(folder) and not marker.exists()

    if attack == "extra module in config auto_map":  # the command's main, in this process: one line, nothing ran
        refused = outcome("push", [str(folder), REPO_ID])
        assert refused.one_line and refused.error.startswith(f"error: {expected}"), refused
        assert not marker.exists() and not local_hub.repo_exists(REPO_ID)


@pytest.mark.parametrize("removed", [["modeling_vit_scratch.py"], ["stems_vit_scratch.py", "loading_vit_scratch.py"]])
def test_a_folder_missing_model_code_files_names_every_one_before_any_request(tmp_path, removed):
    """The repo's users load the model with its code files, and so does the push's reload check: a folder lacking
    any is one line naming each (before: transformers' OSError with a `https://huggingface.co//tmp/...` URL), made
    while offline, so before any request."""
    assert constants.HF_HUB_OFFLINE, "the test process must be offline (HF_HUB_OFFLINE=1)"
    folder = tmp_path / "run"
    saved_folder(folder)
    for name in removed:
        (folder / name).unlink()
    with pytest.raises(FileNotFoundError) as refused:
        push_to_hub(folder, REPO_ID)
    many = len(removed) > 1
    assert str(refused.value).startswith(
        f"{folder} lacks the model code file{'s' * many} {', '.join(sorted(removed, key=MODEL_FILES.index))}, which "
        f"the model loads with (trust_remote_code): restore {'them' if many else 'it'} (copy "
    )


# Run with `python -c`: an empty folder for the child's hub home, the model folder, the repo id.
CREDENTIAL_CHECK = """
import json, subprocess, sys
from modeling_vit_scratch.sharing.push import push_to_hub
from modeling_vit_scratch.common.secrets import credential_free_env
env = credential_free_env(sys.argv[1])
code = "from huggingface_hub import get_token; print(get_token())"
found = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=1800)
push_to_hub(sys.argv[2], sys.argv[3])  # the gate's reload runs, with its guard, while this process has a token
print(json.dumps(dict(env=env, found=found.stdout.strip(), errors=found.stderr[-2000:])))
"""


def test_the_reload_check_reaches_no_credential(local_hub, tmp_path):  # noqa: F811
    """The gate's child process sees no token: not in its environment, not in a saved login. Its own guard (it
    exits if huggingface_hub finds a token) passes, though the pushing process has both, and trips when given one."""
    secret, legacy = "hf_saved_login_secret_0123", "hf_legacy_variable_secret"
    (tmp_path / "hf_home").mkdir()
    (tmp_path / "hf_home" / "token").write_text(secret)  # the saved login of the pushing process (HF_HOME/token)
    saved_folder(tmp_path / "run")
    result = local_hub.run(
        "-c",
        CREDENTIAL_CHECK,
        tmp_path / "empty_home",
        tmp_path / "run",
        REPO_ID,
        hf_home=tmp_path / "hf_home",
        env={"HUGGING_FACE_HUB_TOKEN": legacy, "MY_COPY_OF_THE_TOKEN": TOKEN, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    checked = json.loads(result.stdout.splitlines()[-1])
    env = checked["env"]
    assert not set(env) & set(TOKEN_VARIABLES) and "MY_COPY_OF_THE_TOKEN" not in env
    assert not any(value in text for value in (TOKEN, secret, legacy) for text in env.values())
    assert env["HF_HOME"] == str(tmp_path / "empty_home") and env["HF_HUB_OFFLINE"] == "1"
    assert env["HF_TOKEN_PATH"].startswith(str(tmp_path / "empty_home"))
    assert checked["found"] == "None", checked["errors"]
    assert len(titles(local_hub)) == 3  # pushed: the gate's reload passed its guard

    leaked = local_hub.run("-c", RELOAD_WITHOUT_PACKAGE, tmp_path / "run", "x", "y", hf_home=tmp_path / "hf_home")
    assert leaked.returncode != 0 and "a Hub token reached the reload check" in leaked.stderr


def test_push_script_prints_url_and_commit_and_never_the_token(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    result = run_push_script(local_hub, tmp_path, tmp_path / "run", REPO_ID, "--commit_message", "from the script")
    assert result.returncode == 0, result.stderr[-2000:]
    commit = local_hub.commits(REPO_ID)[0][0]
    assert f"commit: {commit}" in result.stdout and REPO_ID in result.stdout
    assert titles(local_hub)[1] == "from the script"
    assert TOKEN not in result.stdout + result.stderr
    missing = outcome("push", [str(tmp_path / "nope"), REPO_ID])  # in this process: the script ran the same main
    assert missing.one_line and missing.error == (
        f"error: FOLDER {str(tmp_path / 'nope')!r} does not exist: check the path of the folder (a hub repo id is "
        "owner/name, without ./ or a trailing /)."
    )


def change_weights(folder: Path) -> ViTScratchForImageClassification:
    """The weights of `folder` changed after training (say, fine-tuned a little more), its training files kept."""
    model = ViTScratchForImageClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        model.classifier.bias.add_(0.5)
    model.save_pretrained(folder)
    return model


def test_weights_changed_after_training_are_refused_or_pushed_without_their_metrics(local_hub, tmp_path):  # noqa: F811
    folder, undigested, retrained = tmp_path / "run", tmp_path / "undigested", tmp_path / "retrained"
    saved_folder(folder)
    changed = change_weights(folder)
    shutil.copytree(folder, undigested)
    record = json.loads((folder / "training_record.json").read_text())
    del record["weights_sha256"]  # a record written before the digest existed proves nothing either
    (undigested / "training_record.json").write_text(json.dumps(record))
    shutil.copytree(undigested, retrained)  # retrained: record and weights agree again
    write_json(retrained / "training_record.json", weights_sha256=weights_sha256(retrained))

    refused, no_digest, unmeasured, measured = push(
        local_hub,
        tmp_path,
        dict(folder=folder),
        dict(folder=undigested),
        dict(folder=undigested, allow_unmeasured_weights=True),
        dict(folder=retrained),
    )
    refusal = (
        f"The model in {folder} is not the one the metrics in all_results.json were measured on "
        "(its training_record.json names other weights): retrain, or pass --allow_unmeasured_weights"
    )
    assert refused["error"] == "ValueError" and refusal in refused["message"]
    assert no_digest["error"] == "ValueError" and "it has no weights digest on record" in no_digest["message"]
    assert no_digest["commits"] is None  # nothing created

    card_text = card_at(local_hub, unmeasured["commit_id"])
    assert "the metrics measured in training were not measured on them" in card_text
    assert "model-index" not in card_text and "## Results" not in card_text and "0.9123" not in card_text
    files = set(local_hub.files(REPO_ID, unmeasured["commit_id"]))
    assert "training_record.json" in files
    assert not {"all_results.json", "training_curves.png", "confusion_matrix.png"} & files  # they describe others
    pixel_values = torch.randn(2, 1, 20, 20)
    loaded = run_fresh(
        REPO_ID,
        pixel_values,
        tmp_path / "fresh",
        env=local_hub.env(tmp_path / "hf_home_fresh"),
        revision=unmeasured["commit_id"],
    )
    with torch.no_grad():
        assert torch.equal(loaded["logits"], changed(pixel_values).logits)  # the weights pushed are the changed ones

    # retrained: the metrics come back, and so does all_results.json
    card_text = card_at(local_hub, measured["commit_id"])
    assert "0.9123" in card_text and "not measured on them" not in card_text
    assert {"all_results.json", "confusion_matrix.png"} <= set(local_hub.files(REPO_ID))


@pytest.mark.parametrize("secret", [TOKEN, GIVEN_TOKEN], ids=["HF_TOKEN", "token="])
def test_a_folder_holding_the_token_is_refused(tmp_path, monkeypatch, secret):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    # the one request before the load, the credentials' check, is tested in tests/safety/test_hub_arguments.py
    monkeypatch.setattr(hub_arguments, "check_access", lambda *args, **kwargs: None)
    folder = tmp_path / "run"
    saved_folder(folder)
    write_json(folder / "training_record.json", command=f"python scripts/train.py --hub_token {secret}")
    refused = refusal(folder, token=GIVEN_TOKEN)
    record = folder / "training_record.json"
    assert refused.startswith(
        f"A Hub token is in the model card README.md, {record} (as staged for upload from {folder}); refusing to push"
    )
    assert secret not in refused


def test_the_token_is_in_no_pushed_file_and_no_output(pushed):
    # the token given is the one the Hub accepts (the push checks it first); another one is in HF_TOKEN, and the
    # pushing process's output holds neither (checked by `push`)
    files = pushed.hub.files(REPO_ID, pushed.first["commit_id"])
    assert len(files) >= 10
    for path, content in files.items():
        assert TOKEN.encode() not in content and GIVEN_TOKEN.encode() not in content, path


def test_failed_model_commit_leaves_no_commit_and_the_same_push_completes(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    local_hub.fail_commits.add(1)
    failed, finished = push(local_hub, tmp_path, {}, {})
    assert failed["error"] == "PushError" and failed["message"] == (
        f"Uploading the model to {REPO_ID} failed (HTTP 500: Injected fault: commit request 1 fails): nothing was "
        f"committed and the repo {REPO_ID}, created by this push, is still empty; re-run the same command to push it."
    )
    assert failed["commits"] == ["initial commit"]
    assert len(finished["commits"]) == 3 and finished["commits"][1].startswith("Upload vit_scratch model")


@pytest.mark.slow  # the failed-commit test above covers resuming a push by default; this one its second commit
def test_failed_pin_leaves_a_loadable_repo_and_the_same_push_only_pins_it(local_hub, tmp_path):  # noqa: F811
    model = saved_folder(tmp_path / "run")
    local_hub.fail_commits.add(2)
    failed, finished, again = push(local_hub, tmp_path, {}, {}, {})
    model_commit = failed["head"]
    assert failed["error"] == "PushError" and failed["message"] == (
        f"The model is on {REPO_ID} at commit {model_commit} (complete and loadable, its card unpinned), but pinning "
        "the card's loading example to that commit failed (HTTP 500: Injected fault: commit request 2 fails); "
        "re-run the same command to pin it."
    )
    card_text = card_at(local_hub, model_commit)
    assert "revision=" not in card_text and f'model="{REPO_ID}", trust_remote_code=True)' in card_text
    pixel_values = torch.randn(2, 1, 20, 20)
    loaded = run_fresh(
        REPO_ID, pixel_values, tmp_path / "fresh", env=local_hub.env(tmp_path / "hf_home_fresh"), revision=model_commit
    )
    with torch.no_grad():
        assert torch.equal(loaded["logits"], model(pixel_values).logits)

    # one model commit, then the pin
    assert len(finished["commits"]) == 3 and finished["commits"][0].startswith("Model card: pin")
    assert f'revision="{model_commit}"' in card_at(local_hub, finished["commit_id"])
    assert again["commit_id"] == finished["commit_id"] and len(again["commits"]) == 3  # nothing left: no commit


def run_push_script(hub, tmp_path: Path, *args, **env: str):
    """scripts/push_to_hub.py as a user runs it, its huggingface_hub finding `hub` through the environment."""
    script = REPO / "scripts" / "push_to_hub.py"
    return hub.run(script, *args, hf_home=tmp_path / "hf_home", env={"PYTHONPATH": str(REPO), **env})


def one_error_line(result) -> str:
    """The script failed with one `error:` line, last, and no traceback or token anywhere in its output."""
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "Traceback" not in output and TOKEN not in output, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and result.stderr.strip().splitlines()[-1] == errors[0]
    return errors[0]


def test_an_unreachable_hub_is_one_line_from_the_push_script(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    unreachable = run_push_script(local_hub, tmp_path, tmp_path / "run", REPO_ID, HF_ENDPOINT="http://127.0.0.1:9")
    assert one_error_line(unreachable).startswith("error: The Hub at http://127.0.0.1:9 cannot be reached (")


@pytest.mark.slow  # four pushes, each with its reload check in a new process
def test_push_script_faults_are_one_line_and_running_it_again_completes(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    local_hub.fail_commits.add(local_hub.commit_requests + 2)
    failed = run_push_script(local_hub, tmp_path, tmp_path / "run", REPO_ID)
    model_commit = local_hub.commits(REPO_ID)[0][0]
    assert one_error_line(failed) == (
        f"error: The model is on {REPO_ID} at commit {model_commit} (complete and loadable, its card unpinned), but "
        "pinning the card's loading example to that commit failed (HTTP 500: Injected fault: commit request 2 "
        "fails); re-run the same command to pin it."
    )
    finished = run_push_script(local_hub, tmp_path, tmp_path / "run", REPO_ID)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert f"commit: {local_hub.commits(REPO_ID)[0][0]}" in finished.stdout and len(titles(local_hub)) == 3

    change_weights(tmp_path / "run")
    refused = run_push_script(local_hub, tmp_path, tmp_path / "run", REPO_ID)
    assert one_error_line(refused).startswith(f"error: The model in {tmp_path / 'run'} is not the one the metrics")
    accepted = run_push_script(local_hub, tmp_path, tmp_path / "run", REPO_ID, "--allow_unmeasured_weights")
    assert accepted.returncode == 0 and len(titles(local_hub)) == 5, accepted.stderr[-3000:]


@pytest.mark.slow  # as the test above, on a pull request's ref
def test_a_pull_request_whose_pin_failed_is_finished_on_its_ref(local_hub, tmp_path):  # noqa: F811
    saved_folder(tmp_path / "run")
    saved_folder(tmp_path / "run2", seed=1)
    local_hub.fail_commits.add(4)  # the first push makes commit requests 1 and 2; the pull request's pin is the 4th
    first, failed, finished = push(
        local_hub,
        tmp_path,
        dict(commit_message="first model"),
        dict(folder=tmp_path / "run2", create_pr=True),
        dict(folder=tmp_path / "run2", revision="refs/pr/1"),
    )
    assert failed["error"] == "PushError" and failed["message"].endswith(
        "re-run the same command with --revision refs/pr/1 (Python: revision='refs/pr/1') instead of --create_pr to "
        "pin it."
    )
    model_commit = local_hub.commits(REPO_ID, "refs/pr/1")[1][0]
    assert f"at commit {model_commit} " in failed["message"]
    assert titles(local_hub, "refs/pr/1")[:2] == [
        f"Model card: pin the loading example to {model_commit}",
        "Upload vit_scratch model from run2",
    ]
    assert f'revision="{model_commit}"' in card_at(local_hub, finished["commit_id"])
    assert finished["commits"] == first["commits"]  # main untouched


def test_a_folder_that_declares_a_pipeline_of_its_own_is_refused(tmp_path):
    """vit-scratch never writes `custom_pipelines` (transformers would ask every user for remote-code consent and
    run the folder's pipeline class), so any such entry, even naming the package's own class, is foreign: refused
    before any request (the first push above shows the pushed config holds none)."""
    other = tmp_path / "other"
    saved_folder(other)
    pipeline = {"impl": "image_processing_vit_scratch.ViTScratchImageClassificationPipeline", "pt": [], "type": "image"}
    write_json(other / "config.json", custom_pipelines={"image-classification": pipeline})
    assert "declares custom_pipelines; refusing to run or push it" in refusal(other)
