"""Code: no code that comes with a model folder runs unless the user asked for remote code (only `explain
--trust_remote_code` can). A folder whose auto_map names code other than the package's own is refused in one line
by every command that reads a model folder, before anything loads, and transformers' "[y/N]" prompt never appears,
on a terminal or not. The package's own auto_map (what save_pretrained writes) keeps loading."""

import ast
import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from entry_points import MODEL_FOLDER_READERS, Scenario, argv_reading, command_env, hub_repo, outcome
from helpers import PROCESS_TIMEOUT, REPO, TINY_MODEL, one_by_default
from hub_server import local_hub  # noqa: F401  (the fixture)

from modeling_vit_scratch.common.remote_code import foreign_code
from modeling_vit_scratch.configuration_vit_scratch import MODEL_FILES

# how a folder names foreign code: its own module under our model type, a model type transformers does not know
# (where transformers would prompt), another Hub repo
AUTO_MAPS = {
    "own module": ("vit_scratch", {"AutoModelForImageClassification": "evil.Evil"}),
    "unknown model type": (
        "evil_net",
        {"AutoConfig": "evil.EvilConfig", "AutoModelForImageClassification": "evil.Evil"},
    ),
    "another repo": ("vit_scratch", {"AutoModelForImageClassification": "attacker/repo--evil.Evil"}),
}
# the word of the fix each command's line ends with
FIXES = {"train": "never runs", "explain": "--trust_remote_code", "convert": "never runs", "push": "save the model"}


def evil_folder(scenario: Scenario, attack: str, marker: Path) -> Path:
    """The scenario's model with an evil.py that writes `marker` when it is imported, named by config.json."""
    folder = scenario.root / f"evil-{attack.replace(' ', '-')}"
    shutil.copytree(scenario.model(), folder)
    model_type, auto_map = AUTO_MAPS[attack]
    (folder / "evil.py").write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type=model_type, auto_map=auto_map)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_the_package_s_own_auto_map_is_its_own_and_any_other_is_named(tmp_path):
    scenario = Scenario(tmp_path)
    assert json.loads((scenario.model() / "config.json").read_text())["auto_map"]  # save_pretrained writes one
    assert foreign_code(scenario.model()) is None
    for attack, (_, auto_map) in AUTO_MAPS.items():
        found = foreign_code(evil_folder(scenario, attack, tmp_path / "marker"))
        assert "config.json maps" in found and any(repr(reference) in found for reference in auto_map.values())
        assert "not vit-scratch's own code" in found


@pytest.mark.parametrize("attack", AUTO_MAPS)
@pytest.mark.parametrize(("name", "argument"), MODEL_FOLDER_READERS)
def test_a_folder_naming_foreign_code_is_one_line_and_its_code_never_runs(tmp_path, name, argument, attack):
    scenario, marker = Scenario(tmp_path), tmp_path / "marker"
    folder = evil_folder(scenario, attack, marker)
    before = snapshot(folder)
    result = outcome(name, argv_reading(scenario, name, argument, folder))
    assert result.one_line, result
    assert result.error.startswith("error: ") and "evil" in result.error
    assert "refusing to run" in result.error and FIXES[name] in result.error, result.error
    assert not marker.exists()
    assert snapshot(folder) == before


def test_every_load_in_the_tooling_says_whether_to_trust_code_and_reads_safetensors_only():
    """By construction: each Auto class load (and any pipeline) in the package outside the model files passes
    trust_remote_code, and each load of weights passes use_safetensors=True."""
    missing = []
    for path in sorted((REPO / "modeling_vit_scratch").rglob("*.py")):
        if path.parent.name == "modeling_vit_scratch" and path.name in MODEL_FILES:
            continue  # the model's own files: what a user's from_pretrained runs
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            function = ast.unparse(node.func)
            keywords = {keyword.arg: keyword.value for keyword in node.keywords}
            loads = function.endswith((".from_pretrained", ".from_config")) or function == "pipeline"
            if loads and ("Auto" in function or function == "pipeline") and "trust_remote_code" not in keywords:
                missing.append(f"{path.name}:{node.lineno} {function} without trust_remote_code")
            weights = function.endswith(".from_pretrained") and not any(
                kind in function for kind in ("Config", "Processor")
            )
            if weights and ast.unparse(keywords.get("use_safetensors", ast.Constant(None))) != "True":
                missing.append(f"{path.name}:{node.lineno} {function} without use_safetensors=True")
    assert not missing, missing


def refused_answering_yes(name: str, argv: list[str], env: dict, marker: Path) -> str:
    """Run `name` in a new process whose stdin is a pipe answering "y" to anything; check that it ended with one
    line, no prompt and no code run; the line."""
    result = subprocess.run(
        [sys.executable, "-m", "modeling_vit_scratch.cli", name, *argv],
        input="y\n" * 5,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        env=env,
        cwd=REPO,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "Do you wish to run the custom code" not in result.stdout + result.stderr
    assert not marker.exists()
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: "), line
    return line


@pytest.mark.integration
@pytest.mark.parametrize(("name", "argument"), one_by_default(MODEL_FOLDER_READERS))
def test_with_y_on_a_pipe_no_prompt_appears_and_nothing_runs(tmp_path, name, argument):
    """A new process whose stdin is a pipe answering "y": one line, at once, no prompt, no code run."""
    scenario, marker = Scenario(tmp_path), tmp_path / "marker"
    folder = evil_folder(scenario, "unknown model type", marker)
    refused_answering_yes(name, argv_reading(scenario, name, argument, folder), command_env(tmp_path), marker)


@pytest.mark.integration
def test_on_a_terminal_answering_y_no_prompt_appears_and_the_teacher_s_code_never_runs(tmp_path):
    """`train --teacher FOLDER` under a pseudo-terminal that types "y": transformers asked "[y/N]" here, and "y" ran
    the teacher's code."""
    scenario, marker = Scenario(tmp_path), tmp_path / "marker"
    folder = evil_folder(scenario, "unknown model type", marker)
    argv = argv_reading(scenario, "train", "--teacher", folder)
    env = command_env(tmp_path)
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "modeling_vit_scratch.cli", "train", *argv],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env=env,
        cwd=REPO,
    )
    os.close(terminal)
    seen, deadline = b"", time.monotonic() + PROCESS_TIMEOUT
    while process.poll() is None and time.monotonic() < deadline:
        if select.select([controller], [], [], 0.5)[0]:
            try:
                seen += os.read(controller, 4096)
            except OSError:  # the terminal closed with the process
                break
        os.write(controller, b"y\n")  # whatever it asks, the answer is yes
    process.wait(timeout=60)
    os.close(controller)
    text = seen.decode(errors="replace")
    assert process.returncode == 1 and "Traceback" not in text, text[-2000:]
    assert "Do you wish to run the custom code" not in text
    assert "error: " in text and "not vit-scratch's own code" in text
    assert not marker.exists()


@pytest.mark.integration
@pytest.mark.parametrize(
    ("name", "argument"),
    one_by_default([("explain", "--model"), ("train", "--model"), ("train", "--teacher"), ("convert", "--input")]),
)
def test_a_hub_repo_naming_foreign_code_is_one_line_and_never_prompts(local_hub, tmp_path, name, argument):  # noqa: F811
    """The same for a hub repo id: its JSON files are read first; the load would refuse, never ask."""
    scenario, marker = Scenario(tmp_path), tmp_path / "marker"
    hub_repo(local_hub, "local-user/evil", evil_folder(scenario, "unknown model type", marker))
    argv = argv_reading(scenario, name, argument, Path("."))
    argv[argv.index(argument) + 1] = "local-user/evil"
    line = refused_answering_yes(name, argv, command_env(tmp_path, **local_hub.env(tmp_path / "hf_home")), marker)
    assert "'evil.EvilConfig', which is not vit-scratch's own code" in line, line


# how a settings file is damaged: (file, what it holds); "LINK" makes it a link to a text file that is not JSON
DAMAGED = {
    "truncated config": ("config.json", '{"model_type": "vit_scratch",'),
    "processor not JSON": ("preprocessor_config.json", "hello"),
    "config a link to text": ("config.json", "LINK"),
    "config not an object": ("config.json", "[1, 2]"),
}


def damaged_folder(scenario: Scenario, damage: str) -> Path:
    folder = scenario.root / f"damaged-{damage.replace(' ', '-')}"
    shutil.copytree(scenario.model(), folder)
    name, content = DAMAGED[damage]
    (folder / name).unlink()
    if content == "LINK":
        (scenario.root / "text.txt").write_text("root:x:0:0:root:/root:/bin/bash\n")
        (folder / name).symlink_to(scenario.root / "text.txt")
    else:
        (folder / name).write_text(content)
    return folder


@pytest.mark.parametrize("damage", DAMAGED)
@pytest.mark.parametrize(
    ("name", "argument", "extra"),
    [*[(*reader, []) for reader in MODEL_FOLDER_READERS], ("explain", "--model", ["--trust_remote_code"])],
)
def test_a_settings_file_that_is_not_json_is_one_line_naming_the_damage_never_remote_code_advice(
    tmp_path, name, argument, extra, damage
):
    scenario = Scenario(tmp_path)
    folder = damaged_folder(scenario, damage)
    before = snapshot(folder)
    result = outcome(name, [*argv_reading(scenario, name, argument, folder), *extra])
    assert result.one_line, result
    assert "trust_remote_code" not in result.error and "refusing to run" not in result.error, result.error
    if name == "push" and DAMAGED[damage][1] == "LINK":  # push refuses any link first, naming it
        assert "symbolic link" in result.error
    else:
        assert f"{folder / DAMAGED[damage][0]} is not " in result.error and "JSON" in result.error, result.error
        assert "damaged" in result.error and "save the folder again" in result.error, result.error
    assert snapshot(folder) == before


# a value of a saved folder's settings no model is built from: (file, key, value, words of the line)
BAD_VALUES = {
    "NaN eps": ("config.json", "layer_norm_eps", float("nan"), "layer_norm_eps the value nan"),
    "inf rescale": ("preprocessor_config.json", "rescale_factor", float("inf"), "rescale_factor the value inf"),
    "NaN mean": ("preprocessor_config.json", "image_mean", [0.5, float("nan"), 0.5], "image_mean[1] the value nan"),
    "head count": ("config.json", "num_attention_heads", 5, "num_attention_heads (5)"),
    "label ids": ("config.json", "id2label", {"a": "x", "b": "y", "c": "z"}, "id2label the id 'a'"),
    "quantization": ("config.json", "quantization_config", {"quant_method": "bitsandbytes"}, "quantization_config"),
    "hub kernel": ("config.json", "_attn_implementation", "kernels-community/flash-attn", "'kernels-community/"),
    "processor type": (
        "preprocessor_config.json",
        "image_processor_type",
        "CLIPImageProcessor",
        "'CLIPImageProcessor'",
    ),
    "mean length": (
        "preprocessor_config.json",
        "image_mean",
        [0.5, 0.5],
        "image_mean 2 values, but config.json's num_channels is 3",
    ),
    "std length": ("preprocessor_config.json", "image_std", [0.5], "image_std 1 values, but"),
}


@pytest.mark.parametrize("bad", BAD_VALUES)
@pytest.mark.parametrize(("name", "argument"), MODEL_FOLDER_READERS)
def test_a_bad_settings_value_is_one_line_naming_file_key_and_restore_at_every_reader(tmp_path, name, argument, bad):
    """Every value of config.json and preprocessor_config.json is checked before a model is built, by every reader:
    one line naming the file, the key and the value, with the settings' fix (never training's, never a traceback,
    never `nan` scores or a publish)."""
    scenario = Scenario(tmp_path)
    file, key, value, words = BAD_VALUES[bad]
    folder = tmp_path / "bad"
    shutil.copytree(scenario.model(), folder)
    content = json.loads((folder / file).read_text())
    (folder / file).write_text(json.dumps({**content, key: value}))
    before = snapshot(folder)
    result = outcome(name, argv_reading(scenario, name, argument, folder))
    assert result.one_line, result
    assert f"{folder / file} " in result.error and words in result.error, result.error
    assert ("remove the key" if key in ("quantization_config", "_attn_implementation") else "restore") in result.error
    assert "pick a head count" not in result.error, result.error
    assert snapshot(folder) == before


def test_a_settings_file_too_deep_or_too_large_is_one_line_before_it_is_parsed(tmp_path, monkeypatch):
    from modeling_vit_scratch.common import model_folder

    (tmp_path / "config.json").write_text('{"model_type": "vit_scratch", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(ValueError, match="nested too deeply.*save the folder again"):
        model_folder.check_buildable(tmp_path)
    monkeypatch.setattr(model_folder, "MAX_SETTINGS_BYTES", 100)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "vit_scratch", "x": "y" * 100}))
    with pytest.raises(ValueError, match=r"config.json is 1\d\d bytes, more than the 100"):
        model_folder.check_buildable(tmp_path)


def test_an_attention_implementation_transformers_runs_itself_passes(tmp_path):
    from modeling_vit_scratch.common.model_folder import check_buildable

    for value in ("eager", "sdpa", {"": "sdpa"}):
        (tmp_path / "config.json").write_text(json.dumps({"model_type": "vit", "_attn_implementation": value}))
        check_buildable(tmp_path)
    for value in ({"": "kernels-community/flash-attn"}, ["sdpa"]):  # a per-sub-config mapping, a value of no name
        (tmp_path / "config.json").write_text(json.dumps({"model_type": "vit", "attn_implementation": value}))
        with pytest.raises(ValueError, match="attn_implementation .*remove the key"):
            check_buildable(tmp_path)


def test_explain_of_a_folder_that_does_not_resize_names_do_resize_its_file_and_a_fix_explain_takes(tmp_path):
    scenario = Scenario(tmp_path)
    folder = tmp_path / "unresized"
    shutil.copytree(scenario.model(), folder)
    content = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(json.dumps({**content, "do_resize": False}))
    result = outcome("explain", argv_reading(scenario, "explain", "--model", folder))  # a 40x30 picture, an 8x8 model
    assert result.one_line, result
    assert f"{folder / 'preprocessor_config.json'} gives do_resize false" in result.error, result.error
    assert "give --image a 8x8 image" in result.error and "interpolate_pos_encoding" not in result.error


def test_a_trusted_hub_repo_s_settings_are_checked_as_a_local_folder_s(tmp_path, monkeypatch):
    """explain --trust_remote_code with a hub repo id: the repo's fetched settings pass the same check
    (`check_buildable`) as a local folder's, trusting its code or not."""
    from modeling_vit_scratch.common import remote_code

    snapshot_folder = tmp_path / "snapshot"
    snapshot_folder.mkdir()
    config = {"model_type": "vit_scratch", "layer_norm_eps": float("nan")}
    (snapshot_folder / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr(remote_code, "settings_of_repo", lambda repo_id, revision=None: snapshot_folder)
    for trusted in (False, True):
        with pytest.raises(ValueError, match=r"config\.json gives layer_norm_eps the value nan"):
            remote_code.check_no_foreign_code("local-user/repo", "fix", trust_remote_code=trusted)


def write_adapter(folder: Path, parts: tuple[str, ...], base: str = "whatever") -> None:
    """A LoRA adapter of the scenario's classifier beside a model's files: its config, its weights, or both."""
    import torch
    from safetensors.torch import save_file

    if "config" in parts:
        adapter = {"peft_type": "LORA", "base_model_name_or_path": base, "target_modules": ["classifier"]}
        (folder / "adapter_config.json").write_text(json.dumps({**adapter, "r": 2, "lora_alpha": 4}))
    if "weights" in parts:
        prefix = "base_model.model.classifier"
        tensors = {f"{prefix}.lora_A.weight": torch.ones(2, 24), f"{prefix}.lora_B.weight": torch.ones(3, 2)}
        save_file(tensors, folder / "adapter_model.safetensors")


# an adapter beside a model, whole or in part (config only: transformers finds it by its config; weights only)
ADAPTERS = {"whole": ("config", "weights"), "config only": ("config",), "weights only": ("weights",)}


@pytest.mark.parametrize("parts", ADAPTERS)
@pytest.mark.parametrize(("name", "argument"), MODEL_FOLDER_READERS)
def test_a_folder_holding_an_adapter_is_one_line_naming_it_and_the_merge_at_every_reader(
    tmp_path, name, argument, parts
):
    """A command reads a folder's own model only: a PEFT adapter beside it (which transformers would load over the
    model, or load another repo's base model for) is one line naming its file and the fix, before anything loads."""
    scenario = Scenario(tmp_path)
    folder = tmp_path / "adapted"
    shutil.copytree(scenario.model(), folder)
    write_adapter(folder, ADAPTERS[parts])
    before = snapshot(folder)
    result = outcome(name, argv_reading(scenario, name, argument, folder))
    assert result.one_line, result
    first = "adapter_config.json" if "config" in ADAPTERS[parts] else "adapter_model.safetensors"
    assert f"{folder / first} is a PEFT adapter" in result.error, result.error
    assert "merge_and_unload()" in result.error and "remove the adapter files" in result.error, result.error
    assert snapshot(folder) == before


@pytest.mark.parametrize(("name", "argument"), MODEL_FOLDER_READERS)
def test_an_adapter_saved_alone_is_named_as_an_adapter_to_merge_at_every_reader(tmp_path, name, argument):
    """peft's `save_pretrained` of an unmerged model writes the adapter alone (no config.json): every reader names it
    as an adapter to merge into its base model, not as a folder that "has no config.json"."""
    scenario = Scenario(tmp_path)
    folder = tmp_path / "lora_adapter"
    folder.mkdir()
    write_adapter(folder, ("config", "weights"))
    before = snapshot(folder)
    result = outcome(name, argv_reading(scenario, name, argument, folder))
    assert result.one_line, result
    assert f"{folder} holds a PEFT adapter (adapter_config.json, adapter_model.safetensors) and no model" in (
        result.error
    ), result.error
    assert "merge_and_unload()" in result.error, result.error
    assert snapshot(folder) == before


def test_a_hub_repo_holding_an_adapter_is_refused_from_its_fetched_settings(tmp_path, monkeypatch):
    """A hub repo's settings fetch takes its adapter_config.json too, so a repo whose adapter names another repo's
    base model is refused as a local folder is, trusted or not."""
    from modeling_vit_scratch.common import remote_code

    snapshot_folder = tmp_path / "snapshot"
    shutil.copytree(Scenario(tmp_path).model(), snapshot_folder)
    write_adapter(snapshot_folder, ("config",), base="local-user/m1")
    monkeypatch.setattr(remote_code, "settings_of_repo", lambda repo_id, revision=None: snapshot_folder)
    for trusted in (False, True):
        with pytest.raises(ValueError, match=r"adapter_config\.json is a PEFT adapter.*merge_and_unload"):
            remote_code.check_no_foreign_code("local-user/repo", "fix", trust_remote_code=trusted)


def test_the_hub_settings_fetch_takes_the_adapter_config(monkeypatch, tmp_path):
    import huggingface_hub

    from modeling_vit_scratch.common import remote_code

    asked = {}
    monkeypatch.setattr(
        huggingface_hub, "snapshot_download", lambda repo_id, **kwargs: asked.update(kwargs) or tmp_path
    )
    remote_code.settings_of_repo("local-user/repo")
    assert "adapter_config.json" in asked["allow_patterns"], asked


def test_a_grayscale_folder_naming_another_processor_is_one_line_and_the_package_s_own_pass(tmp_path):
    """A 1-channel model whose preprocessor_config.json names CLIP's processor (which would be loaded, then fail on
    the 1-value mean naming nothing) is refused naming the file and the key; the package's own processors, slow or
    fast, and transformers' ViT one (whose RGB output explain brings to one channel) pass."""
    from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification, ViTScratchImageProcessor
    from modeling_vit_scratch.common.model_folder import check_buildable

    config = ViTScratchConfig(**TINY_MODEL, num_labels=3, num_channels=1)
    ViTScratchForImageClassification(config).save_pretrained(tmp_path)
    ViTScratchImageProcessor.for_config(config).save_pretrained(tmp_path)
    path = tmp_path / "preprocessor_config.json"
    content = json.loads(path.read_text())
    for kind in ("ViTScratchImageProcessor", "ViTScratchImageProcessorFast", "ViTImageProcessor"):
        path.write_text(json.dumps({**content, "image_processor_type": kind}))
        check_buildable(tmp_path)
    path.write_text(json.dumps({**content, "image_processor_type": "CLIPImageProcessor"}))
    with pytest.raises(ValueError, match=r"preprocessor_config\.json gives image_processor_type 'CLIPImageProcessor'"):
        check_buildable(tmp_path)
    path.write_text(json.dumps({**content, "image_std": [0.5, 0.5, 0.5]}))
    with pytest.raises(ValueError, match=r"image_std 3 values, but config.json's num_channels is 1"):
        check_buildable(tmp_path)
