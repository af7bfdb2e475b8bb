"""Half precision: the --dtype the scripts take, how closely two runs must agree in it, and bf16 training on CPU."""

import copy
import json
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from entry_points import outcome
from helpers import run_script, tiny_config, tiny_model_file
from safetensors.torch import load_file
from transformers import ViTConfig, ViTForImageClassification, ViTModel

from modeling_vit_scratch import ViTScratchForImageClassification
from modeling_vit_scratch.common.dtypes import logits_agree, parse_dtype, parse_dtypes
from modeling_vit_scratch.training import command, precision
from modeling_vit_scratch.training.arguments import ModelArguments, parse_arguments
from modeling_vit_scratch.training.precision import (
    PRECISION_CHOICE_FILE,
    PrecisionChoice,
    choose_bf16,
    cpu_bf16_flags,
    slow_bf16_warning,
    training_precision,
)


def test_dtypes_are_parsed_by_name_or_alias_and_anything_else_is_refused_naming_the_choices():
    assert parse_dtype("bfloat16") is parse_dtype("bf16") is parse_dtype(" BF16 ") is torch.bfloat16
    assert parse_dtype("float32") is parse_dtype("fp32") is torch.float32
    assert parse_dtypes("float32,bf16,bfloat16") == [torch.float32, torch.bfloat16]
    with pytest.raises(ValueError, match=r"^Unknown dtype 'float16': choose from float32, bfloat16 \(or fp32, bf16\)"):
        parse_dtype("float16")
    with pytest.raises(ValueError, match="No dtype in ','"):
        parse_dtypes(",")


def test_logits_agree_within_a_tolerance_scaled_to_the_logits_and_looser_in_bf16():
    reference = torch.tensor([[4.0, -2.0]])
    assert logits_agree(reference, reference + 0.2, torch.bfloat16)[0]  # 0.2 <= 4 * 2^-4
    agree, difference, tolerance = logits_agree(reference, reference + 0.3, torch.bfloat16)
    assert not agree and difference == pytest.approx(0.3) and tolerance == 0.25
    assert not logits_agree(reference, reference + 1e-3, torch.float32)[0]
    assert logits_agree(reference, reference + 1e-4, torch.float32)[0]


def test_bf16_units_are_read_from_the_cpu_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f amx_bf16 amx_tile avx512_bf16\n")
    assert cpu_bf16_flags(str(cpuinfo)) == ["avx512_bf16", "amx_bf16"]
    cpuinfo.write_text("flags\t\t: fpu sse avx2\n")
    assert cpu_bf16_flags(str(cpuinfo)) == []
    assert cpu_bf16_flags(str(tmp_path / "missing")) == []


def test_bf16_units_are_read_from_the_cpu_flags_on_arm_too(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n")
    assert cpu_bf16_flags(str(cpuinfo)) == ["bf16"]


def test_torch_says_whether_onednn_computes_bf16_on_this_cpu():
    """Unpatched: torch's private check exists in this torch and answers (a missing one counts as yes: no warning)."""
    assert isinstance(precision.onednn_computes_bf16(), bool)


@pytest.mark.parametrize("onednn_bf16", [False, True])
def test_a_user_is_warned_before_bf16_only_where_the_cpu_emulates_it(tmp_path, monkeypatch, onednn_bf16):
    """Emulated: no bf16 flags and no oneDNN bf16 (torch's slow generic loop). Not warned on GPUs, on CPUs with bf16
    units or oneDNN bf16, or where the flags are unknown (no /proc/cpuinfo)."""
    monkeypatch.setattr(precision, "onednn_computes_bf16", lambda: onednn_bf16)
    avx2, bf16_units = tmp_path / "avx2", tmp_path / "bf16"
    avx2.write_text("flags\t\t: fpu sse avx2\n")
    bf16_units.write_text("flags\t\t: fpu sse avx2 avx512f avx512_bf16\n")
    warning = slow_bf16_warning("cpu", "Leave out --bf16 true", str(avx2))
    if onednn_bf16:
        assert warning is None
    else:
        assert "no bf16 units" in warning and "avx512_bf16, amx_bf16" in warning
        assert warning.endswith("Leave out --bf16 true to compute in float32.") and "\n" not in warning
    assert slow_bf16_warning("cpu", "Leave out --bf16 true", str(bf16_units)) is None
    assert slow_bf16_warning("cpu", "Leave out --bf16 true", str(tmp_path / "missing")) is None
    assert slow_bf16_warning("cuda", "Leave out --bf16 true", str(avx2)) is None


def test_bf16_needs_no_other_flag_where_the_cpu_is_the_device(tmp_path):
    """TrainingArguments refuses `bf16` without `use_cpu` on a machine with no accelerator; the CPU is the device."""
    *_, training_args = parse_arguments(["--output_dir", str(tmp_path), "--bf16", "true"])
    assert training_args.bf16 and training_args.use_cpu == (not torch.accelerator.is_available())


def test_a_bf16_probe_times_a_copy_and_leaves_the_model_and_the_random_state_as_they_were():
    model = ViTScratchForImageClassification(tiny_config(num_channels=1, hidden_dropout_prob=0.1)).eval()
    weights = copy.deepcopy(model.state_dict())
    random_state = torch.get_rng_state()
    float32, bf16 = precision.bf16_training_step_seconds(model, (1, 20, 20), batch_size=4, device="cpu", samples=1)
    assert float32 > 0 and bf16 > 0
    assert torch.equal(torch.get_rng_state(), random_state)  # training after it draws what it would have drawn
    assert not model.training and all(parameter.grad is None for parameter in model.parameters())
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, weights[name]), name


def test_bf16_is_chosen_from_1_25x_faster_than_float32_and_the_timings_are_said():
    assert PrecisionChoice.measured(0.125, 0.1, "cpu").bf16
    assert not PrecisionChoice.measured(0.12, 0.1, "cpu").bf16  # a smaller gain is not worth bf16's rounding: float32
    assert not PrecisionChoice.measured(0.1, 0.5, "cuda").bf16
    choice = PrecisionChoice.measured(0.2, 0.05, "cpu")
    assert choice.bf16 and choice.why() == (
        "a training step took 0.05 s under bf16 autocast and 0.2 s in float32 on this CPU: bf16 is 4.00x as fast, "
        "at least the 1.25x it needs"
    )
    assert str(choice) == f"chosen by --bf16_when_faster: {choice.why()}"
    assert str(PrecisionChoice.emulated("cuda")) == (
        "chosen by --bf16_when_faster: bf16 is emulated on this cuda device, which has no bf16 units"
    )


def test_the_help_of_bf16_when_faster_names_the_bar_the_choice_uses():
    help_text = next(field.metadata["help"] for field in fields(ModelArguments) if field.name == "bf16_when_faster")
    assert f"at least {precision.BF16_MIN_SPEEDUP:g}x faster" in help_text


def test_a_checkpoint_keeps_the_grounds_of_the_choice_not_its_words(tmp_path):
    measured, emulated = PrecisionChoice.measured(0.2, 0.1, "cpu"), PrecisionChoice.emulated("cpu")
    for name, choice in (("checkpoint-6", measured), ("checkpoint-8", emulated)):
        (tmp_path / name).mkdir()
        choice.keep_in(tmp_path / name)
    kept = json.loads((tmp_path / "checkpoint-6" / PRECISION_CHOICE_FILE).read_text())
    assert kept == dict(
        bf16=True, reason="measured", device="cpu", float32_seconds=0.2, bf16_seconds=0.1, min_speedup=1.25
    )
    assert json.loads((tmp_path / "checkpoint-8" / PRECISION_CHOICE_FILE).read_text()) == {
        "bf16": False,
        "reason": "emulated",
        "device": "cpu",
    }
    resumed = PrecisionChoice.kept_in(str(tmp_path / "checkpoint-6"))
    assert str(resumed) == f"{measured}; kept on resuming from checkpoint-6"
    resumed.keep_in(tmp_path / "checkpoint-8")  # the resumed run's next checkpoint: the grounds, once
    assert json.loads((tmp_path / "checkpoint-8" / PRECISION_CHOICE_FILE).read_text()) == kept
    assert (
        str(PrecisionChoice.kept_in(str(tmp_path / "checkpoint-8")))
        == f"{measured}; kept on resuming from checkpoint-8"
    )
    assert PrecisionChoice.kept_in(str(tmp_path / "elsewhere")) is None
    assert not list(tmp_path.rglob("*.partial"))


def test_a_choice_kept_in_the_older_form_resumes_in_its_precision_and_keeps_its_words(tmp_path):
    """A run interrupted under an older vit-scratch, which kept the grounds in words only, resumes as it chose."""
    checkpoint = tmp_path / "checkpoint-7"
    checkpoint.mkdir()
    (checkpoint / PRECISION_CHOICE_FILE).write_text(json.dumps({"bf16": True, "why": "measured earlier"}))
    choice = PrecisionChoice.kept_in(str(checkpoint))
    assert choice.bf16
    assert str(choice) == "chosen by --bf16_when_faster: measured earlier; kept on resuming from checkpoint-7"
    choice.keep_in(tmp_path)  # the next checkpoint keeps the same words, without where they were read
    assert PrecisionChoice.kept_in(str(tmp_path)).why() == "measured earlier"


def test_a_bf16_choice_kept_in_a_checkpoint_is_taken_without_timing(tmp_path, monkeypatch):
    checkpoint = tmp_path / "checkpoint-12"
    checkpoint.mkdir()
    PrecisionChoice.measured(0.2, 0.1, "cpu").keep_in(checkpoint)
    monkeypatch.setattr(precision, "bf16_training_step_seconds", None)  # not called: it would raise
    *_, training_args = parse_arguments(["--output_dir", str(tmp_path), "--bf16_when_faster", "true"])
    choice = choose_bf16(ViTScratchForImageClassification(tiny_config()), (3, 20, 20), training_args, str(checkpoint))
    assert str(choice) == (
        "chosen by --bf16_when_faster: a training step took 0.1 s under bf16 autocast and 0.2 s in float32 on this "
        "CPU: bf16 is 2.00x as fast, at least the 1.25x it needs; kept on resuming from checkpoint-12"
    )
    assert training_args.bf16 and training_args.mixed_precision == "bf16"


def test_a_precision_set_through_accelerate_is_the_one_named():
    """`accelerate launch --mixed_precision bf16` (ACCELERATE_MIXED_PRECISION) trains under bf16 autocast without
    --bf16: the record, card and output name that precision, not float32."""
    assert training_precision(SimpleNamespace(bf16=False, fp16=False, mixed_precision="bf16")) == "bf16 mixed precision"
    assert training_precision(SimpleNamespace(bf16=False, fp16=False, mixed_precision="fp16")) == "fp16 mixed precision"
    assert training_precision(SimpleNamespace(bf16=False, fp16=False, mixed_precision="no")) == "float32"


def test_bf16_when_faster_measures_unless_the_command_chose_a_precision(tmp_path):
    model = ViTScratchForImageClassification(tiny_config(num_channels=1))
    for chosen in (["--bf16", "true"], ["--fp16", "true"]):
        *_, training_args = parse_arguments(["--output_dir", str(tmp_path), "--bf16_when_faster", "true", *chosen])
        before = (training_args.bf16, training_args.fp16, training_args.mixed_precision)
        assert choose_bf16(model, (1, 20, 20), training_args) is None
        assert (training_args.bf16, training_args.fp16, training_args.mixed_precision) == before
    *_, training_args = parse_arguments(["--output_dir", str(tmp_path), "--bf16_when_faster", "true"])
    why = str(choose_bf16(model, (1, 20, 20), training_args))
    assert why.startswith("chosen by --bf16_when_faster: ")
    # where bf16 is emulated it is not even timed; elsewhere the timings decide, and the Trainer is told
    if precision.bf16_emulated(training_args.device):
        assert why.endswith("bf16 is emulated on this CPU, which has no bf16 units") and not training_args.bf16
    else:
        assert "a training step took" in why
    assert training_args.mixed_precision == ("bf16" if training_args.bf16 else "no")


@pytest.mark.parametrize(
    "flags, choice, said",
    [
        ([], None, "Trained in float32."),  # no choice made: nothing said about bf16
        (["--bf16", "true"], None, "Trained in bf16 mixed precision."),
        (
            ["--bf16_when_faster", "true"],
            "chosen by --bf16_when_faster: why",
            "Trained in float32 (chosen by --bf16_when_faster: why).",
        ),
    ],
)
def test_the_train_command_says_why_it_trained_in_its_precision_only_where_a_choice_was_made(
    tmp_path, monkeypatch, capsys, flags, choice, said
):
    metrics = dict(test_accuracy=0.5, wall_time_seconds=3.0, **({"precision_choice": choice} if choice else {}))
    monkeypatch.setattr(command, "train", lambda *args: metrics)
    command.main(["--output_dir", str(tmp_path / "out"), *flags])
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("Trained in "))
    assert line == said
    assert flags or "bf16" not in line


@pytest.mark.integration  # it trains
def test_the_train_command_says_which_precision_bf16_when_faster_chose_and_why_in_its_output_record_and_card(
    tmp_path, capsys
):
    output_dir = tmp_path / "out"
    done = outcome(
        "train",
        [
            *("--model", tiny_model_file(tmp_path, num_channels=1), "--max_train_samples", "32", "--report_to", "none"),
            *("--num_train_epochs", "1", "--per_device_train_batch_size", "8", "--disable_tqdm", "true"),
            *("--output_dir", str(output_dir), "--bf16_when_faster", "true"),
        ],
    )
    assert done.code == 0, done
    result = capsys.readouterr()
    record = json.loads((output_dir / "training_record.json").read_text())
    precision_name, why = record["precision"], record["precision_choice"]
    assert why.startswith("chosen by --bf16_when_faster: ")
    assert precision_name == "float32" if "emulated" in why else precision_name in ("float32", "bf16 mixed precision")
    said = f"{precision_name} ({why})"
    lines = result.out.splitlines()
    assert f"Training in {said}." in lines and f"Trained in {said}." in lines
    assert lines.index(f"Training in {said}.") < lines.index(f"Trained in {said}.")
    assert f"1 process, {said}." in (output_dir / "README.md").read_text()


def test_bf16_is_emulated_only_on_a_cpu_without_bf16_units_or_onednn_bf16(tmp_path, monkeypatch):
    avx2, bf16_units = tmp_path / "avx2", tmp_path / "bf16"
    avx2.write_text("flags\t\t: fpu sse avx2\n")
    bf16_units.write_text("flags\t\t: fpu avx512f avx512_bf16\n")
    monkeypatch.setattr(precision, "onednn_computes_bf16", lambda: False)
    assert precision.bf16_emulated("cpu", str(avx2))
    assert not precision.bf16_emulated("cpu", str(bf16_units))
    assert not precision.bf16_emulated("cuda", str(avx2))
    assert not precision.bf16_emulated("cpu", str(tmp_path / "missing"))  # not Linux: unknown, not emulated
    monkeypatch.setattr(precision, "onednn_computes_bf16", lambda: True)
    assert not precision.bf16_emulated("cpu", str(avx2))


def train_tiny(tmp_path, name: str, *flags: str) -> tuple[list[float], Path, str]:
    """scripts/train.py on 96 digits for 4 epochs: the logged training losses, the model folder, what it printed."""
    output_dir = tmp_path / name
    result = run_script(
        *("--model", tiny_model_file(tmp_path, num_channels=1), "--max_train_samples", "96", "--report_to", "none"),
        *("--num_train_epochs", "4", "--per_device_train_batch_size", "8", "--learning_rate", "3e-3"),
        *("--eval_strategy", "epoch", "--save_strategy", "epoch", "--logging_strategy", "epoch", "--seed", "0"),
        *("--output_dir", str(output_dir), *flags),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    last = max(output_dir.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    history = json.loads((last / "trainer_state.json").read_text())["log_history"]
    return [entry["loss"] for entry in history if "loss" in entry], output_dir, result.stdout + result.stderr


@pytest.mark.slow  # two runs of the script (times: docs/testing.md)
def test_train_script_with_bf16_trains_under_autocast_and_saves_float32_weights(tmp_path):
    bf16_losses, folder, bf16_output = train_tiny(tmp_path, "bf16", "--bf16", "true")
    float32_losses, _, float32_output = train_tiny(tmp_path, "float32")
    # one warning line first where this CPU emulates bf16, and none otherwise
    warning = slow_bf16_warning("cuda" if torch.cuda.is_available() else "cpu", "Leave out --bf16 true")
    assert (warning in bf16_output) if warning else ("no bf16 units" not in bf16_output)
    assert "no bf16 units" not in float32_output
    assert len(bf16_losses) == 4 and bf16_losses[-1] < bf16_losses[0]
    # the same seed and data: bf16 matrix products change the losses a little, not the course of training
    assert bf16_losses != float32_losses
    assert bf16_losses == pytest.approx(float32_losses, rel=0.05)
    assert {tensor.dtype for tensor in load_file(folder / "model.safetensors").values()} == {torch.float32}
    assert json.loads((folder / "training_record.json").read_text())["precision"] == "bf16 mixed precision"
    assert "bf16 mixed precision" in (folder / "README.md").read_text()


def convert_script():
    from modeling_vit_scratch.conversion import command

    return command


def random_vit(model_class=ViTForImageClassification) -> torch.nn.Module:
    config = ViTConfig(
        image_size=20, patch_size=4, hidden_size=36, num_hidden_layers=2, num_attention_heads=3, intermediate_size=37
    )
    model = model_class(config).eval()
    with torch.no_grad():  # non-trivial weights everywhere, LayerNorms and biases too
        for parameter in model.parameters():
            parameter.normal_(0, 0.1)
    return model


@pytest.mark.parametrize("model_class", [ViTForImageClassification, ViTModel])
def test_convert_script_checks_parity_in_the_dtype_asked_for_and_says_which_tolerance(tmp_path, capsys, model_class):
    script = convert_script()
    random_vit(model_class).save_pretrained(tmp_path / "reference")
    script.main(["--from", "transformers", "--input", str(tmp_path / "reference"), "--output", str(tmp_path / "ours")])
    float32 = capsys.readouterr().out.splitlines()[-1]
    assert float32.startswith("Parity with the source model: max |difference|") and "for float32." in float32
    for direction in (["--to", "transformers", "--input", str(tmp_path / "ours")], ["--from", "transformers"]):
        if direction[0] == "--from":
            direction += ["--input", str(tmp_path / "reference")]
        output = str(tmp_path / f"bf16{direction[0]}")
        script.main([*direction, "--output", output, "--dtype", "bfloat16"])
        line = capsys.readouterr().out.splitlines()[-1]
        assert "for bfloat16 (bf16 keeps 8 bits of mantissa: 2^-4 of the largest output" in line


def test_the_check_fails_a_model_that_computes_something_else_with_the_tolerance_of_its_dtype():
    script = convert_script()
    reference = random_vit()
    with pytest.raises(ValueError, match=r"does not compute what its source computes \(max \|difference\|"):
        script.check_parity(reference, random_vit(), reference.config, torch.bfloat16)  # other random weights
    slightly_off = copy.deepcopy(reference)
    with torch.no_grad():
        slightly_off.classifier.bias += 1e-2  # within bf16's rounding, far outside float32's
    assert "for bfloat16" in script.check_parity(
        copy.deepcopy(reference), slightly_off, reference.config, torch.bfloat16
    )
    with pytest.raises(ValueError, match="for float32"):
        script.check_parity(reference.float(), slightly_off.float(), reference.config, torch.float32)


def test_convert_script_refuses_an_unknown_dtype_in_one_line_before_any_work(tmp_path):
    script = convert_script()
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--from", "transformers", "--input", "x", "--output", str(tmp_path / "out"), "--dtype", "half"])
    assert str(exit_info.value.code) == "error: Unknown dtype 'half': choose from float32, bfloat16 (or fp32, bf16)."
    assert not (tmp_path / "out").exists()


@pytest.mark.timm
def test_convert_script_from_timm_checks_parity_in_bf16(tmp_path, capsys):
    import timm
    from safetensors.torch import save_file

    kwargs = dict(img_size=32, depth=2, num_classes=5)
    reference = timm.create_model("vit_tiny_patch16_224", pretrained=False, **kwargs)
    save_file(reference.state_dict(), tmp_path / "weights.safetensors")
    flags = ["--from", "timm", "--timm_model", "vit_tiny_patch16_224", "--timm_kwargs", "img_size=32,depth=2"]
    flags += ["--input", str(tmp_path / "weights.safetensors"), "--output", str(tmp_path / "ours")]
    convert_script().main([*flags, "--dtype", "bf16"])
    assert "for bfloat16 (bf16 keeps" in capsys.readouterr().out.splitlines()[-1]
