"""Explain: attention maps for any kernel, rollout, gradient rollout, Fig. 7 diagnostics and the explain script."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from entry_points import outcome
from helpers import PROCESS_TIMEOUT, REPO, tiny_config
from PIL import Image
from safetensors.torch import save_file

from modeling_vit_scratch import ViTScratchForImageClassification, ViTScratchImageProcessor
from modeling_vit_scratch.explanation import attention as explain


def random_attention(batch=2, heads=3, tokens=10, layers=4) -> tuple[torch.Tensor, ...]:
    return tuple(torch.rand(batch, heads, tokens, tokens).softmax(-1) for _ in range(layers))


def test_sdpa_model_gives_eager_attention_maps_and_is_left_unchanged(config):
    sdpa = ViTScratchForImageClassification._from_config(config, attn_implementation="sdpa").eval()
    eager = ViTScratchForImageClassification._from_config(tiny_config(), attn_implementation="eager").eval()
    eager.load_state_dict(sdpa.state_dict())
    images = torch.randn(2, 3, 20, 20)
    with torch.no_grad():
        before = sdpa(images).logits
    weights_before = {k: v.clone() for k, v in sdpa.state_dict().items()}
    maps = explain.attention_maps(sdpa, images)
    expected = explain.attention_maps(eager, images)
    assert len(maps) == config.num_hidden_layers and maps[0].shape == (2, 3, 26, 26)
    for got, want in zip(maps, expected):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    assert sdpa.config._attn_implementation == "sdpa"
    with torch.no_grad():
        assert torch.equal(sdpa(images).logits, before)
    assert all(torch.equal(weights_before[k], v) for k, v in sdpa.state_dict().items())


@pytest.mark.parametrize("head_fusion", explain.HEAD_FUSIONS)
@pytest.mark.parametrize("discard_ratio", [0.0, 0.5])
def test_rollout_rows_are_distributions(head_fusion, discard_ratio):
    rollout = explain.attention_rollout(random_attention(), head_fusion, discard_ratio)
    assert rollout.shape == (2, 10, 10) and (rollout >= 0).all()
    torch.testing.assert_close(rollout.sum(-1), torch.ones(2, 10))


def test_rollout_finds_the_patch_every_layer_looks_at():
    tokens, target = 10, 6
    looking = torch.zeros(1, 2, tokens, tokens)
    looking[..., target] = 1.0  # every token of every head attends only to token 6
    rollout = explain.attention_rollout((looking,) * 3)
    patch_map = explain.token_to_patch_map(rollout, (3, 3))
    assert patch_map.flatten().argmax().item() == target - 1  # patch index = token index - class token
    assert explain.token_to_patch_map(rollout, (3, 3), pooling="mean").flatten().argmax().item() == target - 1


def test_gradient_rollout_depends_on_the_class_and_leaves_no_gradients(config):
    model = ViTScratchForImageClassification(config).eval()
    image = torch.randn(1, 3, 20, 20)
    first = explain.gradient_rollout(model, image, 0)
    second = explain.gradient_rollout(model, image, 1)
    assert first.shape == (1, 26, 26) and not torch.allclose(first, second)
    assert all(parameter.grad is None for parameter in model.parameters())


def test_mean_attention_distance_uniform_equals_analytic_and_local_is_smaller():
    grid, patch = (3, 4), 5
    tokens = 1 + grid[0] * grid[1]
    uniform = torch.full((1, 1, tokens, tokens), 1.0 / tokens)
    local = torch.zeros(1, 1, tokens, tokens)
    local[0, 0, :, :] = torch.eye(tokens) * 0.9 + 0.1 / tokens  # mostly each patch itself
    distances = explain.mean_attention_distance((torch.cat([uniform, local], dim=1),), grid, patch)
    centres = [(r * patch, c * patch) for r in range(grid[0]) for c in range(grid[1])]
    analytic = np.mean([np.hypot(a[0] - b[0], a[1] - b[1]) for a in centres for b in centres])
    assert distances.shape == (1, 2)
    assert distances[0, 0].item() == pytest.approx(analytic, rel=1e-6)
    assert distances[0, 1] < distances[0, 0]


def test_fig7_diagnostics_have_the_paper_shapes(config):
    model = ViTScratchForImageClassification(config)
    components = explain.patch_embedding_components(model, count=7)
    assert components.shape == (7, 3, 4, 4)
    flat = components.reshape(7, -1)
    torch.testing.assert_close(flat @ flat.T, torch.eye(7), atol=1e-4, rtol=0)  # orthonormal directions
    similarity = explain.position_embedding_similarity(model)
    assert similarity.shape == (5, 5, 5, 5)
    torch.testing.assert_close(similarity.reshape(25, 25).diagonal(), torch.ones(25))


def test_a_hybrids_maps_are_its_feature_grid_and_distances_count_its_cells():
    config = tiny_config(stem="conv", stem_channels=[5], image_size=(16, 24), patch_size=2)  # cells of 4x4 pixels
    model = ViTScratchForImageClassification(config).eval()
    attentions = explain.attention_maps(model, torch.randn(1, 3, 16, 24))
    rollout = explain.attention_rollout(attentions, "mean", 0.0)
    assert explain.token_to_patch_map(rollout, config.grid_size)[0].shape == (4, 6)
    distances = explain.patch_distances(config.grid_size, config.cell_size)
    assert distances[0, 1].item() == 4.0 and distances[0, 6].item() == 4.0  # the neighbours right and below
    with pytest.raises(ValueError, match="reads the stem's feature map, not pixels"):
        explain.patch_embedding_components(model)


def test_a_distilled_models_maps_leave_out_both_prefix_tokens():
    """With a distillation token the patches start at token 2: maps, distances and position similarity skip both."""
    config = tiny_config(distillation_token=True)
    model = ViTScratchForImageClassification(config).eval()
    attentions = explain.attention_maps(model, torch.randn(1, 3, 20, 20))
    assert attentions[0].shape[-1] == 27
    rollout = explain.attention_rollout(attentions, "mean", 0.0)
    patch_map = explain.token_to_patch_map(rollout, config.grid_size)[0]
    assert patch_map.shape == (5, 5) and patch_map.max().item() == 1.0
    # the map is the class token's row over the patch columns 2..26, scaled
    torch.testing.assert_close(patch_map.flatten(), rollout[0, 0, 2:] / rollout[0, 0, 2:].max())
    distances = explain.mean_attention_distance(attentions, config.grid_size, config.cell_size)
    assert distances.shape == (2, 3) and distances.isfinite().all()
    similarity = explain.position_embedding_similarity(model)
    torch.testing.assert_close(similarity.reshape(25, 25).diagonal(), torch.ones(25))


def test_explain_command_draws_a_hybrids_cell_grid_and_no_filter_components(tmp_path):
    """In this process: test_explain_script_writes_pictures runs the same `main` through the script."""
    config = tiny_config(stem="conv", stem_channels=[5], image_size=16, patch_size=2)
    ViTScratchForImageClassification(config).save_pretrained(tmp_path / "model")
    ViTScratchImageProcessor.for_config(config).save_pretrained(tmp_path / "model")
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 30, 3), dtype=np.uint8)).save(tmp_path / "in.png")
    argv = ["--model", str(tmp_path / "model"), "--image", str(tmp_path / "in.png"), "--out", str(tmp_path / "out")]
    done = outcome("explain", argv)
    assert done.code == 0, done
    pictures = {path.name for path in (tmp_path / "out").glob("*.png")}
    assert "fig7_mean_attention_distance.png" in pictures and "fig7_patch_embedding_pca.png" not in pictures
    assert len(pictures) == 6


BF16_TOLERANCE = 1e-2  # bf16 keeps 8 bits of mantissa: a sum of a few dozen weights is off by a few 2^-9


def test_maps_of_a_model_loaded_in_bf16_are_distributions_and_match_float32(tmp_path, config):
    ViTScratchForImageClassification(config).save_pretrained(tmp_path)
    images = torch.randn(2, 3, 20, 20)
    maps = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = ViTScratchForImageClassification.from_pretrained(tmp_path, dtype=dtype)
        attentions = explain.attention_maps(model, images.to(dtype))
        assert attentions[0].dtype == dtype
        for attention in attentions:
            torch.testing.assert_close(attention.float().sum(-1), torch.ones(2, 3, 26), atol=BF16_TOLERANCE, rtol=0)
        rollout = explain.attention_rollout(attentions)
        assert rollout.dtype == torch.float32 and (rollout >= 0).all()
        torch.testing.assert_close(rollout.sum(-1), torch.ones(2, 26), atol=BF16_TOLERANCE, rtol=0)
        relevance = explain.gradient_rollout(model, images.to(dtype), 1)
        maps[dtype] = [explain.token_to_patch_map(r, config.grid_size) for r in (rollout, relevance)]
    for float32_map, bf16_map in zip(maps[torch.float32], maps[torch.bfloat16]):
        torch.testing.assert_close(bf16_map, float32_map, atol=2 * BF16_TOLERANCE, rtol=0)


# three channels by default, one in the slow tier: a one-channel model runs through the command by default in
# test_explain_command_runs_a_grayscale_model_with_an_rgb_processor
@pytest.mark.parametrize("channels", [pytest.param(1, marks=pytest.mark.slow), 3])
@pytest.mark.integration
def test_explain_script_writes_pictures(tmp_path, channels):
    config = tiny_config(num_channels=channels, image_size=16, patch_size=4)
    ViTScratchForImageClassification(config).save_pretrained(tmp_path / "model")
    ViTScratchImageProcessor.for_config(config).save_pretrained(tmp_path / "model")
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 30, 3), dtype=np.uint8)).save(tmp_path / "in.png")
    command = [
        sys.executable,
        str(REPO / "scripts" / "explain.py"),
        "--model",
        str(tmp_path / "model"),
        "--image",
        str(tmp_path / "in.png"),
        "--out",
        str(tmp_path / "out"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
    assert result.returncode == 0, result.stderr[-2000:]
    ranking = result.stdout.split("top classes:")[1].split("wrote:")[0].split()
    assert ranking[::2] and len(ranking) == 10 and all(label.startswith("LABEL_") for label in ranking[::2])
    pictures = sorted(path.name for path in (tmp_path / "out").glob("*.png"))
    assert pictures == sorted(
        [
            "patch_grid.png",
            "attention_rollout.png",
            f"gradient_rollout_class_{ranking[0]}.png",
            "attention_per_layer.png",
            "fig7_patch_embedding_pca.png",
            "fig7_position_embedding_similarity.png",
            "fig7_mean_attention_distance.png",
        ]
    )
    with Image.open(tmp_path / "out" / "attention_rollout.png") as picture:
        assert picture.format == "PNG" and picture.size == (800, 400)
    with Image.open(tmp_path / "out" / "patch_grid.png") as picture:
        assert picture.size == (500, 500)

    # the refusal in this process: the script above ran the same main, which gives the line to sys.exit
    (tmp_path / "broken.png").write_bytes(b"not an image")
    command[command.index("--image") + 1] = str(tmp_path / "broken.png")
    refused = outcome("explain", command[2:])
    assert refused.one_line and refused.error.startswith("error: Cannot read"), refused


def test_explain_command_runs_in_bf16_and_refuses_an_unknown_dtype_in_one_line(tmp_path, capsys):
    """In this process: test_explain_script_writes_pictures runs the same `main` through the script."""
    config = tiny_config(image_size=16, patch_size=4)
    ViTScratchForImageClassification(config).save_pretrained(tmp_path / "model")
    ViTScratchImageProcessor.for_config(config).save_pretrained(tmp_path / "model")
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 30, 3), dtype=np.uint8)).save(tmp_path / "in.png")
    command = ["--model", str(tmp_path / "model"), "--image", str(tmp_path / "in.png"), "--out"]
    bf16 = outcome("explain", [*command, str(tmp_path / "bf16"), "--dtype", "bfloat16"])
    assert bf16.code == 0, bf16
    assert len(list((tmp_path / "bf16").glob("*.png"))) == 7
    capsys.readouterr()
    unknown = outcome("explain", [*command, str(tmp_path / "fp16"), "--dtype", "float16"])
    assert unknown.traceback is None and not (tmp_path / "fp16").exists()
    assert unknown.error == "error: Unknown dtype 'float16': choose from float32, bfloat16 (or fp32, bf16)."
    assert capsys.readouterr().err == ""  # the one line (sys.exit prints it) is all a user reads


@pytest.mark.integration
def test_explain_script_runs_no_model_code_unless_asked(tmp_path, capsys):
    """A vit_scratch folder loads with the package's code (see above, no flag); a foreign model's own code runs
    only with --trust_remote_code."""
    folder, marker = tmp_path / "foreign", tmp_path / "code_ran"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "foreign_net",
                "architectures": ["ForeignModel"],
                "auto_map": {
                    "AutoConfig": "configuration_foreign.ForeignConfig",
                    "AutoModelForImageClassification": "configuration_foreign.ForeignModel",
                },
            }
        )
    )
    (folder / "configuration_foreign.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n"
        "from transformers import PretrainedConfig\n\n\nclass ForeignConfig(PretrainedConfig):\n"
        "    model_type = 'foreign_net'\n"
    )
    save_file({"weight": torch.zeros(2)}, folder / "model.safetensors")  # weights are checked before code runs
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(tmp_path / "in.png")
    command = [
        sys.executable,
        str(REPO / "scripts" / "explain.py"),
        "--model",
        str(folder),
        "--image",
        str(tmp_path / "in.png"),
        "--out",
        str(tmp_path / "out"),
    ]
    # the refusal in this process (it comes before any code is loaded); the runs that load code, in new processes
    refused = outcome("explain", command[2:])
    assert refused.one_line, refused
    assert refused.error == (
        f"error: {folder / 'config.json'} maps AutoConfig to 'configuration_foreign.ForeignConfig', which is not "
        "vit-scratch's own code; refusing to run it: read that code, then pass --trust_remote_code if you trust it."
    )
    assert not marker.exists()

    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    trusted = subprocess.run(
        command + ["--trust_remote_code"], capture_output=True, text=True, timeout=PROCESS_TIMEOUT, env=env
    )
    assert marker.read_text() == "ran", trusted.stderr[-2000:]  # with consent the folder's code does run

    # a vit_scratch folder whose code was tampered with: without the flag, the installed package's code runs
    marker.unlink()
    config = tiny_config(num_channels=3, image_size=16, patch_size=4)
    ViTScratchForImageClassification(config).save_pretrained(tmp_path / "model")
    ViTScratchImageProcessor.for_config(config).save_pretrained(tmp_path / "model")
    code = tmp_path / "model" / "modeling_vit_scratch.py"
    code.write_text(f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n" + code.read_text())
    command[command.index("--model") + 1] = str(tmp_path / "model")
    capsys.readouterr()
    done = outcome("explain", command[2:])  # in this process: the package's code is what runs here
    assert done.code == 0 and "top classes:" in capsys.readouterr().out, done
    assert not marker.exists()


@pytest.mark.parametrize("mode", ["L", "I;16", "RGB"])
def test_model_inputs_match_the_packages_processor_whatever_processor_the_folder_has(mode):
    """A grayscale model whose folder holds transformers' RGB `ViTImageProcessor` (as converted checkpoints may)
    gets the same pixel values as from its own processor, for 8-bit, 16-bit and colour images."""
    from transformers import ViTImageProcessor

    config = tiny_config(num_channels=1, image_size=16, patch_size=4)
    rgb_processor = ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    levels = np.random.default_rng(0).integers(0, 256, (23, 19), dtype=np.uint8)
    image = {
        "L": Image.fromarray(levels),
        "I;16": Image.fromarray(levels.astype(np.uint16) * 257),
        "RGB": Image.fromarray(np.stack([levels, levels[::-1], levels[:, ::-1]], -1)),
    }[mode]
    ours, shown = explain.model_inputs(image, ViTScratchImageProcessor.for_config(config), 1)
    theirs, _ = explain.model_inputs(image, rgb_processor, 1)
    assert ours.shape == theirs.shape == (1, 1, 16, 16) and shown.mode == "L" and shown.size == (16, 16)
    torch.testing.assert_close(theirs, ours, atol=2 / 255, rtol=0)
    rgb_model_input, _ = explain.model_inputs(image, ViTScratchImageProcessor.for_config(tiny_config(image_size=16)), 3)
    assert rgb_model_input.shape == (1, 3, 16, 16)


def test_explain_command_runs_a_grayscale_model_with_an_rgb_processor(tmp_path):
    """In this process: test_explain_script_writes_pictures runs the same `main` through the script."""
    from transformers import ViTImageProcessor

    config = tiny_config(num_channels=1, image_size=16, patch_size=4)
    ViTScratchForImageClassification(config).save_pretrained(tmp_path / "model")
    ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(tmp_path / "model")
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 30, 3), dtype=np.uint8)).save(tmp_path / "in.png")
    argv = ["--model", str(tmp_path / "model"), "--image", str(tmp_path / "in.png"), "--out", str(tmp_path / "out")]
    done = outcome("explain", argv)
    assert done.code == 0, done
    assert len(list((tmp_path / "out").glob("*.png"))) == 7


def test_per_layer_attention_plot_says_it_shows_the_class_token_row_of_each_layer():
    import matplotlib.pyplot as plt

    from modeling_vit_scratch.explanation import figures as plots

    class_attention = torch.rand(7, 2, 3)  # 7 layers: two rows of panels, the last 5 empty
    figure = plots.layer_attention_figure(class_attention)
    try:
        assert figure.get_suptitle() == "attention from the class token to each patch, per layer (mean over heads)"
        panels = [axis for axis in figure.axes if axis.images]
        assert [axis.get_title() for axis in panels] == [f"layer {index}" for index in range(1, 8)]
        for axis, layer in zip(panels, class_attention):
            np.testing.assert_array_equal(axis.images[0].get_array(), layer.numpy())
        assert len(figure.axes) == 12 and not any(axis.axison for axis in figure.axes if not axis.images)
    finally:
        plt.close(figure)


@pytest.mark.parametrize("form, name", [("GIF", "anim.gif"), ("PNG", "anim.png"), ("WEBP", "anim.webp")])
def test_an_image_of_several_frames_is_explained_from_frame_1_and_said_once(tmp_path, capsys, form, name):
    from modeling_vit_scratch.explanation.prediction import load_image

    frames = [Image.new("RGB", (8, 8), color) for color in ("red", "green", "blue")]
    frames[0].save(tmp_path / name, format=form, save_all=True, append_images=frames[1:], duration=100, loop=0)
    image = load_image(str(tmp_path / name))
    assert image.tell() == 0 and image.convert("RGB").getpixel((0, 0))[0] > 200  # frame 1, the red one
    assert capsys.readouterr().err == f"{tmp_path / name} has 3 frames: explained frame 1\n"
    frames[0].save(tmp_path / "still.png")
    load_image(str(tmp_path / "still.png"))
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_every_reader_sees_a_photo_upright_by_its_exif_orientation(tmp_path, orientation):
    """explain's --image, the package's pipeline, a streamed or undecoded training image and `datasets`' own decoding
    give the same pixels for a JPEG whose EXIF says to turn it: the image processor's on the upright picture."""
    from datasets import Image as ImageFeature
    from PIL import ImageOps

    from modeling_vit_scratch import ViTScratchImageClassificationPipeline
    from modeling_vit_scratch.explanation.prediction import load_image
    from modeling_vit_scratch.training.data import read_image

    levels = np.random.default_rng(orientation).integers(0, 256, (20, 40, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = tmp_path / "turned.jpg"
    Image.fromarray(levels).save(path, exif=exif, quality=95)
    config = tiny_config(image_size=16, patch_size=4)
    processor = ViTScratchImageProcessor.for_config(config)
    with Image.open(path) as raw:
        expected = processor(images=ImageOps.exif_transpose(raw), return_tensors="pt")["pixel_values"]
        unturned = processor(images=raw, return_tensors="pt")["pixel_values"]
    assert not torch.equal(expected, unturned)  # the orientation matters to what the model sees
    explained, _ = explain.model_inputs(load_image(str(path)), processor, 3)
    torch.testing.assert_close(explained, expected, atol=0, rtol=0)
    piped = ViTScratchImageClassificationPipeline.preprocess(
        type("Pipe", (), {"image_processor": processor, "dtype": torch.float32})(), str(path)
    )
    torch.testing.assert_close(piped["pixel_values"], expected, atol=0, rtol=0)
    trained = processor(images=read_image({"bytes": None, "path": str(path)}), return_tensors="pt")["pixel_values"]
    torch.testing.assert_close(trained, expected, atol=0, rtol=0)
    decoded = ImageFeature().decode_example({"bytes": None, "path": str(path)})
    torch.testing.assert_close(processor(images=decoded, return_tensors="pt")["pixel_values"], expected, atol=0, rtol=0)


def test_the_package_opens_image_files_in_one_place():
    """Every image file is opened by `open_bounded` (format list, size bound) and read for pixels via `upright`:
    no other `Image.open` in the package."""
    import re
    from pathlib import Path

    package = Path(REPO) / "modeling_vit_scratch"
    calls = [
        f"{path.relative_to(package)}:{number}"
        for path in sorted(package.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bImage\.open\(", line) and not line.lstrip().startswith(("#", '"'))
    ]
    assert len(calls) == 1 and calls[0].startswith("image_processing_vit_scratch.py:"), calls
    source = (package / "image_processing_vit_scratch.py").read_text()
    assert source.index("Image.open(") > source.index("def open_bounded(") > 0
    assert source.index("Image.open(") < source.index("\ndef ", source.index("def open_bounded("))
