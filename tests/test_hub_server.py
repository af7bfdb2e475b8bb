"""The local hub, through the real huggingface_hub client: repos, commits, revisions, branches, PRs, errors."""

import hashlib
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hub_server import USER, LocalHub, local_hub  # noqa: F401  (local_hub is a fixture)
from huggingface_hub import HfApi, RepoFile, RepoFolder, hf_hub_download, snapshot_download
from huggingface_hub.errors import (
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import get_session

REPO_ID = f"{USER}/tiny"
COMMIT_ID = re.compile(r"[0-9a-f]{40}")


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


@pytest.fixture
def pushed(folder):
    """`folder` uploaded to a new repo: (api, commit info)."""
    api = HfApi()
    api.create_repo(REPO_ID)
    return api, api.upload_folder(repo_id=REPO_ID, folder_path=folder, commit_message="Add model")


def fetch(filename: str, **kwargs) -> bytes:
    """The bytes of a file of the test repo, through hf_hub_download."""
    return Path(hf_hub_download(REPO_ID, filename, **kwargs)).read_bytes()


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_create_repo_with_an_initial_commit_and_exist_ok():
    api = HfApi()
    url = api.create_repo(REPO_ID)
    assert url.repo_id == REPO_ID and url.endpoint == api.endpoint
    info = api.repo_info(REPO_ID)
    assert COMMIT_ID.fullmatch(info.sha) and [s.rfilename for s in info.siblings] == [".gitattributes"]
    with pytest.raises(HfHubHTTPError) as error:
        api.create_repo(REPO_ID)
    assert error.value.response.status_code == 409
    assert api.create_repo(REPO_ID, exist_ok=True).repo_id == REPO_ID
    assert api.create_repo("tiny-data", repo_type="dataset").repo_id == f"{USER}/tiny-data"  # user's namespace


def test_upload_folder_then_download_identical_bytes(pushed, folder):
    api, commit = pushed
    assert COMMIT_ID.fullmatch(commit.oid) and commit.commit_message == "Add model"
    assert api.repo_info(REPO_ID).sha == commit.oid
    assert set(api.list_repo_files(REPO_ID)) == {".gitattributes", "weights.bin", "config.json", "sub/notes.txt"}
    for name in ("weights.bin", "config.json", "sub/notes.txt"):
        path = hf_hub_download(REPO_ID, name)
        assert f"/snapshots/{commit.oid}/" in path
        assert Path(path).read_bytes() == (folder / name).read_bytes()


def test_each_commit_keeps_its_own_content(pushed, folder):
    api, first = pushed
    second = api.upload_file(path_or_fileobj=b'{"hidden_size": 48}\n', path_in_repo="config.json", repo_id=REPO_ID)
    assert COMMIT_ID.fullmatch(second.oid) and second.oid != first.oid
    assert fetch("config.json", revision=first.oid) == b'{"hidden_size": 36}\n'
    assert fetch("config.json", revision=second.oid) == fetch("config.json") == b'{"hidden_size": 48}\n'
    history = api.list_repo_commits(REPO_ID)
    assert [c.commit_id for c in history[:2]] == [second.oid, first.oid] and history[-1].title == "initial commit"
    assert api.repo_info(REPO_ID, revision=first.oid).sha == first.oid
    # An unchanged file makes no commit; a stale parent_commit is refused.
    unchanged = api.upload_file(path_or_fileobj=folder / "weights.bin", path_in_repo="weights.bin", repo_id=REPO_ID)
    assert unchanged.oid == second.oid
    with pytest.raises(HfHubHTTPError) as error:
        api.upload_file(path_or_fileobj=b"x", path_in_repo="x.txt", repo_id=REPO_ID, parent_commit=first.oid)
    assert error.value.response.status_code == 412


def test_delete_file_and_folder(pushed):
    api, _ = pushed
    api.delete_file("config.json", REPO_ID)
    api.delete_folder("sub", REPO_ID)
    assert set(api.list_repo_files(REPO_ID)) == {".gitattributes", "weights.bin"}
    with pytest.raises(RemoteEntryNotFoundError, match="doesn't exist"):
        api.delete_file("config.json", REPO_ID)


def test_snapshot_download_gets_every_file(pushed, folder, tmp_path):
    _, commit = pushed
    local = snapshot_download(REPO_ID, local_dir=tmp_path / "snapshot")
    for name in ("weights.bin", "config.json", "sub/notes.txt"):
        assert (tmp_path / "snapshot" / name).read_bytes() == (folder / name).read_bytes()
    assert local == str(tmp_path / "snapshot")
    assert snapshot_download(REPO_ID).endswith(f"/snapshots/{commit.oid}")


def test_list_repo_tree_and_paths_info(pushed, folder):
    api, _ = pushed
    top = {entry.path: entry for entry in api.list_repo_tree(REPO_ID)}
    assert set(top) == {".gitattributes", "weights.bin", "config.json", "sub"}
    weights = (folder / "weights.bin").read_bytes()
    assert top["weights.bin"].size == len(weights) and top["weights.bin"].blob_id == git_oid(weights)
    assert top["weights.bin"].lfs is None and isinstance(top["sub"], RepoFolder)
    assert {entry.path for entry in api.list_repo_tree(REPO_ID, recursive=True)} == {*top, "sub/notes.txt"}
    assert [entry.path for entry in api.list_repo_tree(REPO_ID, path_in_repo="sub")] == ["sub/notes.txt"]
    sizes = {s.rfilename: s.size for s in api.model_info(REPO_ID, files_metadata=True).siblings}
    assert sizes["weights.bin"] == len(weights) and sizes["sub/notes.txt"] == 6
    info = api.get_paths_info(REPO_ID, ["config.json", "sub", "missing.txt"])
    assert [(type(entry), entry.path) for entry in info] == [(RepoFile, "config.json"), (RepoFolder, "sub")]


def test_branch_gets_its_own_commits(pushed):
    api, first = pushed
    api.create_branch(REPO_ID, branch="dev")
    commit = api.upload_file(path_or_fileobj=b"on dev\n", path_in_repo="dev.txt", repo_id=REPO_ID, revision="dev")
    assert fetch("dev.txt", revision="dev") == b"on dev\n"
    assert "dev.txt" not in api.list_repo_files(REPO_ID)
    refs = {ref.name: ref.target_commit for ref in api.list_repo_refs(REPO_ID).branches}
    assert refs == {"main": first.oid, "dev": commit.oid}
    with pytest.raises(HfHubHTTPError) as error:
        api.create_branch(REPO_ID, branch="dev")
    assert error.value.response.status_code == 409
    api.create_branch(REPO_ID, branch="dev", exist_ok=True)
    api.create_branch(REPO_ID, branch="old", revision=api.list_repo_commits(REPO_ID)[-1].commit_id)
    assert api.list_repo_files(REPO_ID, revision="old") == [".gitattributes"]


def test_pull_requests_from_create_commit_and_upload_folder(pushed, folder):
    api, first = pushed
    pr = api.upload_file(path_or_fileobj=b"proposed\n", path_in_repo="config.json", repo_id=REPO_ID, create_pr=True)
    assert pr.pr_url.endswith("/discussions/1") and pr.pr_revision == "refs/pr/1"
    assert fetch("config.json", revision=pr.pr_revision) == b"proposed\n"
    assert api.repo_info(REPO_ID).sha == first.oid  # main is untouched
    (folder / "config.json").write_text("{}\n")
    pr = api.upload_folder(repo_id=REPO_ID, folder_path=folder, create_pr=True)  # opens the PR, then commits to it
    assert pr.pr_revision == "refs/pr/2"
    assert fetch("config.json", revision="refs/pr/2") == b"{}\n"
    pulls = api.list_repo_refs(REPO_ID, include_pull_requests=True).pull_requests
    assert [ref.ref for ref in pulls] == ["refs/pr/1", "refs/pr/2"] and pulls[1].target_commit == pr.oid


def test_missing_repo_file_and_revision_raise_the_clients_errors(pushed):
    api, _ = pushed
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download(f"{USER}/missing", "config.json")
    with pytest.raises(RepositoryNotFoundError):
        api.repo_info(f"{USER}/missing")
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(REPO_ID, "missing.json")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download(REPO_ID, "config.json", revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        api.list_repo_files(REPO_ID, revision="f" * 40)
    assert not api.file_exists(REPO_ID, "missing.json") and api.file_exists(REPO_ID, "sub/notes.txt")


def test_invalid_readme_front_matter_is_refused(pushed):
    api, _ = pushed
    with pytest.raises(ValueError, match="Invalid metadata in README.md"):
        api.upload_file(path_or_fileobj=b"---\nlicense: mit\n", path_in_repo="README.md", repo_id=REPO_ID)
    api.upload_file(path_or_fileobj=b"---\nlicense: mit\n---\n# Tiny\n", path_in_repo="README.md", repo_id=REPO_ID)


def test_range_requests_get_a_slice(pushed, folder, local_hub):  # noqa: F811
    url = f"{local_hub.url}/{REPO_ID}/resolve/main/weights.bin"
    response = get_session().get(url, headers={"Range": "bytes=10-19"})
    assert response.status_code == 206 and response.content == (folder / "weights.bin").read_bytes()[10:20]
    assert response.headers["Content-Range"] == "bytes 10-19/3000000"


def test_dataset_repos():
    api = HfApi()
    api.create_repo("data", repo_type="dataset")
    api.upload_file(
        path_or_fileobj=b"a,b\n1,2\n", path_in_repo="train.csv", repo_id=f"{USER}/data", repo_type="dataset"
    )
    path = hf_hub_download(f"{USER}/data", "train.csv", repo_type="dataset")
    assert Path(path).read_bytes() == b"a,b\n1,2\n" and "datasets--local-user--data" in path


def test_repos_persist_across_server_restarts(pushed, local_hub, tmp_path):  # noqa: F811
    _, commit = pushed
    with LocalHub(tmp_path / "hub") as restarted:
        assert restarted.url != local_hub.url
        assert HfApi(endpoint=restarted.url).repo_info(REPO_ID).sha == commit.oid


def test_a_fresh_process_finds_the_hub_through_the_environment(pushed, local_hub, tmp_path):  # noqa: F811
    code = f"from huggingface_hub import hf_hub_download; print(hf_hub_download({REPO_ID!r}, 'sub/notes.txt'))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=local_hub.env(tmp_path / "fresh_home"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    path = result.stdout.strip()
    assert path.startswith(str(tmp_path / "fresh_home")) and Path(path).read_text() == "notes\n"
