"""Every argument of a push that the Hub receives, checked by one function before any model is loaded or trained and
before any repo is created: the repo id, the revision, the shard size, the commit message, the credentials, and a
private push's repo (one that exists public is refused: the push would publish what the user asked to keep private).
`vit-scratch push` calls it before loading the folder, `train --push_to_hub` before training; each names the
arguments as its own command line does (`PUSH`, `TRAIN`), and uses from then on the repo id and revision it returns
(`HubTarget`): a bare repo name resolved to `owner/name` in the token owner's namespace (`whoami`, as huggingface_hub's
`get_full_repo_name` does), a revision given as `refs/heads/NAME` as NAME, so that every request and every line
printed after names the repo and branch the push goes to."""

import os
import re
from dataclasses import dataclass

from huggingface_hub import HfApi, get_token
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.serialization._base import parse_size_to_int

from modeling_vit_scratch.common.names import escaped, is_unprintable
from modeling_vit_scratch.common.secrets import known_secrets, redact, refuse_secret, shown_url
from modeling_vit_scratch.common.sources import check_hub_endpoint, check_not_url, hub_offline_variable, unreached
from modeling_vit_scratch.common.sources import check_repo_id as check_hub_repo_id

# huggingface_hub's errors (HfHubHTTPError is an OSError) and its HTTP client's transport errors.
HUB_ERRORS = (OSError, *HfHubHTTPError.__bases__)
PULL_REQUEST = re.compile(r"refs/pr/(\d+)")
HEADS = "refs/heads/"  # a branch's full ref: `refs/heads/dev` is the branch dev
# what git refuses in a branch name (git check-ref-format), and the Hub with it, each in the words a refusal uses
BRANCH_RULES = (
    (re.compile(r"\.\."), "it holds '..'"),
    (re.compile(r"(^|/)\."), "a part of it starts with '.'"),
    (re.compile(r"\.lock(/|$)"), "a part of it ends in '.lock'"),
    (re.compile(r"//"), "it has an empty part ('//')"),
    (re.compile(r"^/"), "it starts with '/'"),
    (re.compile(r"/$"), "it ends with '/'"),
    (re.compile(r"\.$"), "it ends with '.'"),
    (re.compile(r"@\{"), "it holds '@{'"),
    (re.compile(r"^@$"), "it is '@', which git reads as HEAD"),
    (re.compile(r"^HEAD$"), "it is 'HEAD', which git reads as the current commit, never as a branch"),
)
BAD_CHARACTER = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
# what the Hub takes in a branch name beyond git's rules: letters, digits, '.', '_', '-', and '/' between parts
HUB_BRANCH_CHARACTER = re.compile(r"[^A-Za-z0-9._/-]")


@dataclass(frozen=True)
class HubTarget:
    """Where a checked push goes: the full repo id (`owner/name`), the revision (a branch name, `refs/pr/N` or None
    for main) and the shard size in bytes."""

    repo_id: str
    revision: str | None
    max_shard_size: int


@dataclass(frozen=True)
class Names:
    """How a command names the Hub arguments in its one-line errors."""

    lead: str  # what each line starts with
    repo_fix: str  # how to give a good repo id
    revision: str
    token: str  # where a token may be given
    later: str = ""  # a way around, appended to a fix
    private: str = "--private"
    owner_fix: str = "give the repo id as owner/name, e.g. your-name/{name}"  # for a bare name whose owner is unknown


PUSH = Names("", "give one like your-name/vit-digits", "--revision", "log in with `hf auth login` or set HF_TOKEN")
TRAIN = Names(
    "--push_to_hub true: ",
    "give --hub_model_id your-name/model-name",
    "--hub_revision",
    "log in with `hf auth login`, set HF_TOKEN or pass --hub_token",
    ", or leave out --push_to_hub and push later with vit-scratch push",
    private="--hub_private_repo true",
    owner_fix="give the repo id as owner/name: --hub_model_id your-name/{name}",
)


def start(names: Names, subject: str) -> str:
    """A line's start: the command's lead, then `subject`; or `subject` as a sentence when there is no lead."""
    return f"{names.lead}{subject}" if names.lead else subject[:1].upper() + subject[1:]


def check_hub_arguments(
    repo_id: str,
    *,
    revision: str | None = None,
    create_pr: bool = False,
    commit_message: str | None = None,
    max_shard_size: str | int = "2GB",
    token: str | None = None,
    private: bool = False,
    names: Names = PUSH,
) -> HubTarget:
    """A ValueError naming the argument, its value (never a token) and the fix, unless every Hub argument of a push
    is good: no token typed into a field that is sent, a commit message that is not blank, a valid repo id, a revision
    that is a branch name or an existing pull request of the repo (never a commit id), a shard size, a token at hand
    that the Hub accepts, and, for a `private` push, a repo that is private or does not exist yet. Returns the full
    repo id (a bare name gets the token owner's namespace), the revision (`refs/heads/NAME` as NAME) and the shard size in bytes."""
    check_hub_endpoint()
    secrets = known_secrets(token)
    fix = "tokens go in HF_TOKEN or `hf auth login`, never in a field that is sent; fix the command line"
    refuse_secret("The repo id", repo_id, secrets, fix)
    refuse_secret("The revision", revision, secrets, fix)
    refuse_secret("The commit message", commit_message, secrets, fix)
    if commit_message is not None and not commit_message.strip():
        raise ValueError(
            "--commit_message is blank (empty, or only spaces and line breaks), and a commit needs a title: give a "
            "message, or leave out --commit_message for the default title (Upload vit_scratch model from FOLDER)."
        )
    check_message_characters(commit_message)
    check_repo_id(repo_id, names)
    revision = check_revision(revision, create_pr, names)
    shard_bytes = shard_size(max_shard_size)
    check_hub_endpoint()  # the arguments' own form first; then, before the first Hub call, where it is
    owner = check_access(token, secrets, names)
    repo_id = full_repo_id(repo_id, owner, names)
    check_pull_request(repo_id, revision, token, secrets, names)
    if private:
        check_private(repo_id, token, secrets, names)
    return HubTarget(repo_id, revision, shard_bytes)


def check_repo_id(repo_id: str, names: Names) -> None:
    check_not_url(repo_id, start(names, "the repo id"), names.revision)
    if repo_id.startswith("-"):  # on a command line it reads as an option
        raise ValueError(
            f"{start(names, 'the repo id')} {repo_id!r} starts with '-', which no Hub repo id may: {names.repo_fix}."
        )
    check_hub_repo_id(repo_id, start(names, "the repo id"), names.repo_fix)


def check_revision(revision: str | None, create_pr: bool, names: Names) -> str | None:
    """The branch (created if missing) or `refs/pr/N` a push goes to, None for main: a branch name git accepts, or a
    branch's full ref `refs/heads/NAME` taken as NAME; never a full commit id (a branch named like a commit shadows
    that commit for everyone who loads the repo at it; shorter hex names, "cafe", are branches). A refusal names the
    rule the revision breaks."""
    given = revision
    if revision and revision.startswith(HEADS):
        revision = revision.removeprefix(HEADS)
    if create_pr and revision not in (None, "main"):
        raise ValueError(
            "A pull request (create_pr) is opened against main: drop the revision, or push to the "
            f"branch {revision!r} without create_pr."
        )
    if not given:
        return None
    if re.fullmatch(r"[0-9a-fA-F]{40}", revision):
        raise ValueError(
            f"{start(names, 'the revision')} {given} is a commit "
            "id: a push goes to a branch (created if missing) or refs/pr/N, and a branch named like a commit would "
            f"hide that commit: give a branch name, or leave out {names.revision} for main."
        )
    problem = branch_problem(revision)
    if problem:
        raise ValueError(
            f"{names.lead}{names.revision} {given!r} is not a branch name or refs/pr/N ({problem}): give one like "
            f"experiment-1, or leave it out for main."
        )
    return revision


def branch_problem(revision: str) -> str | None:
    """Why `revision` is neither a branch name git accepts nor `refs/pr/N`, in words; None when it is one."""
    if PULL_REQUEST.fullmatch(revision):
        return None
    if not revision:
        return f"{HEADS} names no branch"
    if revision.startswith("refs/"):
        return "a push goes to a branch (NAME or refs/heads/NAME) or a pull request (refs/pr/N), not to another ref"
    bad = BAD_CHARACTER.search(revision)
    if bad:
        character = bad.group()
        shown = "a space" if character == " " else f"the character {character!r}"
        return f"it holds {shown}, which git refuses in a branch name"
    broken = next((words for rule, words in BRANCH_RULES if rule.search(revision)), None)
    other = HUB_BRANCH_CHARACTER.search(revision)
    if broken or not other:
        return broken
    return (
        f"it holds the character {other.group()!r}, which the Hub refuses in a branch name: letters, digits, '.', "
        "'_', '-' and '/' only"
    )


def shard_size(value: str | int) -> int:
    """`--max_shard_size` in bytes: a positive number of bytes, or one with a unit (500MB, 2GB)."""
    text = str(value).strip()
    try:
        size = int(text) if text.isdigit() else parse_size_to_int(text)
    except ValueError:
        size = 0
    if size <= 0:
        raise ValueError(
            f"--max_shard_size {text!r} is not a size: give a positive number of bytes or one with a unit, e.g. "
            "500MB or 2GB."
        )
    return size


# The variables huggingface_hub reads a token from, first wins; a blank one (empty or whitespace) gives none.
HUB_TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def check_access(token: str | None, secrets: list[str], names: Names) -> str | None:
    """A token at hand that the Hub (HF_ENDPOINT) accepts; returns the name of its owner as the Hub says it (None
    if the Hub's answer names none)."""
    who = names.lead.rstrip(": ") if names.lead else "A push"
    if token is not None and not token.strip():
        raise ValueError(
            f"{who}: --hub_token is {'empty' if token == '' else 'only whitespace'}, which is no token: give a token, "
            f"or leave --hub_token out to use HF_TOKEN or the saved login{names.later}."
        )
    if not get_token() and not token:
        blank = next(
            (name for name in HUB_TOKEN_VARIABLES if name in os.environ and not os.environ[name].strip()), None
        )
        if blank:
            held = "empty" if os.environ[blank] == "" else "only whitespace"
            raise ValueError(
                f"{who} needs a Hub token and none was found: {blank} is set but {held}, which gives no token: "
                f"unset it (`unset {blank}`) or set it to a token, or log in with `hf auth login`{names.later}."
            )
        raise ValueError(f"{who} needs a Hub token and none was found: {names.token}{names.later}.")
    api = HfApi(token=token)
    try:
        owner = api.whoami().get("name")
    except HUB_ERRORS as error:
        response = getattr(error, "response", None)
        refused = isinstance(error, HfHubHTTPError) and response is not None and response.status_code in (401, 403)
        what, fix = (
            ("does not accept the token", refused_token_fix(token, names))
            if refused
            else unreached(error, f"{names.later}")
        )
        if isinstance(error, OfflineModeIsEnabled):  # the network is not to blame: the setting is
            variable = hub_offline_variable()  # the one really set: unsetting it works (the library names its own)
            raise ValueError(
                f"{start(names, 'the Hub')} at {api.endpoint} was not asked, as {variable} is set: unset "
                f"{variable}{names.later}."
            ) from None
        raise ValueError(
            f"{start(names, 'the Hub')} at {api.endpoint} {what} ({describe(error, secrets)}): {fix}."
        ) from None
    return owner if isinstance(owner, str) and owner else None


def full_repo_id(repo_id: str, owner: str | None, names: Names) -> str:
    """`repo_id` as `owner/name`: a bare name is in the namespace of the token's owner, as the Hub itself and
    huggingface_hub's `get_full_repo_name` read it; a bare name whose owner the Hub did not say is one line."""
    if "/" in repo_id:
        return repo_id
    if owner is None:
        raise ValueError(
            f"{start(names, 'the repo id')} {repo_id!r} names no owner, and the Hub did not say whose the token is: "
            f"{names.owner_fix.format(name=repo_id)}."
        )
    return f"{owner}/{repo_id}"


def check_pull_request(repo_id: str, revision: str | None, token: str | None, secrets: list[str], names: Names) -> None:
    """For a revision `refs/pr/N`: a pull request of `repo_id` that exists."""
    if not (revision and PULL_REQUEST.fullmatch(revision)):
        return
    try:
        HfApi(token=token).repo_info(repo_id, revision=revision)
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise ValueError(
            f"{names.lead}{names.revision} {revision}: {repo_id} has no such pull request: give the ref of an "
            "open pull request of that repo, or leave it out (a new pull request: --create_pr)."
        ) from None
    except HUB_ERRORS as error:
        raise ValueError(
            f"{start(names, 'reading')} {revision} of {repo_id} on the Hub failed ({describe(error, secrets)}): check "
            "the network and run again."
        ) from None


def check_private(repo_id: str, token: str | None, secrets: list[str], names: Names) -> None:
    """A private push to a repo that exists and is public would publish the model: refused, and the repo's
    visibility is left to its owner (changing it here would hide what others may already use)."""
    try:
        info = HfApi(token=token).repo_info(repo_id)
    except RepositoryNotFoundError:
        return  # created private by the push
    except HUB_ERRORS as error:
        what, fix = unreached(error, " and run again")
        raise ValueError(
            f"{start(names, 'reading')} {repo_id} on the Hub failed: the Hub at {shown_url(HfApi().endpoint)} {what} "
            f"({describe(error, secrets)}): {fix}."
        ) from None
    if info.private is False:
        raise ValueError(
            f"{names.lead}{names.private}: {repo_id} exists and is public, so the push would publish the model: make "
            f"the repo private on the Hub first (its settings page), push to a new repo id, or leave out "
            f"{names.private.split()[0]}."
        )


def refused_token_fix(token: str | None, names: Names) -> str:
    """What to do about a token the Hub refused, by where it came from, in huggingface_hub's order: given
    (--hub_token), then the environment (HF_TOKEN wins over the saved login), then the saved login."""
    if token:
        return "the token given with --hub_token: give a valid one, or leave it out to use HF_TOKEN or the saved login"
    variable = next((name for name in HUB_TOKEN_VARIABLES if os.environ.get(name, "").strip()), None)
    if variable:
        return (
            f"the token is {variable}'s, which wins over a saved login: unset {variable} (to use the saved login) "
            "or set it to a valid token"
        )
    return f"the token is the saved login's: log in again with `hf auth login`, or {give_token(names)}"


def give_token(names: Names) -> str:
    return "give a valid --hub_token or HF_TOKEN" if names is TRAIN else "set a valid HF_TOKEN"


def describe(error: BaseException, secrets: list[str]) -> str:
    """An error of the Hub or the network in one line, without any token."""
    if isinstance(error, HfHubHTTPError) and getattr(error, "response", None) is not None:
        text = f"HTTP {error.response.status_code}" + (f": {error.server_message}" if error.server_message else "")
    else:
        text = f"{type(error).__name__}: {error}"
    return redact(" ".join(text.split()), secrets)


def check_message_characters(commit_message: str | None) -> None:
    """A ValueError naming the first character of `commit_message` that is not printable text (an escape sequence,
    a carriage return, a tab, a bidi override, a zero-width character; a line break is what splits the title from the
    body, and is kept): the Hub keeps it in the repo's history, and a clone's `git log` would send it to a terminal
    raw, recolouring or hiding text there. Every line the package prints escapes such characters; what it sends
    carries none."""
    for position, character in enumerate(commit_message or ""):
        if character != "\n" and is_unprintable(character):
            raise ValueError(
                f"--commit_message holds the control character {escaped(character)} at position {position + 1}, "
                "which the Hub would keep in the repo's history and a clone's git log would send to a terminal "
                "raw: remove it (a line break between title and body is kept)."
            )
