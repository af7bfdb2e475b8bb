"""Conversion from and to transformers' ViT: same function to 1e-5, bit-exact round trip, clear key errors."""

import hashlib
import json
import subprocess
import sys

import pytest
import torch
from entry_points import outcome
from helpers import PROCESS_TIMEOUT, REPO
from safetensors.torch import load_file, save_file
from transformers import ViTConfig, ViTForImageClassification, ViTModel, pipeline

from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification, ViTScratchImageProcessor
from modeling_vit_scratch.common.folders import replaced_folder
from modeling_vit_scratch.conversion.convert import from_transformers, save_converted, timm_key_map, to_transformers

REFERENCE_SIZES = {
    "small-rgb": dict(
        image_size=32,
        patch_size=8,
        num_channels=3,
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=37,
    ),
    "larger-gray": dict(
        image_size=48,
        patch_size=6,
        num_channels=1,
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=96,
        qkv_bias=False,
        layer_norm_eps=1e-12,
    ),
}


def reference_vit(size: str, attn_implementation: str = "eager", num_labels: int = 7) -> ViTForImageClassification:
    config = ViTConfig(**REFERENCE_SIZES[size], num_labels=num_labels)
    model = ViTForImageClassification(config).eval()
    with torch.no_grad():  # random, non-trivial weights everywhere (LayerNorms and biases too)
        for parameter in model.parameters():
            parameter.normal_(0, 0.1)
    model.set_attn_implementation(attn_implementation)
    return model


def logits(model, pixel_values, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model(pixel_values=pixel_values, **kwargs).logits


@pytest.mark.parametrize("size", sorted(REFERENCE_SIZES))
@pytest.mark.parametrize("kernel", ["eager", "sdpa"])
def test_converted_transformers_model_computes_the_same_logits(tmp_path, size, kernel):
    reference = reference_vit(size, kernel)
    reference.save_pretrained(tmp_path / "reference")
    ours, processor = from_transformers(str(tmp_path / "reference"))
    ours.set_attn_implementation(kernel)
    config = REFERENCE_SIZES[size]
    images = torch.randn(3, config["num_channels"], config["image_size"], config["image_size"])
    assert (logits(ours, images) - logits(reference, images)).abs().max() < 1e-5
    assert ours.config.layer_norm_eps == reference.config.layer_norm_eps
    assert ours.config.qkv_bias == reference.config.qkv_bias and ours.config.id2label == reference.config.id2label
    assert processor.size == {"height": config["image_size"], "width": config["image_size"]}


@pytest.mark.parametrize("new_size", [(64, 64), (32, 56)])
def test_interpolated_position_embeddings_match_transformers(tmp_path, new_size):
    reference = reference_vit("small-rgb")
    reference.save_pretrained(tmp_path / "reference")
    ours, _ = from_transformers(str(tmp_path / "reference"))
    images = torch.randn(2, 3, *new_size)
    expected = logits(reference, images, interpolate_pos_encoding=True)
    assert (logits(ours, images, interpolate_pos_encoding=True) - expected).abs().max() < 1e-5


def test_both_key_layouts_and_the_base_model_convert(tmp_path):
    """transformers 5 saves the 4.x layout (`encoder.layer.i.attention.attention.query`); its modules, and so any
    state dict written straight from them, use the 5.x names (`layers.i.attention.q_proj`). Both convert."""
    reference = reference_vit("small-rgb")
    reference.save_pretrained(tmp_path / "saved")
    assert any(".encoder.layer." in key for key in load_file(tmp_path / "saved" / "model.safetensors"))
    (tmp_path / "in_memory").mkdir()
    save_file(
        {k: v.contiguous() for k, v in reference.state_dict().items()}, tmp_path / "in_memory" / "model.safetensors"
    )
    reference.config.to_json_file(tmp_path / "in_memory" / "config.json")
    images = torch.randn(2, 3, 32, 32)
    for folder in ("saved", "in_memory"):
        ours, _ = from_transformers(str(tmp_path / folder))
        assert (logits(ours, images) - logits(reference, images)).abs().max() < 1e-5, folder

    base = ViTModel(reference.config, add_pooling_layer=True).eval()  # its tanh pooler has no counterpart
    base.save_pretrained(tmp_path / "base")
    ours_base, _ = from_transformers(str(tmp_path / "base"))
    with torch.no_grad():
        expected = base(images).last_hidden_state
        got = ours_base.vit(images).last_hidden_state
    assert ours_base.config.num_labels == 0 and (got - expected).abs().max() < 1e-5


def test_round_trip_through_the_transformers_layout_is_bit_exact(tmp_path):
    config = ViTScratchConfig(**REFERENCE_SIZES["small-rgb"], id2label={0: "no", 1: "yes"})
    ours = ViTScratchForImageClassification(config).eval()
    processor = ViTScratchImageProcessor.for_config(config)
    to_transformers(ours, tmp_path / "hf", processor)
    exported = ViTForImageClassification.from_pretrained(tmp_path / "hf").eval()
    images = torch.randn(2, 3, 32, 32)
    assert (logits(exported, images) - logits(ours, images)).abs().max() < 1e-5
    back, back_processor = from_transformers(str(tmp_path / "hf"))
    for key, tensor in ours.state_dict().items():
        assert torch.equal(back.state_dict()[key], tensor), key
    assert back.config.id2label == {0: "no", 1: "yes"}
    assert back_processor.image_mean == processor.image_mean and back_processor.resample == processor.resample


@pytest.mark.parametrize("colour", [False, True])
def test_a_grayscale_model_exported_to_transformers_runs_in_its_pipeline_as_ours_does(tmp_path, colour):
    """transformers' pipeline makes every image RGB: the export takes RGB and computes what ours computes on the
    image our processor makes gray (exactly for a gray image; a colour image's luma is rounded to 8 bits by ours)."""
    import numpy as np
    from PIL import Image

    config = ViTScratchConfig(**REFERENCE_SIZES["larger-gray"], id2label={0: "a", 1: "b", 2: "c"})
    ours = ViTScratchForImageClassification(config).eval()
    processor = ViTScratchImageProcessor.for_config(config)
    to_transformers(ours, tmp_path / "hf", processor)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["num_channels"] == 3
    pixels = np.random.default_rng(0).integers(0, 256, (48, 48, 3) if colour else (48, 48), dtype=np.uint8)
    image = Image.fromarray(pixels).convert("RGB")
    predictions = pipeline("image-classification", model=str(tmp_path / "hf"), top_k=None)(image)
    got = torch.tensor([{p["label"]: p["score"] for p in predictions}[label] for label in "abc"])
    expected = logits(ours, processor(image, return_tensors="pt").pixel_values).softmax(-1)[0]
    torch.testing.assert_close(got, expected, atol=1e-3 if colour else 1e-6, rtol=0)


def test_mean_pooling_cannot_be_exported_to_transformers(tmp_path):
    ours = ViTScratchForImageClassification(ViTScratchConfig(**REFERENCE_SIZES["small-rgb"], pooling="mean"))
    with pytest.raises(ValueError, match="pooling='mean'"):
        to_transformers(ours, tmp_path / "hf")


def test_a_hybrid_cannot_be_exported_to_transformers_and_nothing_is_written(tmp_path):
    config = ViTScratchConfig(**REFERENCE_SIZES["small-rgb"], stem="conv", stem_channels=[8])
    with pytest.raises(ValueError, match="transformers' ViT has no stem='conv' \\(a hybrid"):
        to_transformers(ViTScratchForImageClassification(config), tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("change", ["missing", "extra"])
def test_a_missing_or_extra_key_is_an_error_naming_it(tmp_path, change):
    reference_vit("small-rgb").save_pretrained(tmp_path / "reference")
    weights = load_file(tmp_path / "reference" / "model.safetensors")
    if change == "missing":
        del weights["vit.encoder.layer.1.output.dense.bias"]
    else:
        weights["vit.layers.0.attention.rotary.weight"] = torch.zeros(3)
    save_file(weights, tmp_path / "reference" / "model.safetensors")
    name = "vit.encoder.layer.1.output.dense.bias" if change == "missing" else "vit.layers.0.attention.rotary.weight"
    with pytest.raises(KeyError, match=name.replace(".", r"\.")):
        from_transformers(str(tmp_path / "reference"))


def test_not_a_vit_folder_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ValueError, match="not a transformers 'vit'"):
        from_transformers(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        from_transformers(str(tmp_path / "missing" / "folder"))


def test_timm_key_map_covers_every_parameter_of_our_model():
    for fc_norm in (False, True):
        config = ViTScratchConfig(**REFERENCE_SIZES["small-rgb"], pooling="mean" if fc_norm else "cls", fc_norm=fc_norm)
        assert set(ViTScratchForImageClassification(config).state_dict()) <= set(timm_key_map(2))


def test_converted_folder_classifies_with_the_pipeline(tmp_path):
    reference_vit("small-rgb").save_pretrained(tmp_path / "reference")
    ours, processor = from_transformers(str(tmp_path / "reference"))
    ours.save_pretrained(tmp_path / "ours")
    processor.save_pretrained(tmp_path / "ours")
    from PIL import Image

    predictions = pipeline("image-classification", model=str(tmp_path / "ours"))(Image.new("RGB", (50, 40)))
    assert len(predictions) == 5 and predictions[0]["label"].startswith("LABEL_")


@pytest.mark.integration
def test_convert_script_both_ways(tmp_path):
    script = REPO / "scripts" / "convert_checkpoint.py"
    reference = reference_vit("small-rgb")
    reference.save_pretrained(tmp_path / "reference")
    forth = ["--from", "transformers", "--input", str(tmp_path / "reference"), "--output", str(tmp_path / "ours")]
    result = subprocess.run(
        [sys.executable, str(script), *forth], capture_output=True, text=True, timeout=PROCESS_TIMEOUT
    )
    assert result.returncode == 0, result.stderr[-2000:]
    # back, in this process: the script above runs the same main (one new process shows the script's wiring)
    returned = outcome(
        "convert", ["--to", "transformers", "--input", str(tmp_path / "ours"), "--output", str(tmp_path / "back")]
    )
    assert returned.code == 0, returned
    back = ViTForImageClassification.from_pretrained(tmp_path / "back")
    for key, tensor in reference.state_dict().items():
        assert torch.equal(back.state_dict()[key], tensor), key
    # the converted folder says what it was converted from, for the card a push writes (never 'trained')
    from modeling_vit_scratch.common.secrets import weights_sha256

    kept = json.loads((tmp_path / "ours" / "conversion_record.json").read_text())
    written = kept.pop("written_sha256")  # what the folder's files were when written: vouches for an overwrite
    assert written["config.json"] == hashlib.sha256((tmp_path / "ours" / "config.json").read_bytes()).hexdigest()
    assert kept == {
        "input": "reference",  # a local folder by its name: the record may be published
        "from": "transformers",
        "weights_sha256": weights_sha256(tmp_path / "ours"),
    }
    # a refusal, in this process: the runs above went through the script to the same main
    failed = outcome(
        "convert", ["--from", "transformers", "--input", str(tmp_path / "nope"), "--output", str(tmp_path / "x")]
    )
    assert failed.one_line and failed.error.startswith(f"error: --input '{tmp_path / 'nope'}' does not exist"), failed


@pytest.mark.parametrize("num_labels", [1, 2, 3])
def test_any_label_count_converts(tmp_path, num_labels):
    """transformers 5 writes no id2label for 2 labels (its default): the head's size comes from its weights."""
    reference = reference_vit("small-rgb", num_labels=num_labels)
    reference.save_pretrained(tmp_path / "reference")
    assert ("id2label" in json.loads((tmp_path / "reference" / "config.json").read_text())) == (num_labels != 2)
    ours, _ = from_transformers(str(tmp_path / "reference"))
    assert ours.config.num_labels == num_labels and ours.config.id2label == reference.config.id2label
    images = torch.randn(2, 3, 32, 32)
    assert (logits(ours, images) - logits(reference, images)).abs().max() < 1e-5


def test_id2label_that_disagrees_with_the_head_is_refused(tmp_path):
    reference_vit("small-rgb", num_labels=3).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["id2label"] = {"0": "cat", "1": "dog"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="names labels \\[0, 1\\] but the classifier has 3 outputs: fix id2label"):
        from_transformers(str(tmp_path))


@pytest.mark.parametrize("num_channels", [1, 2, 4])
def test_any_channel_count_converts_without_a_processor_config(tmp_path, num_channels):
    """Without preprocessor_config.json: transformers ViT's defaults, 0.5 for each of the model's channels."""
    config = ViTConfig(**{**REFERENCE_SIZES["small-rgb"], "num_channels": num_channels}, num_labels=3)
    reference = ViTForImageClassification(config).eval()
    reference.save_pretrained(tmp_path / "reference")
    assert not (tmp_path / "reference" / "preprocessor_config.json").exists()
    ours, processor = from_transformers(str(tmp_path / "reference"))
    assert list(processor.image_mean) == list(processor.image_std) == [0.5] * num_channels
    images = torch.randn(2, num_channels, 32, 32)
    assert (logits(ours, images) - logits(reference, images)).abs().max() < 1e-5
    if num_channels == 1:  # the processor converts images to 1 or 3 channels
        from PIL import Image

        pixel_values = processor(Image.new("RGB", (50, 40)), return_tensors="pt").pixel_values
        assert pixel_values.shape == (1, 1, 32, 32) and logits(ours, pixel_values).shape == (1, 3)


def test_rgb_statistics_of_a_grayscale_model_are_averaged(tmp_path):
    reference = reference_vit("larger-gray")
    reference.save_pretrained(tmp_path)
    settings = {"image_mean": [0.2, 0.4, 0.6], "image_std": [0.1, 0.2, 0.3], "size": {"height": 48, "width": 48}}
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(settings))
    _, processor = from_transformers(str(tmp_path))
    assert processor.image_mean == pytest.approx([0.4]) and processor.image_std == pytest.approx([0.2])


def folder_bytes(folder) -> dict:
    return {path.relative_to(folder): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_conversions_write_all_or_nothing_and_replace_only_with_overwrite(tmp_path):
    target = tmp_path / "hf"
    good = ViTScratchForImageClassification(ViTScratchConfig(**REFERENCE_SIZES["small-rgb"])).eval()
    to_transformers(good, target, ViTScratchImageProcessor.for_config(good.config))
    before = folder_bytes(target)
    mean_pooled = ViTScratchForImageClassification(ViTScratchConfig(**REFERENCE_SIZES["small-rgb"], pooling="mean"))
    with pytest.raises(ValueError, match="pooling='mean'"):
        to_transformers(mean_pooled, target, overwrite=True)
    with pytest.raises(FileExistsError, match=f"^{target} already holds files: .* pass --overwrite"):
        to_transformers(good, target)
    with pytest.raises(RuntimeError, match="disk full"), replaced_folder(target, overwrite=True) as staging:
        (staging / "model.safetensors").write_bytes(b"half a file")
        raise RuntimeError("disk full")
    assert folder_bytes(target) == before and sorted(p.name for p in tmp_path.iterdir()) == ["hf"]  # no leftovers

    other = ViTScratchForImageClassification(ViTScratchConfig(**REFERENCE_SIZES["small-rgb"], num_labels=3)).eval()
    to_transformers(other, target, overwrite=True)
    assert ViTForImageClassification.from_pretrained(target).config.num_labels == 3
    assert not (target / "preprocessor_config.json").exists()  # replaced, not merged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


def test_overwrite_replaces_model_folders_only(tmp_path):
    (tmp_path / "notes.txt").write_text("not a model")
    model = ViTScratchForImageClassification(ViTScratchConfig(**REFERENCE_SIZES["small-rgb"]))
    with pytest.raises(
        FileExistsError, match=r"not a model folder \(no config.json with a model_type; no weights; .*notes"
    ):
        save_converted(model, ViTScratchImageProcessor.for_config(model.config), tmp_path, overwrite=True)
    with pytest.raises(FileExistsError, match="is a file, not a folder"):
        to_transformers(model, tmp_path / "notes.txt", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    (tmp_path / "empty").mkdir()
    save_converted(model, ViTScratchImageProcessor.for_config(model.config), tmp_path / "empty")
    assert (tmp_path / "empty" / "model.safetensors").exists()


def test_convert_command_refuses_a_used_folder_and_leaves_it_as_it_was(tmp_path):
    """In this process: test_convert_script_both_ways runs the same main through the script."""
    mean_pooled = ViTScratchForImageClassification(ViTScratchConfig(**REFERENCE_SIZES["small-rgb"], pooling="mean"))
    mean_pooled.save_pretrained(tmp_path / "mean")
    ViTScratchImageProcessor.for_config(mean_pooled.config).save_pretrained(tmp_path / "mean")
    reference_vit("small-rgb").save_pretrained(tmp_path / "reference")
    from_reference = ("--from", "transformers", "--input", tmp_path / "reference", "--output", tmp_path / "ours")
    assert outcome("convert", list(map(str, from_reference))).code == 0  # the folder to refuse, made in this process
    before = folder_bytes(tmp_path / "ours")
    refused = outcome("convert", list(map(str, from_reference)))
    assert refused.one_line, refused
    assert refused.error == (
        f"error: {tmp_path / 'ours'} already holds files: choose another output folder or pass --overwrite "
        "(overwrite=True) to replace it."
    )
    argv = ["--to", "transformers", "--input", tmp_path / "mean", "--output", tmp_path / "ours", "--overwrite"]
    refused = outcome("convert", list(map(str, argv)))  # in this process
    assert refused.one_line and "pooling='mean'" in refused.error, refused
    assert folder_bytes(tmp_path / "ours") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mean", "ours", "reference"]


@pytest.mark.parametrize("spelling", ["--timm_model", "--timm-model"])
def test_convert_script_takes_the_underscore_flags_and_keeps_the_dashed_ones(spelling, capsys):
    """Users' command lines with the dashed spelling keep working; --help shows the underscore one first."""
    from modeling_vit_scratch.conversion import command as script

    kwargs_flag = spelling.replace("model", "kwargs")
    args = script.parse_args(
        [
            "--from",
            "timm",
            spelling,
            "vit_tiny_patch16_224",
            kwargs_flag,
            "img_size=64",
            "--input",
            "w",
            "--output",
            "o",
        ]
    )
    assert (args.timm_model, args.timm_kwargs) == ("vit_tiny_patch16_224", "img_size=64")
    with pytest.raises(SystemExit):
        script.parse_args(["--help"])
    usage = capsys.readouterr().out
    for flag in ("timm_model", "timm_kwargs"):
        assert f"--{flag}" in usage and usage.index(f"--{flag}") < usage.index(f"--{flag.replace('_', '-')}")


# DeiT: the distillation token, and the two heads of DeiTForImageClassificationWithTeacher


def reference_deit(model_class, size: str = "small-rgb", num_labels: int = 7):
    from transformers import DeiTConfig

    model = model_class(DeiTConfig(**REFERENCE_SIZES[size], num_labels=num_labels)).eval()
    with torch.no_grad():  # random, non-trivial weights everywhere, the distillation token and both heads included
        for parameter in model.parameters():
            parameter.normal_(0, 0.1)
    return model


@pytest.mark.parametrize("size", sorted(REFERENCE_SIZES))
def test_a_transformers_deit_with_teacher_converts_with_both_heads_within_1e_5(tmp_path, size):
    from transformers import DeiTForImageClassificationWithTeacher

    reference = reference_deit(DeiTForImageClassificationWithTeacher, size)
    reference.save_pretrained(tmp_path / "deit")
    model, _ = from_transformers(str(tmp_path / "deit"))
    assert type(model).__name__ == "ViTScratchForImageClassificationWithTeacher" and model.config.distillation_token
    config = reference.config
    pixel_values = torch.randn(3, config.num_channels, config.image_size, config.image_size)
    with torch.no_grad():
        expected, ours = reference(pixel_values=pixel_values), model(pixel_values)
    for name in ("logits", "cls_logits", "distillation_logits"):
        torch.testing.assert_close(ours[name], expected[name], atol=1e-5, rtol=0)


def test_a_transformers_deit_classifier_converts_to_the_class_head_over_a_distillation_token(tmp_path):
    from transformers import DeiTForImageClassification

    reference = reference_deit(DeiTForImageClassification)
    reference.save_pretrained(tmp_path / "deit")
    (tmp_path / "deit" / "preprocessor_config.json").write_text(
        json.dumps(
            {"do_center_crop": True, "crop_size": {"height": 32, "width": 32}, "size": {"height": 36, "width": 36}}
        )
    )
    model, processor = from_transformers(str(tmp_path / "deit"))
    assert type(model).__name__ == "ViTScratchForImageClassification" and model.config.distillation_token
    assert processor.size == {"height": 32, "width": 32}  # DeiT's crop is the model's input size
    pixel_values = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(logits(model, pixel_values), logits(reference, pixel_values), atol=1e-5, rtol=0)


def test_the_convert_command_converts_a_deit_both_ways_with_parity(tmp_path, capsys):
    """In this process: test_convert_script_both_ways runs the same main through the script."""
    from transformers import DeiTForImageClassificationWithTeacher

    reference = reference_deit(DeiTForImageClassificationWithTeacher)
    reference.save_pretrained(tmp_path / "deit")
    forth = outcome(
        "convert", ["--from", "transformers", "--input", str(tmp_path / "deit"), "--output", str(tmp_path / "ours")]
    )
    assert forth.code == 0, forth
    assert "Parity with the source model" in capsys.readouterr().out
    assert json.loads((tmp_path / "ours" / "config.json").read_text())["architectures"] == [
        "ViTScratchForImageClassificationWithTeacher"
    ]
    back = outcome(
        "convert", ["--to", "transformers", "--input", str(tmp_path / "ours"), "--output", str(tmp_path / "back")]
    )
    assert back.code == 0, back
    printed = capsys.readouterr().out
    assert "Wrote a transformers DeiTForImageClassificationWithTeacher folder" in printed
    assert "Parity with the source model" in printed
    exported = DeiTForImageClassificationWithTeacher.from_pretrained(tmp_path / "back").eval()
    for key, tensor in reference.state_dict().items():  # source -> ours -> DeiT: the very same tensors
        assert torch.equal(exported.state_dict()[key], tensor), key


@pytest.mark.parametrize("two_heads", [True, False])
def test_a_distilled_model_exports_to_transformers_deit_and_back_bit_exact(tmp_path, two_heads):
    from transformers import DeiTForImageClassification, DeiTForImageClassificationWithTeacher

    from modeling_vit_scratch import ViTScratchForImageClassificationWithTeacher

    config = ViTScratchConfig(**REFERENCE_SIZES["small-rgb"], distillation_token=True, id2label={0: "a", 1: "b"})
    ours_class = ViTScratchForImageClassificationWithTeacher if two_heads else ViTScratchForImageClassification
    ours = ours_class(config).eval()
    with torch.no_grad():
        for parameter in ours.parameters():
            parameter.normal_(0, 0.1)
    to_transformers(ours, tmp_path / "hf", ViTScratchImageProcessor.for_config(config))
    saved = json.loads((tmp_path / "hf" / "config.json").read_text())
    reference_class = DeiTForImageClassificationWithTeacher if two_heads else DeiTForImageClassification
    assert saved["model_type"] == "deit" and saved["architectures"] == [reference_class.__name__]
    exported = reference_class.from_pretrained(tmp_path / "hf").eval()
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected, got = exported(pixel_values=images), ours(pixel_values=images)
    for name in ("logits", "cls_logits", "distillation_logits") if two_heads else ("logits",):
        torch.testing.assert_close(got[name], expected[name], atol=1e-5, rtol=0)
    back, _ = from_transformers(str(tmp_path / "hf"))
    assert type(back) is ours_class and back.config.id2label == {0: "a", 1: "b"}
    for key, tensor in ours.state_dict().items():
        assert torch.equal(back.state_dict()[key], tensor), key


def test_a_distilled_model_with_mean_pooling_is_refused_naming_deit(tmp_path):
    config = ViTScratchConfig(**REFERENCE_SIZES["small-rgb"], distillation_token=True, pooling="mean", num_labels=3)
    with pytest.raises(ValueError, match=r"^transformers' DeiT has no pooling='mean': this model cannot be expo"):
        to_transformers(ViTScratchForImageClassification(config), tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_deit_in_the_5x_key_layout_and_deit_model_convert(tmp_path):
    """A DeiT state dict written straight from transformers 5's modules (`deit.layers.i.attention.q_proj`), and the
    base `DeiTModel` (its tanh pooler has no counterpart and is dropped)."""
    from transformers import DeiTForImageClassificationWithTeacher, DeiTModel

    reference = reference_deit(DeiTForImageClassificationWithTeacher)
    (tmp_path / "in_memory").mkdir()
    state_dict = {k: v.contiguous() for k, v in reference.state_dict().items()}
    assert any(".layers.0.attention.q_proj." in key for key in state_dict)
    save_file(state_dict, tmp_path / "in_memory" / "model.safetensors")
    reference.config.to_json_file(tmp_path / "in_memory" / "config.json")
    images = torch.randn(2, 3, 32, 32)
    ours, _ = from_transformers(str(tmp_path / "in_memory"))
    torch.testing.assert_close(logits(ours, images), logits(reference, images), atol=1e-5, rtol=0)

    base = DeiTModel(reference.config, add_pooling_layer=True).eval()
    with torch.no_grad():
        for parameter in base.parameters():
            parameter.normal_(0, 0.1)
    base.save_pretrained(tmp_path / "base")
    ours_base, _ = from_transformers(str(tmp_path / "base"))
    assert ours_base.config.num_labels == 0 and ours_base.config.distillation_token
    with torch.no_grad():
        expected, got = base(images).last_hidden_state, ours_base.vit(images).last_hidden_state
    assert got.shape == expected.shape == (2, 2 + 16, 48)  # class, distillation, 4x4 patches
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("new_size", [(64, 64), (32, 56)])
def test_deit_interpolated_position_embeddings_match_transformers(tmp_path, new_size):
    """Two prefix rows (class and distillation) stay; the patch grid is resampled as transformers' DeiT does."""
    from transformers import DeiTForImageClassificationWithTeacher

    reference = reference_deit(DeiTForImageClassificationWithTeacher)
    reference.save_pretrained(tmp_path / "deit")
    ours, _ = from_transformers(str(tmp_path / "deit"))
    images = torch.randn(2, 3, *new_size)
    with torch.no_grad():
        expected = reference(pixel_values=images, interpolate_pos_encoding=True)
        got = ours(pixel_values=images, interpolate_pos_encoding=True)
    for name in ("logits", "cls_logits", "distillation_logits"):
        torch.testing.assert_close(got[name], expected[name], atol=1e-5, rtol=0)
