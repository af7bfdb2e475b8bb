"""Auto classes, safetensors saving and the pipeline: in this process and in one that has never heard of us."""

import ast
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from helpers import run_fresh_loads, tiny_config
from PIL import Image
from transformers import (
    AutoConfig,
    AutoImageProcessor,
    AutoModel,
    AutoModelForImageClassification,
    AutoModelForPreTraining,
    pipeline,
)
from transformers.image_utils import load_image

from modeling_vit_scratch import (
    ViTScratchConfig,
    ViTScratchForImageClassification,
    ViTScratchForPreTraining,
    ViTScratchImageProcessor,
    ViTScratchModel,
)


@pytest.fixture
def saved_folder(tmp_path):
    config = tiny_config(num_channels=1, id2label={i: f"digit {i}" for i in range(5)})
    model = ViTScratchForImageClassification(config).eval()
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    ViTScratchImageProcessor.for_config(config).save_pretrained(folder)
    return model, folder


def test_importing_the_package_registers_the_auto_classes(saved_folder):
    _, folder = saved_folder
    config = AutoConfig.for_model("vit_scratch", hidden_size=24, num_attention_heads=2)
    assert isinstance(config, ViTScratchConfig)
    assert isinstance(AutoModel.from_config(tiny_config()), ViTScratchModel)
    assert isinstance(AutoModelForImageClassification.from_config(tiny_config()), ViTScratchForImageClassification)
    loaded = AutoModelForImageClassification.from_pretrained(folder)
    assert type(loaded) is ViTScratchForImageClassification
    assert isinstance(AutoImageProcessor.from_pretrained(folder), ViTScratchImageProcessor)


def test_saved_folder_holds_safetensors_code_and_auto_map(saved_folder):
    _, folder = saved_folder
    files = set(os.listdir(folder))
    assert {"model.safetensors", "config.json", "preprocessor_config.json"} <= files
    assert {f"{name}.py" for name in SHIPPED_CODE} <= files
    assert not any(name.endswith((".bin", ".pt", ".pth")) for name in files)
    auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
    assert auto_map == {
        "AutoConfig": "configuration_vit_scratch.ViTScratchConfig",
        "AutoModel": "modeling_vit_scratch.ViTScratchModel",
        "AutoModelForImageClassification": "modeling_vit_scratch.ViTScratchForImageClassification",
    }
    processor_map = json.loads((folder / "preprocessor_config.json").read_text())["auto_map"]
    assert processor_map == {
        "AutoImageProcessor": [
            "image_processing_vit_scratch.ViTScratchImageProcessor",
            "image_processing_vit_scratch.ViTScratchImageProcessorFast",
        ]
    }


# The code `save_pretrained` copies into a folder, which runs with `trust_remote_code` where the package is not
# installed, and what it may import there: the standard library, what such users have anyway, and each other.
SHIPPED_CODE = {
    "configuration_vit_scratch",
    "modeling_vit_scratch",
    "loading_vit_scratch",
    "stems_vit_scratch",
    "image_processing_vit_scratch",
}
SHIPPED_CODE_IMPORTS = {"torch", "numpy", "PIL", "transformers", "huggingface_hub"}


def test_the_code_a_saved_folder_ships_imports_nothing_else_of_the_package(saved_folder):
    """A relative import of another package module would be copied along by transformers and ship silently (or fail
    on the Hub): each import of each *.py file in the saved folder is checked, and the folder holds only the files of SHIPPED_CODE."""
    _, folder = saved_folder
    shipped = {path.stem: path for path in folder.glob("*.py")}
    assert SHIPPED_CODE <= set(shipped)
    allowed = SHIPPED_CODE_IMPORTS | set(sys.stdlib_module_names)
    foreign = []
    for path in sorted(shipped.values()):
        for node in ast.walk(ast.parse(path.read_text(), filename=path.name)):
            if isinstance(node, ast.Import):
                foreign += [
                    f"{path.name}:{node.lineno}: import {alias.name}"
                    for alias in node.names
                    if alias.name.split(".")[0] not in allowed
                ]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                if node.module.split(".")[0] not in allowed:
                    foreign.append(f"{path.name}:{node.lineno}: from {node.module} import ...")
            elif isinstance(node, ast.ImportFrom):  # relative: only another of the shipped files
                targets = [node.module] if node.module else [alias.name for alias in node.names]
                if node.level > 1 or any(target.split(".")[0] not in SHIPPED_CODE for target in targets):
                    foreign.append(
                        f"{path.name}:{node.lineno}: from {'.' * node.level}{node.module or ''} import "
                        f"{', '.join(alias.name for alias in node.names)} (not a shipped file)"
                    )
    assert not foreign, "the saved code imports what a Hub user does not have:\n" + "\n".join(foreign)
    assert set(shipped) == SHIPPED_CODE, f"save_pretrained also copied {sorted(set(shipped) - SHIPPED_CODE)}"


PRETRAINING_FRESH_PROCESS = textwrap.dedent(
    """
    import sys
    sys.modules["modeling_vit_scratch"] = None  # the package is absent: importing it would raise ImportError
    import torch
    from transformers import AutoModelForImageClassification, AutoModelForPreTraining
    folder, inputs, outputs = sys.argv[1:4]
    pixel_values, noise = torch.load(inputs)
    model = AutoModelForPreTraining.from_pretrained(folder, trust_remote_code=True).eval()
    classifier = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True)
    with torch.no_grad():
        output = model(pixel_values, noise=noise)
    torch.save({"module": type(model).__module__, "class": type(model).__name__, "logits": output.logits,
                "loss": output.loss, "classifier": type(classifier).__name__}, outputs)
    """
)


@pytest.mark.slow  # the auto_map entry is checked in process; a fresh load is shown by the plain model
@pytest.mark.integration
def test_a_masked_autoencoder_maps_its_auto_class_and_loads_by_remote_code_in_a_fresh_process(tmp_path):
    config = tiny_config(decoder_hidden_size=20, decoder_num_hidden_layers=1, decoder_num_attention_heads=2)
    assert isinstance(AutoModelForPreTraining.from_config(config), ViTScratchForPreTraining)
    model = ViTScratchForPreTraining(config).eval()
    model.save_pretrained(tmp_path / "mae")
    auto_map = json.loads((tmp_path / "mae" / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModelForPreTraining"] == "modeling_vit_scratch.ViTScratchForPreTraining"
    assert auto_map["AutoModelForImageClassification"] == "modeling_vit_scratch.ViTScratchForImageClassification"
    pixel_values, noise = torch.randn(2, 3, 20, 20), torch.rand(2, 25)
    torch.save((pixel_values, noise), tmp_path / "inputs.pt")
    (tmp_path / "load.py").write_text(PRETRAINING_FRESH_PROCESS)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    argv = [sys.executable, "load.py", str(tmp_path / "mae"), "inputs.pt", "outputs.pt"]
    result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = torch.load(tmp_path / "outputs.pt")
    assert loaded["module"].startswith("transformers_modules") and loaded["class"] == "ViTScratchForPreTraining"
    assert loaded["classifier"] == "ViTScratchForImageClassification"
    with torch.no_grad():
        expected = model(pixel_values, noise=noise)
    assert torch.equal(loaded["logits"], expected.logits) and torch.equal(loaded["loss"], expected.loss)


HYBRIDS = {
    "resnetv2": dict(stem="resnetv2", stem_width=32, stem_depths=[1, 1], image_size=24, patch_size=1),
    "conv": dict(stem="conv", stem_channels=[5, 7], image_size=20, patch_size=1),
}


@pytest.fixture(scope="module")
def fresh_loads(tmp_path_factory) -> dict:
    """name -> (model, folder, pixel_values, what a new process without the package loaded): a plain model, a hybrid
    of each stem and a sharded save, all loaded in ONE new process (`run_fresh_loads`: one process start for the
    tests below, each of which reads its own folder's part)."""
    root = tmp_path_factory.mktemp("fresh")
    saved = {}
    configs = {
        "plain": tiny_config(num_channels=1, id2label={i: f"digit {i}" for i in range(5)}),
        **{stem: tiny_config(**fields) for stem, fields in HYBRIDS.items()},
        "sharded": tiny_config(),
    }
    torch.manual_seed(0)
    for name, config in configs.items():
        model = ViTScratchForImageClassification(config).eval()
        model.save_pretrained(root / name, **({"max_shard_size": "20KB"} if name == "sharded" else {}))
        ViTScratchImageProcessor.for_config(config).save_pretrained(root / name)
        pixel_values = torch.randn(2, config.num_channels, config.image_size, config.image_size)
        saved[name] = (model, root / name, pixel_values)
    loaded = run_fresh_loads([(folder, None, pixel_values) for _, folder, pixel_values in saved.values()], root / "new")
    return {name: (*saved[name], result) for name, result in zip(saved, loaded)}


@pytest.mark.integration
def test_fresh_process_without_the_package_loads_by_trust_remote_code(fresh_loads):
    model, _, pixel_values, loaded = fresh_loads["plain"]
    with torch.no_grad():
        assert torch.equal(loaded["logits"], model(pixel_values).logits)
        assert torch.equal(loaded["tokens"], model.vit(pixel_values).last_hidden_state)
    assert (loaded["config_class"], loaded["processor_class"]) == ("ViTScratchConfig", "ViTScratchImageProcessor")
    assert [p["label"] for p in loaded["pipeline"]][:1][0].startswith("digit ")


@pytest.mark.parametrize("stem", sorted(HYBRIDS))  # loaded in the one process of `fresh_loads`
@pytest.mark.integration
def test_a_hybrid_loads_by_the_auto_classes_in_a_fresh_process_without_the_package(fresh_loads, stem):
    """The stems live in their own shipped file: a saved hybrid carries it and reloads from it alone."""
    model, folder, pixel_values, loaded = fresh_loads[stem]
    assert (folder / "stems_vit_scratch.py").is_file()
    assert type(AutoModelForImageClassification.from_pretrained(folder)) is ViTScratchForImageClassification
    with torch.no_grad():
        assert torch.equal(loaded["logits"], model(pixel_values).logits)
    assert len(loaded["pipeline"]) == 5  # the pipeline resizes a 40x30 image to the hybrid's input


@pytest.mark.integration
def test_sharded_save_loads_in_a_fresh_process(fresh_loads):
    model, folder, pixel_values, loaded = fresh_loads["sharded"]
    shards = sorted(p.name for p in folder.glob("model-*.safetensors"))
    assert len(shards) > 1 and (folder / "model.safetensors.index.json").exists()
    with torch.no_grad():
        assert torch.equal(loaded["logits"], model(pixel_values).logits)


def test_pipeline_classifies_pil_images_of_any_size_and_mode(saved_folder):
    model, folder = saved_folder
    classify = pipeline("image-classification", model=str(folder))
    rng = np.random.default_rng(0)
    for image in (
        Image.fromarray(rng.integers(0, 256, (64, 48, 3), dtype=np.uint8)),
        Image.fromarray(rng.integers(0, 256, (9, 13), dtype=np.uint8)),
        Image.fromarray(rng.integers(0, 256, (30, 30, 4), dtype=np.uint8), mode="RGBA"),
    ):
        predictions = classify(image, top_k=5)
        assert len(predictions) == 5 and {p["label"] for p in predictions} == {f"digit {i}" for i in range(5)}
        assert abs(sum(p["score"] for p in predictions) - 1) < 1e-5
        # transformers' own pipeline (no remote code) turns every image into 8-bit RGB first, dropping transparency;
        # the package's pipeline, which composites it, is tested in test_image_processing.py
        seen = load_image(image)
        pixel_values = ViTScratchImageProcessor.from_pretrained(folder)(seen, return_tensors="pt").pixel_values
        with torch.no_grad():
            best = model(pixel_values).logits.argmax(-1).item()
        assert type(classify).__name__ == "ImageClassificationPipeline"
        assert predictions[0]["label"] == f"digit {best}"


def cut_short(path, keep: float = 0.5) -> None:
    """A copy that stopped part-way: the first `keep` of the file's bytes."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize("keep", [0.5, 0.001])  # in the tensor data; in the header
def test_a_truncated_weights_file_is_one_error_naming_it(saved_folder, keep):
    _, folder = saved_folder
    cut_short(folder / "model.safetensors", keep)
    message = f"^{folder / 'model.safetensors'} is incomplete or corrupt .*: re-save the model or download it again.$"
    for load in (ViTScratchForImageClassification.from_pretrained, AutoModelForImageClassification.from_pretrained):
        with pytest.raises(OSError, match=message):
            load(folder)


def test_a_truncated_shard_is_named(tmp_path):
    ViTScratchForImageClassification(tiny_config()).save_pretrained(tmp_path, max_shard_size="20KB")
    shard = max(tmp_path.glob("model-*.safetensors"))
    cut_short(shard)
    with pytest.raises(OSError, match=f"^{shard} is incomplete or corrupt"):
        ViTScratchModel.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            dict(num_hidden_layers=3),
            "has no tensor 'vit.layers.2.attention.o_proj.bias' \\(and 11 more\\) that config.json asks for",
        ),
        (
            dict(num_hidden_layers=1),
            "has a tensor 'vit.layers.1.attention.o_proj.bias' \\(and 11 more\\) that config.json has no place for",
        ),
        (
            dict(intermediate_size=40),
            (
                "holds 'vit.layers.0.mlp.fc1.bias' \\(and 5 more\\) of shape \\(37,\\) "
                "where config.json asks for \\(40,\\)"
            ),
        ),
        (
            dict(position_embedding="sincos"),
            "has a tensor 'vit.embeddings.position_embeddings' that config.json has no place for",
        ),
    ],
)
def test_a_config_that_disagrees_with_the_weights_is_refused_naming_tensor_and_file(saved_folder, change, message):
    """Instead of a randomly initialised layer (transformers only logs a report) or a RuntimeError naming nothing."""
    _, folder = saved_folder
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | change))
    for load in (ViTScratchForImageClassification.from_pretrained, AutoModelForImageClassification.from_pretrained):
        with pytest.raises(ValueError, match=f"^{folder / 'model.safetensors'} {message}: the config and the weights"):
            load(folder)


def test_a_new_head_is_allowed_with_ignore_mismatched_sizes_and_reported(saved_folder, tmp_path):
    model, folder = saved_folder
    three_labels = {0: "cat", 1: "dog", 2: "bird"}
    head_mismatch = "'classifier.bias' \\(and 1 more\\) of shape \\(5,\\) where config.json asks for \\(3,"
    with pytest.raises(ValueError, match=head_mismatch):
        ViTScratchForImageClassification.from_pretrained(folder, id2label=three_labels)
    loaded, info = ViTScratchForImageClassification.from_pretrained(
        folder, id2label=three_labels, ignore_mismatched_sizes=True, output_loading_info=True
    )
    assert sorted(info) == ["error_msgs", "mismatched_keys", "missing_keys", "unexpected_keys"]  # transformers' shape
    assert sorted(key for key, _, _ in info["mismatched_keys"]) == ["classifier.bias", "classifier.weight"]
    assert torch.equal(loaded.vit.layers[1].mlp.fc2.weight, model.vit.layers[1].mlp.fc2.weight)
    assert ViTScratchForImageClassification.from_pretrained(folder, ignore_mismatched_sizes=True).config.num_labels == 5

    model.vit.save_pretrained(tmp_path / "backbone")  # a backbone: a new head only when asked for
    with pytest.raises(ValueError, match="has no tensor 'classifier.bias' \\(and 1 more\\) that config.json asks for"):
        ViTScratchForImageClassification.from_pretrained(tmp_path / "backbone")
    _, info = ViTScratchForImageClassification.from_pretrained(
        tmp_path / "backbone", ignore_mismatched_sizes=True, output_loading_info=True
    )
    assert sorted(info["missing_keys"]) == ["classifier.bias", "classifier.weight"]
    _, info = ViTScratchModel.from_pretrained(folder, output_loading_info=True)  # the head dropped, as in transformers
    assert sorted(info["unexpected_keys"]) == ["classifier.bias", "classifier.weight"] and not info["missing_keys"]


@pytest.mark.parametrize("dtype, tolerance", [(torch.float16, 1e-3), (torch.bfloat16, 1e-2)])
def test_pipeline_runs_in_half_precision_close_to_float32(saved_folder, dtype, tolerance):
    """Scores within the logits' tolerance of tests/model/test_modeling.py (HALF_PRECISION_TOLERANCE): a softmax score
    moves by at most half the largest change of the logits."""
    _, folder = saved_folder
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (30, 40, 3), dtype=np.uint8))
    expected = {p["label"]: p["score"] for p in pipeline("image-classification", model=str(folder))(image, top_k=5)}
    classify = pipeline("image-classification", model=str(folder), dtype=dtype)
    assert classify.model.dtype == dtype and classify.model.vit.embeddings.position_embeddings.dtype == dtype
    scores = {p["label"]: p["score"] for p in classify(image, top_k=5)}
    assert scores.keys() == expected.keys()
    assert max(abs(scores[label] - expected[label]) for label in scores) < tolerance
