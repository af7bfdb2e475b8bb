"""Names of data and model sources, for the arguments that accept a name, a local path or a hub repo id."""

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from modeling_vit_scratch.common.run_state import check_run_state

DIGITS = "digits"  # the --dataset name of the handwritten digits embedded in scikit-learn
MAX_BRANCHES_LOOKED_AT = 10  # a repo's branches asked whether they hold a model, when its main holds none


URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
HUB_HOSTS = ("huggingface.co", "www.huggingface.co", "hf.co")
REPO_KINDS = {"datasets": "a data set's", "spaces": "a Space's"}  # a URL's first part when the repo is no model


def check_not_url(value: str, named: str, revision: str | None = "--revision") -> None:
    """Every argument that takes a Hub repo id (push's repo id, --hub_model_id, --model, --teacher, --input) reads a
    URL through this one check: a Hub page's URL (https://huggingface.co/owner/name/tree/main, or without its
    scheme) is one line giving the id to use; a URL of another host is refused as no Hub id. `named` is how the
    line names the argument ("--model", "The repo id"); `revision`, the command's revision argument, if it has one
    (a URL's /tree/BRANCH is then named as its value)."""
    text = value.strip()
    bare = text.split("/", 1)[0] in HUB_HOSTS and not os.path.exists(text)  # huggingface.co/owner/name
    if not (URL.match(text) or bare):
        return
    parts = urlsplit(text if URL.match(text) else f"https://{text}")
    if "@" in parts.netloc:  # a user name or password in the URL is never echoed
        value = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()
    hosts = {*HUB_HOSTS, urlsplit(os.environ.get("HF_ENDPOINT", "")).hostname}
    if parts.hostname not in hosts:
        raise ValueError(
            f"{named} {value!r} is a URL of {parts.hostname or 'no host'}, not a Hub repo id: give the repo id "
            "(owner/name) of a model on the Hub."
        )
    names = [name for name in parts.path.split("/") if name]
    if names[:1] and names[0] in REPO_KINDS:
        raise ValueError(
            f"{named} {value!r} is the URL of {REPO_KINDS[names[0]]} repo, not a model's: give the repo id "
            "(owner/name) of a model."
        )
    if len(names) < 2:
        raise ValueError(f"{named} {value!r} is a Hub URL that names no repo: give the repo id (owner/name).")
    at_branch = revision and names[2:3] in (["tree"], ["blob"]) and len(names) > 3
    branch = f" (and {revision} {names[3]})" if at_branch else ""
    raise ValueError(f"{named} {value!r} is the Hub URL of a repo: give its id, {names[0]}/{names[1]}{branch}.")


CACHE_VARIABLES = ("HF_HOME", "HF_HUB_CACHE", "HF_DATASETS_CACHE")  # the folders the Hub's and datasets' caches live in


def check_cache_folders() -> None:
    """A cache variable (`CACHE_VARIABLES`) naming a path that is no folder and cannot become one is one line naming
    the variable, its value and the fix, checked with HF_ENDPOINT before any Hub call: the libraries would log a
    stray "corrupted cache" line, or fail on a file below it (`HF_HOME/token`), and then blame the repo id, the
    access or the network. The path, or where it is not there yet its nearest existing parent, must be a folder
    (`/dev/null/x` is below a file); a path not yet there is made by the libraries, so that parent must be writable."""
    from modeling_vit_scratch.common.names import shown_name

    for variable in CACHE_VARIABLES:
        value = os.environ.get(variable)
        if not value:
            continue
        path = Path(os.path.expanduser(value))
        existing = next((parent for parent in (path, *path.parents) if os.path.lexists(parent)), None)
        if existing is None:
            continue
        fix = f"set {variable} to a folder (a new path is made), or unset it for the default cache"
        below = "" if existing == path else f", below '{shown_name(str(existing))}'"
        if not existing.is_dir():
            raise ValueError(
                f"{variable} is '{shown_name(value)}'{below}, which is not a folder, so the Hugging Face cache cannot "
                f"be kept there: {fix}."
            )
        if existing != path and not os.access(existing, os.W_OK | os.X_OK):
            raise ValueError(
                f"{variable} is '{shown_name(value)}', which is not there and cannot be made: "
                f"'{shown_name(str(existing))}' is not writable, so the Hugging Face cache cannot be kept there: {fix}."
            )


def check_hub_endpoint() -> None:
    """The one check of HF_ENDPOINT, made before any Hub call by every command that reaches the Hub (a Hub model,
    teacher, data set or input; a push): set, it must be an http(s) URL with a host, else one line naming it, its
    value (without a user name, password or query) and the fix. An empty or scheme-less value would otherwise fail
    in the HTTP client, and read as the network's fault; a user name or password in it would go with every request
    and the Hub's refusal be blamed on the token. Spaces around it reach the HTTP client as they are, and a path
    ending in `/api` (or holding `/api/`) doubles the `/api/` huggingface_hub adds itself: both would read as the
    network's fault too. Other paths stay allowed: a mirror may sit under one."""
    from modeling_vit_scratch.common.secrets import MASK, shown_url

    check_cache_folders()
    value = os.environ.get("HF_ENDPOINT")
    if value is None:
        return
    parts = urlsplit(value.strip())
    # the value as every line below prints it: no user name, password, query (masked) or fragment, nor a known token;
    # a user name and password are masked first also where no scheme lets urlsplit find them (`user:pw@host`)
    shown = shown_url(re.sub(r"^([^/?#]*//)?[^/@?#]*@", rf"\1{MASK}@", value.strip()))
    address = shown.split("?", 1)[0]  # without its query: the value to set, where the line gives one
    as_set = value.replace(value.strip(), shown)  # with the spaces around it
    if not (parts.scheme in ("http", "https") and parts.hostname):
        raise ValueError(
            f"HF_ENDPOINT is {as_set!r}, which is no http(s) URL with a host, so no Hub could be reached at it: set it "
            "to the Hub's address with its scheme (e.g. HF_ENDPOINT=https://huggingface.co, or http://localhost:8000 "
            "for a local mirror), or unset it (unset HF_ENDPOINT) for huggingface.co."
        )
    if "@" in parts.netloc:  # the Hub reads the token from HF_TOKEN or the login; a password here goes to every request
        raise ValueError(
            f"HF_ENDPOINT {shown} carries a user name or password: the Hub takes the token from HF_TOKEN or "
            "`hf auth login`; remove them from HF_ENDPOINT."
        )
    if value != value.strip():
        raise ValueError(
            f"HF_ENDPOINT {as_set!r} has spaces around it, which the HTTP client does not "
            f"strip: set it without them (HF_ENDPOINT={shown})."
        )
    if parts.query or parts.fragment or "#" in value or "?" in value:  # huggingface_hub appends its paths after it
        raise ValueError(
            "HF_ENDPOINT holds a query or fragment ('?...' or '#...'), before which huggingface_hub would add the "
            f"paths it asks: set it to the address alone (HF_ENDPOINT={address})."
        )
    path = parts.path.rstrip("/")
    if path.endswith("/api") or "/api/" in path:
        asked = address.rstrip("/")
        base = asked[: re.search(r"/api(/|$)", asked.split("://", 1)[1]).start() + len(parts.scheme) + 3]
        raise ValueError(
            f"HF_ENDPOINT {shown} holds the path /api, which huggingface_hub adds to it itself (it would ask "
            f"{asked}/api/...): set it to the address without it (HF_ENDPOINT={base})."
        )


def repo_id_problem(value: str) -> str | None:
    """Why `value` is no Hub repo id (`name` or `owner/name`), in our words; None when it is one. huggingface_hub's
    `validate_repo_id` stays the judge: a value it refuses for a reason not named here is "not of the form
    owner/name"."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    parts = value.split("/")
    bad = re.search(r"[^\w./-]", value)
    held = "a space" if bad and bad.group() == " " else repr(bad and bad.group())
    checks = (
        (not value.strip(), "it is empty"),
        (value != value.strip(), "it has spaces around it"),
        ("//" in value, "it has an empty part ('//')"),
        (value.endswith("/"), "it ends with '/'"),
        (value.startswith("/"), "it starts with '/'"),
        (len(parts) > 2, f"it has {len(parts)} parts, and a repo id has two, owner/name"),
        (value.endswith(".git"), "it ends in '.git', as a git URL does"),
        (
            bad is not None,
            f"it holds {held}, and a repo id holds letters, digits, '-', '_' and '.' only",
        ),
        ("--" in value or ".." in value, f"it holds {'--' if '--' in value else '..'!r}"),
        (any(part[:1] in "-." or part[-1:] in "-." for part in parts), "a part of it starts or ends with '-' or '.'"),
        (any(len(part) > 96 for part in parts), "a part of it is longer than 96 characters"),
    )
    problem = next((words for failed, words in checks if failed), None)
    if problem:
        return problem
    try:
        validate_repo_id(value)
    except HFValidationError:
        return "it is not of the form owner/name"
    return None


def meant_repo_id(value: str) -> str | None:
    """The repo id `value` means when it is one but for what a hand adds (spaces around it, a trailing or doubled
    '/', a '.git' suffix): `local-user/m1/` means `local-user/m1`. None when no such id is meant (or `value` is one
    already); a path from the root, ./ or ~ is never read as an id."""
    text = value.strip()
    if text.startswith(("/", ".", "~")):
        return None
    meant = "/".join(part for part in text.split("/") if part).removesuffix(".git")
    parts = meant.split("/")
    return meant if meant != value and len(parts) in (1, 2) and repo_id_problem(meant) is None else None


def check_repo_id(value: str, named: str, fix: str) -> None:
    """The one check of a Hub repo id's form, for every argument that takes one (push's repo id, --hub_model_id,
    --model, --teacher, --input): a ValueError naming what is wrong, in our words, and the id meant when it is
    plain (`local-user/m1/`: give local-user/m1); otherwise `fix`. A URL is `check_not_url`'s, before this."""
    problem = repo_id_problem(value)
    if problem is None:
        return
    meant = meant_repo_id(value)
    raise ValueError(f"{named} {value!r} is not valid ({problem}): {f'give {meant}' if meant else fix}.")


def path_or_id_fix(value: str, otherwise: str) -> str:
    """The fix for a local path that does not exist: the Hub repo id it may mean (`local-user/m1/` means
    local-user/m1), else `otherwise`."""
    meant = meant_repo_id(value)
    if meant is None:
        return otherwise
    return f"give {meant} for the Hub repo ({repo_id_problem(value)}, which a repo id may not), or an existing folder"


def looks_like_local_path(text: str) -> bool:
    """True for "/x", "./x", "~/x", "x/", "a/b/c", or "a/b" where the folder "a" exists here; hub ids are "name" or
    "owner/name" (no trailing "/")."""
    if text.startswith(("/", ".", "~")) or text.endswith("/") or text.count("/") > 1:
        return True
    return "/" in text and os.path.isdir(text.split("/")[0])


def check_folder_path(source: str, argument: str, command: str) -> None:
    """Refuse, before any work, a model source that is a local file (a folder is read: name the one that holds it),
    a local path that does not exist (never looked up on the Hub as a repo id), or a folder whose run is live or
    was interrupted, as `check_run_state` says for `command`. First, a local path holding or shaped like a token
    (`refuse_token_in_path`): it would be printed in every line naming the folder, and its name written into what is
    made from it (a hub repo id is the Hub fields' rule, `refuse_sent_secrets`)."""
    from modeling_vit_scratch.common.secrets import refuse_token_in_path

    if os.path.exists(source) or looks_like_local_path(source):
        refuse_token_in_path(argument, source, read=True)
    if os.path.isfile(source):
        raise ValueError(
            f"{argument} {source!r} is a file, not a folder: give the folder that holds it "
            f"({os.path.dirname(source) or '.'!r}), with its config.json beside the weights."
        )
    if not os.path.exists(source) and looks_like_local_path(source):
        fix = path_or_id_fix(
            source, "check the path of the folder (a hub repo id is owner/name, without ./ or a trailing /)"
        )
        raise FileNotFoundError(f"{argument} {source!r} does not exist: {fix}.")
    check_run_state(source, argument, command)


SENT_FIX = "tokens go in HF_TOKEN or `hf auth login`, never in a field that is sent; fix the command line"


def refuse_sent_secrets(what: str | None, repo_id: str, revision: str | None) -> None:
    """A ValueError (naming the field, never its value) when a hub repo id (`what` names it; None for a local
    folder, which is not sent) or a `--revision` holds or looks like a token: both go to the Hub in every request."""
    from modeling_vit_scratch.common.secrets import known_secrets, refuse_secret

    secrets = known_secrets()
    refuse_secret("The value of --revision", revision, secrets, SENT_FIX)
    if what is not None:
        refuse_secret(what, repo_id, secrets, SENT_FIX)


def check_hub_model(
    source: str, argument: str, revision: str | None = None, revision_named: str = "--revision"
) -> None:
    """Refuse, before any download, a hub repo whose `revision` (default: main) holds no config.json (a model pushed
    to another branch only: the load would fail with a line about a setting the user never gave), naming the
    branches that hold one; and a --revision given with a local folder. A repo the Hub does not answer for
    (offline, unknown, no such revision) is left to the checks and the load that follow. A token typed into a field
    that would be sent (the repo id, the revision) is refused first, never echoed (`refuse_sent_secrets`).
    `revision_named` is the command's revision argument (train: --model_revision, --teacher_revision)."""
    local = os.path.exists(source) or looks_like_local_path(source)
    refuse_sent_secrets(None if local else f"The repo id of {argument}", source, revision)
    if not local:
        check_hub_endpoint()
        check_repo_id(
            source, f"The repo id of {argument}", "give the path of a folder here or a Hub repo id (owner/name)"
        )
    if local:
        if revision is not None:
            raise ValueError(
                f"{revision_named} {revision!r} names a version of a hub repo, and {argument} {source!r} is a local "
                f"folder: leave out {revision_named}."
            )
        return
    check_hub_endpoint()
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RevisionNotFoundError

    api = HfApi()
    try:
        siblings = api.model_info(source, revision=revision).siblings or []
    except RevisionNotFoundError:
        known = hub_revisions(api, source)
        raise ValueError(unknown_revision(source, revision, argument, known, "", revision_named)) from None
    except Exception:  # noqa: BLE001 - offline, unknown or unreachable: the load that follows says why
        check_offline_cached(source, argument)
        check_cached_revision(source, revision, argument, revision_named)
        return
    if any(sibling.rfilename == "config.json" for sibling in siblings):
        return
    where = "its main branch" if revision is None else f"its revision {revision!r}"
    try:
        branches = [ref.name for ref in api.list_repo_refs(source).branches if ref.name != (revision or "main")]
        holding = [
            name
            for name in branches[:MAX_BRANCHES_LOOKED_AT]
            if any(sibling.rfilename == "config.json" for sibling in api.model_info(source, revision=name).siblings)
        ]
    except Exception:  # noqa: BLE001 - the branches could not be listed: the line says what is known
        holding = []
    found = (
        f"; the branch{'es' * (len(holding) > 1)} {', '.join(holding)} hold{'s' * (len(holding) == 1)} one"
        if holding
        else ""
    )
    branch = holding[0] if holding else "BRANCH"
    raise ValueError(
        f"{argument} {source!r} has no config.json on {where}, so it holds no model there{found}: give "
        f"{revision_named} {branch}."
    )


def unknown_revision(
    source: str, revision: str, argument: str, known: list[str], where: str, revision_named: str = "--revision"
) -> str:
    """The line for a `revision` that `source` (a hub repo, or its copy in the cache: `where`) does not have: never
    the weights' fault. A short commit id is named as such: the Hub takes a commit id only in full."""
    short = (
        f"; a commit id is given in full, 40 hex characters, and {revision!r} has {len(revision)}"
        if re.fullmatch(r"[0-9a-fA-F]{4,39}", revision)
        else ""
    )
    names = f" ({', '.join(known[:MAX_BRANCHES_LOOKED_AT])})" if known else ""
    fix = (
        f"give one the cache holds{names}, or run online (unset {offline_setting() or 'HF_HUB_OFFLINE'})"
        if where
        else f"give one of its branches or tags{names}, or a full commit id"
    )
    return f"{revision_named} {revision!r}: {argument} {source!r} has no branch, tag or commit of that name{where}{short}: {fix}."


def hub_revisions(api, source: str) -> list[str]:
    """The branch and tag names of a hub repo, main first; [] when they cannot be listed."""
    try:
        refs = api.list_repo_refs(source)
    except Exception:  # noqa: BLE001 - the line is still right without them
        return []
    names = [ref.name for ref in [*refs.branches, *refs.tags]]
    return sorted(names, key=lambda name: name != "main")


def check_cached_revision(source: str, revision: str | None, argument: str, revision_named: str = "--revision") -> None:
    """Where the Hub did not answer (offline, out of reach) and the repo is in the Hugging Face cache, a `revision`
    the cache holds under no branch, tag or commit is one line naming it: the load would read nothing there."""
    from huggingface_hub import constants

    cached = Path(constants.HF_HUB_CACHE) / f"models--{source.replace('/', '--')}"
    check_offline_cached(source, argument)
    if revision is None or not cached.is_dir():
        return
    refs = sorted(
        path.relative_to(cached / "refs").as_posix() for path in (cached / "refs").rglob("*") if path.is_file()
    )
    commits = {path.name for path in (cached / "snapshots").glob("*")}
    if revision in refs or revision in commits:
        return
    variable = offline_setting() or "HF_HUB_OFFLINE"
    where = f" in the Hugging Face cache (the Hub was not asked: {variable} is set or it is out of reach)"
    raise ValueError(unknown_revision(source, revision, argument, refs, where, revision_named))


OFFLINE_KINDS = {"model": "repo", "dataset": "data set"}  # how a line names a Hub repo of each kind


def offline_setting(kind: str = "model") -> str | None:
    """The variable that keeps the Hub from being asked for a repo of `kind` ("model" or "dataset"), or None when it
    may be asked: HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE, `hub_offline_variable`), or for a data set also `datasets`'
    own HF_DATASETS_OFFLINE."""
    from huggingface_hub import constants

    if kind == "dataset":
        import datasets.config

        if not datasets.config.HF_HUB_OFFLINE:  # set by either variable when datasets starts
            return None
        return "HF_DATASETS_OFFLINE" if os.environ.get("HF_DATASETS_OFFLINE") is not None else hub_offline_variable()
    return hub_offline_variable() if constants.HF_HUB_OFFLINE else None


def hub_offline_variable() -> str:
    """The variable huggingface_hub read its offline setting from: HF_HUB_OFFLINE, or where that is unset or empty,
    the older TRANSFORMERS_OFFLINE (`huggingface_hub.constants` reads them in that order). A line names the one
    really set, so that unsetting it is a fix that works."""
    return "HF_HUB_OFFLINE" if os.environ.get("HF_HUB_OFFLINE") else "TRANSFORMERS_OFFLINE"


def not_cached_offline(source: str, argument: str, kind: str, variable: str) -> str:
    """The one line for a name that is no folder here and no Hub repo in the cache while `variable` keeps the Hub
    from being asked: both said, so a mistyped folder is not taken for a repo whose weights are missing."""
    named = OFFLINE_KINDS[kind]
    return (
        f"{argument} {source!r}: there is no folder {source!r} here, and no Hub {named} {source!r} in the Hugging Face "
        f"cache ({variable} is set, so the Hub was not asked): check the folder's path (a folder name needs ./ in "
        f"front), or unset {variable} to download the {named} once (it is then read from the cache)."
    )


def check_offline_cached(source: str, argument: str, kind: str = "model") -> None:
    """Offline, a Hub repo (`kind`: "model" or "dataset") that is no folder here and that the Hugging Face cache does
    not hold is one line naming the variable that kept the Hub from being asked: nothing can be read, and the
    loader's own words would blame the network or the weights."""
    from huggingface_hub import constants

    variable = offline_setting(kind)
    if variable is None or os.path.exists(source):
        return
    folder = Path(constants.HF_HUB_CACHE) / f"{kind}s--{source.replace('/', '--')}"
    cached = any((folder / "snapshots").glob("*")) if kind == "model" else folder.is_dir()
    if kind == "dataset":  # or prepared by `datasets` in its own cache
        from datasets import config

        cached = cached or (Path(config.HF_DATASETS_CACHE) / source.replace("/", "___")).is_dir()
    if not cached:
        raise ValueError(not_cached_offline(source, argument, kind, variable))


def hub_commit(source: str, argument: str, revision: str | None, revision_named: str) -> str | None:
    """The full 40-hex commit that hub repo `source` is read at: `revision` (default: main) checked as
    `check_hub_model` does, then resolved once (online, or from the cache's refs offline), so that every later load
    reads that one commit and the record can name it. `revision` as given when it cannot be resolved (an unknown or
    unreachable repo: the load that follows says why)."""
    check_hub_model(source, argument, revision, revision_named)
    from huggingface_hub import HfApi, constants

    try:
        resolved = HfApi().resolve_revision(source, revision=revision, local_files_only=constants.HF_HUB_OFFLINE)
    except Exception:  # noqa: BLE001 - the load that follows says why
        return revision
    return str(resolved.resolved)


def hub_answer(error: BaseException):
    """The HTTP response a Hub server gave, found along `error`'s causes (datasets and transformers wrap
    huggingface_hub's HfHubHTTPError in their own errors), or None where nothing answered."""
    from huggingface_hub.errors import HfHubHTTPError

    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, HfHubHTTPError) and getattr(error, "response", None) is not None:
            return error.response
        error = error.__cause__ or error.__context__
    return None


def hub_misanswered(what: str, error: BaseException) -> str | None:
    """The one line for `what` (e.g. "Cannot load --model 'owner/name'") when the Hub address answered with an HTTP
    error status that no Hub gives a missing or private repo (a mirror's path that is no Hub API, a server error):
    what it answered, to which request, and HF_ENDPOINT as the likely cause. None where no server answered so, or it
    answered 401, 403 or 404 (no such repo, no access: the caller's own words)."""
    from huggingface_hub import constants

    from modeling_vit_scratch.common.secrets import shown_url

    answer = hub_answer(error)
    if answer is None or answer.status_code in (401, 403, 404):
        return None
    answered, fix = unreached(error, "")
    return f"{what}: the Hub at {shown_url(constants.ENDPOINT)} {answered}: {fix}."


def unreached(error: BaseException, then: str) -> tuple[str, str]:
    """What happened when the Hub was asked and gave no usable answer, and the fix: where a server answered (an HTTP
    error status), what it answered to which URL (no user name, password or query) and that HF_ENDPOINT may not
    point at a Hub API; the network is blamed only where nothing answered."""
    from modeling_vit_scratch.common.secrets import shown_url

    response = hub_answer(error)
    if response is not None:
        request = getattr(response, "request", None)
        asked = f" to {request.method} {shown_url(str(request.url))}" if request is not None else ""
        fix = f"HF_ENDPOINT may not point at a Hub API: give the Hub's address (or unset HF_ENDPOINT for huggingface.co){then}"
        return f"answered HTTP {response.status_code}{asked}", fix
    return "cannot be reached", f"check the network{then}"
