"""`vit-scratch convert` between vit_scratch and transformers' ViT / DeiT / ViTMAE: parity both ways on random weights, the
folder written and its record, the output folder's rules, and what is never read (pickles, foreign code)."""

import hashlib
import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch
from helpers import REPO, in_process
from hub_server import Store, local_hub  # noqa: F401  (the fixture)
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForImageClassification,
    AutoModelForPreTraining,
    DeiTConfig,
    DeiTForImageClassification,
    DeiTForImageClassificationWithTeacher,
    ViTConfig,
    ViTForImageClassification,
    ViTMAEConfig,
    ViTMAEForPreTraining,
    ViTMAEModel,
    ViTModel,
)

from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification, ViTScratchForPreTraining
from modeling_vit_scratch.conversion import command
from modeling_vit_scratch.conversion.convert import from_transformers, to_transformers
from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.modeling_vit_scratch import ViTScratchForImageClassificationWithTeacher, mae_position_table

SIZES = dict(image_size=20, patch_size=4, hidden_size=36, num_hidden_layers=2, num_attention_heads=3)
SIZES |= dict(intermediate_size=37, layer_norm_eps=1e-6)
PIXELS = torch.randn(2, 3, 20, 20, generator=torch.Generator().manual_seed(1))


def randomised(model):
    """`model` with non-trivial weights everywhere (LayerNorms and biases too), in eval mode."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.1)
    return model.eval()


def transformers_model(model_class, labels=4):
    config_class = DeiTConfig if model_class.__name__.startswith("DeiT") else ViTConfig
    return randomised(model_class(config_class(**SIZES, num_labels=labels)))


convert = partial(in_process, command.main)  # the command in this process: 0, a status or its error line


def output(model, pixels=PIXELS):
    with torch.no_grad():
        if "ForImageClassification" in type(model).__name__:
            return model(pixel_values=pixels).logits
        return model.base_model(pixel_values=pixels).last_hidden_state


def hashes(folder: Path) -> dict:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in folder.iterdir() if path.is_file()}


@pytest.mark.parametrize(
    "model_class",
    [ViTForImageClassification, ViTModel, DeiTForImageClassification, DeiTForImageClassificationWithTeacher],
)
def test_from_transformers_and_back_computes_what_the_source_computes(tmp_path, capsys, model_class):
    source = transformers_model(model_class)
    source.save_pretrained(tmp_path / "source")
    assert convert("--from", "transformers", "--input", tmp_path / "source", "--output", tmp_path / "ours") == 0
    assert "Parity with the source model" in capsys.readouterr().out
    ours = tmp_path / "ours"
    assert {"config.json", "model.safetensors", "modeling_vit_scratch.py", "conversion_record.json"} <= {
        path.name for path in ours.iterdir()
    }
    loaded = AutoModelForImageClassification.from_pretrained(ours, trust_remote_code=True).eval()
    if model_class is ViTModel:
        loaded = loaded.base_model
    torch.testing.assert_close(output(loaded), output(source), atol=1e-5, rtol=1e-4)
    if model_class is DeiTForImageClassificationWithTeacher:
        assert isinstance(loaded, ViTScratchForImageClassificationWithTeacher)
    record = json.loads((ours / "conversion_record.json").read_text())
    assert record["input"] == "source" and record["from"] == "transformers" and len(record["weights_sha256"]) == 64

    assert convert("--to", "transformers", "--input", ours, "--output", tmp_path / "back", "--dtype", "bf16") == 0
    back = AutoModelForImageClassification.from_pretrained(tmp_path / "back", trust_remote_code=False).eval()
    assert type(back).__module__.startswith("transformers.models")
    if model_class is ViTModel:
        back = back.base_model
    torch.testing.assert_close(output(back), output(source), atol=1e-5, rtol=1e-4)
    assert json.loads((tmp_path / "back" / "conversion_record.json").read_text())["to"] == "transformers"


@settings(max_examples=20)
@given(
    heads=st.sampled_from([1, 2, 4]),
    layers=st.integers(1, 3),
    labels=st.integers(0, 4),
    deit=st.booleans(),
    qkv_bias=st.booleans(),
)
def test_ours_to_transformers_and_back_is_the_identity_on_weights(heads, layers, labels, deit, qkv_bias):
    config = ViTScratchConfig(
        image_size=8, patch_size=4, hidden_size=8, num_attention_heads=heads, num_hidden_layers=layers,
        intermediate_size=11, num_labels=labels, distillation_token=deit, qkv_bias=qkv_bias,
    )  # fmt: skip
    model_class = ViTScratchForImageClassificationWithTeacher if deit and labels else ViTScratchForImageClassification
    model = randomised(model_class(config))
    theirs, _ = to_transformers(model)
    back, _ = from_transformers(theirs)
    assert type(back) is model_class
    assert back.state_dict().keys() == model.state_dict().keys()
    for key, tensor in model.state_dict().items():
        assert torch.equal(back.state_dict()[key], tensor), key


def test_a_grayscale_model_becomes_an_rgb_transformers_model_computing_the_same_on_gray_images(tmp_path):
    model = randomised(ViTScratchForImageClassification(ViTScratchConfig(**SIZES, num_channels=1, num_labels=3)))
    model.save_pretrained(tmp_path / "gray")
    assert convert("--to", "transformers", "--input", tmp_path / "gray", "--output", tmp_path / "rgb") == 0
    theirs = AutoModelForImageClassification.from_pretrained(tmp_path / "rgb").eval()
    gray = PIXELS[:, :1]
    torch.testing.assert_close(output(theirs, gray.expand(-1, 3, -1, -1)), output(model, gray), atol=1e-5, rtol=1e-4)


def one_line(error) -> str:
    """A refusal's line: `error: ...`, one line, naming an argument."""
    assert isinstance(error, str) and error.startswith("error: --") and "\n" not in error, error
    return error


def test_an_existing_model_is_untouched_without_overwrite_and_replaced_with_it(tmp_path):
    transformers_model(ViTForImageClassification).save_pretrained(tmp_path / "source")
    source = hashes(tmp_path / "source")
    argv = ["--from", "transformers", "--input", tmp_path / "source", "--output", tmp_path / "out"]
    assert convert(*argv) == 0
    (tmp_path / "out" / "training_record.json").write_text("{}")  # a record of other weights: must not survive
    before = hashes(tmp_path / "out")
    assert "--overwrite" in one_line(convert(*argv)) and hashes(tmp_path / "out") == before
    assert convert(*argv, "--overwrite") == 0
    assert not (tmp_path / "out" / "training_record.json").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert one_line(convert(*argv[:-1], tmp_path / "mine", "--overwrite"))  # a folder of the user's files
    assert one_line(convert(*argv[:-1], tmp_path / "source", "--overwrite"))  # the input itself
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine" and hashes(tmp_path / "source") == source


def test_a_folder_that_fails_the_parity_check_never_reaches_the_output(tmp_path, monkeypatch):
    transformers_model(ViTForImageClassification).save_pretrained(tmp_path / "source")

    def wrong(reference, settings=None):
        model, processor = from_transformers(reference, settings)
        with torch.no_grad():
            model.classifier.bias += 1.0
        return model, processor

    monkeypatch.setattr(command, "from_transformers", wrong)
    assert "difference" in convert(
        "--from", "transformers", "--input", tmp_path / "source", "--output", tmp_path / "out"
    )
    assert not (tmp_path / "out" / "model.safetensors").exists()
    with pytest.raises(UserError, match="difference"):
        command.check_parity(transformers_model(ViTModel), transformers_model(ViTModel), SIZES_CONFIG, torch.float32)


SIZES_CONFIG = ViTConfig(**SIZES, num_labels=0)


@pytest.mark.parametrize(
    "what", ["pickle", "foreign code", "other side", "timm pickle", "revision of a folder", "a tensor missing"]
)
def test_what_the_conversion_never_reads_is_one_line_and_nothing_written(tmp_path, what):
    source = tmp_path / "source"
    transformers_model(ViTForImageClassification).save_pretrained(source)
    argv = ["--from", "transformers", "--input", source]
    if what == "pickle":
        (source / "model.safetensors").unlink()
        torch.save({}, source / "pytorch_model.bin")
    elif what == "foreign code":
        config = json.loads((source / "config.json").read_text())
        (source / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoConfig": "evil.Config"}}))
    elif what == "other side":
        argv[:2] = ["--to", "transformers"]
    elif what == "a tensor missing":  # transformers would fill it from its initialiser
        weights = load_file(source / "model.safetensors")
        missing = "vit.encoder.layer.0.attention.attention.query.weight"
        save_file({name: tensor for name, tensor in weights.items() if name != missing}, source / "model.safetensors")
    elif what == "timm pickle":
        torch.save({}, tmp_path / "weights.pth")
        argv = ["--from", "timm", "--timm_model", "vit_tiny_patch16_224", "--input", tmp_path / "weights.pth"]
    else:
        argv += ["--revision", "main"]
    one_line(convert(*argv, "--output", tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_an_argument_the_direction_does_not_read_is_refused(tmp_path):
    argv = ["--to", "transformers", "--input", tmp_path, "--output", tmp_path / "out"]
    assert convert(*argv, "--timm_model", "vit_tiny_patch16_224") == 2
    assert convert("--from", "timm", *argv[2:]) == 2  # no --timm_model


@pytest.mark.integration
def test_a_hub_repo_converts_and_its_record_names_the_repo_and_commit(local_hub, tmp_path):  # noqa: F811
    transformers_model(DeiTForImageClassificationWithTeacher).save_pretrained(tmp_path / "source")
    repo = Store(local_hub.root).create("local-user/deit", False, f"{local_hub.url}/local-user/deit")
    files = {path.name: repo.add_blob(path.read_bytes()) for path in (tmp_path / "source").iterdir()}
    commit = repo.commit("refs/heads/main", "a model", "", {**repo.files(repo.refs["refs/heads/main"]), **files})
    repo.save()
    argv = ["--from", "transformers", "--input", "local-user/deit", "--output", str(tmp_path / "out")]
    env = {**local_hub.env(tmp_path / "hf_home"), "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "convert_checkpoint.py"), *argv],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    record = json.loads((tmp_path / "out" / "conversion_record.json").read_text())
    assert record["input"] == "local-user/deit" and record["commit"] == commit
    assert not any(env["HF_TOKEN"] in path.read_text(errors="replace") for path in (tmp_path / "out").iterdir())


MAE_DECODER = dict(decoder_hidden_size=20, decoder_num_hidden_layers=2, decoder_num_attention_heads=2)
MAE_DECODER |= dict(decoder_intermediate_size=23)
NOISE = torch.rand(2, 25, generator=torch.Generator().manual_seed(2))


def transformers_mae(**overrides) -> ViTMAEForPreTraining:
    """A random ViTMAE holding MAE's fixed tables, as a pretrained checkpoint does (built from a config, transformers
    leaves them zero)."""
    model = randomised(ViTMAEForPreTraining(ViTMAEConfig(**SIZES, **MAE_DECODER, **overrides)))
    with torch.no_grad():
        model.vit.embeddings.position_embeddings.copy_(mae_position_table((5, 5), SIZES["hidden_size"]))
        model.decoder.decoder_pos_embed.copy_(mae_position_table((5, 5), MAE_DECODER["decoder_hidden_size"]))
    return model


def reconstruction(model, pixels=PIXELS):
    with torch.no_grad():
        output = model(pixel_values=pixels, noise=NOISE)
    return output.loss, output.logits, output.mask


@pytest.mark.parametrize("norm_pix_loss", [False, True])
def test_a_vitmae_converts_to_our_masked_autoencoder_and_back(tmp_path, capsys, norm_pix_loss):
    source = transformers_mae(norm_pix_loss=norm_pix_loss, mask_ratio=0.6)
    source.save_pretrained(tmp_path / "source")
    assert convert("--from", "transformers", "--input", tmp_path / "source", "--output", tmp_path / "ours") == 0
    assert "Parity with the source model" in capsys.readouterr().out
    ours = AutoModelForPreTraining.from_pretrained(tmp_path / "ours", trust_remote_code=True).eval()
    assert type(ours).__name__ == "ViTScratchForPreTraining" and ours.config.norm_pix_loss == norm_pix_loss
    for got, expected in zip(reconstruction(ours), reconstruction(source), strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)

    assert convert("--to", "transformers", "--input", tmp_path / "ours", "--output", tmp_path / "back") == 0
    back = AutoModelForPreTraining.from_pretrained(tmp_path / "back", trust_remote_code=False).eval()
    assert type(back) is ViTMAEForPreTraining and back.config.mask_ratio == 0.6
    for got, expected in zip(reconstruction(back), reconstruction(source), strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("fields", [{"position_embedding": "sincos"}, {"pooling": "mean", "fc_norm": True}])
def test_our_masked_autoencoder_converts_to_vitmae_computing_the_same(tmp_path, fields):
    """Our fixed tables are written as ViTMAE's frozen ones; a mean-pooling model's final norm as its layernorm."""
    model = randomised(ViTScratchForPreTraining(ViTScratchConfig(**SIZES, **MAE_DECODER, **fields)))
    model.save_pretrained(tmp_path / "ours")
    assert convert("--to", "transformers", "--input", tmp_path / "ours", "--output", tmp_path / "theirs") == 0
    theirs = ViTMAEForPreTraining.from_pretrained(tmp_path / "theirs").eval()
    for got, expected in zip(reconstruction(theirs), reconstruction(model), strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("what", ["zero decoder table", "encoder alone"])
def test_a_vitmae_vit_scratch_cannot_hold_is_one_line_and_nothing_written(tmp_path, what):
    if what == "zero decoder table":  # what transformers builds from a config: no fixed table to compute
        source = transformers_mae()
        with torch.no_grad():
            source.decoder.decoder_pos_embed.zero_()
    else:
        source = randomised(ViTMAEModel(ViTMAEConfig(**SIZES, **MAE_DECODER)))
    source.save_pretrained(tmp_path / "source")
    error = convert("--from", "transformers", "--input", tmp_path / "source", "--output", tmp_path / "out")
    assert ("sin-cos table" if what == "zero decoder table" else "ViTMAEForPreTraining") in one_line(error)
    assert not (tmp_path / "out").exists()


def test_the_parity_check_compares_a_masked_autoencoders_reconstruction():
    source = transformers_mae()
    ours, _ = from_transformers(source)
    assert "Parity" in command.check_parity(source, ours, ours.config, torch.float32)
    with torch.no_grad():
        ours.decoder.decoder_pred.bias += 1e-2
    with pytest.raises(UserError, match="difference"):
        command.check_parity(source, ours, ours.config, torch.float32)
