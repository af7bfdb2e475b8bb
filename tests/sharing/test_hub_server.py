"""The local hub, through the real huggingface_hub client in a new process (as a user runs it): the routes the
package's push and load use, their revisions, branches, pull request refs and errors."""

import hashlib
import json
import random
import subprocess
import sys
import urllib.request
from pathlib import Path
from urllib.error import HTTPError

import pytest
from helpers import PROCESS_TIMEOUT
from hub_server import USER, LocalHub, local_hub  # noqa: F401  (local_hub is a fixture)

REPO_ID = f"{USER}/tiny"
# new processes, scripts or whole suites: `make test` runs them, `make test-fast` leaves them out
pytestmark = pytest.mark.integration

# The start of every client process: argv is the repo id and the folder to upload; `out` is printed as JSON.
CLIENT = """
import json, re, sys
from pathlib import Path
from huggingface_hub import HfApi, RepoFile, RepoFolder, hf_hub_download, snapshot_download
REPO_ID, folder, out = sys.argv[1], Path(sys.argv[2]), {}
COMMIT_ID = re.compile(r"[0-9a-f]{40}")
api = HfApi()



def fetch(filename, **kwargs):
    return Path(hf_hub_download(REPO_ID, filename, **kwargs)).read_bytes().decode()


def error(call, *args, **kwargs):
    '''[the error's class name, its HTTP status or None, its message] of a call that must fail.'''
    try:
        call(*args, **kwargs)
    except Exception as caught:
        return [type(caught).__name__, getattr(getattr(caught, "response", None), "status_code", None), str(caught)]
    raise AssertionError(f"{call.__name__}{args} did not fail")

"""
PUSH = """
api.create_repo(REPO_ID)
first = api.upload_folder(repo_id=REPO_ID, folder_path=folder, commit_message="Add model")
"""


@pytest.fixture(autouse=True)
def _every_route_known(local_hub):  # noqa: F811
    """No test may reach an endpoint the server does not implement."""
    yield
    assert local_hub.unknown_routes == []


@pytest.fixture
def folder(tmp_path):
    """A model folder: ~3 MB of binary weights, a config and a file in a subfolder."""
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "weights.bin").write_bytes(random.Random(0).randbytes(3_000_000))
    (folder / "config.json").write_text('{"hidden_size": 36}\n')
    (folder / "sub" / "notes.txt").write_text("notes\n")
    return folder


def client(hub, folder: Path, code: str, pushed: bool = True) -> dict:
    """Run `code` after `CLIENT` (and, if `pushed`, after `folder` is uploaded to a new repo as `first`) in a new
    process whose huggingface_hub reaches `hub` through the environment; what it put in `out`."""
    source = CLIENT + (PUSH if pushed else "") + code + "\nprint(json.dumps(out))\n"
    result = hub.run("-c", source, REPO_ID, folder, hf_home=folder.parent / "hf_home")
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def get(url: str, **headers: str) -> tuple[int, bytes]:
    """A plain GET from this process (no Hub client, no proxy): status and body."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return response.status, response.read()
    except HTTPError as error:
        return error.code, error.read()


def test_create_repo_with_an_initial_commit_and_exist_ok(local_hub, folder):  # noqa: F811
    out = client(
        local_hub,
        folder,
        """
url = api.create_repo(REPO_ID)
out["url"] = [url.repo_id, url.endpoint, api.endpoint]
info = api.repo_info(REPO_ID)
out["info"] = [info.sha, [s.rfilename for s in info.siblings]]
out["again"] = error(api.create_repo, REPO_ID)
out["exist_ok"] = api.create_repo(REPO_ID, exist_ok=True).repo_id
out["no_namespace"] = api.create_repo("other").repo_id
""",
        pushed=False,
    )
    assert out["url"] == [REPO_ID, local_hub.url, local_hub.url]
    assert out["info"] == [local_hub.commits(REPO_ID)[0][0], [".gitattributes"]]
    assert out["again"][:2] == ["HfHubHTTPError", 409] and out["exist_ok"] == REPO_ID
    assert out["no_namespace"] == f"{USER}/other" and local_hub.repo_exists(f"{USER}/other")  # the user's namespace


def test_upload_folder_then_download_identical_bytes(local_hub, folder):  # noqa: F811
    out = client(
        local_hub,
        folder,
        """
out["commit"] = [first.oid, first.commit_message, api.repo_info(REPO_ID).sha]
out["files"] = sorted(api.list_repo_files(REPO_ID))
out["paths"] = {name: hf_hub_download(REPO_ID, name) for name in ("weights.bin", "config.json", "sub/notes.txt")}
""",
    )
    oid, message, sha = out["commit"]
    assert oid == sha == local_hub.commits(REPO_ID)[0][0] and message == "Add model"
    assert out["files"] == [".gitattributes", "config.json", "sub/notes.txt", "weights.bin"]
    assert set(local_hub.files(REPO_ID)) == set(out["files"])
    for name, path in out["paths"].items():
        assert f"/snapshots/{oid}/" in path and path.startswith(str(folder.parent / "hf_home"))
        assert Path(path).read_bytes() == (folder / name).read_bytes() == local_hub.files(REPO_ID)[name]


def test_each_commit_keeps_its_own_content(local_hub, folder):  # noqa: F811
    out = client(
        local_hub,
        folder,
        """
second = api.upload_file(path_or_fileobj=b'{"hidden_size": 48}\\n', path_in_repo="config.json", repo_id=REPO_ID)
out["ids"] = [first.oid, second.oid]
out["configs"] = [fetch("config.json", revision=rev) for rev in (first.oid, second.oid, None)]
out["history"] = [[c.commit_id, c.title] for c in api.list_repo_commits(REPO_ID)]
out["first_sha"] = api.repo_info(REPO_ID, revision=first.oid).sha
# An unchanged file makes no commit; a stale parent_commit is refused.
weights = folder / "weights.bin"
out["unchanged"] = api.upload_file(path_or_fileobj=weights, path_in_repo="weights.bin", repo_id=REPO_ID).oid
stale = dict(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=REPO_ID, parent_commit=first.oid)
out["stale"] = error(api.upload_file, **stale)
""",
    )
    first, second = out["ids"]
    assert second != first and out["configs"] == ['{"hidden_size": 36}\n', *['{"hidden_size": 48}\n'] * 2]
    assert out["history"] == [list(commit) for commit in local_hub.commits(REPO_ID)]
    assert [commit_id for commit_id, _ in out["history"][:2]] == [second, first]
    assert out["history"][-1][1] == "initial commit" and out["first_sha"] == first
    assert out["unchanged"] == second and out["stale"][:2] == ["HfHubHTTPError", 412]
    assert "x.txt" not in local_hub.files(REPO_ID)


def test_delete_file(local_hub, folder):  # noqa: F811
    out = client(
        local_hub,
        folder,
        """
api.delete_file("config.json", REPO_ID)
out["again"] = error(api.delete_file, "config.json", REPO_ID)
""",
    )
    assert set(local_hub.files(REPO_ID)) == {".gitattributes", "weights.bin", "sub/notes.txt"}
    assert out["again"][0] == "RemoteEntryNotFoundError" and "doesn't exist" in out["again"][2]


def test_snapshot_download_gets_every_file(local_hub, folder):  # noqa: F811
    out = client(
        local_hub,
        folder,
        """
out["local"] = snapshot_download(REPO_ID, local_dir=folder.parent / "snapshot")
out["cached"] = snapshot_download(REPO_ID)
""",
    )
    for name in ("weights.bin", "config.json", "sub/notes.txt"):
        assert (folder.parent / "snapshot" / name).read_bytes() == (folder / name).read_bytes()
    assert out["local"] == str(folder.parent / "snapshot")
    assert out["cached"].endswith(f"/snapshots/{local_hub.commits(REPO_ID)[0][0]}")


def test_list_repo_tree_and_paths_info(local_hub, folder):  # noqa: F811
    out = client(
        local_hub,
        folder,
        """
tree = api.list_repo_tree(REPO_ID, revision=first.oid, recursive=True)
out["tree"] = {e.path: [type(e).__name__, getattr(e, "size", None), getattr(e, "blob_id", None)] for e in tree}
out["lfs"] = [e.path for e in tree if getattr(e, "lfs", None) is not None]
info = api.get_paths_info(REPO_ID, ["config.json", "sub", "missing.txt"], revision=first.oid)
out["info"] = [[type(entry).__name__, entry.path] for entry in info]
""",
    )
    weights = (folder / "weights.bin").read_bytes()
    assert set(out["tree"]) == {".gitattributes", "weights.bin", "config.json", "sub", "sub/notes.txt"}
    assert out["tree"]["weights.bin"] == ["RepoFile", len(weights), git_oid(weights)] and out["lfs"] == []
    assert out["tree"]["sub/notes.txt"] == ["RepoFile", 6, git_oid(b"notes\n")]
    assert out["tree"]["sub"][0] == "RepoFolder"
    assert out["info"] == [["RepoFile", "config.json"], ["RepoFolder", "sub"]]


def test_branch_gets_its_own_commits(local_hub, folder):  # noqa: F811
    out = client(
        local_hub,
        folder,
        """
api.create_branch(REPO_ID, branch="dev")
commit = api.upload_file(path_or_fileobj=b"on dev\\n", path_in_repo="dev.txt", repo_id=REPO_ID, revision="dev")
out["dev"] = [commit.oid, fetch("dev.txt", revision="dev"), api.repo_info(REPO_ID, revision="dev").sha]
out["again"] = error(api.create_branch, REPO_ID, branch="dev")
api.create_branch(REPO_ID, branch="dev", exist_ok=True)
""",
    )
    commit, content, sha = out["dev"]
    assert content == "on dev\n" and sha == commit == local_hub.commits(REPO_ID, "dev")[0][0]
    assert "dev.txt" not in local_hub.files(REPO_ID) and "dev.txt" in local_hub.files(REPO_ID, "dev")
    assert local_hub.commits(REPO_ID, "dev")[1] == local_hub.commits(REPO_ID)[0]  # branched from main
    assert out["again"][:2] == ["HfHubHTTPError", 409]


def test_pull_requests_from_create_commit(local_hub, folder):  # noqa: F811
    out = client(
        local_hub,
        folder,
        """
pr = api.upload_file(path_or_fileobj=b"proposed\\n", path_in_repo="config.json", repo_id=REPO_ID, create_pr=True)
out["pr"] = [pr.pr_url, pr.pr_revision, fetch("config.json", revision=pr.pr_revision)]
pin = api.upload_file(path_or_fileobj=b"pinned\\n", path_in_repo="pin.txt", repo_id=REPO_ID, revision=pr.pr_revision)
out["pin"] = [pin.oid, api.repo_info(REPO_ID).sha, first.oid]
""",
    )
    assert out["pr"] == [f"{local_hub.url}/{REPO_ID}/discussions/1", "refs/pr/1", "proposed\n"]
    pin, main, first = out["pin"]
    assert main == first == local_hub.commits(REPO_ID)[0][0]  # main is untouched
    assert [commit_id for commit_id, _ in local_hub.commits(REPO_ID, "refs/pr/1")[:3:2]] == [pin, first]
    assert local_hub.files(REPO_ID, "refs/pr/1")["pin.txt"] == b"pinned\n"


def test_missing_repo_file_and_revision_raise_the_clients_errors(local_hub, folder):  # noqa: F811
    out = client(
        local_hub,
        folder,
        """
out["errors"] = [
    error(hf_hub_download, f"{REPO_ID}-missing", "config.json")[0],
    error(api.repo_info, f"{REPO_ID}-missing")[0],
    error(hf_hub_download, REPO_ID, "missing.json")[0],
    error(hf_hub_download, REPO_ID, "config.json", revision="no-such-branch")[0],
    error(api.list_repo_files, REPO_ID, revision="f" * 40)[0],
]
out["exists"] = [api.file_exists(REPO_ID, "missing.json"), api.file_exists(REPO_ID, "sub/notes.txt")]
""",
    )
    assert out["errors"] == [
        "RepositoryNotFoundError",
        "RepositoryNotFoundError",
        "RemoteEntryNotFoundError",
        "RevisionNotFoundError",
        "RevisionNotFoundError",
    ]
    assert out["exists"] == [False, True]


def test_invalid_readme_front_matter_is_refused(local_hub, folder):  # noqa: F811
    out = client(
        local_hub,
        folder,
        """
never_closed = dict(path_or_fileobj=b"---\\nlicense: mit\\n", path_in_repo="README.md", repo_id=REPO_ID)
out["open"] = error(api.upload_file, **never_closed)
api.upload_file(path_or_fileobj=b"---\\nlicense: mit\\n---\\n# Tiny\\n", path_in_repo="README.md", repo_id=REPO_ID)
""",
    )
    assert out["open"][0] == "ValueError" and "Invalid metadata in README.md" in out["open"][2]
    assert local_hub.files(REPO_ID)["README.md"] == b"---\nlicense: mit\n---\n# Tiny\n"


def test_repos_persist_across_restarts_and_what_no_client_uses_is_501(local_hub, folder, tmp_path):  # noqa: F811
    client(local_hub, folder, "")
    with LocalHub(tmp_path / "hub") as restarted:
        assert restarted.url != local_hub.url
        status, body = get(f"{restarted.url}/api/models/{REPO_ID}")
        assert status == 200 and json.loads(body)["sha"] == local_hub.commits(REPO_ID)[0][0]
        status, body = get(f"{restarted.url}/api/spaces")
        assert status == 501 and json.loads(body)["error"] == "LocalHub does not implement GET /api/spaces"
        status, body = get(f"{restarted.url}/{REPO_ID}/resolve/main/config.json", Range="bytes=0-3")
        assert status == 501 and json.loads(body)["error"].startswith("LocalHub does not implement byte ranges")
        ranged = f"GET /{REPO_ID}/resolve/main/config.json (LocalHub does not implement byte ranges"
        assert restarted.unknown_routes[0] == "GET /api/spaces" and restarted.unknown_routes[1].startswith(ranged)
        assert len(restarted.unknown_routes) == 2


def test_a_fresh_process_finds_the_hub_through_the_environment_alone(local_hub, folder, tmp_path):  # noqa: F811
    client(local_hub, folder, "")
    code = f"from huggingface_hub import hf_hub_download; print(hf_hub_download({REPO_ID!r}, 'sub/notes.txt'))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=local_hub.env(tmp_path / "fresh_home"),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    path = result.stdout.strip()
    assert path.startswith(str(tmp_path / "fresh_home")) and Path(path).read_text() == "notes\n"
