"""A token never leaves the machine, however it was given, and a push sends only what it means to.

- A token typed into a field that is sent (a commit message, a repo id, a revision, a run name) is refused in one line
  that does not echo it, before any request; a token that is incidental (the pushed folder's name in the commit
  title) is redacted; a class name holding one is refused before training.
- A push never follows a symbolic link in the pushed folder: it is refused in one line naming the link.
- `--push_to_hub` checks the repo id and the credentials before training.
- Log records are redacted while a run lasts.

Refusals that come before any request run in this process (offline); pushes and runs against the local Hub run in
new processes (integration).
"""

import io
import json
import logging
import os
import shutil
from pathlib import Path

import pytest
from entry_points import MODEL_FOLDER_READERS, Scenario, argv_reading, outcome, run_command, with_argument
from helpers import write_imagefolder
from hub_server import TOKEN, LocalHub
from huggingface_hub import constants
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from modeling_vit_scratch.common.secrets import TOKEN_VARIABLES, find_secrets, redacting_logs

SECRET = "hf_SecretTokenOfThisUser0123456789abcd"  # what HF_TOKEN holds in the fast tests
TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\"), max_size=12)


@pytest.fixture
def logged_in(monkeypatch, tmp_path):
    """HF_TOKEN holds SECRET; no saved login is in reach."""
    for name in TOKEN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-login" / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "no-login" / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path / "no-login"))


# two logins kept by `hf auth login`, neither active nor shaped like a Hub token (an old org token, an endpoint's)
STORED = {"old-org": "api_org_PersonalSecretZZyy", "endpoint": "EndpointKey-0a1b2c3d4e5f"}


@pytest.fixture
def stored_logins(logged_in, tmp_path):
    """`logged_in`, and a stored_tokens file of two entries that are not the active token."""
    path = Path(constants.HF_STORED_TOKENS_PATH)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"[{name}]\nhf_token = {token}\n\n" for name, token in STORED.items()))


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


# where a token typed into a field that is sent hides, per entry point: (entry point, field, argv with {} for it)
SENT_FIELDS = [
    ("push", "The commit message", ["--commit_message", "{}"]),
    ("push", "The revision", ["--revision", "{}"]),
    ("push", "The repo id", None),  # the second positional argument
    ("train", "--hub_model_id", ["--hub_model_id", "{}"]),
    ("train", "--run_name", ["--run_name", "{}"]),
    ("train", "--hub_revision", ["--hub_revision", "{}"]),
    ("explain", "The value of --revision", ["--revision", "{}"]),
    ("convert", "The value of --revision", ["--revision", "{}"]),
    ("explain", "The repo id of --model", ["--model", "local-user/{}"]),
    ("convert", "The repo id of --input", ["--input", "local-user/{}"]),
]


def with_sent_field(argv: list[str], template: list[str] | None, value: str) -> list[str]:
    """`argv` with `value` in the sent field that `template` (a SENT_FIELDS entry) names."""
    if template is None:
        return [argv[0], value, *argv[2:]]
    option, shape = template
    return with_argument(argv, option, shape.format(value))


@pytest.mark.parametrize("name, field, template", SENT_FIELDS, ids=[f"{n}-{f}" for n, f, _ in SENT_FIELDS])
@settings(max_examples=10, suppress_health_check=[HealthCheck.function_scoped_fixture])  # the same login throughout
@given(before=TEXT.filter(lambda text: not text.startswith("-")), after=TEXT)  # "-..." is an option: see below
def test_a_token_typed_into_a_sent_field_is_refused_without_echoing_it(
    name, field, template, before, after, tmp_path_factory, logged_in
):
    root = tmp_path_factory.mktemp("scenario")
    argv = with_sent_field(Scenario(root).argv(name), template, f"{before}{SECRET}{after}")
    on_disk = files_of(root)
    done = outcome(name, argv)
    assert done.one_line, done
    assert field in done.error and "Hub token" in done.error
    assert SECRET not in done.error
    assert files_of(root) == on_disk  # nothing written or changed, the output folder not even made


@pytest.mark.parametrize("name, field, template", SENT_FIELDS, ids=[f"{n}-{f}" for n, f, _ in SENT_FIELDS])
@pytest.mark.parametrize("stored", STORED)
def test_every_stored_login_is_a_known_secret_at_every_sent_field(
    name, field, template, stored, tmp_path, stored_logins
):
    """Every token this machine holds is a known secret, wherever it is kept: each entry of stored_tokens, active or
    not and whatever its shape, is refused in a sent field like HF_TOKEN."""
    argv = with_sent_field(Scenario(tmp_path).argv(name), template, f"msg {STORED[stored]}")
    done = outcome(name, argv)
    assert done.one_line, done
    assert field in done.error and "Hub token" in done.error and STORED[stored] not in done.error


@pytest.mark.parametrize("name, argument", MODEL_FOLDER_READERS)
@pytest.mark.parametrize("where", ["stored_tokens", "HF_HOME/token"])
def test_a_token_kept_in_any_login_file_is_refused_in_a_read_folders_settings(
    name, argument, where, tmp_path, stored_logins, monkeypatch
):
    """A stored login and HF_HOME/token (which HF_TOKEN hides from huggingface_hub's `get_token`) are known secrets
    at every reader's settings check too."""
    token = STORED["old-org"]
    if where == "HF_HOME/token":
        token = "OldLoginOfThisUser-9z8y7x"
        (Path(constants.HF_HOME) / "token").write_text(token)
    scenario = Scenario(tmp_path)
    folder = tmp_path / "with-token"
    shutil.copytree(scenario.model(), folder)
    config = json.loads((folder / "config.json").read_text())
    config["note"] = token
    (folder / "config.json").write_text(json.dumps(config))
    argv = argv_reading(scenario, name, argument, folder)
    before = files_of(tmp_path)
    result = outcome(name, argv)
    assert result.one_line, result
    assert f"{folder / 'config.json'} holds or looks like a Hub token at key 'note'" in result.error
    assert token not in result.error and files_of(tmp_path) == before


@pytest.mark.parametrize("name", ["train", "push", "explain", "convert"])
@pytest.mark.parametrize("mistake", [["--commit-message", SECRET], ["--revision", f"-{SECRET}"], [f"--{SECRET}"]])
def test_an_argument_error_never_echoes_a_token(name, mistake, tmp_path, logged_in):
    """argparse's own errors (an unknown argument, a value that reads as an option) would print the token."""
    done = outcome(name, Scenario(tmp_path).argv(name) + mistake)
    assert done.one_line, done
    assert not any(SECRET[start : start + 8] in done.error for start in range(len(SECRET) - 7))  # no piece of it


@pytest.mark.parametrize("name", ["push", "explain", "convert", "benchmark"])
@pytest.mark.parametrize("option", ["--hub_token", "--token=", "--api_key", "--Password="])
@pytest.mark.parametrize("value", ["notatoken", "pw"])  # not token-shaped, and short
def test_the_value_of_an_unknown_secret_option_is_never_echoed(name, option, value, tmp_path, logged_in):
    given = [option + value] if option.endswith("=") else [option, value]
    done = outcome(name, Scenario(tmp_path).argv(name) + given)
    assert done.one_line, done
    shown = option.rstrip("=")
    assert f"{shown}{'=' if option.endswith('=') else ' '}***" in done.error and value not in done.error
    assert f"takes no {shown}; it reads a Hub token from HF_TOKEN or `hf auth login`" in done.error


@pytest.mark.parametrize("link", ["notes.txt", "all_results.json", "model.safetensors"])
def test_a_symbolic_link_in_the_pushed_folder_is_refused_and_never_followed(link, tmp_path, logged_in):
    scenario = Scenario(tmp_path)
    folder = scenario.model()
    private = tmp_path / "private.txt"
    private.write_text("a private file outside the folder")
    if (folder / link).exists():
        shutil.move(folder / link, private)  # the link points at the real file: still refused
    (folder / link).symlink_to(private)
    done = outcome("push", scenario.argv("push"))
    assert done.one_line, done
    assert done.error.startswith(f"error: {folder / link} is a symbolic link; a push never follows links")
    assert done.error.endswith("replace the link by the file itself, or remove it.")


def test_log_records_are_redacted_while_a_run_lasts():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    loggers = [logging.getLogger("transformers.trainer"), logging.getLogger("modeling_vit_scratch.training")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        with redacting_logs([SECRET]):
            for logger in loggers:
                logger.warning("Could not read /data/%s/cat/1.png", SECRET)
            logging.getLogger("transformers.trainer").warning("a token-shaped value hf_%s", "x" * 34)
        loggers[0].warning("after the run: %s", "untouched")
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert lines == ["Could not read /data/***/cat/1.png"] * 2 + [
        "a token-shaped value ***",
        "after the run: untouched",
    ]


def test_a_class_name_holding_a_token_is_refused_before_training(tmp_path, logged_in):
    dataset = write_imagefolder(tmp_path / "data", classes=("cat", f"dog-{SECRET}"), per_class=10)
    argv = Scenario(tmp_path).argv("train")
    argv[argv.index("--dataset") + 1] = str(dataset)
    done = outcome("train", argv)
    assert done.one_line, done
    assert done.error.startswith(f"error: A class name of the data set {tmp_path / 'data'} holds or looks like a Hub")
    assert done.error.endswith("rename that class (its folder, or its label in the data set) before training.")
    assert SECRET not in done.error
    assert not (tmp_path / "out-train" / "config.json").exists()


@pytest.mark.parametrize(
    "hub_model_id, expected",
    [
        ("someone/a/b", "error: --push_to_hub true: the repo id 'someone/a/b' is not valid ("),
        ("bad name!", "error: --push_to_hub true: the repo id 'bad name!' is not valid ("),
    ],
)
def test_push_to_hub_refuses_a_bad_repo_id_before_training(hub_model_id, expected, tmp_path, logged_in):
    argv = Scenario(tmp_path).argv("train") + ["--push_to_hub", "true", "--hub_model_id", hub_model_id]
    done = outcome("train", argv)
    assert done.one_line, done
    assert done.error.startswith(expected) and done.error.endswith("give --hub_model_id your-name/model-name.")
    assert not (tmp_path / "out-train").exists()  # refused before the output folder is claimed


def test_push_to_hub_without_a_token_or_hub_is_refused_before_training(tmp_path, logged_in, monkeypatch):
    argv = Scenario(tmp_path).argv("train") + ["--push_to_hub", "true", "--hub_model_id", "local-user/x"]
    unreachable = outcome("train", argv)  # this process is offline
    assert unreachable.one_line, unreachable
    assert unreachable.error.startswith("error: --push_to_hub true: the Hub at ")
    assert "was not asked, as HF_HUB_OFFLINE is set" in unreachable.error, unreachable
    assert "push later with vit-scratch push." in unreachable.error
    monkeypatch.delenv("HF_TOKEN")
    no_token = outcome("train", argv)
    assert no_token.error == (
        "error: --push_to_hub true needs a Hub token and none was found: log in with `hf auth login`, set "
        "HF_TOKEN or pass --hub_token, or leave out --push_to_hub and push later with vit-scratch push."
    )
    assert not (tmp_path / "out-train").exists()


@pytest.mark.integration
def test_the_hub_refusing_the_token_stops_the_run_before_training(tmp_path):
    with LocalHub(tmp_path / "hub") as hub:
        env = hub.env(tmp_path / "hf_home")
        argv = Scenario(tmp_path).argv("train") + ["--push_to_hub", "true", "--hub_model_id", "local-user/x"]
        done = run_command("train", [*argv, "--hub_token", "not-the-token-of-anyone"], env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: --push_to_hub true: the Hub at {hub.url} does not accept the token (HTTP 401")
    assert line.endswith(
        "the token given with --hub_token: give a valid one, or leave it out to use HF_TOKEN or the saved login."
    )
    assert "not-the-token-of-anyone" not in done.stdout + done.stderr
    assert not (tmp_path / "out-train").exists() and not hub.repo_exists("local-user/x")


# By default the pushes that reach the Hub (one pushed, one refused by the gate); the refusals before any request
# run in the slow tier, and in process on every field by test_a_token_typed_into_a_sent_field_is_refused_without_echoing_it
@pytest.mark.integration
@pytest.mark.parametrize(
    "wheres",
    [
        ("folder name", "label name"),
        pytest.param(("commit message", "revision", "repo id"), marks=pytest.mark.slow, id="refused-before-a-request"),
    ],
    ids=["reaching-the-hub", None],
)
def test_a_token_reaches_no_commit_file_or_line_of_a_push(tmp_path, wheres):
    """Against the local Hub: a folder whose path holds the token is refused before it is read (`FOLDER`); the
    token in the commit message, the revision or the repo id is refused before any request; a class name holding it
    is refused by the gate. Nothing on the server and no printed line holds the token."""
    scenario = Scenario(tmp_path)
    named = tmp_path / f"run-{TOKEN}"
    shutil.copytree(scenario.model(), named)
    labelled = tmp_path / "labelled"
    shutil.copytree(scenario.model(), labelled)
    config = (labelled / "config.json").read_text().replace('"LABEL_1"', f'"dog {TOKEN}"')
    (labelled / "config.json").write_text(config)
    calls = {
        "folder name": [str(named), "local-user/named"],
        "commit message": [str(scenario.model()), "local-user/m", "--commit_message", f"trained with {TOKEN}"],
        "revision": [str(scenario.model()), "local-user/r", "--revision", f"{TOKEN}-branch"],
        "repo id": [str(scenario.model()), f"local-user/{TOKEN}"],
        "label name": [str(labelled), "local-user/labelled"],
    }
    with LocalHub(tmp_path / "hub") as hub:
        env = hub.env(tmp_path / "hf_home")
        done = {where: run_command("push", calls[where], env=env) for where in wheres}
    for where, result in done.items():
        assert TOKEN not in result.stdout + result.stderr, where
        assert "Traceback" not in result.stderr, (where, result.stderr[-2000:])
    for where in {"folder name", "commit message", "revision", "repo id", "label name"} & set(done):
        assert done[where].returncode == 1 and done[where].stderr.strip().splitlines()[-1].startswith("error: "), where
    if "commit message" in done:
        assert "error: The commit message holds or looks like a Hub token" in done["commit message"].stderr
    if "folder name" in done:
        assert "error: The value of FOLDER holds or looks like a Hub token" in done["folder name"].stderr
    if "label name" in done:
        assert "/config.json holds or looks like a Hub token at key 'id2label.1'" in done["label name"].stderr
    stored = [path for path in (tmp_path / "hub").rglob("*") if path.is_file()]
    assert not [path for path in stored if TOKEN.encode() in path.read_bytes() or TOKEN in str(path)]
    repos = tmp_path / "hub" / "models" / "local-user"
    assert sorted(os.listdir(repos) if repos.is_dir() else []) == []


SHAPED = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"  # shaped like a token, and not one this process knows


@pytest.mark.parametrize("name, argument", MODEL_FOLDER_READERS)
@pytest.mark.parametrize("where", ["a known token in a note", "a token-shaped label"])
def test_a_model_folder_whose_settings_hold_a_token_is_refused_by_every_reader(
    name, argument, where, tmp_path, logged_in
):
    """A folder that train (--model, --teacher), explain, convert or push reads is copied into what they write (a
    checkpoint, a figure's file name and title, a converted config, the Hub's files): a known token or anything shaped
    like one in its settings is refused before any work, in one line naming the file and the key, never the value."""
    scenario = Scenario(tmp_path)
    folder = tmp_path / "with-token"
    shutil.copytree(scenario.model(), folder)
    config = json.loads((folder / "config.json").read_text())
    if where == "a token-shaped label":
        config["id2label"]["1"] = f"y-{SHAPED}"
        key = "id2label.1"
    else:
        config["note"] = SECRET
        key = "note"
    (folder / "config.json").write_text(json.dumps(config))
    argv = argv_reading(scenario, name, argument, folder)
    before = files_of(tmp_path)
    result = outcome(name, argv)
    assert result.one_line, result
    assert f"{folder / 'config.json'} holds or looks like a Hub token at key '{key}'" in result.error
    assert SECRET not in result.error and SHAPED not in result.error
    assert files_of(tmp_path) == before


@pytest.mark.parametrize("name, argument", MODEL_FOLDER_READERS)
@pytest.mark.parametrize("token", [SECRET, SHAPED])
def test_a_model_folder_whose_path_holds_a_token_is_refused_by_every_reader_naming_the_argument(
    name, argument, token, tmp_path, logged_in, monkeypatch
):
    """`convert --to transformers --input W/m-TOKEN --output cv` (before: refused only after loading, converting and
    the parity check, sent to "its config.json labels"), and every other reader of a model folder: one line naming
    the argument, before the folder is read; the token never echoed."""
    from modeling_vit_scratch.common import model_folder

    scenario = Scenario(tmp_path)
    folder = tmp_path / f"m-{token}"
    shutil.copytree(scenario.model(), folder)
    monkeypatch.setattr(model_folder, "check_processor_fits", lambda *a, **k: pytest.fail("the folder was read"))
    argv = argv_reading(scenario, name, argument, folder)
    before = files_of(tmp_path)
    result = outcome(name, argv)
    assert result.one_line, result
    assert result.error.startswith(f"error: The value of {argument or 'FOLDER'} holds or looks like a Hub token")
    assert token not in result.error
    assert files_of(tmp_path) == before


@pytest.mark.parametrize("name, argument", [("explain", "--image"), ("train", "RECIPE")])
def test_an_input_file_whose_path_holds_a_token_is_refused_naming_the_argument(name, argument, tmp_path, logged_in):
    """The other files a command reads by path: explain's picture, train's recipe (before: explained, and trained,
    with the token-shaped name in their lines and records)."""
    scenario = Scenario(tmp_path)
    argv = scenario.argv(name)
    if argument == "--image":
        picture = tmp_path / f"p-{SHAPED}.png"
        shutil.copy(scenario.picture(), picture)
        argv = with_argument(argv, "--image", picture)
    else:
        recipe = tmp_path / f"r-{SHAPED}.json"
        recipe.write_text(json.dumps({"num_train_epochs": 1}))
        argv = [str(recipe), *argv]
    before = files_of(tmp_path)
    result = outcome(name, argv)
    assert result.one_line, result
    assert result.error.startswith(f"error: The value of {argument} holds or looks like a Hub token"), result.error
    assert SHAPED not in result.error and files_of(tmp_path) == before


@pytest.mark.parametrize(
    "kind, fix",
    [
        ("a signed URL", "remove the token from the URL of --image (a signed URL: download the file and give --image"),
        ("the file's name", "rename the file, or give --image a path that does not hold the token"),
        ("a folder above", "give --image a path without it: rename the folder, or give it by a path that does not"),
    ],
)
def test_a_token_in_a_read_path_or_url_is_refused_with_the_fix_of_its_kind(kind, fix, tmp_path, logged_in):
    """explain --image takes a path or a URL: a token in a URL's query is no folder to rename."""
    scenario = Scenario(tmp_path)
    argv = scenario.argv("explain")
    image = {
        "a signed URL": f"http://host/a.png?sig={SECRET}",
        "the file's name": tmp_path / f"p-{SECRET}.png",
        "a folder above": tmp_path / f"d-{SECRET}" / "p.png",
    }[kind]
    if not isinstance(image, str):
        image.parent.mkdir(exist_ok=True)
        shutil.copy(scenario.picture(), image)
    argv = with_argument(argv, "--image", image)
    before = files_of(tmp_path)
    result = outcome("explain", argv)
    assert result.one_line, result
    assert result.error.startswith("error: The value of --image holds or looks like a Hub token"), result.error
    assert fix in result.error and SECRET not in result.error and files_of(tmp_path) == before


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16-le"])
def test_the_staged_file_scan_finds_a_token_shaped_string_it_was_not_told(encoding, tmp_path):
    """What push, train and convert scan before a folder is sent or written (`find_secrets`) lists a file holding
    anything shaped like a Hub token, known or not, as text or UTF-16; a file with a shorter `hf_` word is not."""
    (tmp_path / "card.md").write_bytes(f"labels: y-{SHAPED}".encode(encoding))
    (tmp_path / "clean.md").write_bytes("hf_short and hf_transfer".encode(encoding))
    assert find_secrets(tmp_path, [SECRET]) == [tmp_path / "card.md"]


def png_holding(path: Path, how: str) -> None:
    """A picture whose text chunk holds SECRET: plain (tEXt), zlib-compressed (zTXt), or international (iTXt)."""
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    if how == "iTXt compressed":
        info.add_itxt("Comment", f"made with {SECRET}", lang="en", tkey="Kommentar", zip=True)
    else:
        info.add_text("Comment", f"made with {SECRET}", zip=how == "zTXt")
    Image.new("RGB", (4, 4)).save(path, pnginfo=info)


@pytest.mark.parametrize("how", ["tEXt", "zTXt", "iTXt compressed"])
def test_the_staged_file_scan_reads_a_pictures_compressed_text(how, tmp_path):
    """What push and train scan before a folder is sent or written (`find_secrets`) reads a PNG's text chunks as
    PIL gives them, decompressed; a clean picture and a file that only looks like a PNG are not listed."""
    from PIL import Image

    png_holding(tmp_path / "figure.png", how)
    Image.new("RGB", (4, 4)).save(tmp_path / "clean.png")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    assert find_secrets(tmp_path, [SECRET]) == [tmp_path / "figure.png"]


@pytest.mark.parametrize(
    "source, fix",
    [
        (
            "given",
            "the token given with --hub_token: give a valid one, or leave it out to use HF_TOKEN or the saved login.",
        ),
        (
            "HF_TOKEN",
            (
                "the token is HF_TOKEN's, which wins over a saved login: unset HF_TOKEN (to use the saved login) "
                "or set it to a valid token."
            ),
        ),
        ("saved login", "the token is the saved login's: log in again with `hf auth login`, or set a valid HF_TOKEN."),
    ],
)
def test_a_refused_token_line_names_where_the_token_came_from(source, fix, tmp_path, monkeypatch):
    """A stale HF_TOKEN beside a valid saved login: the 401 line says HF_TOKEN wins and how to fix it."""
    from types import SimpleNamespace

    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    from modeling_vit_scratch.sharing import hub_arguments

    for name in TOKEN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    login = tmp_path / "login" / "token"
    login.parent.mkdir()
    login.write_text(SECRET)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(login))
    if source == "HF_TOKEN":
        monkeypatch.setenv("HF_TOKEN", "hf_StaleTokenOfThisUser0123456789abcdef")

    def refuse(self):
        response = SimpleNamespace(status_code=401, headers={}, request=None)  # what the error reads of a response
        raise HfHubHTTPError("Invalid credentials", response=response)

    monkeypatch.setattr(HfApi, "whoami", refuse)
    names = hub_arguments.TRAIN if source == "given" else hub_arguments.PUSH
    with pytest.raises(ValueError, match="does not accept the token") as refused:
        hub_arguments.check_access("not-the-token-of-anyone" if source == "given" else None, [SECRET], names)
    assert str(refused.value).endswith(fix)


def png_hiding(path: Path, where: str, text: str) -> None:
    """A picture that holds `text` only where a reader decodes it, never in its raw bytes: the zlib-compressed ICC
    profile (iCCP), EXIF (eXIf, as UTF-16), a private chunk's zlib stream."""
    import struct
    import zlib

    from PIL import Image

    image = Image.new("RGB", (4, 4))
    if where == "iCCP":
        image.save(path, icc_profile=f"desc: {text} ".encode())
    elif where == "eXIf UTF-16":
        exif = image.getexif()
        exif[0x9C9C] = f"made with {text}".encode("utf-16-le")  # XPComment, as Windows writes it
        image.save(path, exif=exif)
    elif where == "private chunk":
        image.save(path)
        body = b"note\0\0" + zlib.compress(text.encode())
        chunk = struct.pack(">I4s", len(body), b"prVt") + body + struct.pack(">I", zlib.crc32(b"prVt" + body))
        data = path.read_bytes()
        path.write_bytes(data[:33] + chunk + data[33:])  # after IHDR
    assert text.encode() not in path.read_bytes()


HIDING_PLACES = ["iCCP", "eXIf UTF-16", "private chunk"]


@pytest.mark.parametrize("where", HIDING_PLACES)
def test_the_staged_file_scan_reads_every_part_of_a_picture_a_reader_decodes(where, tmp_path):
    """`find_secrets` reads what a reader decodes from a picture (every zlib stream of a PNG, the metadata PIL
    gives), by its format; a clean picture with the same parts is not listed."""
    png_hiding(tmp_path / "figure.png", where, SHAPED)
    png_hiding(tmp_path / "clean.png", where, "nothing to see here, a plain note")
    assert find_secrets(tmp_path, []) == [tmp_path / "figure.png"]


def test_a_push_of_a_figure_hiding_a_token_is_refused_naming_the_file(tmp_path, logged_in, monkeypatch):
    """`push m1 local-user/x` with a token in training_curves.png's ICC profile (zlib-compressed: its bytes hold no
    token; before: pushed, and the Hub's copy gave it back to `Image.open(...).info['icc_profile']`): refused before
    the repo is asked for, naming the file. The Hub arguments are taken as the Hub would accept them (this process
    is offline)."""
    from types import SimpleNamespace

    from test_push_card import trained_folder

    from modeling_vit_scratch.sharing import push

    accepted = SimpleNamespace(repo_id="local-user/x", revision=None, max_shard_size="2GB")
    monkeypatch.setattr(push, "check_hub_arguments", lambda *args, **kwargs: accepted)
    monkeypatch.setattr(push.HfApi, "repo_exists", lambda *args, **kwargs: pytest.fail("the Hub was asked"))
    folder = trained_folder(tmp_path)
    png_hiding(folder / "training_curves.png", "iCCP", SECRET)
    result = outcome("push", [str(folder), "local-user/x"])
    assert result.one_line, result
    assert result.error.startswith(f"error: A Hub token is in {folder / 'training_curves.png'} (as staged for upload")
    assert SECRET not in result.error
