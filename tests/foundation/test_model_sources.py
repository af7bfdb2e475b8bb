"""Model sources: a folder that would make the package run code or unpickle is one line, and nothing of it runs; our
own save_pretrained folder loads; `trust_remote_code` lets a foreign auto_map through."""

import json
import pickle
import shutil
import sys
from pathlib import Path

import pytest
from helpers import tiny_config
from hypothesis import given
from hypothesis import strategies as st

from modeling_vit_scratch import ViTScratchForImageClassification, sources
from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.sources import check_model_folder, load_model

EVIL = "from pathlib import Path\nPath({marker!r}).write_text('ran')\nclass Evil: pass\n"


class RunsCode:
    """A pickle that writes the marker when it is read."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """Our own model, as save_pretrained writes it."""
    folder = tmp_path_factory.mktemp("saved") / "model"
    ViTScratchForImageClassification(tiny_config()).save_pretrained(folder)
    return folder


def copy_with_evil(saved: Path, where: Path) -> tuple[Path, Path]:
    folder, marker = where / "model", where / "marker"
    shutil.copytree(saved, folder, dirs_exist_ok=True)
    (folder / "evil.py").write_text(EVIL.format(marker=str(marker)))
    return folder, marker


def nothing_ran(marker: Path) -> bool:
    return not marker.exists() and "evil" not in sys.modules


def test_our_own_folder_passes_and_loads(saved):
    assert check_model_folder(saved)["model_type"] == "vit_scratch"
    assert isinstance(load_model(saved), ViTScratchForImageClassification)


def test_a_folders_copy_of_our_code_never_runs_untrusted(saved, tmp_path):
    """The folder's own modeling file, though our auto_map names it, is not what loads: the installed package is."""
    folder, marker = copy_with_evil(saved, tmp_path)
    for name in ("modeling_vit_scratch.py", "configuration_vit_scratch.py"):
        (folder / name).write_text(EVIL.format(marker=str(marker)))
    assert isinstance(load_model(folder), ViTScratchForImageClassification)
    assert not marker.exists()


foreign = st.sampled_from(["evil.Evil", "someone/repo--evil.Evil", "someone/repo--modeling_vit_scratch.Evil"])


@given(
    file=st.sampled_from(["config.json", "preprocessor_config.json"]),
    auto_class=st.sampled_from(["AutoConfig", "AutoModelForImageClassification", "AutoImageProcessor"]),
    form=st.sampled_from(["str", "list", "not a mapping"]),
    reference=foreign,
)
def test_a_foreign_auto_map_is_refused_and_runs_nothing(saved, tmp_path_factory, file, auto_class, form, reference):
    folder, marker = copy_with_evil(saved, tmp_path_factory.mktemp("foreign"))
    settings = json.loads((folder / file).read_text()) if (folder / file).exists() else {}
    value = {"str": reference, "list": [reference, None], "not a mapping": reference}[form]
    settings["auto_map"] = value if form == "not a mapping" else {**settings.get("auto_map", {}), auto_class: value}
    (folder / file).write_text(json.dumps(settings))
    with pytest.raises(UserError, match=file):
        load_model(folder)
    assert nothing_ran(marker)
    assert check_model_folder(folder, trust_remote_code=True)["model_type"] == "vit_scratch"
    assert nothing_ran(marker)  # trusted, it is let through; still nothing runs until something loads it


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "weights.ckpt"])
def test_pickle_only_weights_are_refused_unread(saved, tmp_path, name):
    folder, marker = copy_with_evil(saved, tmp_path)
    (folder / "model.safetensors").unlink()
    (folder / name).write_bytes(pickle.dumps(RunsCode(marker)))
    with pytest.raises(UserError, match=name):
        load_model(folder)
    assert nothing_ran(marker)


def test_an_adapter_alone_is_refused(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "x", "peft_type": "LORA"}))
    (tmp_path / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(UserError, match="--model"):
        load_model(tmp_path)


@given(damage=st.sampled_from([b"{", b"[1, 2]", b"null", b"\xff\xfe{", b"", b'{"a": 1']) | st.binary(max_size=30))
def test_a_damaged_config_is_one_line(saved, tmp_path_factory, damage):
    try:
        if isinstance(json.loads(damage.decode("utf-8")), dict):
            return  # a JSON object: not damaged
    except (UnicodeDecodeError, json.JSONDecodeError):
        pass
    folder, marker = copy_with_evil(saved, tmp_path_factory.mktemp("damaged"))
    (folder / "config.json").write_bytes(damage)
    with pytest.raises(UserError, match="config.json"):
        load_model(folder)
    assert nothing_ran(marker)


@pytest.mark.parametrize("trust", [False, True])
def test_a_hub_snapshot_fetches_code_only_when_asked(monkeypatch, tmp_path, trust):
    asked = {}

    def snapshot_download(repo_id, revision=None, allow_patterns=None):
        asked.update(repo_id=repo_id, revision=revision, patterns=allow_patterns)
        return str(tmp_path)

    monkeypatch.setattr("huggingface_hub.snapshot_download", snapshot_download)
    assert sources.resolve("someone/model", revision="v1", trust_remote_code=trust) == tmp_path
    assert asked["revision"] == "v1" and any(p.endswith(".py") for p in asked["patterns"]) == trust
    assert not any(p.endswith((".bin", ".pt", ".pkl", ".ckpt")) for p in asked["patterns"])


def test_a_config_asking_for_more_memory_than_is_free_is_one_line_before_anything_is_allocated(tmp_path):
    ViTScratchForImageClassification(tiny_config()).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(hidden_size=2**20, intermediate_size=2**22, num_attention_heads=1)  # petabytes of parameters
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match="memory"):
        load_model(tmp_path)
