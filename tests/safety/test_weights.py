"""Weights: read from safetensors only, wherever a command reads a folder (train --model/--teacher/--resume, explain,
convert, push). A pickle is never unpickled: a folder holding only one is refused in one line that names the command
converting it (for a trusted file). A crafted safetensors header is one line, before any large allocation; a resumed
checkpoint whose pickled Trainer state is more than tensors is one line before training starts."""

import json
import math
import pickle
import random
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from entry_points import MODEL_FOLDER_READERS, Scenario, argv_reading, command_env, hub_repo, outcome
from helpers import PROCESS_TIMEOUT, REPO, one_by_default
from hub_server import local_hub  # noqa: F401  (the fixture)
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from modeling_vit_scratch.common.weights import check_checkpoint, check_safetensors, weight_files

BITS = {"F32": 32, "F16": 16, "BF16": 16, "F64": 64, "I64": 64, "I32": 32, "U8": 8, "I8": 8, "BOOL": 8}
FLAWS = ("length", "json", "offsets", "shape", "dtype", "entry", "truncate", "metadata")


class Payload:
    """Unpickled without weights_only, this runs code: it writes `marker`."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@st.composite
def safetensors_files(draw, flaws=("none", *FLAWS)) -> tuple[bytes, str]:
    """(the bytes of a safetensors file, its flaw): well formed ("none"), or broken as an attacker would break it:
    the header's length (up to 2^64), its JSON, a tensor's offsets or shape (declared sizes up to 2^62 elements),
    its dtype, an entry that is no object, the file cut short, metadata that is not text."""
    header, data = {}, b""
    for index in range(draw(st.integers(0, 3))):
        dtype = draw(st.sampled_from(sorted(BITS)))
        shape = draw(st.lists(st.integers(0, 3), max_size=3))
        size = math.prod(shape) * BITS[dtype] // 8
        header[f"t{index}"] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + size]}
        data += bytes(draw(st.binary(min_size=size, max_size=size)))
    if draw(st.booleans()):
        header["__metadata__"] = {"format": "pt"}
    flaw = draw(st.sampled_from(flaws))
    names = [name for name in header if name != "__metadata__"]
    if flaw in ("offsets", "shape", "dtype", "entry") and not names:
        header["t"] = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
        names = ["t"]
    target = header[draw(st.sampled_from(names))] if names else None
    if flaw == "offsets":
        big = st.integers(-2, 2**64)
        target["data_offsets"] = draw(st.one_of(st.lists(big, min_size=2, max_size=2), st.lists(big, max_size=3)))
    elif flaw == "shape":
        target["shape"] = draw(st.lists(st.integers(-1, 2**62), min_size=1, max_size=4))
    elif flaw == "dtype":
        target["dtype"] = draw(st.one_of(st.text(max_size=6), st.integers()))
    elif flaw == "entry":
        target.clear()
        target.update(draw(st.dictionaries(st.sampled_from(["dtype", "shape", "x"]), st.integers(), max_size=2)))
    elif flaw == "metadata":
        header["__metadata__"] = {"format": draw(st.one_of(st.integers(), st.lists(st.text(max_size=2))))}
    text = json.dumps(header).encode()
    if flaw == "json":
        text = draw(st.one_of(st.binary(max_size=40), st.just(text[:-1]), st.just(b"[]"), st.just(b" " + text)))
    length = len(text)
    if flaw == "length":
        length = draw(st.one_of(st.integers(len(text) + len(data) + 1, 2**64 - 1), st.just(2**62)))
    content = struct.pack("<Q", length) + text + data
    if flaw == "truncate":
        content = content[: draw(st.integers(0, len(content) - 1))]
    return content, flaw


@settings(max_examples=400)
@given(safetensors_files())
def test_a_header_is_refused_in_one_line_or_loads(case):
    """The shared check (common/weights.py) says ValueError for every broken file, and whatever it lets through
    safetensors loads: no exception, no large allocation."""
    content, flaw = case
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "model.safetensors"
        path.write_bytes(content)
        try:
            check_safetensors(path)
        except ValueError as error:
            assert flaw != "none", error
            assert "\n" not in str(error) and str(path) in str(error)
            return
        load_file(path)  # whatever passed the check loads


def pickle_only_folder(scenario: Scenario, marker: Path) -> Path:
    """The scenario's model with its weights as a pickle that runs code when unpickled (and no safetensors)."""
    folder = scenario.root / "pickled"
    shutil.copytree(scenario.model(), folder)
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(Payload(marker)))
    return folder


@pytest.mark.parametrize(("name", "argument"), MODEL_FOLDER_READERS)
def test_a_folder_with_only_a_pickle_is_one_line_naming_the_conversion_and_is_never_unpickled(tmp_path, name, argument):
    scenario, marker = Scenario(tmp_path), tmp_path / "marker"
    folder = pickle_only_folder(scenario, marker)
    before = snapshot(folder)
    result = outcome(name, argv_reading(scenario, name, argument, folder))
    assert result.one_line, result
    assert f"{folder} holds its weights only as a pickle (pytorch_model.bin)" in result.error
    assert "use_safetensors=False" in result.error and ".save_pretrained(" in result.error
    assert "only for a file you trust" in result.error
    assert not marker.exists()
    assert snapshot(folder) == before


@settings(max_examples=4)
@given(case=safetensors_files(flaws=FLAWS))
@pytest.mark.parametrize(("name", "argument"), [*MODEL_FOLDER_READERS, ("convert", "--from timm")])
def test_a_crafted_header_is_one_line_at_every_entry_point(tmp_path_factory, name, argument, case):
    content, _ = case
    scenario = Scenario(tmp_path_factory.mktemp("crafted"))
    if argument == "--from timm":  # a timm state dict, given as a file
        weights = scenario.root / "timm.safetensors"
        argv = ["--from", "timm", "--timm_model", "vit_tiny_patch16_224", "--input", str(weights)]
        argv += ["--output", str(scenario.root / "out")]
    else:
        folder = scenario.root / "crafted"
        shutil.copytree(scenario.model(), folder)
        weights = folder / "model.safetensors"
        argv = argv_reading(scenario, name, argument, folder)
    weights.write_bytes(content)
    try:
        check_safetensors(weights)
        assume(False)  # a flaw that left a readable file (a shape of the same size): not a crafted header
    except ValueError:
        pass
    result = outcome(name, argv)
    assert result.one_line, result
    assert str(weights) in result.error


def checkpoint_run(scenario: Scenario) -> Path:
    """An output folder holding one checkpoint, as the Trainer writes it (weights, trainer state, pickled states)."""
    run = scenario.root / "run"
    checkpoint = run / "checkpoint-1"
    checkpoint.mkdir(parents=True)
    for name in ("model.safetensors", "config.json"):
        shutil.copy(scenario.model() / name, checkpoint / name)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    torch.save({"state": {}, "param_groups": [{"lr": 0.1, "params": [0]}]}, checkpoint / "optimizer.pt")
    torch.save({"last_epoch": 1, "_last_lr": [0.1]}, checkpoint / "scheduler.pt")
    rng = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()}
    torch.save(rng, checkpoint / "rng_state.pth")
    return run


def test_the_trainer_s_own_states_pass_the_checkpoint_check(tmp_path):
    check_checkpoint(checkpoint_run(Scenario(tmp_path)) / "checkpoint-1")


@pytest.mark.parametrize("written_by", ["pickle", "torch.save"])
@pytest.mark.parametrize("state", ["optimizer.pt", "scheduler.pt", "rng_state.pth"])
def test_a_checkpoint_whose_state_is_a_malicious_pickle_is_one_line_before_training(tmp_path, state, written_by):
    scenario, marker = Scenario(tmp_path), tmp_path / "marker"
    run = checkpoint_run(scenario)
    if written_by == "pickle":
        (run / "checkpoint-1" / state).write_bytes(pickle.dumps(Payload(marker)))
    else:  # torch's own zip format, as the Trainer writes its states
        torch.save(Payload(marker), run / "checkpoint-1" / state)
    before = snapshot(run / "checkpoint-1")
    argv = argv_reading(scenario, "train", "--output_dir", run) + ["--resume_from_checkpoint", "true"]
    result = outcome("train", argv)
    assert result.one_line, result
    assert f"{run / 'checkpoint-1' / state} is not a state the Trainer wrote" in result.error
    assert "it was not unpickled" in result.error and "--overwrite_output_dir true" in result.error
    assert not marker.exists()
    assert snapshot(run / "checkpoint-1") == before


def test_a_resumed_checkpoint_with_a_crafted_header_is_one_line(tmp_path):
    scenario = Scenario(tmp_path)
    run = checkpoint_run(scenario)
    (run / "checkpoint-1" / "model.safetensors").write_bytes(struct.pack("<Q", 2**62) + b"{}")
    argv = argv_reading(scenario, "train", "--output_dir", run) + ["--resume_from_checkpoint", "true"]
    result = outcome("train", argv)
    assert result.one_line, result
    assert "model.safetensors is not a readable safetensors file" in result.error and "header too large" in result.error


def test_sharded_weights_are_each_checked_and_an_index_names_only_files_beside_it(tmp_path):
    folder = tmp_path / "sharded"
    folder.mkdir()
    shutil.copy(Scenario(tmp_path).model() / "model.safetensors", folder / "model-00001-of-00001.safetensors")
    index = {"weight_map": {"w": "model-00001-of-00001.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert weight_files(folder) == [folder / "model-00001-of-00001.safetensors"]
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "../../etc/passwd"}}))
    with pytest.raises(ValueError, match="names a shard '../../etc/passwd' that is no file beside it"):
        weight_files(folder)


@pytest.mark.integration
def test_the_conversion_command_named_in_the_refusal_makes_a_folder_every_command_reads(tmp_path):
    """For a trusted pickle: the command the line names writes safetensors beside it, and explain then runs."""
    scenario = Scenario(tmp_path)
    folder = tmp_path / "trusted"
    shutil.copytree(scenario.model(), folder)
    from modeling_vit_scratch import ViTScratchForImageClassification

    model = ViTScratchForImageClassification.from_pretrained(folder)
    (folder / "model.safetensors").unlink()
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    refused = outcome("explain", argv_reading(scenario, "explain", "--model", folder))
    command = refused.error.split("convert it to safetensors with ", 1)[1].split(" (this unpickles it", 1)[0]
    python, code = command.split(' -c "', 1)  # the interpreter that ran (common/commands.py printed_python)
    assert python in ("python", shlex.quote(sys.executable)) and code.endswith('"')
    converted = subprocess.run(
        [sys.executable, "-c", code[:-1]],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=PROCESS_TIMEOUT,
    )
    assert converted.returncode == 0, converted.stderr[-2000:]
    assert outcome("explain", argv_reading(scenario, "explain", "--model", folder)).code == 0


@pytest.mark.integration
@pytest.mark.parametrize(
    ("name", "argument"), one_by_default([("explain", "--model"), ("train", "--model"), ("train", "--teacher")])
)  # a new process each; the in-process test above tries every entry point on a local folder
def test_a_hub_repo_with_only_a_pickle_is_one_line_and_never_unpickled(local_hub, tmp_path, name, argument):  # noqa: F811
    scenario, marker = Scenario(tmp_path), tmp_path / "marker"
    hub_repo(local_hub, "local-user/pickled", pickle_only_folder(scenario, marker))
    argv = argv_reading(scenario, name, argument, Path("."))
    argv[argv.index(argument) + 1] = "local-user/pickled"
    env = command_env(tmp_path, **local_hub.env(tmp_path / "hf_home"))
    result = subprocess.run(
        [sys.executable, "-m", "modeling_vit_scratch.cli", name, *argv],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and "'local-user/pickled'" in line and "safetensors" in line, line
    assert not marker.exists()


def spoiled_weights(folder: Path, how: str) -> None:
    """`folder`'s classifier.weight with one NaN, or stored as int64 (its values cast)."""
    from safetensors.torch import save_file

    weights = load_file(folder / "model.safetensors")
    if how == "NaN":
        weights["classifier.weight"][0, 0] = float("nan")
    else:
        weights["classifier.weight"] = (weights["classifier.weight"] * 100).to(torch.int64)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})


@pytest.mark.parametrize(("name", "argument"), MODEL_FOLDER_READERS)
@pytest.mark.parametrize("how", ["NaN", "int64"])
def test_weights_that_cannot_be_used_as_saved_are_one_line_at_every_reader(tmp_path, monkeypatch, name, argument, how):
    """A NaN in a weight (scores of NaN, blank figures) and a floating-point parameter stored as integers (cast
    silently by transformers) are refused by every reader, naming the tensor: nothing is written or sent (a push's
    Hub is taken to accept the token: the refusal comes before any upload)."""
    monkeypatch.setattr("modeling_vit_scratch.sharing.hub_arguments.check_access", lambda *args: "local-user")
    scenario = Scenario(tmp_path)
    folder = tmp_path / "spoiled"
    shutil.copytree(scenario.model(), folder)
    spoiled_weights(folder, how)
    argv = argv_reading(scenario, name, argument, folder)
    result = outcome(name, argv)
    assert result.one_line, result
    said = "holds non-finite values (NaN or infinity) in tensor 'classifier.weight'"
    said = said if how == "NaN" else "stores the floating-point parameter 'classifier.weight' (I64) as integers"
    assert said in result.error, result.error
    assert not any((tmp_path / f"out-{name}").glob("*"))


@pytest.mark.parametrize(("name", "argument"), MODEL_FOLDER_READERS)
@pytest.mark.parametrize("edit", ["intermediate_size", "labels"])
def test_a_config_that_disagrees_with_the_weights_is_our_one_line_never_transformers_load_report(
    tmp_path, capfd, name, argument, edit
):
    """transformers logs a multi-line LOAD REPORT table (with escape codes) for weights that do not fit the config;
    every reader names the mismatch in one line of its own, and the table never reaches the terminal."""
    scenario = Scenario(tmp_path)
    folder = tmp_path / "edited"
    shutil.copytree(scenario.model(), folder)
    config = json.loads((folder / "config.json").read_text())
    if edit == "intermediate_size":
        config["intermediate_size"] += 1
    else:  # more classes than the head was saved with
        config["id2label"] = {str(index): f"c{index}" for index in range(50)}
        config["label2id"] = {f"c{index}": index for index in range(50)}
    (folder / "config.json").write_text(json.dumps(config))
    capfd.readouterr()
    result = outcome(name, argv_reading(scenario, name, argument, folder))
    printed = capfd.readouterr()
    fine_tunes = (name, argument, edit) == ("train", "--model", "labels")  # another label set: a new head, on purpose
    assert result.code == 0 if fine_tunes else result.one_line, result
    assert "LOAD REPORT" not in printed.err + printed.out and "\x1b[" not in printed.err + printed.out


@pytest.fixture
def address_space_cap():
    """A limit on this process's address space (what it holds now and 4 GiB more) while the test runs: a check that
    failed would get a MemoryError, never thrash the machine."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    held = (
        int(
            next(
                line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmSize")
            ).split()[1]
        )
        * 1024
    )
    resource.setrlimit(resource.RLIMIT_AS, (held + 4 * 2**30, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.parametrize(
    ("name", "argument", "extra"),
    [*[(*reader, []) for reader in MODEL_FOLDER_READERS], ("explain", "--model", ["--trust_remote_code"])],
)
def test_a_config_too_large_to_build_is_one_line_at_every_reader_before_any_allocation(
    tmp_path, monkeypatch, address_space_cap, name, argument, extra
):
    """An edited config.json (intermediate_size 2^36: 6.6 TB of weights) is refused by the size check training
    applies to a new architecture, at every reader of a model folder, before the model is built."""
    monkeypatch.setattr("modeling_vit_scratch.sharing.hub_arguments.check_access", lambda *args: "local-user")
    scenario = Scenario(tmp_path)
    folder = tmp_path / "huge"
    shutil.copytree(scenario.model(), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "intermediate_size": 2**36}))
    result = outcome(name, [*argv_reading(scenario, name, argument, folder), *extra])
    assert result.one_line, result
    assert result.error.startswith(f"error: {folder / 'config.json'}: ") and "parameters, more than the" in result.error
    assert "restore config.json" in result.error, result.error


def tiny_folder(folder: Path, **config) -> Path:
    """A saved vit_scratch classifier (8x8 images, 2 layers of width 24), its config.json then given `config`."""
    from modeling_vit_scratch.configuration_vit_scratch import ViTScratchConfig
    from modeling_vit_scratch.modeling_vit_scratch import ViTScratchForImageClassification

    architecture = {"image_size": 8, "patch_size": 4, "hidden_size": 24, "num_hidden_layers": 2}
    model_config = ViTScratchConfig(**architecture, num_attention_heads=2, intermediate_size=37, num_labels=3)
    ViTScratchForImageClassification(model_config).save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**saved, **config}))
    return folder


def test_a_config_larger_than_its_weights_is_one_line_before_the_model_is_built(tmp_path, address_space_cap):
    """config.json edited to 200 layers of width 2000 (under the parameter cap, 19 GB in float32) beside the tiny
    weights: refused from the weights' header and a model built on the meta device, naming the first tensor that
    differs, with no memory taken for the model."""
    from modeling_vit_scratch.common.model_folder import check_buildable

    folder = tiny_folder(tmp_path / "m", num_hidden_layers=200, hidden_size=2000, intermediate_size=2000)
    with pytest.raises(ValueError, match="from different models") as raised:
        check_buildable(folder)
    message = str(raised.value)
    assert message.startswith(f"{folder / 'model.safetensors'} holds 'classifier.weight' of shape (3, 24) ")
    assert "where config.json asks for (3, 2000)" in message and "\n" not in message


@pytest.mark.parametrize("edit", ["layers", "labels", "sharded"])
def test_weights_are_compared_with_the_config_by_name_and_shape(tmp_path, edit):
    """A missing layer is named; a head of another label count (fine-tuning replaces it) and sharded weights pass."""
    from modeling_vit_scratch.common.model_folder import check_buildable

    if edit == "layers":
        folder = tiny_folder(tmp_path / "m", num_hidden_layers=3)
        with pytest.raises(
            ValueError, match=r"has no tensor 'vit\.layers\.2\.[a-z_.]+' that config.json asks for \(of shape \("
        ):
            check_buildable(folder)
        return
    labels = {"id2label": {str(i): f"c{i}" for i in range(7)}, "label2id": {f"c{i}": i for i in range(7)}}
    folder = tiny_folder(tmp_path / "m", **(labels if edit == "labels" else {}))
    if edit == "sharded":
        from modeling_vit_scratch.modeling_vit_scratch import ViTScratchForImageClassification

        model = ViTScratchForImageClassification.from_pretrained(folder)
        folder = tmp_path / "sharded"
        model.save_pretrained(folder, max_shard_size="20KB")
        assert (folder / "model.safetensors.index.json").is_file() and not (folder / "model.safetensors").exists()
    check_buildable(folder)
