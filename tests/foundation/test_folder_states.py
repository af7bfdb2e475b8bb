"""The output folder as a state machine: whatever state a folder is in, a command writes into it only when it is new,
empty or ours, never touches a user's file or what a link points to, and a reader sees each file old or new."""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from modeling_vit_scratch import folders
from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.folders import LOCK, MARKER, OutputFolder, ours

USER_NAMES = ("notes.txt", "data.csv", "my.safetensors", "config.json.bak", "Runs", "mine/photo.png")
STAGED = ("model.safetensors", "config.json", "README.md", "training_record.json", "runs/events.out")
REMOVABLE = ("runs", "checkpoint-*", "all_results.json")  # what a new output may no longer have
LINK_NAMES = ("runs", "checkpoint-3", "README.md", "all_results.json")


class Killed(Exception):
    """Stands for the process dying in the middle of a publish."""


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under `root`, links never followed: a file by its digest, a link by its target."""
    found = {}
    for folder, subfolders, files in os.walk(root):
        for name in subfolders + files:
            path = Path(folder, name)
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_dir():
                found[key] = ("dir",)
            else:
                found[key] = digest(path.read_bytes())
    return found


def digest(data: bytes) -> tuple:
    return ("file", hashlib.sha256(data).hexdigest())


class OutputFolderMachine(RuleBasedStateMachine):
    """The model: what the folder is (absent / file / link / dir), whether it is marked, holds a model or is held."""

    @initialize()
    def start(self):
        self.root = Path(tempfile.mkdtemp(prefix="folders-"))
        self.path = self.root / "out"
        self.outside = self.root / "outside"  # what links point to: a folder of the user's, never to change
        (self.outside / "sub").mkdir(parents=True)
        (self.outside / "keep.txt").write_text("the user's")
        (self.outside / "sub" / "deep.txt").write_text("the user's too")
        self.kind, self.marked, self.holder, self.version = "absent", False, None, 0
        self.user: dict[str, bytes] = {}

    def teardown(self):
        if getattr(self, "holder", None):
            self.holder.__exit__(None, None, None)
        shutil.rmtree(self.root, ignore_errors=True)

    # states a folder can be in

    @precondition(lambda self: self.kind in ("absent", "dir"))
    @rule(name=st.sampled_from(USER_NAMES), data=st.binary(max_size=64))
    def user_file(self, name, data):
        (self.path / name).parent.mkdir(parents=True, exist_ok=True)
        (self.path / name).write_bytes(data)
        self.kind, self.user[name] = "dir", data

    @precondition(lambda self: self.kind == "absent")
    @rule()
    def empty_folder(self):
        self.path.mkdir()
        self.kind = "dir"

    @precondition(lambda self: self.kind == "absent")
    @rule()
    def a_file(self):
        self.path.write_text("a file, not a folder")
        self.kind = "file"

    @precondition(lambda self: self.kind == "absent")
    @rule()
    def a_link_to_a_folder(self):
        self.path.symlink_to(self.outside, target_is_directory=True)
        self.kind = "link"

    @precondition(lambda self: self.kind == "dir")
    @rule()
    def stale_staging(self):
        """What a command killed while saving leaves: a half-written staging folder."""
        stale = self.path / f"{folders.STAGING_PREFIX}killed"
        stale.mkdir(exist_ok=True)
        (stale / "model.safetensors").write_bytes(b"half")

    @precondition(lambda self: self.kind == "dir" and self.marked)
    @rule(name=st.sampled_from(LINK_NAMES), to_file=st.booleans())
    def link_inside(self, name, to_file):
        """A link named like a package file, pointing at the user's files: removing or replacing it removes the link."""
        target = self.path / name
        if target.exists() or target.is_symlink():
            return
        target.symlink_to(self.outside / "keep.txt" if to_file else self.outside)

    @precondition(lambda self: self.holder is None)
    @rule()
    def another_command_holds_it(self):
        holder = OutputFolder(self.path, "--output", replace=True)
        try:
            holder.__enter__()
        except UserError:
            return
        self.holder, self.kind, self.marked = holder, "dir", True

    @precondition(lambda self: self.holder is not None)
    @rule()
    def the_other_command_ends(self):
        self.holder.__exit__(None, None, None)
        self.holder = None

    # a command writing

    def refused(self, replace: bool) -> bool:
        if self.kind in ("file", "link") or self.holder is not None:
            return True
        if self.kind == "dir" and any(self.path.iterdir()) and not self.marked:
            return True
        return (self.path / "model.safetensors").exists() and not replace

    @rule(
        replace=st.booleans(),
        staged=st.sets(st.sampled_from(STAGED), min_size=1),
        remove=st.booleans(),
        killed_after=st.none() | st.integers(0, 4),
    )
    def write(self, replace, staged, remove, killed_after):
        before = snapshot(self.root)
        self.version += 1
        new = {name: f"version {self.version} of {name}".encode() for name in staged}
        replaced = 0
        real_replace = os.replace

        def dying_replace(*args):
            nonlocal replaced
            if killed_after is not None and replaced >= killed_after:
                raise Killed
            replaced += 1
            real_replace(*args)

        refused = self.refused(replace)
        try:
            with OutputFolder(self.path, "--output", replace=replace) as folder, folder.staging() as stage:
                for name, data in new.items():
                    (stage / name).parent.mkdir(parents=True, exist_ok=True)
                    (stage / name).write_bytes(data)
                with mock.patch.object(folders.os, "replace", dying_replace):
                    folder.publish(stage, remove=REMOVABLE if remove else ())
        except UserError:
            assert refused, "a folder that may be written was refused"
            assert snapshot(self.root) == before, "a refused command changed a file"
            return
        except Killed:
            killed = True
        else:
            killed = False
        assert not refused, "a folder that must be refused was written"
        if killed and not self.path.exists():  # stopped before anything was written: no trace, not even the folder
            self.kind, self.marked = "absent", False
        else:  # a stop before anything was written takes its marker back
            self.kind, self.marked = "dir", (self.path / MARKER).exists()
        after = snapshot(self.root)
        for name, data in new.items():  # each file whole: the old one or the new one
            old = before.get(f"out/{name}")
            assert after.get(f"out/{name}") in ((digest(data),) if not killed else (digest(data), old, None))
        if not killed:
            assert not any(key.startswith(f"out/{folders.STAGING_PREFIX}") for key in after)
            for key, entry in before.items():  # what the new output no longer has is gone, the rest kept
                name = key.split("/")[1] if key.startswith("out/") else None  # its entry in the folder
                if name and name not in {n.split("/")[0] for n in new} and name not in (MARKER, LOCK):
                    gone = remove and ours(name, REMOVABLE) or name.startswith(folders.STAGING_PREFIX)
                    assert (key in after) != gone and (gone or after[key] == entry), key

    # what holds whatever happened

    @invariant()
    def users_files_kept(self):
        for name, data in getattr(self, "user", {}).items():
            path = self.path / name
            if self.kind == "dir":
                assert path.is_file() and not path.is_symlink() and path.read_bytes() == data, name
        if hasattr(self, "outside"):
            assert (self.outside / "keep.txt").read_text() == "the user's"
            assert (self.outside / "sub" / "deep.txt").read_text() == "the user's too"
            assert sorted(p.name for p in self.outside.iterdir()) == ["keep.txt", "sub"]


TestOutputFolder = OutputFolderMachine.TestCase
TestOutputFolder.settings = settings(max_examples=150, stateful_step_count=10, deadline=None)


def test_a_lock_held_by_another_process_refuses(tmp_path):
    """The lock is the file system's (flock): another process holding it keeps a command out, files unchanged."""
    out = tmp_path / "out"
    with OutputFolder(out, "--output"):
        pass
    hold = "import fcntl, sys; f = open(sys.argv[1], 'r+'); fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True)"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold + "; sys.stdin.read()", str(out / LOCK)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        before = snapshot(tmp_path)
        with pytest.raises(UserError, match="--output"), OutputFolder(out, "--output"):
            pass
        assert snapshot(tmp_path) == before
    finally:
        holder.communicate("")
    with OutputFolder(out, "--output"):  # the lock dies with its process
        pass


@pytest.mark.parametrize("relation", ["same", "inside", "holding", "inside through a link"])
def test_an_output_that_is_holds_or_lies_inside_an_input_is_refused(tmp_path, relation):
    model = tmp_path / "model"
    model.mkdir()
    (tmp_path / "alias").symlink_to(model)
    for folder in (tmp_path, model):  # both ours: only the input rule refuses
        (folder / MARKER).touch()
    out = {"same": model, "inside": model / "out", "holding": tmp_path, "inside through a link": tmp_path / "alias/x"}
    before = snapshot(tmp_path)
    with pytest.raises(UserError, match="--output"), OutputFolder(out[relation], "--output", inputs=(model,)):
        pass
    assert snapshot(tmp_path) == before
