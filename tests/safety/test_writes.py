"""Writes: every command that writes (train, explain, convert) writes into the folder it was given only, never
through a symbolic link, never over files it did not write, never onto one of its own inputs, never into `/`, the
home folder or a checkout's root, and a refused run removes nothing. Each rule is tried over every entry point of
`OUTPUT_ARGUMENT`; a new command that writes is covered by adding it there."""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from entry_points import MODEL_FOLDER_READERS, OUTPUT_ARGUMENT, Scenario, argv_reading, outcome, with_argument
from hypothesis import given, settings
from hypothesis import strategies as st

from modeling_vit_scratch.common.folders import (
    LOCK_FILE,
    MARKER_FILE,
    RECORD_FILE,
    RUN_FILE,
    check_output_folder,
    file_sha256,
    mark_as_ours,
    write_file,
)

WRITERS = sorted(OUTPUT_ARGUMENT)


def snapshot(folder: Path) -> dict:
    """Everything under `folder` (links as their targets, not followed): to show that a refusal changed nothing."""
    found = {}
    for parent, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(parent, name)
            relative = str(path.relative_to(folder))
            if path.is_symlink():
                found[relative] = ("link", os.readlink(path))
            elif path.is_file():
                found[relative] = path.read_bytes()
    return found


def with_output(name: str, argv: list[str], output: Path | str) -> list[str]:
    """`argv` with the output argument of `name` set to `output`."""
    argv = list(argv)
    argv[argv.index(OUTPUT_ARGUMENT[name]) + 1] = str(output)
    return argv


def ours(name: str, folder: Path) -> list[str]:
    """Make `folder` one that `name` may write into; returns the arguments that allow it (a conversion replaces a
    model folder with --overwrite; training and explaining write into a folder carrying the package's marker)."""
    folder.mkdir(parents=True, exist_ok=True)
    if name == "convert":
        (folder / "config.json").write_text(json.dumps({"model_type": "vit_scratch"}))
        return ["--overwrite"]
    (folder / MARKER_FILE).write_text("written by vit-scratch\n")
    return []


@pytest.mark.parametrize("name", WRITERS)
def test_a_folder_of_files_the_package_did_not_write_is_refused_and_left_as_it_was(tmp_path, name):
    scenario = Scenario(tmp_path)
    checkout = tmp_path / "notes"  # `--output_dir .` in a folder of the user's own files
    checkout.mkdir()
    for file, text in {"README.md": "# mine", "all_results.json": "{}", "preprocessor_config.json": "{}"}.items():
        (checkout / file).write_text(text)
    before = snapshot(checkout)
    extra = ["--overwrite"] if name == "convert" else []  # even when asked to replace
    result = outcome(name, with_output(name, scenario.argv(name), checkout) + extra)
    assert result.code == 1 and result.one_line, result
    expected = "not a model folder" if name == "convert" else "holds files that vit-scratch did not write"
    assert expected in result.error and str(checkout) in result.error
    assert ("give a new or empty folder" if name != "convert" else "choose another output folder") in result.error
    assert snapshot(checkout) == before


LINK_NAMES = [LOCK_FILE, "checkpoint-3", "model.safetensors", "training_args.bin", "attention_rollout.png"]


@pytest.mark.parametrize("name", WRITERS)
@settings(max_examples=10)
@given(link=st.sampled_from(LINK_NAMES), to_folder=st.booleans(), nested=st.booleans())
def test_a_symbolic_link_inside_the_output_folder_is_refused_naming_it(name, link, to_folder, nested):
    with tempfile.TemporaryDirectory() as root:
        root = Path(root)
        scenario, output, elsewhere = Scenario(root), root / "out", root / "elsewhere"
        extra = ours(name, output)
        target = elsewhere / "victim"
        if to_folder:
            target.mkdir(parents=True)
            (target / "kept.txt").write_text("kept")
        else:
            elsewhere.mkdir()
            target.write_text("kept")
        inside = output / "checkpoint-1" / link if nested else output / link
        inside.parent.mkdir(exist_ok=True)
        inside.symlink_to(target, target_is_directory=to_folder)
        before = snapshot(root / "elsewhere"), snapshot(output)
        result = outcome(name, with_output(name, scenario.argv(name), output) + extra)
        assert result.code == 1 and result.one_line, result
        assert "symbolic link" in result.error and str(inside) in result.error and "remove them" in result.error
        assert (snapshot(root / "elsewhere"), snapshot(output)) == before


def test_the_lock_as_a_link_to_a_file_elsewhere_leaves_that_file_whole(tmp_path):
    scenario, output = Scenario(tmp_path), tmp_path / "out"
    output.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (output / LOCK_FILE).symlink_to(victim)
    result = outcome("train", scenario.argv("train", output))
    assert result.code == 1 and result.one_line and LOCK_FILE in result.error
    assert victim.read_text() == "precious"


def test_a_lock_linked_after_the_check_is_still_not_followed(tmp_path, monkeypatch):
    """The lock is opened no-follow: a link that appears between the check and the open fails the open."""
    from modeling_vit_scratch.common import folders

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / LOCK_FILE).symlink_to(victim)
    monkeypatch.setattr(folders, "links_inside", lambda folder: [])  # as if the link came after the check
    with (
        pytest.raises(ValueError, match="Cannot open the lock .*remove it if it is a link"),
        folders.claim_output_folder(tmp_path / "out", overwrite=False, resume=False),
    ):
        pass
    assert victim.read_text() == "precious"


def test_files_are_never_written_through_a_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "picture.png").symlink_to(victim)
    with pytest.raises(OSError):
        write_file(tmp_path / "picture.png", b"a picture")
    assert victim.read_text() == "precious"


# Each writer's inputs: argument -> the Scenario file it names (added to the working line where it is not in it)
INPUTS = {
    "train": {"--dataset": "images", "--model": "model", "--teacher": "model"},
    "explain": {"--model": "model", "--image": "picture"},
    "convert": {"--input": "model"},
}


@st.composite
def writer_and_input(draw):
    name = draw(st.sampled_from(WRITERS))
    return name, draw(st.sampled_from(sorted(INPUTS[name]))), draw(st.sampled_from(["is", "is inside", "holds"]))


@settings(max_examples=25)
@given(case=writer_and_input())
def test_an_output_that_is_inside_or_holds_an_input_is_refused(case):
    name, argument, relation = case
    with tempfile.TemporaryDirectory() as root:
        scenario = Scenario(Path(root) / "work")
        scenario.root.mkdir()
        argv = scenario.argv(name)
        made = getattr(scenario, INPUTS[name][argument])()
        source = scenario.root / "box" / made.name  # in a folder of its own, which the output may hold
        source.parent.mkdir()
        made.rename(source)
        if argument in argv:
            argv[argv.index(argument) + 1] = str(source)
        else:
            argv += [argument, str(source)]
        output = {"is": source, "is inside": source / "out", "holds": source.parent}[relation]
        before = snapshot(scenario.root)
        extra = ["--overwrite"] if name == "convert" else []  # convert --input X --output X --overwrite
        result = outcome(name, with_output(name, argv, output) + extra)
        assert result.code == 1 and result.one_line, result
        if source.is_file() and relation == "is":
            assert "is a file, not a folder" in result.error
        else:
            assert f"{relation} the input {argument}" in result.error, result.error
            assert "a folder apart from every input" in result.error
        assert snapshot(scenario.root) == before


@pytest.mark.parametrize("name", WRITERS)
@pytest.mark.parametrize("place", ["home", "checkout"])
def test_the_home_folder_and_a_checkout_root_are_refused(tmp_path, monkeypatch, name, place):
    scenario = Scenario(tmp_path / "work")
    scenario.root.mkdir()
    home, checkout = tmp_path / "home", tmp_path / "checkout"
    home.mkdir()
    (home / ".bashrc").write_text("mine")
    (checkout / ".git").mkdir(parents=True)
    (checkout / "README.md").write_text("# the project")
    monkeypatch.setenv("HOME", str(home))
    output = {"home": home, "checkout": checkout}[place]
    before = snapshot(home), snapshot(checkout)
    extra = ["--overwrite"] if name == "convert" else []
    result = outcome(name, with_output(name, scenario.argv(name), output) + extra)
    assert result.code == 1 and result.one_line, result
    assert {"home": "your home folder", "checkout": "the root of a git checkout"}[place] in result.error
    assert "give a folder of its own" in result.error
    after = {key: value for key, value in snapshot(home).items() if not key.startswith(".cache/")}, snapshot(checkout)
    assert after == before  # (libraries may fill the home's .cache: matplotlib does on its first import)


@pytest.mark.parametrize("argument", sorted(OUTPUT_ARGUMENT.values()))
def test_the_root_folder_is_refused(argument):
    """Through the rule itself, not a command: a command that failed to apply it would write into `/` (the tests may
    run as root); the commands reach the same check as for the home folder above."""
    with pytest.raises(ValueError, match=f"^{argument} '/' is the root folder: give a folder of its own"):
        check_output_folder("/", argument)


@pytest.mark.parametrize(
    "late_mistake",
    [
        ["--config_overrides", "hiden_size=24"],  # a misspelled key: found when the model is configured
        ["--max_train_samples", "0"],  # found once the data is read
    ],
)
def test_a_refused_overwrite_keeps_every_checkpoint(tmp_path, late_mistake):
    scenario, output = Scenario(tmp_path), tmp_path / "out"
    for step in (4, 8):
        checkpoint = output / f"checkpoint-{step}"
        checkpoint.mkdir(parents=True)
        (checkpoint / "model.safetensors").write_bytes(b"weights")
        (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (output / ".saving-1a2b3c").mkdir()  # a killed run's staging leftovers: removed only by a run that trains
    before = snapshot(output)
    result = outcome("train", scenario.argv("train", output) + ["--overwrite_output_dir", "true", *late_mistake])
    assert result.code == 1 and result.one_line, result
    assert snapshot(output) == before


@pytest.mark.parametrize(
    "mistake",
    [
        ["--dataset", "no-such-folder"],  # found when the data is looked for
        ["--config_overrides", "image_size=10"],  # found when the model is configured
        ["--max_train_samples", "0"],  # found once the data is read
    ],
)
def test_a_refused_run_leaves_no_trace_and_a_folder_it_left_empty_stays_the_users(tmp_path, mistake):
    """A run refused before it writes takes back the folders it made and its lock: no marker stays behind to make
    a folder "ours", so files the user puts there later are never written over."""
    scenario = Scenario(tmp_path)
    new, empty = tmp_path / "new" / "out", tmp_path / "empty"
    empty.mkdir()
    for output in (new, empty):
        result = outcome("train", scenario.argv("train", output) + mistake)
        assert result.code == 1 and result.one_line, result
    assert not (tmp_path / "new").exists() and list(empty.iterdir()) == []
    (empty / "README.md").write_text("# my notes")
    result = outcome("train", scenario.argv("train", empty))
    assert result.one_line and "holds files that vit-scratch did not write (README.md)" in result.error, result
    assert (empty / "README.md").read_text() == "# my notes"


def test_a_saved_model_beside_the_users_files_is_not_a_folder_the_package_wrote(tmp_path):
    """A vit_scratch config.json (a `save_pretrained` folder, a copied model) says nothing of who wrote the files
    beside it: even with --overwrite_output_dir the user's README.md is not replaced by a model card."""
    scenario, output = Scenario(tmp_path), tmp_path / "mixed"
    output.mkdir()
    (output / "config.json").write_text(json.dumps({"model_type": "vit_scratch"}))
    (output / "README.md").write_text("MY OWN NOTES")
    before = snapshot(output)
    result = outcome("train", scenario.argv("train", output) + ["--overwrite_output_dir", "true"])
    assert result.one_line and "holds files that vit-scratch did not write (README.md, config.json)" in result.error
    assert snapshot(output) == before


def test_overwriting_and_resuming_at_once_is_one_line_naming_both(tmp_path):
    scenario = Scenario(tmp_path)
    argv = scenario.argv("train") + ["--overwrite_output_dir", "true", "--resume_from_checkpoint", "true"]
    result = outcome("train", argv)
    assert result.one_line, result
    assert "--overwrite_output_dir true and --resume_from_checkpoint both given" in result.error
    assert "pass only the one you mean" in result.error
    assert not (tmp_path / "out-train").exists()


@pytest.mark.parametrize("name", WRITERS)
@pytest.mark.parametrize("place", ["checkpoint", "staging", "git"])
def test_an_output_inside_a_runs_checkpoint_or_a_git_folder_is_refused(tmp_path, name, place):
    """A run's checkpoints and staging folders are written and removed by that run alone, and `.git` holds a
    repository's records: no command writes into them, whatever the folder is called beneath."""
    scenario = Scenario(tmp_path)
    run = tmp_path / "run"
    (run / "checkpoint-3").mkdir(parents=True)
    (run / "checkpoint-3" / "trainer_state.json").write_text("{}")
    (run / MARKER_FILE).write_text("written by vit-scratch\n")
    (run / ".saving-1a2b").mkdir()
    (tmp_path / "repo" / ".git" / "refs" / "tags").mkdir(parents=True)
    output = {
        "checkpoint": run / "checkpoint-3",
        "staging": run / ".saving-1a2b" / "sub",
        "git": tmp_path / "repo" / ".git" / "refs" / "tags",
    }[place]
    before = snapshot(tmp_path / "run"), snapshot(tmp_path / "repo")
    extra = ["--overwrite"] if name == "convert" else []
    result = outcome(name, with_output(name, scenario.argv(name), output) + extra)
    assert result.code == 1 and result.one_line, result
    said = {"checkpoint": "which the training run in", "staging": "which the training run in", "git": "git folder"}
    assert said[place] in result.error and "give a folder of its own" in result.error
    assert (snapshot(tmp_path / "run"), snapshot(tmp_path / "repo")) == before


# Working runs: the rule refuses nothing that is the package's own


@pytest.mark.integration
def test_training_writes_a_new_folder_and_outputs_inside_a_checkout_and_resumes_its_own(tmp_path, monkeypatch):
    scenario = Scenario(tmp_path / "work")
    scenario.root.mkdir()
    checkout = tmp_path / "checkout"
    (checkout / ".git").mkdir(parents=True)
    monkeypatch.chdir(checkout)  # `make train` writes outputs/vit-digits in the checkout
    result = outcome("train", scenario.argv("train", Path("outputs/x")) + ["--max_steps", "2", "--save_steps", "1"])
    assert result.code == 0, result
    output = checkout / "outputs" / "x"
    assert (output / "model.safetensors").is_file() and (output / MARKER_FILE).is_file()
    assert (output / "checkpoint-2").is_dir()
    resumed = scenario.argv("train", output) + ["--max_steps", "2", "--resume_from_checkpoint", "true"]
    refused = outcome("train", resumed)  # a finished run has nothing to resume: said, and nothing written again
    assert refused.one_line and "finished at step 2" in refused.error, refused
    again = scenario.argv("train", output) + ["--max_steps", "1", "--overwrite_output_dir", "true"]
    (output / "README.md").write_text("my card")  # edited by hand: no longer the package's, never replaced
    refused = outcome("train", again)
    assert refused.one_line and "README.md changed since vit-scratch wrote it" in refused.error, refused
    assert (output / "README.md").read_text() == "my card" and (output / "checkpoint-2").is_dir()
    (output / "README.md").unlink()
    assert outcome("train", again).code == 0
    assert [path.name for path in output.glob("checkpoint-*")] == ["checkpoint-1"]  # the old run's went, at last


@pytest.mark.integration
@pytest.mark.parametrize("name", ["explain", "convert"])
def test_explaining_and_converting_again_into_their_own_folder_works(tmp_path, name):
    scenario = Scenario(tmp_path)
    argv = scenario.argv(name) + (["--overwrite"] if name == "convert" else [])
    assert outcome(name, argv).code == 0
    assert outcome(name, argv).code == 0
    assert any((tmp_path / f"out-{name}").iterdir())


@pytest.mark.parametrize("name", WRITERS)
def test_an_output_naming_a_file_is_one_line_and_the_file_stays(tmp_path, name):
    scenario, file = Scenario(tmp_path), tmp_path / "notes.txt"
    file.write_text("mine")
    result = outcome(name, with_output(name, scenario.argv(name), file))
    assert result.code == 1 and result.one_line, result
    assert "is a file, not a folder" in result.error and str(file) in result.error
    assert file.read_text() == "mine"


def test_an_output_folder_given_as_a_link_is_the_users_choice_and_is_written_through(tmp_path):
    """The folder named may itself be a link (to a larger disk, say): the user chose it; links inside it are not."""
    (tmp_path / "disk").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "disk", target_is_directory=True)
    assert check_output_folder(tmp_path / "out", "--out") == tmp_path / "out"
    (tmp_path / "disk" / "inner").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="holds symbolic links"):
        check_output_folder(tmp_path / "out", "--out")


@pytest.mark.parametrize("name", ["convert", "explain"])  # train resolves --model first: the empty cache stops it
def test_an_output_inside_the_hub_cache_of_the_model_it_reads_is_refused(tmp_path, monkeypatch, name):
    """A Hub model is read from its folder in the Hub cache: an output inside that folder (its snapshot) is refused
    as a local input's would be, before anything is loaded."""
    from huggingface_hub import constants

    cache = tmp_path / "hub-cache"
    snapshot_folder = cache / "models--local-user--t1" / "snapshots" / "0123abcd"
    snapshot_folder.mkdir(parents=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    scenario = Scenario(tmp_path / "work")
    scenario.root.mkdir()
    model_argument = {"explain": "--model", "convert": "--input"}[name]
    argv = scenario.argv(name)
    argv = (
        [*argv[: argv.index(model_argument) + 1], "local-user/t1", *argv[argv.index(model_argument) + 2 :]]
        if (model_argument in argv)
        else [*argv, model_argument, "local-user/t1"]
    )
    before = snapshot(cache)
    result = outcome(name, with_output(name, argv, snapshot_folder / "figs"))
    assert result.code == 1 and result.one_line, result
    assert f"is inside the input {model_argument} 'local-user/t1' (its Hub cache folder" in result.error, result.error
    assert snapshot(cache) == before


NOT_FILES = {"folder": os.mkdir, "fifo": os.mkfifo}


@pytest.mark.parametrize("kind", NOT_FILES)
@pytest.mark.parametrize("name", [MARKER_FILE, RUN_FILE, LOCK_FILE, RECORD_FILE, "config.json"])
@pytest.mark.parametrize(
    "command, argument",
    [("train", "--output_dir"), ("convert", "--output"), *MODEL_FOLDER_READERS],
)
def test_a_marker_record_or_lock_that_is_no_regular_file_is_one_line_and_changes_nothing(
    tmp_path, kind, name, command, argument
):
    """Where the package keeps a file (its markers, lock, records, a model's files), a folder or fifo is one line
    naming it, before any work, for every command that writes or reads the folder (before: an IsADirectoryError
    traceback after the pre-flight, or once the run had trained, a `.probe-*` file left; a fifo would wait for ever)."""
    scenario = Scenario(tmp_path)
    folder = tmp_path / "folder"
    shutil.copytree(scenario.model(), folder)
    (folder / MARKER_FILE).write_text("{}")
    (folder / name).unlink(missing_ok=True)
    NOT_FILES[kind](folder / name)
    before = sorted(path.name for path in folder.iterdir())
    if argument in ("--output_dir", "--output"):
        argv = with_argument(scenario.argv(command), argument, folder)
        argv += ["--overwrite_output_dir", "true"] if command == "train" else ["--overwrite"]
    else:
        argv = argv_reading(scenario, command, argument, folder)
    result = outcome(command, argv)
    assert result.code == 1 and result.one_line, result
    assert f"{folder / name} is not a regular file (a folder, fifo or device)" in result.error
    assert sorted(path.name for path in folder.iterdir()) == before  # no probe, no lock, nothing made


@pytest.mark.integration
def test_a_folder_of_explains_figures_is_no_model_folder_and_overwriting_it_removes_them(tmp_path):
    """Explain's figures describe the model explained: train and convert refuse their folder as a model folder that
    is not theirs (before: train wrote its model beside them, and they read as its own); train's
    --overwrite_output_dir removes them, naming them."""
    scenario = Scenario(tmp_path)
    folder = tmp_path / "figures"
    assert outcome("explain", with_argument(scenario.argv("explain"), "--out", folder)).code == 0
    figures = sorted(path.name for path in folder.glob("*.png"))
    assert "patch_grid.png" in figures
    before = {path: path.read_bytes() for path in folder.iterdir()}
    train = with_argument(scenario.argv("train"), "--output_dir", folder) + ["--max_steps", "1"]
    result = outcome("train", train)
    assert result.one_line and "holds the figures of explain (" in result.error, result
    result = outcome("convert", [*with_argument(scenario.argv("convert"), "--output", folder), "--overwrite"])
    assert result.one_line and "is not a model folder" in result.error and "attention_per_layer.png" in result.error
    assert {path: path.read_bytes() for path in folder.iterdir()} == before
    assert outcome("train", [*train, "--overwrite_output_dir", "true"]).code == 0
    assert not any(path.name in figures for path in folder.iterdir())
    assert (folder / "model.safetensors").is_file()


@pytest.mark.parametrize("name", ["attention_rollout.png", "fig7_mine.png"])
def test_a_file_named_as_explains_figure_is_removed_only_when_explain_wrote_it(tmp_path, name):
    """A name vouches for nothing: a user's picture named as one of explain's figures, in a folder the package wrote
    (a trained one, an explained one), is refused by train --overwrite_output_dir (which removes explain's figures)
    and by explain (which replaces or removes them), and stays as it was (before: train removed it as explain's)."""
    scenario = Scenario(tmp_path)
    trained, explained = tmp_path / "trained", tmp_path / "explained"
    shutil.copytree(scenario.model(), trained)
    mark_as_ours(trained, {path.name: file_sha256(path) for path in trained.iterdir()})
    mark_as_ours(explained)
    train = with_argument(scenario.argv("train"), "--output_dir", trained) + ["--overwrite_output_dir", "true"]
    explain = with_argument(scenario.argv("explain"), "--out", explained)
    for command, argv, folder in (("train", train, trained), ("explain", explain, explained)):
        (folder / name).write_bytes(b"my own picture")
        before = snapshot(folder)
        result = outcome(command, argv)
        assert result.one_line and f"nothing shows that vit-scratch wrote {name} as it is now" in result.error, result
        assert snapshot(folder) == before


@pytest.mark.parametrize("marker", ["written by vit-scratch\n", '{"written_by": "vit-scratch"}\n'])
def test_an_older_explains_folder_is_refused_with_the_command_that_removes_it(tmp_path, marker):
    """A folder an older explain wrote (its marker keeps no digest of the figures) holds nothing that shows who
    wrote them: train --overwrite_output_dir and explain refuse it, changing nothing, and where the folder holds only
    those figures and the marker the line gives the exact command that removes it (the user's to run; before: only
    'move them out', file by file); with any other file in it, no such command."""
    scenario = Scenario(tmp_path)
    folder = tmp_path / "older explain"  # a name the printed command must quote
    assert outcome("explain", with_argument(scenario.argv("explain"), "--out", folder)).code == 0
    (folder / MARKER_FILE).write_text(marker)
    train = with_argument(scenario.argv("train"), "--output_dir", folder) + ["--overwrite_output_dir", "true"]
    explain = with_argument(scenario.argv("explain"), "--out", folder)
    before = snapshot(folder)
    (folder / "notes.txt").write_text("mine")
    for command, argv in (("train", train), ("explain", explain)):
        result = outcome(command, argv)
        assert (
            result.one_line and "nothing shows that vit-scratch wrote " in result.error and "rm -- " not in result.error
        )
    (folder / "notes.txt").unlink()
    for command, argv in (("train", train), ("explain", explain)):
        result = outcome(command, argv)
        assert result.one_line and "the folder holds nothing else but its marker" in result.error, result
        assert snapshot(folder) == before
    removal = result.error.split("remove the folder with: ", 1)[1].split(", then run this again", 1)[0]
    subprocess.run(["bash", "-c", removal], check=True)
    assert not folder.exists()
    assert outcome("explain", explain).code == 0
