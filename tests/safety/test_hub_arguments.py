"""Every Hub argument of a push (repo id, revision, shard size, commit message, credentials) is checked by one
function, `sharing.hub_arguments.check_hub_arguments`, before anything loads or trains and before any repo is created,
for `vit-scratch push` and `train --push_to_hub` alike. What a push finds on the repo is said: an earlier model's
weights (of any format) and results are removed in its commit, other files kept, a README.md it did not write kept
unless --overwrite_card; the default commit title names the folder's resolved name (`push .`).

Refusals before any request run in this process (offline); pushes against the local Hub run in one new process."""

import json
import re
from types import SimpleNamespace

import pytest
from entry_points import MODEL_FOLDER_READERS, Scenario, hub_repo, outcome, with_argument
from helpers import REPO
from hub_server import LocalHub
from hypothesis import given
from hypothesis import strategies as st
from test_secrets import logged_in  # noqa: F401 (a fixture: HF_TOKEN holds a token, no saved login)

from modeling_vit_scratch.common.secrets import redact
from modeling_vit_scratch.common.sources import check_hub_endpoint
from modeling_vit_scratch.sharing import hub_arguments, push
from modeling_vit_scratch.sharing.hub_arguments import PUSH, check_revision
from modeling_vit_scratch.sharing.push import model_card_text, written_by_push

# where each command takes a Hub argument: {argument: (push's option, train's option)}
OPTIONS = {"revision": ("--revision", "--hub_revision"), "repo id": (None, "--hub_model_id")}


def fail_if_reached(*args, **kwargs):
    raise AssertionError("the command went on past what it should refuse")


@pytest.fixture
def nothing_loaded(monkeypatch):
    """Loading the pushed folder, building the model to train, or asking the Hub anything fails the test."""
    monkeypatch.setattr(push, "load_verified", fail_if_reached)
    monkeypatch.setattr("modeling_vit_scratch.training.trainer.build_model", fail_if_reached)
    monkeypatch.setattr(hub_arguments, "check_access", fail_if_reached)


def with_hub_argument(scenario: Scenario, name: str, argument: str, value: str) -> list[str]:
    """The scenario's working line of `name` (train with --push_to_hub), with a Hub argument set to `value`."""
    argv = scenario.argv(name)
    push_option, train_option = OPTIONS[argument]
    if name == "push":
        return [argv[0], value, *argv[2:]] if push_option is None else [*argv, push_option, value]
    argv = with_argument([*argv, "--push_to_hub", "true"], "--hub_model_id", "local-user/x")
    return with_argument(argv, train_option, value)


BAD = [
    ("revision", "../../x", "is not a branch name or refs/pr/N (it holds '..')"),
    ("revision", "refs/tags/v1", "is not a branch name or refs/pr/N (a push goes to a branch (NAME or refs/heads/"),
    ("revision", "refs/heads/a..b", "is not a branch name or refs/pr/N (it holds '..')"),
    ("revision", "a b", "is not a branch name or refs/pr/N (it holds a space, which git refuses"),
    ("revision", "exp.lock", "is not a branch name or refs/pr/N (a part of it ends in '.lock')"),
    ("revision", "f" * 40, "is a commit id"),
    ("revision", "{{x}}", "is not a branch name or refs/pr/N (it holds the character '{', which the Hub refuses"),
    ("repo id", "someone/a/b", "is not valid"),
    ("repo id", "bad name!", "is not valid"),
]


@pytest.mark.usefixtures("logged_in", "nothing_loaded")
@pytest.mark.parametrize("name", ["push", "train"])
@pytest.mark.parametrize("argument, value, said", BAD, ids=[f"{a}={v}" for a, v, _ in BAD])
def test_a_bad_hub_argument_is_one_line_before_any_load_or_request(name, argument, value, said, tmp_path):
    result = outcome(name, with_hub_argument(Scenario(tmp_path), name, argument, value))
    assert result.one_line, result
    assert value in result.error and said in result.error
    assert not (tmp_path / "out-train").exists()


@pytest.mark.usefixtures("logged_in", "nothing_loaded")
@pytest.mark.parametrize("size", ["abc", "0", "-1GB", "2XB", ""])
def test_a_shard_size_that_is_no_size_is_one_line_before_any_load(size, tmp_path):
    result = outcome("push", [*Scenario(tmp_path).argv("push"), f"--max_shard_size={size}"])
    if not size:  # empty, as every command's text arguments (common/blank.py)
        assert result.one_line and result.error.startswith("error: --max_shard_size is empty (''): give it"), result
        return
    assert result.error == (
        f"error: --max_shard_size {size!r} is not a size: give a positive number of bytes or one with a unit, e.g. "
        "500MB or 2GB."
    )


@pytest.mark.usefixtures("logged_in", "nothing_loaded")
@pytest.mark.parametrize("message", ["", "   \n  ", "\t"])
def test_a_blank_commit_message_is_one_line_before_any_load_or_request(message, tmp_path):
    result = outcome("push", [*Scenario(tmp_path).argv("push"), f"--commit_message={message}"])
    # the rule of every empty text argument (checked as the arguments are read) names it and its default
    assert result.one_line and result.error.startswith("error: --commit_message is empty ("), result
    assert "or leave out --commit_message for its default;" in result.error


def test_a_blank_commit_message_reaching_the_hub_check_is_one_line_naming_the_default_title():
    from modeling_vit_scratch.sharing.hub_arguments import check_hub_arguments

    with pytest.raises(ValueError) as refused:  # push() called from Python: no argument parser before it
        check_hub_arguments("local-user/model", commit_message=" \n ")
    assert str(refused.value) == (
        "--commit_message is blank (empty, or only spaces and line breaks), and a commit needs a title: give a "
        "message, or leave out --commit_message for the default title (Upload vit_scratch model from FOLDER)."
    )


@pytest.mark.usefixtures("logged_in", "nothing_loaded")
@pytest.mark.parametrize(
    ("message", "said"),
    [
        ("first\x1b[31m red\nline2", "\\x1b at position 6"),
        ("a\rb", "\\r at position 2"),
        ("x \u202e y", "\\u202e at position 3"),
    ],
)
def test_a_commit_message_holding_a_control_character_is_one_line_before_any_load(message, said, tmp_path):
    """A commit message is kept in the repo's history, and a clone's git log sends it to a terminal raw: an escape
    sequence, a carriage return or a bidi override in it (before: sent as typed) is one line naming it, escaped."""
    result = outcome("push", [*Scenario(tmp_path).argv("push"), "--commit_message", message])
    assert result.one_line, result
    assert result.error.startswith(f"error: --commit_message holds the control character {said}, "), result.error
    assert "\x1b" not in result.error and "\r" not in result.error


def test_a_commit_message_of_a_title_and_a_body_keeps_its_line_breaks():
    from modeling_vit_scratch.sharing.hub_arguments import check_message_characters

    check_message_characters("Fine-tuned on my photos\n\nSecond run, lower learning rate.")
    check_message_characters(None)


@pytest.mark.usefixtures("logged_in")
def test_a_push_without_a_token_is_one_line_before_any_load(tmp_path, monkeypatch):
    monkeypatch.setattr(push, "load_verified", fail_if_reached)
    monkeypatch.delenv("HF_TOKEN")
    result = outcome("push", Scenario(tmp_path).argv("push"))
    assert result.error == (
        "error: A push needs a Hub token and none was found: log in with `hf auth login` or set HF_TOKEN."
    )


def pushing_argv(scenario: Scenario, command: str) -> list[str]:
    """A working command line of `push`, or of `train` with --push_to_hub true."""
    argv = scenario.argv(command)
    return argv + ["--push_to_hub", "true", "--hub_model_id", "local-user/x"] if command == "train" else argv


@pytest.mark.usefixtures("logged_in")
@pytest.mark.parametrize("value, held", [("", "empty"), (" \t", "only whitespace")])
@pytest.mark.parametrize("command", ["push", "train"])
def test_a_blank_token_variable_or_hub_token_is_named_as_blank_not_as_missing(
    tmp_path, monkeypatch, value, held, command
):
    monkeypatch.setattr(push, "load_verified", fail_if_reached)
    monkeypatch.setenv("HF_TOKEN", value)  # set, but no token: huggingface_hub reads it as none
    argv = pushing_argv(Scenario(tmp_path), command)
    result = outcome(command, argv)
    assert result.one_line, result
    assert f"none was found: HF_TOKEN is set but {held}, which gives no token: unset it (`unset HF_TOKEN`) or set " in (
        result.error
    )
    if command == "train":
        monkeypatch.delenv("HF_TOKEN")
        given = outcome(command, argv + ["--hub_token", value])
        assert given.error.startswith(f"error: --push_to_hub true: --hub_token is {held}, which is no token: give a ")
        assert not (tmp_path / "out-train").exists()


class PublicRepos:
    """A Hub client on which every repo exists and is public."""

    def __init__(self, token=None):
        pass

    def repo_info(self, repo_id, **kwargs):
        return SimpleNamespace(id=repo_id, private=False)


@pytest.mark.usefixtures("logged_in")
@pytest.mark.parametrize(
    "name, option", [("push", ["--private"]), ("train", ["--hub_private_repo", "true"])], ids=["push", "train"]
)
def test_a_private_push_to_a_public_repo_is_one_line_before_any_load(name, option, tmp_path, monkeypatch):
    monkeypatch.setattr(push, "load_verified", fail_if_reached)
    monkeypatch.setattr("modeling_vit_scratch.training.trainer.build_model", fail_if_reached)
    monkeypatch.setattr(hub_arguments, "check_access", lambda *args: None)
    monkeypatch.setattr(hub_arguments, "HfApi", PublicRepos)
    scenario = Scenario(tmp_path)
    argv = scenario.argv(name) + (
        ["--push_to_hub", "true", "--hub_model_id", "local-user/x"] if name == "train" else []
    )
    result = outcome(name, [*argv, *option])
    repo_id = "local-user/x" if name == "train" else "local-user/scenario"
    lead = "--push_to_hub true: " if name == "train" else ""
    assert result.error == (
        f"error: {lead}{' '.join(option)}: {repo_id} exists and is public, so the push would publish the model: make "
        f"the repo private on the Hub first (its settings page), push to a new repo id, or leave out {option[0]}."
    )
    assert not (tmp_path / "out-train").exists()


@given(st.from_regex(r"[A-Za-z0-9_-]{1,30}(/[A-Za-z0-9_-]{1,10})?", fullmatch=True))
def test_a_plain_branch_name_is_accepted_and_its_full_ref_is_that_branch(branch):
    if not re.fullmatch(r"[0-9a-fA-F]{40}", branch):
        assert check_revision(branch, False, PUSH) == branch
        assert check_revision(f"refs/heads/{branch}", False, PUSH) == branch


WHY_NOT_A_BRANCH = [
    ("refs/heads/", "refs/heads/ names no branch"),
    ("refs/remotes/origin/x", "a push goes to a branch (NAME or refs/heads/NAME) or a pull request (refs/pr/N), not"),
    ("refs/pr/x", "a push goes to a branch (NAME or refs/heads/NAME) or a pull request (refs/pr/N), not"),
    ("x/.hidden", "a part of it starts with '.'"),
    ("x//y", "it has an empty part ('//')"),
    ("/x", "it starts with '/'"),
    ("x/", "it ends with '/'"),
    ("x.", "it ends with '.'"),
    ("x@{1}", "it holds '@{'"),
    ("@", "it is '@', which git reads as HEAD"),
    ("HEAD", "it is 'HEAD', which git reads as the current commit, never as a branch"),
    ("x~1", "it holds the character '~', which git refuses in a branch name"),
    ("x\ty", "it holds the character '\\t', which git refuses in a branch name"),
    ("{{x}}", "it holds the character '{', which the Hub refuses in a branch name: letters, digits, '.', '_', '-'"),
    ("exp+1", "it holds the character '+', which the Hub refuses in a branch name"),
    ("café", "it holds the character 'é', which the Hub refuses in a branch name"),
]


@pytest.mark.parametrize("revision, why", WHY_NOT_A_BRANCH, ids=[r for r, _ in WHY_NOT_A_BRANCH])
def test_a_refused_revision_is_told_the_rule_it_breaks(revision, why):
    with pytest.raises(ValueError) as refused:
        check_revision(revision, False, PUSH)
    assert str(refused.value).startswith(f"--revision {revision!r} is not a branch name or refs/pr/N ({why}")
    assert str(refused.value).endswith("): give one like experiment-1, or leave it out for main.")


@pytest.mark.usefixtures("logged_in")
def test_a_bare_repo_name_is_in_the_namespace_of_the_token_s_owner(monkeypatch):
    """As the Hub and huggingface_hub's `get_full_repo_name` read it; a full id is kept as given."""
    monkeypatch.setattr(hub_arguments, "check_access", lambda *args: "someone")
    checked = hub_arguments.check_hub_arguments("plain", revision="refs/heads/dev")
    assert checked == hub_arguments.HubTarget("someone/plain", "dev", 2 * 10**9)
    assert hub_arguments.check_hub_arguments("org/plain").repo_id == "org/plain"


@pytest.mark.usefixtures("logged_in", "nothing_loaded")
@pytest.mark.parametrize("name", ["push", "train"])
def test_a_bare_repo_name_whose_owner_is_unknown_is_one_line_before_any_load(name, tmp_path, monkeypatch):
    monkeypatch.setattr(hub_arguments, "check_access", lambda *args: None)  # a Hub whose whoami names nobody
    scenario = Scenario(tmp_path)
    if name == "push":
        argv, lead, fix = [str(scenario.model()), "plain"], "The repo id 'plain'", "e.g. your-name/plain"
    else:  # no --hub_model_id: the output folder's name
        argv = [*scenario.argv("train"), "--push_to_hub", "true"]
        lead, fix = "--push_to_hub true: the repo id 'out-train'", "--hub_model_id your-name/out-train"
    result = outcome(name, argv)
    assert result.error == (
        f"error: {lead} names no owner, and the Hub did not say whose the token is: give the repo id as "
        f"owner/name{':' if name == 'train' else ','} {fix}."
    )
    assert not (tmp_path / "out-train").exists()


@pytest.mark.integration
def test_a_push_to_a_bare_name_and_a_full_branch_ref_goes_to_owner_name_on_that_branch(tmp_path):
    """`vit-scratch push FOLDER plain --revision refs/heads/dev` against the local Hub: the repo is the token owner's
    `local-user/plain`, the branch `dev`, and every line printed names them."""
    model = Scenario(tmp_path).model()
    with LocalHub(tmp_path / "hub") as hub:
        done = hub.run(
            "-m",
            "modeling_vit_scratch.cli",
            "push",
            model,
            "plain",
            "--revision",
            "refs/heads/dev",
            hf_home=tmp_path / "hf_home",
            env={"PYTHONPATH": str(REPO)},
        )
        assert done.returncode == 0, done.stderr[-3000:]
        branch = hub.files("local-user/plain", "dev")
        unknown = hub.unknown_routes
    assert f"repo: {hub.url}/local-user/plain\n" in done.stdout
    assert "README.md: the generated model card" in done.stdout and "model.safetensors" in branch
    assert unknown == []  # no request named a repo without its owner


@given(
    st.text(st.characters(codec="ascii", exclude_characters="\x00"), max_size=8),
    st.sampled_from(["..", "/.", " ", "~", "^", ":", "?", "*", "[", "\\", "@{", "//"]),
    st.text(st.characters(codec="ascii", exclude_characters="\x00"), max_size=8),
)
def test_a_revision_git_would_refuse_is_refused(before, bad, after):
    revision = f"{before}{bad}{after}"
    with pytest.raises(ValueError, match="is not a branch name or refs/pr/N|is a commit id"):
        check_revision(revision, False, PUSH)


def test_a_card_is_ours_until_edited(config):
    card = model_card_text(config, {}, {}, True, "local-user/x", None, None, []).encode()
    assert written_by_push(card)
    assert not written_by_push(card.replace(b"Vision Transformer", b"Vision transformer", 1))
    assert not written_by_push(b"# My model\n\nWritten by hand.\n")


# Run with `python -c`: JSON [[folder, repo_id, {push_to_hub keyword arguments}], ...], then the folder to run in;
# prints a JSON list of {"notes", "commit"} or {"error"} per push.
PUSHES = """
import json, os, sys
from modeling_vit_scratch.sharing.push import push_to_hub
os.chdir(sys.argv[2])  # once imported: the folder's own modeling_vit_scratch.py would shadow the package
outcomes = []
for folder, repo_id, kwargs in json.loads(sys.argv[1]):
    try:
        result = push_to_hub(folder, repo_id, **kwargs)
        outcomes.append(dict(notes=result.notes, commit=result.commit_id))
    except (ValueError, RuntimeError) as error:
        outcomes.append(dict(error=str(error)))
print(json.dumps(outcomes))
"""


@pytest.mark.integration
def test_what_a_push_finds_on_the_repo_is_said_and_bad_arguments_create_nothing(tmp_path):
    """One process, against the local Hub: a missing pull request and a refused token create no repo; a private push
    to the public repo is refused and commits nothing; a repo
    holding a user's README.md, pickle weights, an earlier model's results and notes keeps the README and the notes,
    loses the weights and results in the model commit, and says so; --overwrite_card replaces the README; `push .`
    titles its commit with the folder's name."""
    scenario = Scenario(tmp_path)
    model = scenario.model()
    for not_model in ("notes.txt", ".env"):  # in the pushed folder: not sent, and said
        (model / not_model).write_text("x")
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    user_card = "# My model\n\nA card I wrote myself.\n"
    files = {"README.md": user_card, "pytorch_model.bin": "old weights", "eval_results.json": "{}", "notes.md": "x"}
    for file_name, text in files.items():
        (earlier / file_name).write_text(text)
    with LocalHub(tmp_path / "hub") as hub:
        hub_repo(hub, "local-user/used", earlier)
        calls = [
            [str(model), "local-user/used", {"private": True}],
            [str(model), "local-user/pr", {"revision": "refs/pr/999"}],
            [str(model), "local-user/bad-token", {"token": "hf_not_the_token_of_anyone_0123456789"}],
            [".", "local-user/used", {}],
            [".", "local-user/used", {"overwrite_card": True}],
        ]
        done = hub.run(
            "-c", PUSHES, json.dumps(calls), model, hf_home=tmp_path / "hf_home", env={"PYTHONPATH": str(REPO)}
        )
        assert done.returncode == 0, done.stderr[-3000:]
        private, pr, bad_token, kept, replaced = json.loads(done.stdout.splitlines()[-1])
        files_after_first = hub.files("local-user/used", kept["commit"])
        final = hub.files("local-user/used")
        titles = [title for _, title in hub.commits("local-user/used")]
        created = [repo for repo in ("local-user/pr", "local-user/bad-token") if hub.repo_exists(repo)]
        still_public = not hub.private("local-user/used")
    assert private["error"].startswith("--private: local-user/used exists and is public, so the push would publish")
    assert still_public
    assert pr["error"].startswith("--revision refs/pr/999: local-user/pr has no such pull request")
    assert bad_token["error"].startswith(f"The Hub at {hub.url} does not accept the token (HTTP 401")
    assert created == []
    removed = (
        "Removed from local-user/used in the model commit (its history keeps them): eval_results.json, "
        "pytorch_model.bin, an earlier model's weights or results, which would be read instead of, or beside, the new "
        "ones."
    )
    card_kept = (
        "Kept README.md on local-user/used: a card vit-scratch did not write, or edited since; its loading example is "
        "not pinned to the new weights. Pass --overwrite_card (Python: overwrite_card=True) to replace it with the "
        "generated card."
    )
    left_out = f"Not sent (not part of the model): .env, notes.txt, in {model.resolve()}."
    assert kept["notes"] == [
        left_out,
        removed,
        "Kept on local-user/used, not written by vit-scratch: notes.md.",
        card_kept,
    ]
    assert replaced["notes"][0] == left_out
    assert files_after_first["README.md"].decode() == user_card and "pytorch_model.bin" not in files_after_first
    assert files_after_first["notes.md"] == b"x" and "eval_results.json" not in files_after_first
    assert "notes.txt" not in final and ".env" not in final
    # a commit id is printed in full: a short one is no revision the Hub (or explain, convert) takes
    assert re.fullmatch(
        r"README\.md: the generated model card, its loading example pinned to [0-9a-f]{40}\.", replaced["notes"][-1]
    )
    assert written_by_push(final["README.md"]) and final["notes.md"] == b"x"
    assert titles.count(f"Upload vit_scratch model from {model.name}") == 1  # the refused private push made none


# every argument that takes a Hub repo id: (command, argument; None: push's repo id), and how its line names it
REPO_ID_ARGUMENTS = [
    ("push", None, "The repo id"),
    ("train", "--hub_model_id", "--push_to_hub true: the repo id"),
    ("train", "--model", "--model"),
    ("train", "--teacher", "--teacher"),
    ("explain", "--model", "--model"),
    ("convert", "--input", "--input"),
]


def with_repo_id(scenario: Scenario, name: str, argument: str | None, value: str) -> list[str]:
    """The scenario's working line of `name` with the repo id `argument` (None: push's REPO) set to `value`."""
    argv = scenario.argv(name)
    if argument is None:
        argv[1] = value
    else:
        argv = with_argument(argv, argument, value)
    if argument == "--hub_model_id":
        argv = with_argument(argv, "--push_to_hub", "true")
    return argv


@pytest.mark.parametrize(("name", "argument", "named"), REPO_ID_ARGUMENTS)
@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("https://huggingface.co/someone/model", "is the Hub URL of a repo: give its id, someone/model"),
        ("hf.co/someone/model", "is the Hub URL of a repo: give its id, someone/model"),
        ("https://example.com/someone/model", "is a URL of example.com, not a Hub repo id: give the repo id"),
    ],
)
def test_a_url_given_as_a_repo_id_is_one_line_giving_the_id(tmp_path, name, argument, named, url, says, nothing_loaded):
    done = outcome(name, with_repo_id(Scenario(tmp_path), name, argument, url))
    assert done.one_line, done
    assert done.error.startswith(f"error: {named} {url!r} {says}"), done.error


# a repo id as a hand mistypes it -> what the line says is wrong (every one of them means local-user/m1)
MISTYPED_IDS = [
    ("local-user/m1/", "it ends with '/'"),
    ("local-user//m1", "it has an empty part ('//')"),
    (" local-user/m1", "it has spaces around it"),
    ("local-user/m1.git", "it ends in '.git'"),
]


@pytest.mark.usefixtures("logged_in", "nothing_loaded")
@pytest.mark.parametrize(("name", "argument", "named"), REPO_ID_ARGUMENTS)
@pytest.mark.parametrize("value, said", MISTYPED_IDS, ids=[v for v, _ in MISTYPED_IDS])
def test_a_mistyped_repo_id_is_one_line_in_our_words_naming_the_id_meant(name, argument, named, value, said, tmp_path):
    """One check (common/sources.py `check_repo_id`, `path_or_id_fix` where the value reads as a path) for every
    argument that takes a repo id: what is wrong in our words, never huggingface_hub's (which names a `repo_type`
    argument no command has), and the id to give."""
    result = outcome(name, with_repo_id(Scenario(tmp_path), name, argument, value))
    assert result.one_line, result
    assert repr(value) in result.error and said in result.error and "give local-user/m1" in result.error, result
    assert "repo_type" not in result.error
    assert not (tmp_path / "out-train").exists()


@pytest.mark.parametrize(
    "value, problem",
    [
        ("local user/m1", "it holds a space, and a repo id holds letters, digits, '-', '_' and '.' only"),
        ("a--b/m1", "it holds '--'"),
        ("a/b/c", "it has 3 parts, and a repo id has two, owner/name"),
        ("-a/b", "a part of it starts or ends with '-' or '.'"),
        ("a/" + "x" * 97, "a part of it is longer than 96 characters"),
        ("local-user/m1", None),
        ("m1", None),
    ],
)
def test_a_repo_id_is_judged_in_our_words(value, problem):
    from modeling_vit_scratch.common.sources import meant_repo_id, repo_id_problem

    assert repo_id_problem(value) == problem
    assert meant_repo_id(value) is None  # nothing plain is meant: the command's own fix is given


def test_a_url_given_as_a_repo_id_is_never_echoed_with_its_password():
    from modeling_vit_scratch.common.sources import check_not_url

    with pytest.raises(ValueError) as refused:
        check_not_url("https://me:s3cret@huggingface.co/someone/model", "--model")
    assert str(refused.value) == (
        "--model 'https://huggingface.co/someone/model' is the Hub URL of a repo: give its id, someone/model."
    )


@pytest.mark.usefixtures("logged_in", "nothing_loaded")
@pytest.mark.parametrize(("name", "argument", "named"), REPO_ID_ARGUMENTS)
@pytest.mark.parametrize("userinfo", ["alice:Sup3rS3cretPw@", "Sup3rS3cretPw@"])
def test_an_endpoint_with_a_user_name_or_password_is_one_line_before_any_request(
    name, argument, named, userinfo, tmp_path, monkeypatch
):
    """HF_ENDPOINT=http://user:password@host would send the password with every request and blame the token when
    the Hub refuses it: every command that would reach the Hub refuses it first, the password never shown."""
    monkeypatch.setenv("HF_ENDPOINT", f"http://{userinfo}127.0.0.1:9")
    done = outcome(name, with_repo_id(Scenario(tmp_path), name, argument, "local-user/m1"))
    assert done.one_line, done
    assert done.error == (
        "error: HF_ENDPOINT http://***@127.0.0.1:9 carries a user name or password: the Hub takes the token from "
        "HF_TOKEN or `hf auth login`; remove them from HF_ENDPOINT."
    )
    assert not (tmp_path / "out-train").exists()


@pytest.mark.parametrize("url", ["http://alice:pw@host:9/api", "https://pw@host/x?y", "ftp://a:b@c"])
def test_a_printed_url_never_shows_its_user_name_or_password(url):
    """The one redaction every printed line goes through masks a URL's user name and password, and only them."""
    shown = redact(f"The Hub at {url} cannot be reached", [])
    assert "@" in shown and shown.split("://", 1)[1].startswith("***@") and url.split("@", 1)[1] in shown


@pytest.mark.parametrize(
    "endpoint, shown",
    [
        ("", ""),
        ("localhost:8000", "localhost:8000"),
        ("ftp://u:pw@h?t=1", "ftp://***@h?***"),
        ("u:pw@localhost:8000", "***@localhost:8000"),
    ],
)
@pytest.mark.parametrize("command", ["train --dataset", "train --model", "explain", "convert", "push"])
def test_an_hf_endpoint_that_is_no_url_is_one_line_naming_it_before_any_hub_call(
    tmp_path, monkeypatch, command, endpoint, shown
):
    """HF_ENDPOINT is checked once, before any Hub call, by every command that reaches the Hub; a password or query
    in it is never echoed."""
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    scenario = Scenario(tmp_path)
    name, _, argument = command.partition(" ")
    argv = {
        "push": [str(scenario.model()), "someone/model"],
        "convert": ["--from", "transformers", "--input", "someone/model", "--output", str(tmp_path / "out-convert")],
    }.get(name) or with_argument(scenario.argv(name), argument or "--model", "someone/model")
    result = outcome(name, argv)
    assert result.one_line, result
    assert result.error.startswith(f"error: HF_ENDPOINT is {shown!r}, which is no http(s) URL with a host"), result
    assert "pw" not in result.error and "t=1" not in result.error
    assert not any(path.name.startswith("out-") for path in tmp_path.iterdir())


@pytest.mark.parametrize(
    "endpoint, error",
    [
        (
            "  http://127.0.0.1:9",
            (
                "HF_ENDPOINT '  http://127.0.0.1:9' has spaces around it, which the HTTP client does not strip: set it "
                "without them (HF_ENDPOINT=http://127.0.0.1:9)."
            ),
        ),
        (
            "http://127.0.0.1:9/api",
            (
                "HF_ENDPOINT http://127.0.0.1:9/api holds the path /api, which huggingface_hub adds to it itself (it would "
                "ask http://127.0.0.1:9/api/api/...): set it to the address without it (HF_ENDPOINT=http://127.0.0.1:9)."
            ),
        ),
        (
            "https://h/mirror/api/models/",
            (
                "HF_ENDPOINT https://h/mirror/api/models/ holds the path /api, which huggingface_hub adds to it itself (it "
                "would ask https://h/mirror/api/models/api/...): set it to the address without it "
                "(HF_ENDPOINT=https://h/mirror)."
            ),
        ),
        (
            "http://127.0.0.1:9#frag",
            (
                "HF_ENDPOINT holds a query or fragment ('?...' or '#...'), before which huggingface_hub would add the "
                "paths it asks: set it to the address alone (HF_ENDPOINT=http://127.0.0.1:9)."
            ),
        ),
        (
            "https://h/mirror?t=secret",
            (
                "HF_ENDPOINT holds a query or fragment ('?...' or '#...'), before which huggingface_hub would add the "
                "paths it asks: set it to the address alone (HF_ENDPOINT=https://h/mirror)."
            ),
        ),
    ],
    ids=["spaces", "api", "api-inside", "fragment", "query"],
)
def test_an_hf_endpoint_with_spaces_or_the_api_path_is_one_line_with_the_value_to_set(monkeypatch, endpoint, error):
    """Spaces around HF_ENDPOINT reach the HTTP client as they are, and a path ending in /api (or holding /api/)
    doubles the /api/ huggingface_hub adds: both read as the network's fault, so both are refused by the one check,
    with the value to set. Other paths stay allowed (a mirror may sit under one)."""
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    with pytest.raises(ValueError) as refused:
        check_hub_endpoint()
    assert str(refused.value) == error
    for allowed in ("https://h/mirror", "http://127.0.0.1:9/apis/", "https://huggingface.co/"):
        monkeypatch.setenv("HF_ENDPOINT", allowed)
        check_hub_endpoint()


def test_an_hf_endpoint_with_the_api_path_is_refused_before_any_hub_call(tmp_path, monkeypatch):
    """The command's own line, from the one check every Hub-reaching command makes (before: "cannot be reached ...
    /api/api/whoami-v2: check the network")."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9/api")
    result = outcome("push", [str(Scenario(tmp_path).model()), "someone/model"])
    assert result.one_line and result.error.startswith("error: HF_ENDPOINT http://127.0.0.1:9/api holds the path /api")


@pytest.mark.parametrize("command", ["train --dataset", "train --model", "train --teacher", "explain", "push"])
def test_offline_a_hub_id_the_cache_lacks_is_one_line_naming_hf_hub_offline(tmp_path, monkeypatch, command):
    import datasets
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the variable huggingface_hub read it from
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets-cache")
    monkeypatch.setenv("HF_TOKEN", "hf_" + "a" * 34)
    scenario = Scenario(tmp_path)
    name, _, argument = command.partition(" ")
    argv = [str(scenario.model()), "someone/model"] if name == "push" else scenario.argv(name)
    argv = argv if name == "push" else with_argument(argv, argument or "--model", "someone/model")
    result = outcome(name, argv)
    assert result.one_line, result
    assert "HF_HUB_OFFLINE is set" in result.error and "unset HF_HUB_OFFLINE" in result.error, result
    assert "check the network" not in result.error
    assert not any(path.name.startswith("out-") for path in tmp_path.iterdir())


@pytest.fixture
def answering_501(monkeypatch):
    """A server under a path (a mirror's address) that answers every request with HTTP 501, as HF_ENDPOINT."""
    import http.server
    import threading

    from huggingface_hub import constants

    class NotImplementedHere(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(501)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), NotImplementedHere)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_port}/mirror"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    template = f"{endpoint}/{{repo_id}}/resolve/{{revision}}/{{filename}}"  # made of HF_ENDPOINT at import
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    yield endpoint
    server.shutdown()


@pytest.mark.usefixtures("logged_in")
@pytest.mark.parametrize("command", ["push", "train"])
def test_a_hub_endpoint_that_answers_an_error_status_is_named_with_its_answer_not_the_network(
    tmp_path, monkeypatch, answering_501, command
):
    monkeypatch.setattr(push, "load_verified", fail_if_reached)
    argv = pushing_argv(Scenario(tmp_path), command)
    result = outcome(command, argv)
    assert result.one_line, result
    assert (
        f" at {answering_501} answered HTTP 501 to GET {answering_501}/api/whoami-v2 (HTTP 501): HF_ENDPOINT may "
        "not point at a Hub API: give the Hub's address (or unset HF_ENDPOINT for huggingface.co)"
    ) in result.error
    assert "check the network" not in result.error
    assert not (tmp_path / "out-train").exists()


def test_a_hub_data_set_the_hub_address_answers_with_an_error_status_is_named_with_that_answer(monkeypatch):
    """datasets wraps the server's answer (HTTP 501 from a mirror's path) in its own FileNotFoundError: the line
    still says what the server answered, to which URL (no password), and HF_ENDPOINT, not "check the path"."""
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError

    from modeling_vit_scratch.training.data import hub_data_set_error

    def answered(status: int, method: str, url: str) -> HfHubHTTPError:
        request = SimpleNamespace(method=method, url=url)
        return HfHubHTTPError(
            f"{status} Server Error", response=SimpleNamespace(status_code=status, request=request, headers={})
        )

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9/mirror")
    url = "http://u:pw@127.0.0.1:9/mirror/datasets/someone/data/resolve/main/README.md"
    try:
        try:
            raise answered(501, "HEAD", url)
        except HfHubHTTPError as answer:
            raise FileNotFoundError("Couldn't find 'someone/data' on the Hugging Face Hub either") from answer
    except FileNotFoundError as wrapped:
        line = str(hub_data_set_error("someone/data", wrapped, "could not be loaded from the hub"))
    assert line == (
        "Data set 'someone/data' could not be loaded from the hub: the Hub at http://127.0.0.1:9/mirror answered HTTP "
        "501 to HEAD http://***@127.0.0.1:9/mirror/datasets/someone/data/resolve/main/README.md: HF_ENDPOINT may not "
        "point at a Hub API: give the Hub's address (or unset HF_ENDPOINT for huggingface.co)."
    )
    missing = answered(404, "GET", url)  # a Hub without the set: the name is to check
    assert "check the path" in str(hub_data_set_error("someone/data", missing, "could not be loaded"))


@pytest.mark.parametrize(
    "name, argument", [(name, argument) for name, argument in MODEL_FOLDER_READERS if argument is not None]
)
def test_a_hub_model_the_hub_address_answers_with_an_error_status_for_is_named_with_that_answer(
    tmp_path, answering_501, name, argument
):
    """Every reader of a model (train's --model and --teacher, convert, explain) names what a mirror's path that is
    no Hub API answered, as the data set and push lines do, not the network nor the repo id."""
    scenario = Scenario(tmp_path)
    result = outcome(name, with_argument(scenario.argv(name), argument, "someone/model"))
    assert result.one_line, result
    assert f": the Hub at {answering_501} answered HTTP 501 to HEAD {answering_501}/someone/model/" in result.error
    assert "HF_ENDPOINT may not point at a Hub API" in result.error and "network" not in result.error, result
    assert not any(path.name.startswith("out-") for path in tmp_path.iterdir())


@pytest.mark.parametrize("below", [False, True])
@pytest.mark.parametrize(
    "variable, command",
    [("HF_HUB_CACHE", "explain"), ("HF_HOME", "push"), ("HF_DATASETS_CACHE", "train --dataset")],
)
def test_a_cache_variable_naming_a_file_is_one_line_before_any_hub_call(
    tmp_path, monkeypatch, variable, command, below
):
    """HF_HUB_CACHE naming a regular file gave a stray "Ignoring corrupted tree cache file" line, then "check the repo
    id, your access and the network", and HF_HOME below a file (`/dev/null/x`) a NotADirectoryError blamed on them:
    each cache variable naming something that is no folder, or a path whose nearest existing parent is none, is one
    line naming it, checked with HF_ENDPOINT by every command that reaches the Hub. A path not yet there is made."""
    cache = tmp_path / "cache-file"
    cache.write_text("not a folder")
    value = cache / "x" / "y" if below else cache
    monkeypatch.setenv(variable, str(value))
    scenario = Scenario(tmp_path)
    name, _, argument = command.partition(" ")
    argv = [str(scenario.model()), "someone/model"] if name == "push" else scenario.argv(name)
    argv = argv if name == "push" else with_argument(argv, argument or "--model", "someone/model")
    result = outcome(name, argv)
    where = f", below '{cache}'" if below else ""
    assert result.error == (
        f"error: {variable} is '{value}'{where}, which is not a folder, so the Hugging "
        f"Face cache cannot be kept there: set {variable} to a folder (a new path is made), or unset it for the "
        "default cache."
    ), result
    assert cache.read_text() == "not a folder"
    assert not any(path.name.startswith("out-") for path in tmp_path.iterdir())
    monkeypatch.setenv(variable, str(tmp_path / "not-yet" / "deeper"))
    check_hub_endpoint()  # a path not there yet is made by the libraries


def test_a_cache_variable_whose_parent_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    """A cache path not there yet is made by the libraries: its nearest existing parent must be writable, else one
    line naming the variable and that parent (a folder already there may be a read-only cache: no line)."""
    from modeling_vit_scratch.common import sources

    monkeypatch.setenv("HF_HOME", str(tmp_path / "new" / "cache"))
    monkeypatch.setattr(sources.os, "access", lambda path, mode: str(path) != str(tmp_path))
    with pytest.raises(
        ValueError, match=rf"HF_HOME is '{tmp_path}/new/cache', which is not there and cannot be made: "
    ):
        check_hub_endpoint()
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    check_hub_endpoint()
