"""Inputs and outputs are classified before any work, and each wrong kind is one line: an output folder under a file
(it could never be made), a file where a model folder is read, a local path that does not exist (never looked up on
the Hub, however the network is), and for a conversion a folder of the other side (`--to transformers` given a
transformers ViT)."""

import pytest
from entry_points import MODEL_ARGUMENT, OUTPUT_ARGUMENT, Scenario, argv_reading, outcome
from test_writes import snapshot

from modeling_vit_scratch.conversion import command as convert_command
from modeling_vit_scratch.explanation import prediction
from modeling_vit_scratch.sharing import push


def fail_if_reached(*args, **kwargs):
    raise AssertionError("the command went on past what it should refuse")


@pytest.fixture
def never_loaded(monkeypatch):
    """Every command's first long step fails the test: a refusal must come before it."""
    monkeypatch.setattr(prediction, "load_model", fail_if_reached)
    monkeypatch.setattr(convert_command, "read_source", fail_if_reached)
    monkeypatch.setattr(push.ViTScratchForImageClassification, "from_pretrained", fail_if_reached)


@pytest.mark.parametrize("name", sorted(OUTPUT_ARGUMENT))
@pytest.mark.parametrize("depth", ["sub", "sub/deeper"])
def test_an_output_under_a_file_is_one_line_before_any_work(name, depth, tmp_path, never_loaded):
    scenario = Scenario(tmp_path)
    blocker = tmp_path / "notes.txt"
    blocker.write_text("the user's notes")
    argv = scenario.argv(name, output=blocker / depth)  # its input files made
    before = snapshot(tmp_path)
    result = outcome(name, argv)
    assert result.one_line, result
    argument = OUTPUT_ARGUMENT[name]
    assert f"{argument} " in result.error and f"/notes.txt/{depth}' cannot be made: " in result.error
    assert result.error.endswith(
        f"{str(blocker)!r} above it is a file, not a folder; give {argument} a folder outside that file, e.g. "
        "beside it."
    )
    assert snapshot(tmp_path) == before  # the file, and everything else, untouched


@pytest.mark.parametrize("name", sorted(OUTPUT_ARGUMENT))
@pytest.mark.parametrize("depth", ["", "sub"])
def test_an_output_through_a_link_to_nothing_says_so_before_any_work(name, depth, tmp_path, never_loaded):
    scenario = Scenario(tmp_path)
    link = tmp_path / "dangling"
    link.symlink_to(tmp_path / "gone")
    output = link / depth if depth else link
    argv = scenario.argv(name, output=output)
    before = snapshot(tmp_path)
    result = outcome(name, argv)
    assert result.one_line, result
    argument = OUTPUT_ARGUMENT[name]
    above = f" cannot be made: {str(link)!r} above it" if depth else ""
    assert result.error == (
        f"error: {argument} {str(output)!r}{above} is a symbolic link to {str(tmp_path / 'gone')!r}, which does not "
        f"exist: give {argument} the real path, or make the folder the link points to."
    )
    assert snapshot(tmp_path) == before and not (tmp_path / "gone").exists()


# where a model folder is read, and the name the one line gives it (train's --model also takes a JSON file)
FOLDER_READERS = [(name, argument) for name, argument in MODEL_ARGUMENT.items() if name != "train"]


def label(name: str, argument: str | None) -> str:
    return argument or "FOLDER"


@pytest.mark.parametrize("name, argument", FOLDER_READERS, ids=[name for name, _ in FOLDER_READERS])
def test_a_file_where_a_model_folder_is_read_names_the_folder_holding_it(name, argument, tmp_path, never_loaded):
    scenario = Scenario(tmp_path)
    weights = scenario.model() / "model.safetensors"
    result = outcome(name, argv_reading(scenario, name, argument, weights))
    assert result.error == (
        f"error: {label(name, argument)} {str(weights)!r} is a file, not a folder: give the folder that holds it "
        f"({str(scenario.model())!r}), with its config.json beside the weights."
    )


@pytest.mark.parametrize("name, argument", FOLDER_READERS, ids=[name for name, _ in FOLDER_READERS])
@pytest.mark.parametrize("form", ["./{missing}", "{root}/{missing}", "{missing}/", "model/{missing}"])
def test_a_missing_local_folder_does_not_exist_whatever_the_network(
    name, argument, form, tmp_path, never_loaded, monkeypatch
):
    """Online (HF_HUB_OFFLINE=0), with the Hub out of reach: the line is about the folder, never the network."""
    scenario = Scenario(tmp_path)
    scenario.model()
    monkeypatch.chdir(tmp_path)  # "model/..." has an existing parent folder here
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: a lookup would fail on the network
    missing = form.format(root=tmp_path, missing="no-such-model")
    result = outcome(name, argv_reading(scenario, name, argument, missing))
    assert result.one_line, result
    assert result.error.startswith(f"error: {label(name, argument)} {missing!r} does not exist: "), result.error


@pytest.mark.parametrize(
    "direction, source, wanted",
    [("--to", "hf", "is a transformers ViT folder already"), ("--from", "model", "is a vit_scratch folder already")],
)
def test_a_conversion_of_the_other_side_names_the_direction(direction, source, wanted, tmp_path, monkeypatch):
    scenario = Scenario(tmp_path)
    hf = tmp_path / "hf"
    assert outcome("convert", ["--to", "transformers", "--input", str(scenario.model()), "--output", str(hf)]).code == 0
    monkeypatch.setattr(convert_command, "read_source", fail_if_reached)
    folder = tmp_path / source
    result = outcome(
        "convert",
        [
            "--to" if direction == "--to" else "--from",
            "transformers",
            "--input",
            str(folder),
            "--output",
            str(tmp_path / "out"),
        ],
    )
    assert result.one_line, result
    other = "--from" if direction == "--to" else "--to"
    assert result.error.startswith(f"error: --input {str(folder)!r} {wanted}")
    assert result.error.endswith(f"use {other} transformers instead of {direction}.")
    assert not (tmp_path / "out").exists()
