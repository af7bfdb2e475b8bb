"""A local Hugging Face Hub for tests, on the standard library alone, driven by the unmodified `huggingface_hub`.

`LocalHub(root)` serves the part of the Hub HTTP API that the package's push (`modeling_vit_scratch.sharing.push`) and a
user's load (`from_pretrained(repo_id, trust_remote_code=True)`) use, on 127.0.0.1 (a free port), and keeps model
repos under `root`: `root/models/{namespace}/{name}/repo.json` holds the refs, commits and pull requests, and
`blobs/{sha256}` beside it the file contents. Commit ids are real: the sha1 of the parent commit, the tree and the
message.

Clients reach it as users reach the Hub: in a new process whose environment names it (`LocalHub.env`: HF_ENDPOINT,
a token, its own HF_HOME), started with `LocalHub.run`. Nothing in the test process is patched, and the test process
stays offline. Tests read what clients left from the store itself (`files`, `commits`, `repo_exists`, `private`),
without a client.

Every file is a plain git file: the preupload endpoint answers `uploadMode: "regular"`, so contents come inline
(base64) in the commit and no LFS or Xet transfer ever happens. Repo ids are always `namespace/name`, as on the Hub.
Routes the server does not know are logged to stderr and answered 501 (and listed in `LocalHub.unknown_routes`), as
are the options of known routes the clients do not use (file sizes in repo info, non-recursive trees, byte
ranges).

Faults, for tests of what a client leaves behind: `LocalHub(root, fail_commits={2})` answers the 2nd commit request
(counted from 1 over the server's life, `LocalHub.commit_requests`) with a 500 and commits nothing; the set
`LocalHub.fail_commits` can be changed while the server runs.
"""

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from helpers import PROCESS_TIMEOUT

USER = "local-user"  # the account every token belongs to, and the namespace of repos created without one
TOKEN = "hf_local_test_token"  # the one token `whoami` accepts (other routes do not look at tokens)
GITATTRIBUTES = b"".join(
    f"*.{ext} filter=lfs diff=lfs merge=lfs -text\n".encode()
    for ext in ("bin", "h5", "msgpack", "onnx", "pt", "pth", "safetensors", "zip")
)
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def now() -> str:
    """The current UTC time, the way the Hub writes dates."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def git_blob_oid(data: bytes) -> str:
    """The git object id of a file: what the Hub reports as a regular file's oid and ETag."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def tree_digest(files: dict[str, str]) -> str:
    """A sha1 of a tree's paths and blobs, for commit ids and folder oids."""
    return hashlib.sha1("".join(f"{files[path]} {path}\n" for path in sorted(files)).encode()).hexdigest()


class HubError(Exception):
    """An error answer: status, message (JSON `error` and `X-Error-Message`), the Hub's `X-Error-Code` if any, and
    extra headers or JSON fields."""

    def __init__(self, status: int, message: str, code: str | None = None, headers: dict | None = None, **fields):
        super().__init__(message)
        self.status, self.message, self.code, self.headers, self.fields = status, message, code, headers or {}, fields


def valid_repo_id(repo_id: str) -> bool:
    """Whether `repo_id` is `namespace/name` with safe parts (which also keeps every repo path under the root)."""
    parts = repo_id.split("/")
    return len(parts) == 2 and all(NAME.fullmatch(part) and ".." not in part for part in parts)


def unsupported(what: str) -> HubError:
    """The answer to an option of a known route that the package's clients never use: a 501, like an unknown
    route (and listed with them in `LocalHub.unknown_routes`)."""
    return HubError(501, f"LocalHub does not implement {what}")


def entry_not_found(path: str, commit: str) -> HubError:
    return HubError(404, f"Entry not found: {path}", "EntryNotFound", {"X-Repo-Commit": commit})


@dataclass
class Request:
    """What a handler sees: the route's URL parameters (unquoted), the query string, the headers and the body."""

    params: dict[str, str]
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self):
        try:
            return json.loads(self.body or b"{}")
        except ValueError as error:
            raise HubError(400, f"Invalid JSON body: {error}") from None

    def flag(self, name: str) -> bool:
        return self.query.get(name, [""])[0].lower() in ("1", "true")


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def json_response(data, status: int = 200, headers: dict | None = None) -> Response:
    return Response(status, json.dumps(data).encode(), {"Content-Type": "application/json", **(headers or {})})


class Repo:
    """One model repo on disk: refs, commits and pull requests in `repo.json`, file contents in `blobs/<sha256>`.

    Refs are full names: `refs/heads/<branch>` and `refs/pr/<n>`. A commit is
    `{parent, title, message, date, files: {path: sha256}}`; `blobs` maps a sha256 to the blob's size and git oid.
    """

    def __init__(self, path: Path, repo_id: str):
        self.path, self.id = path, repo_id
        self.state = json.loads((path / "repo.json").read_text())

    def save(self) -> None:
        """Write the state atomically, so that a reader never sees half of it."""
        tmp = self.path / "repo.json.tmp"
        tmp.write_text(json.dumps(self.state, indent=1))
        tmp.replace(self.path / "repo.json")

    @property
    def refs(self) -> dict[str, str]:
        return self.state["refs"]

    def ref_name(self, revision: str) -> str | None:
        """The ref a revision names ('main' -> 'refs/heads/main', 'refs/pr/1' as is), None if it names none."""
        return next((ref for ref in (f"refs/heads/{revision}", revision) if ref in self.refs), None)

    def resolve(self, revision: str) -> str:
        """The commit id of a branch, a `refs/...` name or a full commit id."""
        ref = self.ref_name(revision)
        if ref is not None:
            return self.refs[ref]
        if revision in self.state["commits"]:
            return revision
        raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    @property
    def object_id(self) -> str:
        """A stable 24-hex id, like the Hub's database ids."""
        return hashlib.sha1(f"model/{self.id}".encode()).hexdigest()[:24]

    def commit_info(self, commit_id: str) -> dict:
        return self.state["commits"][commit_id]

    def files(self, commit_id: str) -> dict[str, str]:
        """{path: sha256} of every file at a commit."""
        return self.commit_info(commit_id)["files"]

    def blob(self, sha256: str) -> dict:
        """{size, oid} of a blob."""
        return self.state["blobs"][sha256]

    def read_blob(self, sha256: str) -> bytes:
        return (self.path / "blobs" / sha256).read_bytes()

    def add_blob(self, data: bytes) -> str:
        """Store a file content (once) and return its sha256."""
        sha256 = hashlib.sha256(data).hexdigest()
        if sha256 not in self.state["blobs"]:
            (self.path / "blobs" / sha256).write_bytes(data)
            self.state["blobs"][sha256] = {"size": len(data), "oid": git_blob_oid(data)}
        return sha256

    def commit(self, ref: str, title: str, message: str, files: dict[str, str]) -> str:
        """Record a commit of `files` on top of `ref` (created if new, from no parent) and move `ref` to it."""
        parent = self.refs.get(ref)
        digest = f"parent {parent or ''}\ntree {tree_digest(files)}\n\n{title}\n\n{message}"
        commit_id = hashlib.sha1(digest.encode()).hexdigest()
        self.state["commits"][commit_id] = {
            "parent": parent,
            "title": title,
            "message": message,
            "date": now(),
            "files": files,
        }
        self.refs[ref] = commit_id
        return commit_id

    def history(self, revision: str) -> list[tuple[str, dict]]:
        """(commit id, commit) of a revision and its ancestors, newest first."""
        commit_id, history = self.resolve(revision), []
        while commit_id is not None:
            history.append((commit_id, self.commit_info(commit_id)))
            commit_id = self.commit_info(commit_id)["parent"]
        return history

    def open_pull_request(self, title: str, description: str, base: str) -> int:
        """Open a pull request against the branch ref `base`; its ref `refs/pr/<n>` starts at the head of `base`.
        Return its number."""
        num = len(self.state["pull_requests"]) + 1
        self.state["pull_requests"][str(num)] = {
            "title": title,
            "description": description,
            "base": base,
            "createdAt": now(),
        }
        self.refs[f"refs/pr/{num}"] = self.refs[base]
        return num


class Store:
    """All model repos under a root directory."""

    def __init__(self, root: Path):
        self.root = root

    def repo_path(self, repo_id: str) -> Path:
        return self.root / "models" / repo_id

    def open(self, repo_id: str) -> Repo:
        """The repo, or the Hub's RepoNotFound answer."""
        path = self.repo_path(repo_id)
        if not valid_repo_id(repo_id) or not (path / "repo.json").is_file():
            raise HubError(404, f"Repository not found: {repo_id}", "RepoNotFound")
        return Repo(path, repo_id)

    def create(self, repo_id: str, private: bool, url: str) -> Repo:
        """A new repo whose main branch holds an initial commit with a .gitattributes, like on the Hub.

        If it exists: 409, with its `url` (which the client reads when `exist_ok=True`)."""
        path = self.repo_path(repo_id)
        if (path / "repo.json").exists():
            raise HubError(409, f"You already created this model repo: {repo_id}", url=url)
        (path / "blobs").mkdir(parents=True, exist_ok=True)
        state = {"private": private, "createdAt": now(), "refs": {}, "commits": {}, "blobs": {}, "pull_requests": {}}
        (path / "repo.json").write_text(json.dumps(state))
        repo = Repo(path, repo_id)
        repo.commit("refs/heads/main", "initial commit", "", {".gitattributes": repo.add_blob(GITATTRIBUTES)})
        repo.save()
        return repo


REPO = r"/api/models/(?P<ns>[^/]+)/(?P<name>[^/]+)"
REV = r"(?P<rev>[^/]+)"  # the client quotes revisions whole: refs/pr/1 arrives as refs%2Fpr%2F1


class HubApp:
    """The Hub API: one handler per endpoint, each turning a `Request` into a `Response` (or raising `HubError`)."""

    ROUTES = (  # only what the package's push and a user's load use
        ("POST", r"/api/repos/create", "create_repo"),
        ("POST", r"/api/validate-yaml", "validate_yaml"),
        ("GET", r"/api/whoami-v2", "whoami"),
        ("GET", REPO, "repo_info"),
        ("GET", REPO + r"/revision/" + REV, "repo_info"),
        ("POST", REPO + r"/branch/(?P<branch>[^/]+)", "create_branch"),
        ("POST", REPO + r"/preupload/" + REV, "preupload"),
        ("POST", REPO + r"/commit/" + REV, "commit"),
        ("GET", REPO + r"/tree/" + REV, "list_tree"),
        ("POST", REPO + r"/paths-info/" + REV, "paths_info"),
        ("GET", REPO + r"/commits/" + REV, "list_commits"),
        ("GET", REPO + r"/refs", "list_refs"),
        ("GET", REPO + r"/discussions", "list_discussions"),
        ("GET HEAD", r"/(?P<ns>[^/]+)/(?P<name>[^/]+)/resolve/" + REV + r"/(?P<path>.+)", "resolve_file"),
    )

    def __init__(self, store: Store, url: str, fail_commits: set[int] | None = None):
        self.store, self.url = store, url
        self.fail_commits = fail_commits if fail_commits is not None else set()  # commit requests to answer 500
        self.commit_requests = 0
        self.lock = threading.Lock()  # one request at a time reads or changes the repos
        self.routes = [
            (methods.split(), re.compile(pattern + "$"), getattr(self, name)) for methods, pattern, name in self.ROUTES
        ]
        self.unknown_routes: list[str] = []

    # -- dispatch

    def handle(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> Response:
        """Route a request (on its raw, still quoted path) to its handler; errors become the Hub's error answers."""
        url = urlsplit(raw_path)
        for methods, pattern, handler in self.routes:
            match = pattern.match(url.path)
            if method in methods and match:
                params = {key: unquote(value) for key, value in match.groupdict().items() if value is not None}
                try:
                    with self.lock:
                        return handler(Request(params, parse_qs(url.query), headers, body))
                except HubError as error:
                    if error.status == 501:
                        self.unknown_routes.append(f"{method} {raw_path} ({error.message})")
                        print(f"LocalHub: {error.message} ({method} {raw_path}) -> 501", file=sys.stderr)
                    message = error.message.encode("ascii", "backslashreplace").decode()  # headers are latin-1
                    error_headers = {"X-Error-Message": message, **error.headers}
                    if error.code:
                        error_headers["X-Error-Code"] = error.code
                    return json_response({"error": error.message, **error.fields}, error.status, error_headers)
                except Exception:  # noqa: BLE001 (any failure of a handler is the server's 500)
                    traceback.print_exc(file=sys.stderr)
                    return json_response({"error": "Internal error of the local hub (traceback on stderr)"}, 500)
        self.unknown_routes.append(f"{method} {raw_path}")
        print(f"LocalHub: no route for {method} {raw_path} -> 501", file=sys.stderr)
        return json_response({"error": f"LocalHub does not implement {method} {url.path}"}, 501)

    # -- helpers

    def repo(self, request: Request) -> Repo:
        return self.store.open(f"{request.params['ns']}/{request.params['name']}")

    def repo_url(self, repo_id: str) -> str:
        return f"{self.url}/{repo_id}"

    @staticmethod
    def file_entry(repo: Repo, path: str, sha256: str) -> dict:
        blob = repo.blob(sha256)
        return {"type": "file", "path": path, "size": blob["size"], "oid": blob["oid"]}

    @staticmethod
    def folder_entry(files: dict[str, str], path: str) -> dict:
        inside = {name: sha for name, sha in files.items() if name.startswith(path + "/")}
        return {"type": "directory", "path": path, "size": 0, "oid": tree_digest(inside)}

    @staticmethod
    def writable_ref(repo: Repo, revision: str) -> str:
        """The ref a commit to `revision` moves: a branch or a pull request ref, not a bare commit."""
        ref = repo.ref_name(revision)
        if ref is None:
            repo.resolve(revision)  # RevisionNotFound if it names nothing at all
            raise HubError(400, f"Can only commit to a branch or a pull request ref, not {revision}")
        return ref

    # -- repos

    def create_repo(self, request: Request) -> Response:
        """POST /api/repos/create {name, organization, type, visibility|private}: 409 if it exists."""
        body = request.json()
        repo_id = f"{body.get('organization') or USER}/{body.get('name', '')}"
        if (body.get("type") or "model") != "model":
            raise HubError(400, f"This local hub has model repos only, not {body['type']} repos")
        if not valid_repo_id(repo_id):
            raise HubError(400, f"Invalid repo name: {repo_id}")
        private = bool(body.get("private")) or body.get("visibility") == "private"
        repo = self.store.create(repo_id, private, self.repo_url(repo_id))
        return json_response({"url": self.repo_url(repo.id), "name": repo.id, "id": repo.object_id})

    def whoami(self, request: Request) -> Response:
        """GET /api/whoami-v2: USER for `Authorization: Bearer TOKEN`, 401 for any other token or none."""
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            raise HubError(401, "Invalid credentials in Authorization header")
        return json_response({"type": "user", "name": USER, "auth": {"type": "access_token"}})

    def list_refs(self, request: Request) -> Response:
        """GET /api/models/{repo_id}/refs: the branches and their commits (no tags, no conversions)."""
        repo = self.repo(request)
        branches = [
            {"name": ref.removeprefix("refs/heads/"), "ref": ref, "targetCommit": commit}
            for ref, commit in sorted(repo.refs.items())
            if ref.startswith("refs/heads/")
        ]
        return json_response({"branches": branches, "converts": [], "tags": []})

    def list_discussions(self, request: Request) -> Response:
        """GET /api/models/{repo_id}/discussions: its pull requests, newest first, all open (none is ever merged or
        closed here), on one page; a filter other than type=pull_request, status=open is not served."""
        for name, served in (("type", "pull_request"), ("status", "open")):
            if request.query.get(name, [served]) != [served]:
                raise unsupported(f"discussions with {name}={request.query[name][0]}")
        repo = self.repo(request)
        found = [
            {
                "num": int(num),
                "title": pull["title"],
                "author": {"name": "local-user"},
                "createdAt": pull["createdAt"],
                "status": "open",
                "repo": {"name": repo.id, "type": "model"},
                "isPullRequest": True,
            }
            for num, pull in sorted(repo.state["pull_requests"].items(), key=lambda item: -int(item[0]))
        ]
        return json_response({"count": len(found), "start": 0, "discussions": found})

    def repo_info(self, request: Request) -> Response:
        """GET /api/models/{repo_id}[/revision/{revision}]: id, sha, siblings (their names)."""
        if request.flag("blobs"):
            raise unsupported("file sizes in repo info (blobs=true)")
        repo = self.repo(request)
        commit_id = repo.resolve(request.params.get("rev", "main"))
        siblings = [{"rfilename": path} for path in sorted(repo.files(commit_id))]
        namespace = repo.id.split("/")[0]
        return json_response(
            {
                "_id": repo.object_id,
                "id": repo.id,
                "author": namespace,
                "sha": commit_id,
                "lastModified": repo.commit_info(commit_id)["date"],
                "createdAt": repo.state["createdAt"],
                "private": repo.state["private"],
                "disabled": False,
                "gated": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "siblings": siblings,
            }
        )

    def validate_yaml(self, request: Request) -> Response:
        """POST /api/validate-yaml {content}: only rejects front matter that is opened and never closed."""
        content = request.json().get("content", "")
        if content.startswith("---") and "\n---" not in content[3:]:
            message = "README.md front matter starts with '---' but has no closing '---' line"
            return json_response({"error": message, "errors": [{"message": message}]}, 400)
        return json_response({"errors": [], "warnings": []})

    # -- writing

    def preupload(self, request: Request) -> Response:
        """POST .../preupload/{revision}: every file is "regular" (content inline in the commit); its current oid."""
        repo = self.repo(request)
        files = repo.files(repo.resolve(request.params["rev"]))
        answers = [
            {
                "path": item["path"],
                "uploadMode": "regular",
                "shouldIgnore": False,
                "oid": repo.blob(files[item["path"]])["oid"] if item["path"] in files else None,
            }
            for item in request.json().get("files", [])
        ]
        return json_response({"files": answers})

    def commit(self, request: Request) -> Response:
        """POST .../commit/{revision} (NDJSON: a header, then file / deletedFile lines).

        With `create_pr=1` the commit goes to a new pull request opened against the branch `revision`.
        A request whose number is in `fail_commits` is answered 500 before anything changes.
        """
        self.commit_requests += 1
        if self.commit_requests in self.fail_commits:
            raise HubError(500, f"Injected fault: commit request {self.commit_requests} fails")
        repo = self.repo(request)
        ref = self.writable_ref(repo, request.params["rev"])
        try:
            lines = [json.loads(line) for line in request.body.splitlines() if line.strip()]
        except ValueError as error:
            raise HubError(400, f"Invalid NDJSON commit payload: {error}") from None
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, "A commit payload starts with a header line")
        header = lines[0]["value"]
        head = repo.refs[ref]
        if header.get("parentCommit") not in (None, head):
            raise HubError(412, f"A commit has happened since {header['parentCommit']}: {ref} is at {head}")
        files = self.apply_operations(repo, dict(repo.files(head)), lines[1:])
        title, description, pull_request_url = header.get("summary", ""), header.get("description", ""), None
        repo_url = self.repo_url(repo.id)
        if request.flag("create_pr"):
            num = repo.open_pull_request(title, description, base=ref)
            ref, pull_request_url = f"refs/pr/{num}", f"{repo_url}/discussions/{num}"
        commit_id = repo.commit(ref, title, description, files)
        repo.save()
        return json_response(
            {
                "success": True,
                "commitOid": commit_id,
                "commitUrl": f"{repo_url}/commit/{commit_id}",
                "hookOutput": "",
                "pullRequestUrl": pull_request_url,
            }
        )

    @staticmethod
    def apply_operations(repo: Repo, files: dict[str, str], operations: list[dict]) -> dict[str, str]:
        """The tree `files` after a commit's operations; nothing is committed if one of them fails."""
        for operation in operations:
            key, value = operation.get("key"), operation.get("value", {})
            path = value.get("path", "")
            if key == "file":
                files[path] = repo.add_blob(base64.b64decode(value["content"]))
            elif key == "deletedFile":
                if files.pop(path, None) is None:
                    raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
            elif key == "lfsFile":
                raise HubError(
                    400,
                    f"LFS files are not supported by the local hub ({path}): it answers uploadMode "
                    "'regular' at preupload, so contents must come inline",
                )
            else:
                raise HubError(400, f"Unknown commit operation: {key}")
        return files

    def create_branch(self, request: Request) -> Response:
        """POST .../branch/{branch} {startingPoint}: a new branch (from main by default); 409 if it exists."""
        repo, branch = self.repo(request), request.params["branch"]
        if branch.startswith("refs/") or not NAME.fullmatch(branch.replace("/", "-")):
            raise HubError(400, f"Invalid branch name: {branch}")
        if f"refs/heads/{branch}" in repo.refs:
            raise HubError(409, f"Reference already exists: refs/heads/{branch}")
        repo.refs[f"refs/heads/{branch}"] = repo.resolve(request.json().get("startingPoint") or "main")
        repo.save()
        return json_response({})

    # -- reading

    def list_tree(self, request: Request) -> Response:
        """GET .../tree/{revision}?recursive=true: every folder, then every file, in one page."""
        if not request.flag("recursive"):
            raise unsupported("tree listings other than recursive ones from the root")
        repo = self.repo(request)
        files = repo.files(repo.resolve(request.params["rev"]))
        folders = sorted({path.rsplit("/", i)[0] for path in files for i in range(1, path.count("/") + 1)})
        entries = [self.file_entry(repo, path, files[path]) for path in sorted(files)]
        return json_response([self.folder_entry(files, path) for path in folders] + entries)

    def paths_info(self, request: Request) -> Response:
        """POST .../paths-info/{revision} (form: paths=...): the files and folders among `paths`; others are skipped."""
        repo = self.repo(request)
        files = repo.files(repo.resolve(request.params["rev"]))
        answer = []
        for path in parse_qs(request.body.decode()).get("paths", []):
            path = path.strip("/")
            if path in files:
                answer.append(self.file_entry(repo, path, files[path]))
            elif any(name.startswith(path + "/") for name in files):
                answer.append(self.folder_entry(files, path))
        return json_response(answer)

    def list_commits(self, request: Request) -> Response:
        """GET .../commits/{revision}: the revision's history, newest first, in one page."""
        history = self.repo(request).history(request.params["rev"])
        return json_response(
            [
                {
                    "id": commit_id,
                    "title": commit["title"],
                    "message": commit["message"],
                    "authors": [{"user": USER}],
                    "date": commit["date"],
                }
                for commit_id, commit in history
            ]
        )

    def resolve_file(self, request: Request) -> Response:
        """GET/HEAD /{repo_id}/resolve/{revision}/{path}: the bytes, `X-Repo-Commit`, the git oid as `ETag`."""
        if "Range" in request.headers:
            raise unsupported("byte ranges (a client resuming a download)")
        repo = self.repo(request)
        commit_id, path = repo.resolve(request.params["rev"]), request.params["path"]
        files = repo.files(commit_id)
        if path not in files:
            raise entry_not_found(path, commit_id)
        headers = {
            "X-Repo-Commit": commit_id,
            "ETag": f'"{repo.blob(files[path])["oid"]}"',
            "Content-Type": "application/octet-stream",
        }
        return Response(200, repo.read_blob(files[path]), headers)


class _Handler(BaseHTTPRequestHandler):
    """HTTP plumbing: read the body, let the app answer, write the answer (headers only for HEAD)."""

    server_version = "LocalHub/1.0"

    def do_GET(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        response = self.server.app.handle(self.command, self.path, self.headers, self.rfile.read(length))
        self.send_response(response.status)
        for name, value in response.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    do_HEAD = do_POST = do_PUT = do_DELETE = do_GET

    def log_message(self, format: str, *args) -> None:
        """Quiet: only unknown routes and server errors reach stderr."""


class _Server(ThreadingHTTPServer):
    request_queue_size = 64  # snapshot_download opens several connections at once
    app: HubApp


class LocalHub:
    """A Hub-compatible server on 127.0.0.1 (a free port) storing repos under `root`; `url` is set once started."""

    def __init__(self, root: str | Path, fail_commits=()):
        self.root = Path(root)
        self.fail_commits: set[int] = set(fail_commits)  # shared with the app: may change while the server runs
        self.url: str | None = None
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "LocalHub":
        self.root.mkdir(parents=True, exist_ok=True)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._server.app = HubApp(Store(self.root), self.url, self.fail_commits)
        # A short poll interval: stop() waits for the serving loop to notice the shutdown.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="local-hub", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def commit_requests(self) -> int:
        """The commit requests received so far (answered or failed)."""
        return self._server.app.commit_requests

    @property
    def unknown_routes(self) -> list[str]:
        """The requests answered 501 so far: "METHOD /path?query", and "(why)" for an option no client uses."""
        return self._server.app.unknown_routes

    def env(self, hf_home: str | Path) -> dict[str, str]:
        """Environment variables that point a fresh process's huggingface_hub at this hub, with its own cache."""
        return {
            "HF_ENDPOINT": self.url,
            "HF_TOKEN": TOKEN,
            "HF_HOME": str(hf_home),
            "HF_HUB_CACHE": str(Path(hf_home) / "hub"),
            "HF_HUB_OFFLINE": "0",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "NO_PROXY": "127.0.0.1,localhost",  # a proxy configured on the machine must not see local requests
        }

    def run(self, *args, hf_home: str | Path, env: dict | None = None, timeout: float = PROCESS_TIMEOUT):
        """`python *args` in a new process whose huggingface_hub (and transformers) reach this hub through the
        environment, as a user's would: this process's environment, then `env(hf_home)`, then `env`."""
        return subprocess.run(
            [sys.executable, *map(str, args)],
            env={**os.environ, **self.env(hf_home), **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    # -- what clients left on the hub, read from the store (no client, no request)

    def repo_exists(self, repo_id: str) -> bool:
        return (Store(self.root).repo_path(repo_id) / "repo.json").is_file()

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        """{path: content} of every file of a model repo at a branch, `refs/pr/N` or commit id."""
        repo = Store(self.root).open(repo_id)
        return {path: repo.read_blob(sha256) for path, sha256 in repo.files(repo.resolve(revision)).items()}

    def commits(self, repo_id: str, revision: str = "main") -> list[tuple[str, str]]:
        """(commit id, title) of a revision's history, newest first."""
        return [(commit_id, commit["title"]) for commit_id, commit in Store(self.root).open(repo_id).history(revision)]

    def private(self, repo_id: str) -> bool:
        return Store(self.root).open(repo_id).state["private"]


@pytest.fixture
def local_hub(tmp_path):
    """A started `LocalHub` storing its repos under tmp_path/"hub".

    Nothing in this process is pointed at it (the test process stays offline): clients run in new processes
    started with `LocalHub.run`, and tests read what those clients left on the hub with `files`, `commits` and
    `repo_exists`.
    """
    with LocalHub(tmp_path / "hub") as hub:
        yield hub
