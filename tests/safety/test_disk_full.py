"""A write the system refuses (a full disk, a quota, a file size limit) is one line naming what was being written,
the cause and the fix, at convert, explain and push (its reload check's copy, its staged files), and nothing half-written is left where the output goes: the
conversion's folder is written beside its output and removed, each picture is staged and moved into place. SIGXFSZ
does not kill the command: the write fails with EFBIG, which the line names."""

import errno
import resource

import pytest
from entry_points import Scenario, command_env, outcome, run_command
from hub_server import local_hub  # noqa: F401  (the fixture)

from modeling_vit_scratch.common.write_errors import refused_write


def test_a_refused_write_is_known_by_its_number_or_by_safetensors_words():
    assert refused_write(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"
    rust = RuntimeError("Error while serializing: I/O error: File too large (os error 27)")
    assert refused_write(rust) == "File too large"
    child = RuntimeError("F does not load (OSError: [Errno 27] File too large: 'a.py' -> 'modules/a.py')")
    assert refused_write(child) == "File too large"  # a child process's last line, as the push's reload check reads it
    try:
        try:
            raise OSError(errno.EDQUOT, "quota")
        except OSError as cause:
            raise RuntimeError("the writer failed") from cause
    except RuntimeError as error:
        assert refused_write(error) == "Disk quota exceeded"
    assert refused_write(OSError(errno.EACCES, "Permission denied")) is None  # not a refused write: its own line


def small_file_limit():
    """In the child: files of at most 20 KiB (the tiny model's weights are larger)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (20 * 1024, 20 * 1024))


@pytest.mark.integration
def test_a_file_size_limit_at_convert_explain_and_push_is_one_line_and_leaves_nothing_half_written(
    local_hub,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    import subprocess

    scenario = Scenario(tmp_path)
    original = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: original(*a, **k, preexec_fn=small_file_limit))
    converted = run_command("convert", scenario.argv("convert"), env=command_env(tmp_path))
    explained = run_command("explain", scenario.argv("explain"), env=command_env(tmp_path))
    hub_env = command_env(tmp_path, **local_hub.env(tmp_path / "hf_home"))
    pushed = run_command("push", [str(scenario.model()), "local-user/limited"], env=hub_env)
    assert pushed.returncode == 1 and "Traceback" not in pushed.stderr, pushed.stderr[-2000:]
    assert pushed.stderr.strip().splitlines()[-1].startswith(
        f"error: Writing the push's temporary copies of {scenario.model()} (in "
    ) and pushed.stderr.strip().endswith(
        f") failed (File too large): nothing was uploaded and {scenario.model()} is as it was (the copies were "
        "removed); free space on that disk, or point TMPDIR at a folder on a disk with room (or raise the file size "
        "limit, `ulimit -f`), and run the same command again."
    )
    assert not local_hub.repo_exists("local-user/limited")
    assert converted.returncode == 1 and "Traceback" not in converted.stderr, converted.stderr[-2000:]
    output = tmp_path / "out-convert"
    assert converted.stderr.strip().splitlines()[-1] == (
        f"error: Writing the new folder beside {output} failed (File too large): nothing was written to {output} (it "
        "is as it was) and the unfinished folder beside it was removed; free space on that disk (or raise the file "
        "size limit, `ulimit -f`) and run the same command again."
    )
    assert not output.exists() and not list(tmp_path.glob(".out-convert.*"))
    assert explained.returncode == 1 and "Traceback" not in explained.stderr, explained.stderr[-2000:]
    line = explained.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: Writing {tmp_path / 'out-explain'}/") and "failed (File too large)" in line
    for picture in (tmp_path / "out-explain").iterdir():  # whole pictures only, no staged leftovers
        assert not picture.name.startswith(".") or picture.name == ".vit-scratch-output"
        assert picture.stat().st_size < 20 * 1024


class NoHub:
    """A Hub client that fails the test when asked anything."""

    def __init__(self, **kwargs):
        pass

    def __getattr__(self, name):
        pytest.fail(f"the Hub was asked ({name})")


@pytest.mark.parametrize("failing", ["the staging folder", "a staged file"])
def test_a_full_temporary_disk_while_push_stages_is_one_line_naming_tmpdir(tmp_path, monkeypatch, failing):
    """Push's staging in TMPDIR goes through the one writer rule: a refused write is one line naming the place and
    the fix (free space, or TMPDIR elsewhere), nothing is uploaded and no staged file is left."""
    import tempfile

    from modeling_vit_scratch import ViTScratchImageProcessor
    from modeling_vit_scratch.sharing import push
    from modeling_vit_scratch.sharing.hub_arguments import HubTarget

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(push, "check_hub_arguments", lambda repo_id, **kwargs: HubTarget(repo_id, None, 1 << 30))
    monkeypatch.setattr(push, "HfApi", NoHub)
    full = OSError(errno.ENOSPC, "No space left on device")
    folder = Scenario(tmp_path).model()
    if failing == "the staging folder":
        real = push.scratch_folder
        monkeypatch.setattr(
            push, "scratch_folder", lambda purpose: (_ for _ in ()).throw(full) if purpose == "push" else real(purpose)
        )
    else:  # the processor's file, written into the staging folder
        monkeypatch.setattr(ViTScratchImageProcessor, "save_pretrained", lambda *a, **k: (_ for _ in ()).throw(full))
    result = outcome("push", [str(folder), "local-user/full"])
    assert result.one_line, result
    assert result.error.startswith(f"error: Writing the push's temporary copies of {folder} (in {tmp_path / 'tmp'})")
    assert (
        "(No space left on device)" in result.error and "point TMPDIR at a folder on a disk with room" in result.error
    )
    assert list((tmp_path / "tmp").iterdir()) == []
