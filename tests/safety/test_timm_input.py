"""`convert --from timm`: what timm is handed. A pickle given as --input is never unpickled, `--timm_kwargs` never
makes timm read a file or download (`checkpoint_path`, `pretrained`, `pretrained_cfg*`), an argument timm does not
take is one line naming it, and weights of another size are one line naming the `--timm_kwargs` that fit them,
each before timm builds or loads anything."""

import json
import pickle

import pytest
import torch
from entry_points import outcome
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from modeling_vit_scratch.common.weights import check_safetensors, weights_format


class Payload:
    """Unpickled without weights_only, this runs code: it writes `marker`."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def convert(weights, tmp_path, kwargs: str | None = None):
    extra = ["--timm_kwargs", kwargs] if kwargs is not None else []
    argv = ["--from", "timm", "--timm_model", "vit_tiny_patch16_224", "--input", str(weights), *extra]
    return outcome("convert", [*argv, "--output", str(tmp_path / "out")])


@pytest.mark.parametrize("name", ["evil.pth", "evil.bin", "evil.pt", "evil.safetensors"])
@pytest.mark.parametrize("how", ["torch.save", "pickle"])
def test_a_pickle_as_input_is_one_line_and_never_unpickled(tmp_path, name, how):
    weights, marker = tmp_path / name, tmp_path / "ran"
    if how == "torch.save":  # a zip archive holding the pickle
        torch.save({"x": Payload(marker)}, weights)
    else:
        weights.write_bytes(pickle.dumps(Payload(marker), protocol=4))
    result = convert(weights, tmp_path)
    assert result.one_line, result
    assert "is a pickle, which vit-scratch never reads" in result.error
    target = weights.with_suffix(".safetensors")  # where the converted file goes: never onto the input
    target = tmp_path / "evil-converted.safetensors" if target == weights else target
    assert f"--input {target}" in result.error and f"s.save_file(m.load_state_dict('{weights}'), '{target}')" in (
        result.error
    )
    assert not marker.exists() and not (tmp_path / "out").exists()


def safetensors_with_header_length(path, length: int) -> None:
    """A valid safetensors file (one float32 tensor) whose header, padded with spaces as safetensors pads it, is
    `length` bytes long."""
    header = json.dumps({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    path.write_bytes(length.to_bytes(8, "little") + header.ljust(length) + bytes(4))


@settings(max_examples=20, deadline=None)
@given(pages=st.integers(0, 400))
def test_a_safetensors_file_whose_header_length_starts_with_pickles_proto_byte_is_safetensors(tmp_path_factory, pages):
    """A header length whose first byte is 0x80 (pickle's PROTO opcode: 1 file in 256, e.g. timm's vit_tiny at 32 px,
    0x3580; before: refused "as a pickle", with a fix that converted the file onto itself) is read as safetensors:
    the format is sniffed by the length and the `{` after it, the pickle magic only otherwise."""
    weights = tmp_path_factory.mktemp("w") / "w.safetensors"
    safetensors_with_header_length(weights, 256 * pages + 0x80)
    assert weights.read_bytes()[:1] == b"\x80"
    check_safetensors(weights)  # safetensors reads it
    assert weights_format(weights) == "safetensors"
    result = convert(weights, weights.parent)
    assert "is a pickle" not in (result.error or ""), result


@pytest.mark.parametrize(
    "key",
    ["checkpoint_path", "pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "pretrained_strict", "cache_dir"],
)
def test_a_timm_kwarg_that_loads_files_or_weights_is_refused_naming_it(tmp_path, key):
    weights, evil = tmp_path / "weights.safetensors", tmp_path / "evil.pth"
    save_file({"head.weight": torch.zeros(3, 4)}, weights)
    torch.save({"x": Payload(tmp_path / "ran")}, evil)
    result = convert(weights, tmp_path, f"global_pool=avg,{key}={evil}")
    assert result.one_line, result
    assert result.error.startswith(f"error: --timm_kwargs {key}=... is refused: it ")
    assert not (tmp_path / "ran").exists() and not (tmp_path / "out").exists()


def test_a_timm_kwargs_item_that_is_not_key_value_names_timm_kwargs(tmp_path):
    weights = tmp_path / "weights.safetensors"
    save_file({"head.weight": torch.zeros(3, 4)}, weights)
    result = convert(weights, tmp_path, "img_size")
    assert result.one_line, result
    assert result.error == "error: --timm_kwargs item 'img_size' is not key=value: write e.g. 'img_size=384'."


@pytest.mark.timm
def test_a_key_timm_does_not_take_is_one_line_naming_it(tmp_path):
    weights = tmp_path / "weights.safetensors"
    save_file({"head.weight": torch.zeros(3, 4)}, weights)
    result = convert(weights, tmp_path, "bogus=1")
    assert result.one_line, result
    assert result.error.startswith("error: --timm_kwargs 'bogus' is not an argument of timm's VisionTransformer")


@pytest.mark.timm
def test_weights_of_another_size_name_the_timm_kwargs_that_fit(tmp_path):
    import timm

    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, num_classes=3)
    weights = tmp_path / "weights.safetensors"
    save_file({name: tensor.contiguous() for name, tensor in reference.state_dict().items()}, weights)
    result = convert(weights, tmp_path)
    assert result.one_line, result
    assert "pos_embed is [1, 5, 192] in the file, [1, 197, 192] in the model" in result.error
    assert "pass --timm_kwargs 'img_size=32'" in result.error
    assert convert(weights, tmp_path, "img_size=32").code == 0  # the line's fix works


@pytest.mark.timm
def test_weights_without_a_classifier_head_are_refused_before_writing(tmp_path):
    """timm weights without `head.*` (a feature extractor, num_classes=0) converted silently to a model of no labels
    (explain then a KeyError traceback; the push succeeded, the pipeline failed): the package's models classify."""
    import timm

    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, num_classes=0)
    weights = tmp_path / "weights.safetensors"
    save_file({name: tensor.contiguous() for name, tensor in reference.state_dict().items()}, weights)
    assert convert(weights, tmp_path, "img_size=32").refused(tmp_path / "out") == (
        f"error: --input '{weights}' holds no classifier head (no head.weight; a feature extractor's weights): "
        "vit-scratch models classify, and a model without a head would convert with no labels and fail in the "
        "pipeline: give vit_tiny_patch16_224's weights with their head (a classifier, num_classes > 0)."
    )


def convert_model(model: str, weights, tmp_path, *extra: str):
    argv = ["--from", "timm", "--timm_model", model, "--input", str(weights), "--output", str(tmp_path / "out")]
    return outcome("convert", [*argv, *extra])


def tiny_timm_weights(tmp_path):
    """A vit_tiny_patch16_224 classifier of 3 classes at 32 px, as safetensors: what --input is."""
    import timm

    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, num_classes=3)
    weights = tmp_path / "weights.safetensors"
    save_file({name: tensor.contiguous() for name, tensor in reference.state_dict().items()}, weights)
    return weights


@pytest.mark.timm
@pytest.mark.parametrize(
    "model, line",
    [
        ("hf-hub:local-user/m1", "is a model source or a path, which timm would download or read"),
        ("local-dir:{tdir}", "is a model source or a path, which timm would download or read"),
        ("hf_hub:timm/vit_tiny_patch16_224", "is a model source or a path, which timm would download or read"),
        ("{tdir}", "is a model source or a path, which timm would download or read"),
        ("vit_tiny_patch16_224.nosuchtag", "timm knows no pretrained tag 'nosuchtag' for vit_tiny_patch16_224"),
        ("vit_tiny_patch16_22", "is not an architecture timm knows (closest: vit_tiny_patch16_224"),
    ],
)
def test_timm_model_is_an_architecture_name_checked_before_any_work(tmp_path, monkeypatch, model, line):
    """`--timm_model` names an architecture of timm's registry (with a tag timm knows): a Hub repo or a local folder
    (before: the Hub contacted; the folder's config read and its absolute path written into the pushed records), an
    unknown tag or a typo (before: timm's RuntimeError traceback) is one line naming the value and the fix, before
    timm builds anything."""
    import timm

    tdir = tmp_path / "tdir"
    tdir.mkdir()
    (tdir / "config.json").write_text(json.dumps({"architecture": "vit_tiny_patch16_224", "num_classes": 3}))
    weights = tiny_timm_weights(tmp_path)
    monkeypatch.setattr(timm, "create_model", lambda *a, **k: pytest.fail("timm built a model"))
    model = model.format(tdir=tdir)
    error = convert_model(model, weights, tmp_path, "--timm_kwargs", "img_size=32").refused(tmp_path / "out")
    assert error.startswith(f"error: --timm_model {model!r}") and line in error, error
    assert error.endswith(("with the weights as --input.", "the weights as --input (safetensors).")), error


@pytest.mark.timm
def test_a_timm_model_with_a_tag_timm_knows_converts_and_is_recorded_by_that_name(tmp_path):
    """The rule lets through what timm's registry knows: an architecture with one of its pretrained tags."""
    import timm

    model = timm.list_models("vit_tiny_patch16_224", include_tags=True)[0]  # e.g. vit_tiny_patch16_224.augreg_in21k
    weights = tiny_timm_weights(tmp_path)
    assert convert_model(model, weights, tmp_path, "--timm_kwargs", "img_size=32").code == 0
    record = json.loads((tmp_path / "out" / "conversion_record.json").read_text())
    assert model in json.dumps(record) and str(tmp_path) not in json.dumps(record)


TOKEN_SHAPED = "hf_" + "Q" * 34  # shaped like a token, held by no variable


@pytest.mark.parametrize(
    "argument, value",
    [
        ("--timm_model", TOKEN_SHAPED),
        ("--timm_model", f"vit_tiny_patch16_224.{TOKEN_SHAPED}"),
        ("--timm_model", f"local-dir:td-{TOKEN_SHAPED}"),
        ("--timm_kwargs", f"weight_init={TOKEN_SHAPED}"),
        ("--input", f"w-{TOKEN_SHAPED}.safetensors"),
        ("--dtype", TOKEN_SHAPED),
    ],
)
def test_a_token_shaped_value_in_any_convert_argument_is_refused_first_naming_it(tmp_path, argument, value):
    """Every argument of convert, checked before any work (before: --timm_model's went to timm, a local folder's
    was refused only after converting, blaming "its config.json labels"; --input's of --from timm was not looked at):
    one line naming the argument, never the token; nothing written."""
    weights = tmp_path / "weights.safetensors"
    save_file({"head.weight": torch.zeros(3, 4)}, weights)
    values = {"--timm_model": "vit_tiny_patch16_224", "--input": str(weights), "--dtype": "float32"}
    values[argument] = str(tmp_path / value) if argument == "--input" else value
    if argument == "--input":
        weights.rename(values["--input"])
    argv = ["--from", "timm", *[item for pair in values.items() for item in pair], "--output", str(tmp_path / "out")]
    error = outcome("convert", argv).refused(tmp_path / "out")
    assert error.startswith(f"error: The value of {argument} holds or looks like a Hub token"), error
    assert TOKEN_SHAPED not in error


@pytest.mark.timm
@pytest.mark.parametrize(
    "key, line",
    [
        ("file", "'file' is not an argument of timm's VisionTransformer"),
        ("model_cfg", "model_cfg=... is refused: it replaces the architecture that --timm_model names"),
        ("device", "'device' is not an argument of timm's VisionTransformer"),
    ],
)
def test_a_timm_kwarg_that_names_a_file_or_a_build_setting_is_refused_naming_it(tmp_path, key, line):
    """What else create_model takes beside the architecture: `file` (a pretrained_cfg field, never an argument of
    its own), `model_cfg`, a device: each refused naming the key, before timm builds anything."""
    weights = tmp_path / "weights.safetensors"
    save_file({"head.weight": torch.zeros(3, 4)}, weights)
    error = convert(weights, tmp_path, f"img_size=32,{key}={tmp_path / 'x.pth'}").refused(tmp_path / "out")
    assert error.startswith(f"error: --timm_kwargs {line}"), error
