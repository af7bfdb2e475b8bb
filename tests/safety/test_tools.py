"""The tools a stranger runs on a model folder (explain, push, train --model): each refusal is one line before any
long work. A download of --image is bounded in time and bytes; --image naming a folder says so; a preset name is no
model to explain; a vit_scratch folder's processor must fit its model; the metrics describe the weights AND the
config and processor they were measured through; a push's revision is a branch, never a commit id; a repo id cannot
start with '-'; a folder or repo of another model type is one line before anything loads (push, explain), a transformers
ViT sent to `vit-scratch convert`."""

import http.server
import io
import json
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from entry_points import MODEL_ARGUMENT, Scenario, argv_reading, hub_repo, outcome
from helpers import REPO, TINY_MODEL
from hub_server import LocalHub, Store
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from test_templates import RECORD as CARD_RECORD

from modeling_vit_scratch.common.model_folder import described_sha256
from modeling_vit_scratch.common.secrets import weights_sha256
from modeling_vit_scratch.explanation import prediction


def fail_if_reached(*args, **kwargs):
    raise AssertionError("the command went on past what it should refuse")


# ---- explain --image URL: a download bounded in time and bytes (a local server on the loopback only)


PAGE = b"<html>a page showing a cat</html>"
TRICKLE_BYTES = 200


def png_bytes(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(buffer, "PNG")
    return buffer.getvalue()


CAT_PNG = png_bytes(4, 3)


class Misbehaving(http.server.BaseHTTPRequestHandler):
    """/cat.png is a small PNG; /trickle sends a byte every 0.05 s, TRICKLE_BYTES in all (a download that ignores its
    time limit ends with bytes that are no image, never a hang); /endless streams 64 kB chunks without end, with no
    length; /page is a web page; /missing is a 404."""

    def do_GET(self):
        if self.path.startswith("/cat.png"):
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(CAT_PNG)))
            self.end_headers()
            self.wfile.write(CAT_PNG)
            return
        if self.path.startswith(("/page", "/missing")):
            page = PAGE
            self.send_response(200 if self.path.startswith("/page") else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
            return
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.end_headers()
        try:
            if self.path == "/trickle":
                for _ in range(TRICKLE_BYTES):
                    self.wfile.write(b"\x89")
                    self.wfile.flush()
                    time.sleep(0.05)
                self.close_connection = True
                return
            while True:
                self.wfile.write(b"\0" * 65536)
        except OSError:  # the client hung up: what the test wants
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Misbehaving)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def explain_argv(scenario: Scenario, image: str) -> list[str]:
    return ["--model", str(scenario.model()), "--image", image, "--out", str(scenario.root / "out")]


def test_a_trickling_download_is_refused_after_the_time_limit(server, tmp_path, monkeypatch):
    """The download's clock is a fake one, 10 s a reading: the limit trips after a few bytes however loaded the
    machine is, and the socket keeps its own timeout (30 s, far above the trickle's pace)."""
    readings = iter(range(0, 10_000, 10))
    monkeypatch.setattr(prediction, "time", SimpleNamespace(monotonic=lambda: next(readings)))
    monkeypatch.setattr(prediction, "DOWNLOAD_SECONDS", 30)
    monkeypatch.setattr(prediction, "load_model", fail_if_reached)
    result = outcome("explain", explain_argv(Scenario(tmp_path), f"{server}/trickle"))
    assert result.one_line, result
    assert f"{server}/trickle took more than 30 s" in result.error
    assert "download it yourself and give --image the file" in result.error


def test_an_endless_download_is_refused_at_the_byte_limit(server, tmp_path, monkeypatch):
    monkeypatch.setattr(prediction, "DOWNLOAD_BYTES", 1 << 20)
    monkeypatch.setattr(prediction, "load_model", fail_if_reached)
    result = outcome("explain", explain_argv(Scenario(tmp_path), f"{server}/endless"))
    assert result.one_line, result
    assert f"{server}/endless is larger than 1,048,576 bytes" in result.error
    assert "download it yourself and give --image the file" in result.error


def test_a_body_that_is_not_an_image_names_its_content_type(server, tmp_path, monkeypatch):
    monkeypatch.setattr(prediction, "load_model", fail_if_reached)
    result = outcome("explain", explain_argv(Scenario(tmp_path), f"{server}/page"))
    assert result.error == (
        f"error: {server}/page sent text/html, {len(PAGE)} bytes, which is not an image PIL can read: give the URL of the "
        "image file itself (not of a page that shows it), or download it and give --image the file."
    )


class Loaded(Exception):
    """The model load was reached: the image was taken."""


@pytest.mark.parametrize("scheme", ["http", "HTTP"])  # a URL's scheme is case-insensitive (RFC 3986)
def test_a_downloaded_image_is_said_to_be_taken_from_its_url(scheme, server, tmp_path, monkeypatch, capsys):
    def loaded(*args, **kwargs):
        raise Loaded

    monkeypatch.setattr(prediction, "load_model", loaded)
    url = scheme + server.removeprefix("http")
    result = outcome("explain", explain_argv(Scenario(tmp_path), f"{url}/cat.png?signature=s3cr3t"))
    assert isinstance(result.traceback, Loaded), result
    # the URL as read, its scheme lower-cased
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"image: downloaded from {server}/cat.png?*** (image/png, {len(CAT_PNG)} bytes), a PNG of 4x3 pixels"
    )


def test_an_image_url_of_another_scheme_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(prediction, "load_model", fail_if_reached)
    result = outcome("explain", explain_argv(Scenario(tmp_path), "ftp://example.com/cat.png"))
    assert result.error == (
        "error: Image 'ftp://example.com/cat.png' is a ftp: URL, and explain downloads http(s) URLs only: download "
        "it yourself and give --image the file (a file:// URL is read as the path it names)."
    )


def test_several_images_are_one_line_saying_one_per_run_and_how_to_explain_each(tmp_path, monkeypatch):
    monkeypatch.setattr(prediction, "load_model", fail_if_reached)
    scenario = Scenario(tmp_path)
    argv = explain_argv(scenario, "a.png")
    argv.insert(argv.index("a.png") + 1, "b.png")
    result = outcome("explain", argv)
    assert result.error == (
        "error: --image takes one image per run, and 2 were given ('a.png', 'b.png'): explain each in its own run "
        'with its own --out, e.g. for image in a.png b.png; do vit-scratch explain --model M --image "$image" --out '
        '"figs/${image%.*}"; done.'
    )
    assert not (scenario.root / "out").exists()


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def download_failures(server: str) -> list[tuple[str, str, str]]:
    """(URL given, URL shown, cause in words) of a download that fails before any image arrives."""
    port = free_port()
    return [
        (f"http://127.0.0.1:{port}/cat.png", f"http://127.0.0.1:{port}/cat.png", "the server refused the connection"),
        (f"{server}/missing?signature=s3cr3t-key", f"{server}/missing?***", "the server answered HTTP 404 Not Found"),
        ("http://no-such-host.invalid/cat.png", "http://no-such-host.invalid/cat.png", "could not be resolved"),
    ]


def test_a_failed_download_names_the_url_without_credentials_and_the_cause(server, tmp_path, monkeypatch):
    monkeypatch.setattr(prediction, "load_model", fail_if_reached)
    for url, shown, cause in download_failures(server):
        result = outcome("explain", explain_argv(Scenario(tmp_path), url))
        assert result.one_line, result
        assert result.error.startswith(f"error: Downloading {shown} failed: "), result.error
        assert cause in result.error and "urlopen" not in result.error
        assert result.error.endswith(
            "check the URL and the network, or download it yourself and give --image the file."
        )
        assert "s3cr3t" not in result.error


def test_a_url_with_a_password_is_refused_without_showing_it(server, tmp_path, monkeypatch):
    monkeypatch.setattr(prediction, "load_model", fail_if_reached)
    url = server.replace("//", "//me:hunter2-password@") + "/page"
    result = outcome("explain", explain_argv(Scenario(tmp_path), url))
    assert result.error == (
        f"error: http://***@{server.split('//')[1]}/page carries a user name or password, which explain never "
        "sends: download it yourself and give --image the file."
    )


def test_image_that_is_a_folder_is_named_a_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(prediction, "load_model", fail_if_reached)
    (tmp_path / "pictures").mkdir()
    result = outcome("explain", explain_argv(Scenario(tmp_path), str(tmp_path / "pictures")))
    assert result.one_line, result
    assert "is a folder: --image takes one image file" in result.error


def test_a_preset_name_is_no_model_to_explain(tmp_path, monkeypatch):
    monkeypatch.setattr(prediction, "load_image", fail_if_reached)
    scenario = Scenario(tmp_path)
    result = outcome(
        "explain", ["--model", "vit-tiny-patch16-224", "--image", str(scenario.picture()), "--out", str(tmp_path / "o")]
    )
    assert result.one_line, result
    assert "'vit-tiny-patch16-224' is a preset name" in result.error and "no trained weights" in result.error


# ---- a vit_scratch folder's processor fits its model (8x8 RGB here)

PROCESSOR_EDITS = {
    "size": ({"height": 20000, "width": 20000}, "size (height, width) [20000, 20000]"),
    "image_mean": ([0.5], "image_mean 1 values"),
    "image_std": ([0.5, 0.5], "image_std 2 values"),
    "num_channels": (1, "num_channels 1"),
}


def edit_processor(folder, field, value):
    path = folder / "preprocessor_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), field: value}))


@pytest.mark.parametrize("name", ["explain", "push", "train"])
@pytest.mark.parametrize("field", sorted(PROCESSOR_EDITS))
def test_a_processor_that_does_not_fit_its_model_is_refused(name, field, tmp_path, monkeypatch):
    scenario = Scenario(tmp_path)
    value, said = PROCESSOR_EDITS[field]
    edit_processor(scenario.model(), field, value)
    before = (scenario.model() / "preprocessor_config.json").read_bytes()
    monkeypatch.setattr("transformers.AutoModelForImageClassification.from_pretrained", fail_if_reached)
    monkeypatch.setattr(
        "modeling_vit_scratch.sharing.push.ViTScratchForImageClassification.from_pretrained", fail_if_reached
    )
    monkeypatch.setattr("modeling_vit_scratch.training.trainer.build_model", fail_if_reached)
    argv = {
        "explain": scenario.argv("explain"),
        "push": scenario.argv("push"),
        "train": [*scenario.argv("train"), "--model", str(scenario.model())],
    }[name]
    if name == "train":  # the second --model wins
        argv = argv[: argv.index("--model")] + argv[argv.index("--model") + 2 :]
    result = outcome(name, argv)
    assert result.one_line, result
    assert "preprocessor_config.json gives " + said in result.error
    assert "config.json's" in result.error and "ViTScratchImageProcessor.for_config" in result.error
    assert (scenario.model() / "preprocessor_config.json").read_bytes() == before


# ---- push: the metrics describe the weights, the config and the processor


# what the model card reads of a training record (the template test's, with a command and a data set)
RECORD = dict(CARD_RECORD, command="vit-scratch train ...", dataset="images")


def trained_folder(scenario: Scenario, files_digest: bool = True):
    """The scenario's model with training files as training writes them (files_digest=False: an earlier version's
    record, with the weights' digest only)."""
    folder = scenario.model()
    (folder / "all_results.json").write_text(json.dumps({"test_accuracy": 0.9}))
    record = dict(RECORD, weights_sha256=weights_sha256(folder))
    if files_digest:
        record["files_sha256"] = described_sha256(folder)
    (folder / "training_record.json").write_text(json.dumps(record))
    return folder


REACHED_THE_HUB = "on the Hub failed"


@pytest.fixture
def hub_reached(monkeypatch):
    """A push that passes its gate meets the Hub, out of reach offline (`REACHED_THE_HUB`); the bit-for-bit reload
    check and the credentials' check are left to tests/sharing and tests/safety/test_hub_arguments.py, which run
    pushes in new processes."""
    monkeypatch.setattr("modeling_vit_scratch.sharing.push.check_reloads_to", lambda *args, **kwargs: None)
    monkeypatch.setattr("modeling_vit_scratch.sharing.hub_arguments.check_access", lambda *args, **kwargs: None)


@pytest.mark.parametrize(
    "file, field, value",
    [("config.json", "layer_norm_eps", 0.9), ("config.json", "id2label", {"0": "b", "1": "c", "2": "a"})],
)
def test_a_config_edited_after_training_counts_as_unmeasured(file, field, value, tmp_path, hub_reached):
    scenario = Scenario(tmp_path)
    folder = trained_folder(scenario)
    path = folder / file
    path.write_text(json.dumps({**json.loads(path.read_text()), field: value}))
    result = outcome("push", scenario.argv("push"))
    assert result.one_line, result
    assert f"is not the one the metrics in all_results.json were measured on (its {file} changed after training)" in (
        result.error
    )
    assert "--allow_unmeasured_weights" in result.error
    allowed = outcome("push", [*scenario.argv("push"), "--allow_unmeasured_weights"])
    assert REACHED_THE_HUB in allowed.error  # accepted: the push went on to the Hub


def test_a_record_of_the_earlier_form_vouches_for_the_weights(tmp_path, hub_reached):
    scenario = Scenario(tmp_path)
    trained_folder(scenario, files_digest=False)
    assert REACHED_THE_HUB in outcome("push", scenario.argv("push")).error


def test_a_resaved_config_still_counts_as_measured(tmp_path):
    folder = trained_folder(Scenario(tmp_path))
    before = described_sha256(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "transformers_version": "9.9.9"}, indent=4))
    assert described_sha256(folder) == before


# ---- push: what is sent is what was meant


@settings(max_examples=25)
@given(st.text("0123456789abcdefABCDEF", min_size=40, max_size=40))
def test_a_revision_that_is_a_commit_id_is_refused(tmp_path_factory, commit):
    scenario = Scenario(tmp_path_factory.mktemp("push"))
    result = outcome("push", [*scenario.argv("push"), "--revision", commit])
    assert result.one_line, result
    assert f"The revision {commit} is a commit id" in result.error and "give a branch name" in result.error


@pytest.mark.parametrize("branch", ["cafe", "deadbeef", "v1", "refs/pr/3"])
def test_a_short_hex_branch_name_is_a_branch(branch, tmp_path, hub_reached):
    scenario = Scenario(tmp_path)
    assert REACHED_THE_HUB in outcome("push", [*scenario.argv("push"), "--revision", branch]).error


def test_a_repo_id_starting_with_a_dash_is_named(tmp_path):
    scenario = Scenario(tmp_path)
    result = outcome("push", [str(scenario.model()), "-x/y"])
    assert result.one_line, result
    assert "The repo id '-x/y' starts with '-'" in result.error


def transformers_vit_folder(folder: Path) -> Path:
    """A tiny transformers ViT classifier folder, as `convert --to transformers` writes one."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(image_size=8, patch_size=4, hidden_size=24, num_hidden_layers=1, num_attention_heads=2)
    ViTForImageClassification(config).save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(json.dumps({"size": {"height": 8, "width": 8}}))
    return folder


# the commands that read vit_scratch models only: how each names what to do with a converted folder
VIT_SCRATCH_READERS = {"push": "push", "explain": "explain --model"}


@pytest.mark.parametrize("name", VIT_SCRATCH_READERS)
def test_a_model_of_another_type_is_one_line_before_anything_loads(name, tmp_path, monkeypatch):
    """A transformers ViT is sent to `vit-scratch convert --from transformers`; another model type is told which
    models the command reads. Nothing is loaded and no output folder is made."""
    monkeypatch.setattr("modeling_vit_scratch.sharing.push.load_verified", fail_if_reached)
    monkeypatch.setattr(prediction, "load_model", fail_if_reached)
    scenario = Scenario(tmp_path)
    hf = transformers_vit_folder(tmp_path / "hf-vit")
    other = tmp_path / "bert"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (other / "preprocessor_config.json").write_text(json.dumps({"size": {"height": 8, "width": 8}}))
    for folder in (hf, other):
        result = outcome(name, argv_reading(scenario, name, MODEL_ARGUMENT[name], folder))
        assert result.one_line, result
        said = (
            f"error: {hf} is a transformers ViT model, not a vit_scratch one (config.json's model_type is 'vit'): "
            f"convert it first with `vit-scratch convert --from transformers --input {hf} --output NEW_FOLDER`, "
            f"then {VIT_SCRATCH_READERS[name]} NEW_FOLDER."
            if folder == hf
            else f"error: {other} is not a vit_scratch model (config.json's model_type is 'bert'): "
        )
        assert result.error.startswith(said), result.error
    assert not (tmp_path / "out-explain").exists()


@pytest.mark.integration
def test_explain_of_a_hub_repo_of_another_type_is_one_line_before_the_image_or_the_weights(tmp_path):
    """`explain --model OWNER/NAME` of a transformers ViT on the (local) Hub: the repo's config.json is read first,
    and the one line sends it to the conversion; nothing is written."""
    with LocalHub(tmp_path / "hub") as hub:
        hub_repo(hub, "local-user/hf-vit", transformers_vit_folder(tmp_path / "hf-vit"))
        out = tmp_path / "ex_hf"
        done = hub.run(
            "-m",
            "modeling_vit_scratch.cli",
            "explain",
            *["--model", "local-user/hf-vit", "--image", Scenario(tmp_path).picture(), "--out", out],
            hf_home=tmp_path / "hf_home",
            env={"PYTHONPATH": str(REPO)},
        )
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "error: local-user/hf-vit is a transformers ViT model, not a vit_scratch one (config.json's model_type is "
        "'vit'): convert it first with `vit-scratch convert --from transformers --input local-user/hf-vit --output "
        "NEW_FOLDER`, then explain --model NEW_FOLDER."
    )
    assert "top classes" not in done.stdout and not out.exists()


BRANCH_ONLY = """
import json, sys
sys.path.insert(0, sys.argv[1])
from entry_points import outcome
image, out = sys.argv[2], sys.argv[3]
lines = [
    outcome("explain", ["--model", "local-user/on-dev", "--image", image, "--out", out]).error,
    outcome("convert", ["--to", "transformers", "--input", "local-user/on-dev", "--output", out]).error,
    outcome("explain", ["--model", "local-user/on-dev", "--revision", "dev", "--image", image, "--out", out]).code,
    outcome("convert", ["--to", "transformers", "--input", "local-user/on-dev", "--revision", "dev", "--output", out + "-hf"]).code,
]
print(json.dumps(lines))
"""


def script_on_hub(hub: LocalHub, script: str, tmp_path: Path) -> list:
    """What `script` (given the support folder, a picture and an output folder) prints as its last line, as JSON,
    run in a new process that reaches `hub` as a user's would."""
    done = hub.run(
        "-c",
        script,
        REPO / "tests" / "support",
        Scenario(tmp_path).picture(),
        tmp_path / "out",
        hf_home=tmp_path / "hf_home",
        env={"PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.integration
def test_a_hub_repo_whose_model_is_on_a_branch_only_is_one_line_naming_the_branch(tmp_path):
    """A repo whose main holds no model (pushed with --revision dev): explain and convert say so, and which branch
    holds it, before any download (before: a stray 'No files matched' line and a line about model_type, or about
    use_safetensors, which the user never set); with --revision dev, both read the branch's model."""
    with LocalHub(tmp_path / "hub") as hub:
        repo = Store(hub.root).create("local-user/on-dev", False, f"{hub.url}/local-user/on-dev")
        folder = Scenario(tmp_path).model()
        files = {path.name: repo.add_blob(path.read_bytes()) for path in folder.iterdir() if path.is_file()}
        repo.commit("refs/heads/dev", "a model", "", {**repo.files(repo.refs["refs/heads/main"]), **files})
        repo.save()
        explain_line, convert_line, explained, converted = script_on_hub(hub, BRANCH_ONLY, tmp_path)
    for argument, line in (("--model", explain_line), ("--input", convert_line)):
        assert line == (
            f"error: {argument} 'local-user/on-dev' has no config.json on its main branch, so it holds no model "
            "there; the branch dev holds one: give --revision dev."
        )
    assert explained == converted == 0  # with --revision dev, both read the branch's model
    assert (tmp_path / "out" / "attention_rollout.png").is_file() and (tmp_path / "out-hf" / "config.json").is_file()


@pytest.mark.parametrize("name, argument", [("explain", "--model"), ("convert", "--input")])
def test_a_revision_with_a_local_folder_is_one_line(name, argument, tmp_path, monkeypatch):
    monkeypatch.setattr(prediction, "load_model", fail_if_reached)
    scenario = Scenario(tmp_path)
    result = outcome(name, [*scenario.argv(name), "--revision", "dev"])
    assert result.error == (
        f"error: --revision 'dev' names a version of a hub repo, and {argument} {str(scenario.model())!r} is a local "
        "folder: leave out --revision."
    )
    assert not (tmp_path / f"out-{name}").exists()


# the commands that read a hub repo at a --revision, and the argument that names the repo
REVISION_READERS = {"explain": "--model", "convert": "--input"}


def argv_at_revision(scenario: Scenario, name: str, revision: str) -> list[str]:
    return [*argv_reading(scenario, name, REVISION_READERS[name], "local-user/m"), "--revision", revision]


@pytest.mark.parametrize("name", sorted(REVISION_READERS))
@pytest.mark.parametrize(
    ("revision", "short"),
    [("abc12", "; a commit id is given in full, 40 hex characters, and 'abc12' has 5"), ("nope", "")],
)
def test_a_revision_the_hub_does_not_know_is_one_line_naming_it_not_the_weights(
    name, revision, short, tmp_path, monkeypatch
):
    import httpx2
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RevisionNotFoundError

    def unknown(self, repo_id, revision=None, **kwargs):
        request = httpx2.Request("GET", f"http://hub/api/models/{repo_id}/revision/{revision}")
        raise RevisionNotFoundError(f"Invalid rev id: {revision}", response=httpx2.Response(404, request=request))

    refs = SimpleNamespace(branches=[SimpleNamespace(name="dev"), SimpleNamespace(name="main")], tags=[])
    monkeypatch.setattr(HfApi, "model_info", unknown)
    monkeypatch.setattr(HfApi, "list_repo_refs", lambda self, repo_id, **kwargs: refs)
    result = outcome(name, argv_at_revision(Scenario(tmp_path), name, revision))
    assert result.error == (
        f"error: --revision {revision!r}: {REVISION_READERS[name]} 'local-user/m' has no branch, tag or commit of "
        f"that name{short}: give one of its branches or tags (main, dev), or a full commit id."
    )


@pytest.mark.parametrize("name", sorted(REVISION_READERS))
def test_offline_a_revision_the_cache_does_not_hold_is_one_line(name, tmp_path, monkeypatch):
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import OfflineModeIsEnabled

    cached = tmp_path / "cache" / "models--local-user--m"
    (cached / "refs").mkdir(parents=True)
    (cached / "refs" / "main").write_text("0" * 40)
    (cached / "snapshots" / ("0" * 40)).mkdir(parents=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(HfApi, "model_info", lambda *args, **kwargs: (_ for _ in ()).throw(OfflineModeIsEnabled()))
    result = outcome(name, argv_at_revision(Scenario(tmp_path), name, "nope"))
    assert result.error == (
        f"error: --revision 'nope': {REVISION_READERS[name]} 'local-user/m' has no branch, tag or commit of that "
        "name in the Hugging Face cache (the Hub was not asked: HF_HUB_OFFLINE is set or it is out of reach): give "
        "one the cache holds (main), or run online (unset HF_HUB_OFFLINE)."
    )


UNKNOWN_REVISIONS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from entry_points import outcome
image, out = sys.argv[2], sys.argv[3]
print(json.dumps([
    outcome("explain", ["--model", "local-user/m", "--revision", "abc12", "--image", image, "--out", out]).error,
    outcome("convert", ["--to", "transformers", "--input", "local-user/m", "--revision", "nope", "--output", out]).error,
]))
"""


@pytest.mark.integration
@pytest.mark.slow  # the rule's in-process tests run in `make test`; this one against the local Hub
def test_a_revision_the_local_hub_does_not_know_is_one_line_at_explain_and_convert(tmp_path):
    """Before: "Cannot load the weights of 'local-user/m' (abc12 is not a valid git identifier ...)"."""
    with LocalHub(tmp_path / "hub") as hub:
        hub_repo(hub, "local-user/m", Scenario(tmp_path).model())
        explained, converted = script_on_hub(hub, UNKNOWN_REVISIONS, tmp_path)
    assert explained == (
        "error: --revision 'abc12': --model 'local-user/m' has no branch, tag or commit of that name; a commit id is "
        "given in full, 40 hex characters, and 'abc12' has 5: give one of its branches or tags (main), or a full "
        "commit id."
    )
    assert converted == (
        "error: --revision 'nope': --input 'local-user/m' has no branch, tag or commit of that name: give one of its "
        "branches or tags (main), or a full commit id."
    )
    assert not (tmp_path / "out").exists()


def labelled_model(folder: Path, labels: list[str]) -> Path:
    """A tiny saved classifier of `labels` (a teacher for the scenario's image folder)."""
    from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification, ViTScratchImageProcessor

    config = ViTScratchConfig(**TINY_MODEL, id2label=dict(enumerate(labels)))
    ViTScratchForImageClassification(config).save_pretrained(folder)
    ViTScratchImageProcessor.for_config(config).save_pretrained(folder)
    return folder


TRAINED_FROM_HUB = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from entry_points import Scenario, outcome, with_argument
root = Path(sys.argv[3]).parent
train = Scenario(root).argv("train")
unknown = outcome("train", [*with_argument(train, "--model", "local-user/m"), "--model_revision", "nope"]).error
fine_tuned = outcome("train", with_argument(with_argument(train, "--model", "local-user/m"), "--output_dir", root / "ft"))
taught = outcome("train", [*with_argument(train, "--output_dir", root / "kd"), "--teacher", "local-user/t"])
print(json.dumps([unknown, fine_tuned.error, taught.error]))
"""


@pytest.mark.integration
def test_a_run_from_a_hub_model_or_teacher_records_the_commit_it_read(tmp_path):
    """A hub --model (or --teacher) is read at one commit, resolved once before anything loads: the record and the
    card name it in full (before: "starting from the weights of local-user/m", no commit); --model_revision and
    --teacher_revision take a branch, tag or full commit id, checked as explain's and convert's --revision."""
    with LocalHub(tmp_path / "hub") as hub:
        hub_repo(hub, "local-user/m", Scenario(tmp_path).model())
        hub_repo(hub, "local-user/t", labelled_model(tmp_path / "teacher", ["cat", "dog", "fox"]))
        (commit, _), *_ = hub.commits("local-user/m")
        (teacher_commit, _), *_ = hub.commits("local-user/t")
        unknown, fine_tuned, taught = script_on_hub(hub, TRAINED_FROM_HUB, tmp_path)
    assert unknown == (
        "error: --model_revision 'nope': --model 'local-user/m' has no branch, tag or commit of that name: give one "
        "of its branches or tags (main), or a full commit id."
    )
    assert fine_tuned is None and taught is None, (fine_tuned, taught)
    record = json.loads((tmp_path / "ft" / "training_record.json").read_text())
    assert (record["initial_weights"], record["initial_weights_commit"]) == ("local-user/m", commit)
    assert (
        f"starting from the weights of `local-user/m` at commit `{commit}`"
        in (tmp_path / "ft" / "README.md").read_text()
    )
    taught_record = json.loads((tmp_path / "kd" / "training_record.json").read_text())
    assert f"the teacher local-user/t (commit {teacher_commit})" in taught_record["distillation"]


@pytest.mark.parametrize(
    "given, said",
    [
        (["--model_revision", "dev"], "error: --model_revision 'dev' names a version of a hub repo, and --model "),
        (
            ["--teacher_revision", "dev"],
            "error: --teacher_revision is used only with --teacher TEACHER, which is not given",
        ),
    ],
)
def test_a_model_revision_without_a_hub_repo_is_one_line(given, said, tmp_path):
    result = outcome("train", [*Scenario(tmp_path).argv("train"), *given])
    assert result.one_line and result.error.startswith(said), result
    assert not (tmp_path / "out-train").exists()
