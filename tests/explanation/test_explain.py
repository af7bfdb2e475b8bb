"""Explain: attention maps for any kernel, rollouts, the Fig. 7 diagnostics, the token norms of the registers paper,
and the command's behaviour (figures written, folders refused untouched, one line per refusal, no token anywhere)."""

import hashlib
import json
import threading
import warnings
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import torch
from helpers import REPO, in_process, tiny_config
from hub_server import TOKEN, Store, local_hub  # noqa: F401  (the fixture)
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from modeling_vit_scratch import ViTScratchForImageClassification, ViTScratchImageProcessor
from modeling_vit_scratch.conversion.command import main as convert
from modeling_vit_scratch.errors import UserError
from modeling_vit_scratch.explanation import attention as explain
from modeling_vit_scratch.explanation import norms, prediction
from modeling_vit_scratch.explanation.command import main

FIGURES = {
    "patch_grid.png",
    "attention_rollout.png",
    "attention_per_layer.png",
    "fig7_patch_embedding_pca.png",
    "fig7_position_embedding_similarity.png",
    "fig7_mean_attention_distance.png",
    "token_norms.png",
}


def saved_model(folder, processor=None, **overrides):
    config = tiny_config(**{"image_size": 16, "patch_size": 4, **overrides})
    ViTScratchForImageClassification(config).save_pretrained(folder)
    (processor or ViTScratchImageProcessor.for_config(config)).save_pretrained(folder)
    return folder


def picture(path, size=(30, 40), mode="RGB"):
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (*size, 3), dtype=np.uint8)).convert(mode).save(path)
    return path


def run(*argv) -> tuple[int, str | None]:
    """`explain` in this process: its exit status and the one line it ended with."""
    try:
        main([str(word) for word in argv])
    except SystemExit as stop:
        return (1, stop.code) if isinstance(stop.code, str) else (stop.code, None)
    return 0, None


def digest(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def inputs(tmp_path):
    return saved_model(tmp_path / "model"), picture(tmp_path / "in.png")


def test_sdpa_model_gives_eager_attention_maps_and_is_left_unchanged(config):
    sdpa = ViTScratchForImageClassification._from_config(config, attn_implementation="sdpa").eval()
    eager = ViTScratchForImageClassification._from_config(tiny_config(), attn_implementation="eager").eval()
    eager.load_state_dict(sdpa.state_dict())
    images = torch.randn(2, 3, 20, 20)
    with torch.no_grad():
        before = sdpa(images).logits
    maps = explain.attention_maps(sdpa, images)
    assert len(maps) == config.num_hidden_layers and maps[0].shape == (2, 3, 26, 26)
    for got, want in zip(maps, explain.attention_maps(eager, images)):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=0)
    assert sdpa.config._attn_implementation == "sdpa"
    with torch.no_grad():
        assert torch.equal(sdpa(images).logits, before)


@given(
    head_fusion=st.sampled_from(explain.HEAD_FUSIONS),
    discard_ratio=st.floats(0, 0.95),
    seed=st.integers(0, 2**16),
    layers=st.integers(1, 4),
)
def test_rollout_rows_are_distributions(head_fusion, discard_ratio, seed, layers):
    generator = torch.Generator().manual_seed(seed)
    attentions = tuple(torch.rand(2, 3, 10, 10, generator=generator).softmax(-1) for _ in range(layers))
    rollout = explain.attention_rollout(attentions, head_fusion, discard_ratio)
    assert rollout.shape == (2, 10, 10) and (rollout >= 0).all()
    torch.testing.assert_close(rollout.sum(-1), torch.ones(2, 10))


def test_rollout_finds_the_patch_every_layer_looks_at():
    looking = torch.zeros(1, 2, 10, 10)
    looking[..., 6] = 1.0  # every token of every head attends only to token 6, patch 5
    rollout = explain.attention_rollout((looking,) * 3)
    for pooling in ("cls", "mean"):
        assert explain.token_to_patch_map(rollout, (3, 3), pooling).flatten().argmax().item() == 5


def test_gradient_rollout_depends_on_the_class_and_leaves_no_gradients(config):
    model = ViTScratchForImageClassification(config).eval()
    image = torch.randn(1, 3, 20, 20)
    first, second = explain.gradient_rollout(model, image, 0), explain.gradient_rollout(model, image, 1)
    assert first.shape == (1, 26, 26) and not torch.allclose(first, second)
    assert all(parameter.grad is None for parameter in model.parameters())


def test_mean_attention_distance_of_uniform_attention_is_the_mean_distance_and_local_is_smaller():
    grid, patch = (3, 4), 5
    tokens = 1 + grid[0] * grid[1]
    uniform = torch.full((1, 1, tokens, tokens), 1.0 / tokens)
    local = (torch.eye(tokens) * 0.9 + 0.1 / tokens)[None, None]
    distances = explain.mean_attention_distance((torch.cat([uniform, local], dim=1),), grid, patch)
    centres = [(r * patch, c * patch) for r in range(grid[0]) for c in range(grid[1])]
    analytic = np.mean([np.hypot(a[0] - b[0], a[1] - b[1]) for a in centres for b in centres])
    assert distances[0, 0].item() == pytest.approx(analytic, rel=1e-6) and distances[0, 1] < distances[0, 0]


@pytest.mark.parametrize("overrides", [{}, {"distillation_token": True}, {"num_register_tokens": 2}])
def test_fig7_diagnostics_have_the_paper_shapes_and_skip_every_prefix_token(overrides):
    model = ViTScratchForImageClassification(tiny_config(**overrides)).eval()
    flat = explain.patch_embedding_components(model, count=7).reshape(7, -1)
    assert flat.shape == (7, 3 * 4 * 4)
    torch.testing.assert_close(flat @ flat.T, torch.eye(7), atol=1e-4, rtol=0)  # orthonormal directions
    similarity = explain.position_embedding_similarity(model)
    torch.testing.assert_close(similarity.reshape(25, 25).diagonal(), torch.ones(25))
    attentions = explain.attention_maps(model, torch.randn(1, 3, 20, 20))
    rollout = explain.attention_rollout(attentions)
    prefix = rollout.shape[-1] - 25
    torch.testing.assert_close(
        explain.token_to_patch_map(rollout, (5, 5))[0].flatten(), rollout[0, 0, prefix:] / rollout[0, 0, prefix:].max()
    )
    assert explain.mean_attention_distance(attentions, (5, 5), 4).shape == (2, 3)


def test_the_token_norm_map_is_the_patch_grid_of_the_last_hidden_state_without_registers_or_class_tokens():
    config = tiny_config(num_register_tokens=2, distillation_token=True)  # 2 class tokens, 2 registers, 5x5 patches
    model = ViTScratchForImageClassification(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():  # norms that differ from token to token, the final LayerNorm's too
            parameter.normal_(0, 0.5, generator=torch.Generator().manual_seed(parameter.numel()))
        model.vit.embeddings.register_tokens.mul_(100)  # a map that took in a register would show it
    images = torch.randn(2, 3, 20, 20)
    found = norms.token_norms(model, images)
    with torch.no_grad():
        tokens = model.vit(images).last_hidden_state  # (2, 4 + 25, 36)
    assert found.shape == (2, 29)
    patch_map = norms.patch_norm_map(found, config.grid_size)
    assert patch_map.shape == (2, 5, 5)
    torch.testing.assert_close(patch_map, tokens[:, 4:].norm(dim=-1).reshape(2, 5, 5))
    torch.testing.assert_close(norms.register_norms(found, config), tokens[:, 2:4].norm(dim=-1))


def test_the_high_norm_share_is_the_share_of_patch_norms_above_twice_their_median():
    patch_norms = torch.ones(3, 5, 5)
    patch_norms[0, 0, :3] = 10.0  # 3 of 25 far above the median, 1
    patch_norms[1] = torch.arange(1.0, 26.0).reshape(5, 5)  # median 13: nothing above 26
    patch_norms[2, 4, 4] = 2.0  # exactly twice the median is not above it
    assert norms.high_norm_share(patch_norms).tolist() == pytest.approx([3 / 25, 0.0, 0.0])
    even = torch.tensor([[1.0, 2.0, 3.0, 5.5], [1.0, 2.0, 3.0, 5.0]])  # median 2.5, the mean of the middle two
    assert norms.high_norm_threshold(even).tolist() == [5.0, 5.0]
    assert norms.high_norm_share(even).tolist() == [0.25, 0.0]


@given(st.lists(st.integers(1, 1000), min_size=1, max_size=40), st.sampled_from([1.5, 2.0, 3.0]))
def test_the_high_norm_share_is_the_documented_rule(values, multiple):
    expected = np.mean(np.array(values) > multiple * np.median(values))  # exact: no rounding at the threshold
    share = norms.high_norm_share(torch.tensor([values], dtype=torch.float32), multiple)[0].item()
    assert share == pytest.approx(expected)


def test_a_hybrids_distances_count_its_cells_and_it_has_no_filter_picture():
    config = tiny_config(stem="conv", stem_channels=[5], image_size=(16, 24), patch_size=2)  # cells of 4x4 pixels
    distances = explain.patch_distances(config.grid_size, config.cell_size)
    assert distances[0, 1].item() == 4.0 and distances[0, 6].item() == 4.0  # the neighbours right and below
    with pytest.raises(ValueError, match="stem"):
        explain.patch_embedding_components(ViTScratchForImageClassification(config))


def test_maps_of_a_model_loaded_in_bf16_match_float32(tmp_path, config):
    ViTScratchForImageClassification(config).save_pretrained(tmp_path)
    images, maps = torch.randn(2, 3, 20, 20), {}
    for dtype in (torch.float32, torch.bfloat16):
        model = ViTScratchForImageClassification.from_pretrained(tmp_path, dtype=dtype)
        rollout = explain.attention_rollout(explain.attention_maps(model, images.to(dtype)))
        assert rollout.dtype == torch.float32
        maps[dtype] = explain.token_to_patch_map(rollout, config.grid_size)
    torch.testing.assert_close(maps[torch.bfloat16], maps[torch.float32], atol=2e-2, rtol=0)


@pytest.mark.parametrize("mode", ["L", "I;16", "RGB"])
def test_a_grayscale_model_gets_the_same_pixels_from_transformers_rgb_processor(mode):
    from transformers import ViTImageProcessor

    config = tiny_config(num_channels=1, image_size=16, patch_size=4)
    rgb = ViTImageProcessor(size={"height": 16, "width": 16}, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    levels = np.random.default_rng(0).integers(0, 256, (23, 19), dtype=np.uint8)
    image = {
        "L": Image.fromarray(levels),
        "I;16": Image.fromarray(levels.astype(np.uint16) * 257),
        "RGB": Image.fromarray(np.stack([levels, levels[::-1], levels[:, ::-1]], -1)),
    }[mode]
    ours, seen = explain.model_inputs(image, ViTScratchImageProcessor.for_config(config), 1)
    theirs, _ = explain.model_inputs(image, rgb, 1)
    assert ours.shape == theirs.shape == (1, 1, 16, 16) and seen.mode == "L" and seen.size == (16, 16)
    torch.testing.assert_close(theirs, ours, atol=2 / 255, rtol=0)


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_the_image_is_read_upright_by_its_exif_orientation(tmp_path, orientation):
    from PIL import ImageOps

    exif = Image.Exif()
    exif[0x0112] = orientation
    levels = np.random.default_rng(orientation).integers(0, 256, (20, 40, 3), dtype=np.uint8)
    Image.fromarray(levels).save(tmp_path / "turned.jpg", exif=exif, quality=95)
    with Image.open(tmp_path / "turned.jpg") as raw:
        upright = np.asarray(ImageOps.exif_transpose(raw))
    np.testing.assert_array_equal(np.asarray(prediction.read_image(str(tmp_path / "turned.jpg"))), upright)


@pytest.mark.parametrize("form", ["GIF", "PNG", "WEBP"])
def test_an_image_of_several_frames_is_read_from_frame_1_and_said_once(tmp_path, capsys, form):
    frames = [Image.new("RGB", (8, 8), color) for color in ("red", "green", "blue")]
    frames[0].save(tmp_path / "anim", format=form, save_all=True, append_images=frames[1:], duration=100)
    image = prediction.read_image(str(tmp_path / "anim"))
    assert image.convert("RGB").getpixel((0, 0))[0] > 200  # frame 1, the red one
    assert capsys.readouterr().err.count("3 frames") == 1
    frames[0].save(tmp_path / "still.png")
    prediction.read_image(str(tmp_path / "still.png"))
    assert capsys.readouterr().err == ""


def test_an_image_url_is_read_and_its_size_is_bounded(tmp_path, monkeypatch):
    picture(tmp_path / "in.png")
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert prediction.read_image(f"{url}/in.png").size == (40, 30)
        with pytest.raises(UserError, match="404"):
            prediction.read_image(f"{url}/missing.png")
        monkeypatch.setattr(prediction, "DOWNLOAD_BYTES", 100)
        with pytest.raises(UserError, match="--image"):
            prediction.read_image(f"{url}/in.png")
    finally:
        server.shutdown()


def test_explain_writes_its_figures_and_rewrites_only_its_own_in_its_folder(tmp_path, inputs, capsys):
    model, image = inputs
    assert run("--model", model, "--image", image, "--out", tmp_path / "out") == (0, None)
    printed = capsys.readouterr().out
    ranking = printed.split("top classes:")[1].split("high-norm patch tokens:")[0].split()
    assert len(ranking) == 10 and all(label.startswith("LABEL_") for label in ranking[::2])
    written = {path.name for path in (tmp_path / "out").glob("*.png")}
    assert written == {*FIGURES, f"gradient_rollout_class_{ranking[0]}.png"}
    with Image.open(tmp_path / "out" / "attention_rollout.png") as drawn:
        assert drawn.size == (800, 400)
    stale = tmp_path / "out" / "gradient_rollout_class_another_model_s.png"
    stale.write_bytes(b"an earlier run's")
    (tmp_path / "out" / "token_norms.png").write_bytes(b"an earlier run's")
    (tmp_path / "out" / "notes.txt").write_text("the user's")
    (tmp_path / "out" / "token_norms_by_hand.png").write_bytes(b"the user's")
    assert run("--model", model, "--image", image, "--out", tmp_path / "out", "--head_fusion", "max")[0] == 0
    assert not stale.exists() and (tmp_path / "out" / "notes.txt").read_text() == "the user's"
    assert (tmp_path / "out" / "token_norms_by_hand.png").read_bytes() == b"the user's"
    with Image.open(tmp_path / "out" / "token_norms.png") as drawn:  # rewritten
        assert drawn.size == (1200, 400)
    assert {path.name for path in (tmp_path / "out").glob("*.png")} == {*written, "token_norms_by_hand.png"}


def test_explain_prints_the_share_of_high_norm_patch_tokens_and_each_registers_norm(tmp_path, capsys, monkeypatch):
    model = saved_model(tmp_path / "model", num_register_tokens=2)  # class token, 2 registers, 4x4 patches
    constructed = torch.ones(1, 3 + 16)
    constructed[0, :3] = torch.tensor([7.0, 50.0, 60.0])
    constructed[0, 3:5] = 9.0  # 2 of the 16 patches above twice the median, 1
    monkeypatch.setattr(norms, "token_norms", lambda *_: constructed)
    assert run("--model", model, "--image", picture(tmp_path / "in.png"), "--out", tmp_path / "out")[0] == 0
    printed = capsys.readouterr().out
    assert "high-norm patch tokens: 12.5% (2 of 16; norm above 2 x the median patch-token norm = 2)" in printed
    assert "register token norms: 50, 60\n" in printed
    assert "token_norms.png" in printed


@pytest.mark.parametrize("held", [("config.json", "model.safetensors"), ("checkpoint-3",), ("photo.jpg",)])
def test_a_folder_holding_a_model_or_someone_elses_files_is_refused_untouched(tmp_path, inputs, held, monkeypatch):
    monkeypatch.setattr(prediction, "load_model", None)  # refused before any load
    out = tmp_path / "taken"
    out.mkdir()
    if held[0] != "photo.jpg":
        (out / ".vit-scratch-output").touch()  # ours: another run's training folder
    for name in held:
        (out / name).mkdir() if name.startswith("checkpoint-") else (out / name).write_text("{}")
    before = digest(out)
    code, line = run("--model", inputs[0], "--image", inputs[1], "--out", out)
    assert code == 1 and line.startswith("error: --out") and "\n" not in line
    assert digest(out) == before


@pytest.mark.parametrize(
    "change, named",
    [
        (["--image", "broken.png"], "broken.png"),
        (["--image", "cut.png"], "cut.png"),
        (["--image", "big.png"], "big.png"),
        (["--image", "nowhere.png"], "nowhere.png"),
        (["--discard_ratio", "1.5"], "--discard_ratio"),
        (["--head_fusion", "median"], "--head_fusion"),
        (["--dtype", "float16"], "--dtype"),
        (["--out", "model"], "--out"),
        (["--model", "foreign"], "foreign"),
        (["--model", "misfit"], "num_attention_heads"),  # the config's own check, as the model's loader meets it
    ],
)
def test_a_refusal_is_one_line_naming_what_to_fix_and_writes_nothing(tmp_path, inputs, change, named, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.png").write_bytes(b"not an image")
    (tmp_path / "cut.png").write_bytes(inputs[1].read_bytes()[:-30])  # cut short: PIL finds it when decoding
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 5000)  # in.png's 1200 pass, big.png's 10,000 do not
    picture(tmp_path / "big.png", size=(100, 100))
    saved_model(tmp_path / "foreign")
    settings = json.loads((tmp_path / "foreign" / "config.json").read_text())
    (tmp_path / "foreign" / "config.json").write_text(json.dumps({**settings, "model_type": "vit"}))
    saved_model(tmp_path / "misfit")
    heads = settings["hidden_size"] + 1  # divides no hidden size
    (tmp_path / "misfit" / "config.json").write_text(json.dumps({**settings, "num_attention_heads": heads}))
    argv = {"--model": str(inputs[0]), "--image": str(inputs[1]), "--out": "out", **dict([change])}
    before = digest(tmp_path / "model")
    code, line = run(*[word for pair in argv.items() for word in pair])
    assert code in (1, 2) and line.startswith("error: ") and "\n" not in line and named in line, line
    assert not (tmp_path / "out").exists() and digest(tmp_path / "model") == before
    if named.endswith(".png") and named != "nowhere.png":  # as training's image reader says: the fix
        assert "remove" in line, line


@pytest.mark.parametrize("case", ["hybrid", "grayscale with an RGB processor", "bf16", "registers"])
def test_explain_runs_a_hybrid_a_grayscale_model_in_bf16_and_with_registers(tmp_path, case):
    from transformers import ViTImageProcessor

    overrides = {"stem": "conv", "stem_channels": [5], "patch_size": 2} if case == "hybrid" else {}
    if case.startswith("grayscale"):
        overrides = {"num_channels": 1}
    if case == "registers":
        overrides = {"num_register_tokens": 3, "distillation_token": True, "layerscale_value": 0.1}
    rgb = ViTImageProcessor(size={"height": 16, "width": 16}) if case.startswith("grayscale") else None
    model = saved_model(tmp_path / "model", rgb, **overrides)
    extra = ["--dtype", "bf16"] if case == "bf16" else []
    assert run("--model", model, "--image", picture(tmp_path / "in.png"), "--out", tmp_path / "out", *extra)[0] == 0
    written = {path.name for path in (tmp_path / "out").glob("*.png")}
    assert len(written) == (7 if case == "hybrid" else 8) and ("fig7_patch_embedding_pca.png" in written) == (
        case != "hybrid"
    )


def test_a_converted_dinov2_with_registers_backbone_is_explained_without_classes(tmp_path, capsys):
    from transformers import Dinov2WithRegistersConfig, Dinov2WithRegistersModel

    sizes = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, patch_size=14, image_size=42)
    Dinov2WithRegistersModel(Dinov2WithRegistersConfig(**sizes, layerscale_value=0.5)).save_pretrained(tmp_path / "src")
    model, out = tmp_path / "model", tmp_path / "out"
    assert in_process(convert, "--from", "transformers", "--input", tmp_path / "src", "--output", model) == 0
    assert run("--model", model, "--image", picture(tmp_path / "in.png"), "--out", out)[0] == 0
    printed = capsys.readouterr().out
    assert "top classes: none" in printed and "of 9; norm above 2 x the median" in printed  # a 3x3 grid of patches
    assert len(printed.split("register token norms: ")[1].split("\n")[0].split(", ")) == 4
    assert {path.name for path in out.glob("*.png")} == FIGURES  # no class, so no gradient rollout


def test_a_label_holding_a_token_never_reaches_a_file_name_or_a_line(tmp_path, inputs, capsys):
    token = "hf_" + "Secret1" * 6
    config = json.loads((inputs[0] / "config.json").read_text())
    config["id2label"] = {str(index): f"{token}/{index}" for index in range(5)}
    (inputs[0] / "config.json").write_text(json.dumps(config))
    assert run("--model", inputs[0], "--image", inputs[1], "--out", tmp_path / "out")[0] == 0
    captured = capsys.readouterr()
    assert token not in captured.out + captured.err
    assert not [
        path for path in (tmp_path / "out").iterdir() if token in path.name or token.encode() in path.read_bytes()
    ]


def test_a_label_holding_a_formula_or_a_control_character_is_drawn_as_text(tmp_path, inputs):
    config = json.loads((inputs[0] / "config.json").read_text())
    config["id2label"] = {str(index): f"x$\\frac$\x1b{index}" for index in range(5)}  # not mathtext: it would fail
    (inputs[0] / "config.json").write_text(json.dumps(config))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run("--model", inputs[0], "--image", inputs[1], "--out", tmp_path / "out")[0] == 0
    assert not [str(w.message) for w in caught if "missing from font" in str(w.message)]
    assert len(list((tmp_path / "out").glob("gradient_rollout_class_*.png"))) == 1


def test_code_a_folder_brings_runs_only_when_trusted(tmp_path, inputs):
    marker = tmp_path / "code_ran"
    settings = json.loads((inputs[0] / "config.json").read_text())
    foreign = {**settings, "auto_map": {"AutoConfig": "configuration_foreign.ForeignConfig"}}
    (inputs[0] / "config.json").write_text(json.dumps(foreign))
    (inputs[0] / "configuration_foreign.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    code, line = run("--model", inputs[0], "--image", inputs[1], "--out", tmp_path / "out")
    assert code == 1 and "--trust_remote_code" in line and not marker.exists()
    # the package's own code, even tampered with in the folder: the installed package's runs, without the flag
    (inputs[0] / "config.json").write_text(json.dumps(settings))
    (inputs[0] / "modeling_vit_scratch.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    assert run("--model", inputs[0], "--image", inputs[1], "--out", tmp_path / "out")[0] == 0
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.integration
def test_a_hub_model_is_explained_at_its_revision_and_the_token_is_nowhere(tmp_path, inputs, local_hub):  # noqa: F811
    repo = Store(local_hub.root).create("local-user/explained", False, f"{local_hub.url}/local-user/explained")
    files = {path.name: repo.add_blob(path.read_bytes()) for path in inputs[0].iterdir() if path.is_file()}
    repo.commit("refs/heads/trained", "a model", "", files)  # on a branch only: main has none
    repo.save()
    argv = ["--model", "local-user/explained", "--image", inputs[1], "--out", tmp_path / "out"]
    script = REPO / "scripts" / "explain.py"
    hub_home = tmp_path / "home"
    missing = local_hub.run(script, *argv, hf_home=hub_home, env={"PYTHONPATH": str(REPO)})
    assert missing.returncode == 1 and missing.stderr.strip().splitlines()[-1].startswith("error: ")
    done = local_hub.run(script, *argv, "--revision", "trained", hf_home=hub_home, env={"PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "top classes:" in done.stdout and TOKEN not in done.stdout + done.stderr
    assert len(list((tmp_path / "out").glob("*.png"))) == 8
