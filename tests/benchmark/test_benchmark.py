"""The benchmark (modeling_vit_scratch.benchmark, which scripts/benchmark.py runs) measures like for like and pairs
its ratios chunk by chunk. No timing is asserted here: speed lives in the benchmark's own runs, these tests check
that what it compares and reports is right."""

import importlib.util
import json
import statistics

import pytest
import torch
from entry_points import outcome
from helpers import REPO, tiny_model_file

from modeling_vit_scratch.benchmark import command, end_to_end, measure, models, report, timing
from modeling_vit_scratch.training.precision import slow_bf16_warning


def parameter_count(implementation: str, config_name: str) -> int:
    with torch.device("meta"):  # shapes only: base224 costs nothing to build
        model = models.build(implementation, models.CONFIGS[config_name])
    return sum(parameter.numel() for parameter in model.parameters())


PLAIN_CONFIGS = [name for name, config in models.CONFIGS.items() if "stem" not in config]


@pytest.mark.parametrize("config_name", PLAIN_CONFIGS)
def test_ours_and_transformers_are_built_with_the_same_hyper_parameters(config_name):
    ours = parameter_count("vit_scratch", config_name)
    assert (
        ours == parameter_count("transformers-sdpa", config_name) == parameter_count("transformers-eager", config_name)
    )


@pytest.mark.timm
@pytest.mark.parametrize("config_name", list(models.CONFIGS))
def test_timm_is_built_with_the_same_hyper_parameters(config_name):
    assert parameter_count("timm", config_name) == parameter_count("vit_scratch", config_name)


def test_a_hybrid_is_measured_against_timm_alone_and_transformers_is_not_asked_to_build_it():
    config = models.CONFIGS["r26s32_224"]
    assert [name for name in models.IMPLEMENTATIONS if models.builds(name, config)] == ["vit_scratch", "timm"]
    with pytest.raises(
        ValueError, match="transformers-sdpa has no hybrid ViT: measure vit_small_r26_s32_224 with timm"
    ):
        models.build("transformers-sdpa", config)
    plain = {key: value for key, value in config.items() if key != "stem"}  # 224x224 tokens of 1x1 pixels
    assert models.stem_stride(config) == 32 and models.forward_flops(config) < models.forward_flops(plain) / 1e3
    assert parameter_count("vit_scratch", "r26s32_224") == 36_431_912 - 1000 * 385 + 10 * 385  # 10 labels


# The benchmark writes its digits configs out (an installed package has no configs/): these keep them the models'.
ARCHITECTURE_FILES = {"digits": "model_digits_convstem.json", "digits-plain": "model_digits.json"}


@pytest.mark.parametrize(("config_name", "file_name"), ARCHITECTURE_FILES.items())
def test_the_digits_configs_are_the_architectures_in_configs_models(config_name, file_name):
    fields = json.loads((REPO / "configs" / "models" / file_name).read_text())
    assert models.architecture(models.CONFIGS[config_name]) == fields


def test_digits_is_the_model_make_train_trains_and_is_measured_against_timm_alone():
    recipe = json.loads((REPO / "configs" / "train_digits.json").read_text())
    assert (REPO / "configs" / recipe["model"]).resolve() == REPO / "configs" / "models" / ARCHITECTURE_FILES["digits"]
    config = models.CONFIGS["digits"]
    assert config["train_batch"] == recipe["total_train_batch_size"]
    assert [name for name in models.IMPLEMENTATIONS if models.builds(name, config)] == ["vit_scratch", "timm"]
    with pytest.raises(ValueError, match="transformers-eager has no hybrid ViT: measure its conv stem with timm"):
        models.build("transformers-eager", config)


def test_worker_processes_start_through_the_package_not_a_script_path():
    """So that the benchmark runs from an installed package, which has no scripts/."""
    command = measure.package_command("--matmul", "float32", "8")
    assert command[1] == "-c" and command[3:] == ["--matmul", "float32", "8"]
    assert "runpy.run_module('modeling_vit_scratch.benchmark.command'" in command[2] and "scripts" not in command[2]


@pytest.mark.parametrize("implementation", ["vit_scratch", "transformers-sdpa"])
def test_models_are_built_with_their_default_attention_kernel(implementation):
    model = models.build(implementation, models.CONFIGS["digits-plain"])
    assert model.config._attn_implementation == "sdpa"


MODES_AND_PRECISIONS = [
    (mode, precision)
    for mode in models.MODES
    for precision in models.precisions_for(mode, [torch.float32, torch.bfloat16])
]


def test_every_mode_is_measured_in_float32_and_bf16_autocast_and_inference_also_with_bf16_weights():
    assert MODES_AND_PRECISIONS == [
        ("inference", "float32"),
        ("inference", "bf16-autocast"),
        ("inference", "bf16-weights"),
        ("train", "float32"),
        ("train", "bf16-autocast"),
    ]
    assert models.precisions_for("inference", [torch.bfloat16]) == ["bf16-autocast", "bf16-weights"]
    assert models.precisions_for("train", [torch.float32]) == ["float32"]


@pytest.mark.parametrize(("mode", "precision"), MODES_AND_PRECISIONS)
def test_a_measurement_runs_the_step_and_reports_throughput_and_memory(mode, precision):
    measurement = timing.Measurement("vit_scratch", "digits", mode, batch=4, precision=precision)
    # bf16 weights are loaded in bf16; autocast keeps float32 weights and computes in bf16
    wanted = torch.bfloat16 if precision == "bf16-weights" else torch.float32
    assert {parameter.dtype for parameter in measurement.model.parameters()} == {wanted}
    measurement.warm_up(warmup=1, min_steps=2, chunk_seconds=0.0)
    assert measurement.steps_per_chunk == 2
    seconds = measurement.chunk()
    result = measurement.report(seconds)
    assert result["images_per_second"] > 0 and result["milliseconds_per_batch"] > 0
    passes = 1 if mode == "inference" else 3  # a training step: forward and a backward of twice its FLOPs
    config = models.CONFIGS["digits"]
    assert result["achieved_tflops"] == pytest.approx(passes * models.forward_flops(config) * 4 / seconds / 1e12)
    # on CPU the growth of the process peak since the baseline: under the whole peak, which an unset baseline reports
    whole_process_mb = timing.peak_memory_bytes(measurement.device) / 2**20
    assert 0 <= result["peak_memory_mb"] < whole_process_mb, (result["peak_memory_mb"], whole_process_mb)


@pytest.mark.slow  # compiles (docs/testing.md has the slow tier's times)
def test_compiled_bf16_inference_gives_the_eager_logits_and_is_measured_after_compiling():
    eager = timing.Measurement("vit_scratch", "digits", "inference", batch=4, precision="bf16-weights")
    compiled = timing.Measurement("vit_scratch", "digits", "inference", 4, "bf16-weights", compile_model=True)
    compiled.warm_up(warmup=1, min_steps=1, chunk_seconds=0.0)
    assert compiled.chunk() < 5  # the compilation happened while setting up, not in a timed step
    images = torch.randn(4, 1, 16, 16, dtype=torch.bfloat16)
    with torch.inference_mode():
        expected = eager.model(images).logits.float()
        got = torch.compile(compiled.model)(images).logits.float()
    torch.testing.assert_close(got, expected, atol=0.1, rtol=0.05)
    torch._inductor.config.freezing = False


@pytest.mark.integration
def test_a_round_runs_each_implementation_in_its_own_process_and_pairs_them():
    args = command.main_parser().parse_args(["--warmup", "1", "--steps", "1", "--chunks", "2", "--chunk_seconds", "0"])
    variants = [("transformers-sdpa", "float32"), ("vit_scratch", "bf16-weights")]
    results = measure.measure_round(variants, "digits-plain", "inference", 8, args)
    assert set(results) == set(variants)
    for result in results.values():
        assert result["steps_per_chunk"] == 1 and len(result["chunk_seconds"]) == 2
        assert result["images_per_second"] == pytest.approx(8 / min(result["chunk_seconds"]))


@pytest.mark.slow  # compiles in the worker
def test_a_compiled_variant_is_the_same_model_compiled_in_its_own_process_beside_the_others():
    args = command.main_parser().parse_args(
        ["--warmup", "1", "--steps", "1", "--chunks", "2", "--chunk_seconds", "0"]
        + ["--implementations", "transformers-sdpa", "vit_scratch", "vit_scratch-compiled"]
    )
    variants = [("vit_scratch", "float32"), ("vit_scratch-compiled", "float32")]
    results = measure.measure_round(variants, "digits", "inference", 8, args)
    # "compiled" is whether the worker's step runs a torch.compile wrapper around the model
    assert not results[("vit_scratch", "float32")]["compiled"]
    assert results[("vit_scratch-compiled", "float32")]["compiled"]
    assert all(len(result["chunk_seconds"]) == 2 for result in results.values())


@pytest.mark.integration
def test_a_failing_worker_names_itself_and_shows_its_error():
    args = command.main_parser().parse_args(["--warmup", "1", "--steps", "1", "--chunks", "1"])
    with pytest.raises(
        RuntimeError, match=r"(?s)no-such-model digits inference float32 batch 8 failed.*Unknown implementation"
    ):
        measure.measure_round([("no-such-model", "float32")], "digits", "inference", 8, args)


@pytest.mark.slow  # three training runs and three model-alone runs, each a new process
def test_end_to_end_runs_the_training_script_and_the_same_steps_of_its_model_alone(tmp_path, monkeypatch):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(
        json.dumps(
            dict(
                model=tiny_model_file(tmp_path, num_channels=1),
                dataset="digits",
                max_train_samples=48,
                total_train_batch_size=16,
                num_train_epochs=2,
                eval_strategy="epoch",
                save_strategy="epoch",
            )
        )
    )
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "e2e.json"
    argv = ["--end_to_end", str(recipe), "--end_to_end_steps", "4", "--rounds", "2", "--json", str(out)]
    command.main([*argv, "--max_end_to_end_ratio", "1000", "--train_args", "--learning_rate", "0.01"])
    result = json.loads(out.read_text())
    (row,) = result["rows"]
    assert row["steps"] == 4 and row["batch"] == 16 and row["train_args"] == "--learning_rate 0.01"
    assert row["precision"] == "float32"  # as the run's training_record.json says
    assert len(row["samples"]) == 2
    for sample in row["samples"]:
        assert sample["end_to_end_seconds"] > 0 and sample["model_only_seconds"] > 0
    ratios = [s["end_to_end_seconds"] / s["model_only_seconds"] for s in row["samples"]]
    assert row["ratio"] == pytest.approx(statistics.median(ratios))
    assert result["bars"] == [
        f"{recipe} --learning_rate 0.01: end to end {row['ratio']:.3f}x the model alone (bar <= 1000.00x): met"
    ]
    # the whole recipe, in bf16 (the model alone then runs under bf16 autocast too)
    command.main(["--end_to_end", str(recipe), "--rounds", "1", "--json", str(out), "--train_args", "--bf16", "true"])
    (row,) = json.loads(out.read_text())["rows"]
    assert row["steps"] == 3 * 2 and json.loads(out.read_text())["bars"] == []  # 48 images in batches of 16, 2 epochs
    assert row["precision"] == "bf16"


def test_the_model_alone_takes_the_saved_folders_model_and_input_shape(tmp_path):
    """An 8x8 one-channel model with 3 labels: random inputs of another shape or labels beyond 3 would fail."""
    from modeling_vit_scratch import ViTScratchConfig, ViTScratchForImageClassification, ViTScratchImageProcessor

    fields = dict(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    config = ViTScratchConfig(image_size=8, patch_size=4, num_channels=1, num_labels=3, **fields)
    ViTScratchForImageClassification(config).save_pretrained(tmp_path)
    processor = ViTScratchImageProcessor(
        size={"height": 8, "width": 8}, num_channels=1, image_mean=[0.5], image_std=[0.5]
    )
    processor.save_pretrained(tmp_path)
    assert end_to_end.model_only_seconds(str(tmp_path), steps=2, batch=4, bf16=False) > 0
    assert end_to_end.model_only_seconds(str(tmp_path), steps=1, batch=4, bf16=True) > 0


def samples(*chunk_seconds, memory=100.0):
    """One result per round from its chunks' seconds per step (batch 1), as `measure_round` returns them."""
    return [
        dict(
            images_per_second=1 / min(chunks),
            milliseconds_per_batch=1000 * min(chunks),
            peak_memory_mb=memory,
            chunk_seconds=list(chunks),
        )
        for chunks in chunk_seconds
    ]


def test_ratios_pair_each_chunk_with_the_reference_chunk_timed_next_to_it():
    """A slow spell of the machine hits the chunks timed together; ratios of medians or of fastest chunks would not
    see that. Round 1: the chunk-paired ratios are 0.8, 1.25, 1.25 (median 1.25), though the fastest chunks tie;
    round 2: 0.8, 0.8, 1.0."""
    runs = {
        "vit_scratch": samples([1.0, 0.8, 2.0], [1.25, 2.5, 1.0], memory=50.0),
        "transformers-sdpa": samples([0.8, 1.0, 2.5], [1.0, 2.0, 1.0]),
        "transformers-eager": samples([0.5, 1.0, 3.0], [2.0, 2.0, 2.0]),
        "timm": samples([2.0, 0.5, 2.0], [1.0, 3.0, 0.5]),
    }
    summary = report.summarise(runs["vit_scratch"], runs)
    assert summary["ratio"] == pytest.approx((1.25 + 0.8) / 2)  # median of two rounds
    # fastest peer per chunk: round 1 (0.5, 0.5, 2.0) -> 0.5, 0.625, 1.0; round 2 (1.0, 2.0, 0.5) -> 0.8, 0.8, 0.5
    assert summary["ratio_to_fastest_peer"] == pytest.approx((0.625 + 0.8) / 2)
    assert summary["memory_ratio"] == pytest.approx(0.5)
    assert (summary["median"], summary["min"], summary["max"]) == (1.125, 1.0, 1.25)


TODAYS_BARS = dict(min_speedup_vs_sdpa=1.0, min_speedup_vs_fastest=0.95, max_memory_ratio=1.05)


def our_row(**ratios):
    return dict(config="digits", mode="train", precision="float32", batch=256, implementation="vit_scratch", **ratios)


def test_bars_report_each_failed_condition():
    row = our_row(ratio=1.02, ratio_to_fastest_peer=0.93, memory_ratio=1.0)
    assert report.bars([row], **TODAYS_BARS) == [
        (
            "digits train float32 batch 256: 1.020x transformers SDPA (bar 1.00x), "
            "0.930x fastest of eager/timm (bar 0.95x), memory 1.000x (bar <= 1.05x): NOT met"
        )
    ]
    assert report.bars([{**row, "ratio_to_fastest_peer": 0.95}], **TODAYS_BARS)[0].endswith(": met")


def test_a_baseline_peak_of_zero_gives_no_memory_ratio_and_a_memory_bar_it_cannot_meet():
    """A tiny config's peak may not rise above the warm-up model's (0 MB): that round has no memory ratio."""
    ours, baseline = samples([0.01], [0.01], memory=20.0), samples([0.02], [0.02], memory=0.0)
    assert "memory_ratio" not in report.summarise(ours, {"transformers-sdpa": baseline})
    baseline[1]["peak_memory_mb"] = 40.0  # one round measured: its ratio alone
    assert report.summarise(ours, {"transformers-sdpa": baseline})["memory_ratio"] == 0.5
    assert report.bars([our_row(ratio=2.0)], max_memory_ratio=1.05) == [
        "digits train float32 batch 256: memory not measured: transformers' peak was 0 MB (bar <= 1.05x): NOT met"
    ]


def test_bars_are_judged_only_as_given_on_the_command_line():
    """The same row meets loose bars and fails strict ones; a bar not given is neither shown nor judged."""
    row = our_row(ratio=1.02, ratio_to_fastest_peer=0.93, memory_ratio=1.1)
    others = {**our_row(ratio=0.5, memory_ratio=3.0), "implementation": "timm"}
    assert report.bars([row, others]) == []  # no bar given: no verdict
    args = command.main_parser().parse_args(["--min_speedup_vs_sdpa", "1.03", "--max_memory_ratio", "1.2"])
    bars = dict(
        min_speedup_vs_sdpa=args.min_speedup_vs_sdpa,
        min_speedup_vs_fastest=args.min_speedup_vs_fastest,
        max_memory_ratio=args.max_memory_ratio,
    )
    assert report.bars([row, others], **bars) == [
        "digits train float32 batch 256: 1.020x transformers SDPA (bar 1.03x), memory 1.100x (bar <= 1.20x): NOT met"
    ]
    assert report.bars([row], min_speedup_vs_fastest=0.925) == [
        "digits train float32 batch 256: 0.930x fastest of eager/timm (bar 0.925x): met"
    ]
    assert report.bars([row], max_memory_ratio=1.05)[0].endswith("memory 1.100x (bar <= 1.05x): NOT met")
    without_peers = our_row(ratio=1.02, memory_ratio=1.0)  # eager and timm not measured: that bar has nothing to judge
    assert report.bars([without_peers], **TODAYS_BARS) == [
        "digits train float32 batch 256: 1.020x transformers SDPA (bar 1.00x), memory 1.000x (bar <= 1.05x): met"
    ]


def test_bf16_bars_judge_bf16_rows_only_and_only_what_was_measured():
    """The bf16 bars: a bf16 row's share of the bf16 matmul rate and its speed-up over float32."""
    args = command.main_parser().parse_args(["--min_bf16_matmul_fraction", "0.85", "--min_bf16_speedup", "2.5"])
    bf16_bars = dict(min_bf16_matmul_fraction=args.min_bf16_matmul_fraction, min_bf16_speedup=args.min_bf16_speedup)
    bf16 = {**our_row(ratio=1.2, matmul_fraction=0.87, ratio_to_float32=1.9), "precision": "bf16-autocast"}
    float32 = our_row(ratio=1.1, matmul_fraction=0.5)
    assert report.bars([bf16, float32], **bf16_bars) == [
        (
            "digits train bf16-autocast batch 256: 87.0% of the bf16 matmul rate (bar 85%), "
            "1.900x float32 (bar 2.50x): NOT met"
        )
    ]
    weights = {**bf16, "precision": "bf16-weights", "ratio_to_float32": 2.6}
    assert report.bars([weights], **bf16_bars)[0].endswith("2.600x float32 (bar 2.50x): met")
    # emulated bf16 (no matmul fraction) and a run without float32 (no speed-up): nothing to judge
    unmeasured = {**our_row(ratio=1.2), "precision": "bf16-autocast"}
    assert report.bars([unmeasured], **bf16_bars) == []


@pytest.mark.parametrize("spelling", ["underscore", "dash"])
def test_flags_take_the_underscore_spelling_and_keep_the_dashed_one(spelling):
    flags = ["--chunk_seconds", "0.5", "--glibc_malloc_defaults", "--peak_tflops", "100"]
    if spelling == "dash":
        flags = [flag.replace("_", "-") for flag in flags]
    args = command.main_parser().parse_args(flags)
    assert (args.chunk_seconds, args.glibc_malloc_defaults, args.peak_tflops) == (0.5, True, 100.0)


def test_help_shows_the_underscore_spelling_first():
    usage = command.main_parser().format_help()
    for flag in ("chunk_seconds", "glibc_malloc_defaults", "peak_tflops"):
        assert f"--{flag.replace('_', '-')}" in usage
        assert usage.index(f"--{flag}") < usage.index(f"--{flag.replace('_', '-')}")


def test_modes_are_those_asked_for_that_the_config_has():
    args = command.main_parser().parse_args([])
    assert models.modes_for(models.CONFIGS["digits"], args) == ["inference", "train"]
    args = command.main_parser().parse_args(["--modes", "inference"])
    assert models.modes_for(models.CONFIGS["base224"], args) == ["inference"]
    no_training = {**models.CONFIGS["digits"], "train_batch": None}
    assert models.modes_for(no_training, command.main_parser().parse_args([])) == ["inference"]


def test_an_unknown_dtype_is_one_line_naming_the_choices(capsys):
    with pytest.raises(SystemExit) as exit_info:
        command.main(["--dtype", "float32,float16"])
    message = str(exit_info.value.code)
    assert message == "error: --dtype: Unknown dtype 'float16': choose from float32, bfloat16 (or fp32, bf16)."
    assert capsys.readouterr().out == ""  # refused before any measurement


@pytest.mark.integration
def test_the_matmul_rate_is_measured_per_dtype_in_a_worker_process():
    args = command.main_parser().parse_args([])
    rates = measure.measure_matmul_rates({"float32": 64, "bfloat16": 32}, args)
    assert list(rates) == ["float32", "bfloat16"] and all(rate > 0 for rate in rates.values())


def test_emulated_bf16_is_measured_on_a_smaller_matrix_and_every_other_dtype_at_the_size_asked():
    both = [torch.float32, torch.bfloat16]
    assert measure.matmul_sizes(both, 4096, bf16_emulated=True) == {"float32": 4096, "bfloat16": 1024}
    assert measure.matmul_sizes(both, 4096, bf16_emulated=False) == {"float32": 4096, "bfloat16": 4096}
    assert measure.matmul_sizes(both, 256, bf16_emulated=True) == {"float32": 256, "bfloat16": 256}


@pytest.mark.slow
def test_a_tiny_run_measures_each_precision_against_its_own_matmul_rate_and_float32(tmp_path):
    """The whole command on the digits-plain config, training, in both dtypes: a row per implementation and
    precision, each with its model FLOP/s as a fraction of its dtype's matmul rate, and bf16 rows with their speed-up
    over float32."""
    output = tmp_path / "results.json"
    flags = ["--configs", "digits-plain", "--modes", "train", "--implementations", "vit_scratch", "transformers-sdpa"]
    flags += ["--rounds", "1", "--chunks", "2", "--chunk_seconds", "0", "--warmup", "1", "--steps", "1"]
    command.main([*flags, "--matmul_size", "1024", "--json", str(output)])
    result = json.loads(output.read_text())
    rows = {(row["implementation"], row["precision"]): row for row in result["rows"]}
    assert set(rows) == {
        (name, p) for name in ("vit_scratch", "transformers-sdpa") for p in ("float32", "bf16-autocast")
    }
    emulated = slow_bf16_warning("cuda" if torch.cuda.is_available() else "cpu", "") is not None
    for (name, precision), row in rows.items():
        rate = result["matmul_flops"]["float32" if precision == "float32" else "bfloat16"]
        if precision != "float32" and emulated:  # bf16 emulated: its large product is no ceiling for small ones
            assert "matmul_fraction" not in row
        else:
            assert row["matmul_fraction"] == pytest.approx(row["achieved_tflops"] * 1e12 / rate)
        assert ("ratio_to_float32" in row) == (precision != "float32")
    # the baseline is transformers in the same precision: its bf16 row is 1.00x itself, not its float32 row
    assert rows[("transformers-sdpa", "bf16-autocast")]["ratio"] == 1.0
    chunks = lambda precision: rows[("vit_scratch", precision)]["samples"][0]["chunk_seconds"]
    paired = [f / b for f, b in zip(chunks("float32"), chunks("bf16-autocast"))]
    assert rows[("vit_scratch", "bf16-autocast")]["ratio_to_float32"] == pytest.approx(statistics.median(paired))


def test_table_has_a_row_per_implementation_and_our_peer_ratio():
    runs = {name: samples([0.01, 0.02], [0.01]) for name in models.IMPLEMENTATIONS}
    rows = [
        dict(config="digits", mode="train", batch=256, implementation=name, **report.summarise(runs[name], runs))
        for name in models.IMPLEMENTATIONS
    ]
    table = report.markdown(rows).splitlines()
    assert len(table) == 2 + len(models.IMPLEMENTATIONS)
    assert table[2].count("1.00x") == 3 and table[3].count("1.00x") == 2  # ours also carries the peer ratio
    assert "| 100 | 100-100 |" in table[2]  # images/s: whole numbers from 100 up, one decimal below


def test_a_compiled_variant_is_paired_with_the_same_model_uncompiled_and_the_table_shows_it(monkeypatch):
    """Compiled chunks 0.02/0.02 s against uncompiled 0.01/0.02 s: paired speed ratios 0.5 and 1.0, median 0.75
    (the fastest chunks alone would say 0.5)."""
    rounds = {
        ("vit_scratch", "float32"): samples([0.01, 0.02]),
        ("vit_scratch-compiled", "float32"): samples([0.02, 0.02]),
        ("transformers-sdpa", "float32"): samples([0.02, 0.02]),
    }
    monkeypatch.setattr(measure, "measure_round", lambda variants, *args: {v: rounds[v][0] for v in variants})
    args = command.main_parser().parse_args(
        ["--configs", "digits-plain", "--modes", "inference", "--dtype", "float32", "--rounds", "1"]
        + ["--implementations", "vit_scratch-compiled", "vit_scratch", "transformers-sdpa"]
    )
    args.dtypes, args.matmul_rates = [torch.float32], {}
    rows = {row["implementation"]: row for row in measure.benchmark(args)}
    assert rows["vit_scratch-compiled"]["ratio_to_uncompiled"] == pytest.approx(0.75)
    assert "ratio_to_uncompiled" not in rows["vit_scratch"]
    table = report.markdown(list(rows.values())).splitlines()
    assert table[0].endswith("| vs uncompiled |")
    assert table[2].startswith("| digits-plain | inference | float32 | 256 | vit_scratch-compiled |")
    assert table[2].endswith("| 0.75x |")


def test_table_keeps_a_decimal_for_slow_models():
    runs = {name: samples([0.4, 0.5], [0.37]) for name in models.IMPLEMENTATIONS}
    summary = report.summarise(runs["vit_scratch"], runs)
    row = dict(config="base224", mode="inference", batch=1, implementation="vit_scratch", **summary)
    assert "| 2.6 | 2.5-2.7 |" in report.markdown([row])


def test_table_shows_the_precision_the_speed_up_over_float32_and_the_share_of_the_matmul_rate():
    runs = {name: samples([0.01, 0.02], [0.01]) for name in models.IMPLEMENTATIONS}
    summary = report.summarise(runs["vit_scratch"], runs, {"ratio_to_float32": samples([0.025, 0.05], [0.025])})
    assert summary["ratio_to_float32"] == pytest.approx(2.5)
    row = dict(config="digits", mode="inference", precision="bf16-weights", batch=1, implementation="vit_scratch")
    table = report.markdown([{**row, **summary, "achieved_tflops": 0.5741, "matmul_fraction": 0.7834}])
    assert "| digits | inference | bf16-weights | 1 | vit_scratch |" in table
    assert table.splitlines()[2].endswith("| 2.50x | 0.574 | 78% |")


def test_a_share_above_the_matmul_rate_is_shown_unmeasured_and_a_product_too_small_is_refused(tmp_path):
    """A model above the product's rate means the product measured no peak: the cell says so instead of a share
    over 100%; a --matmul_size that small is one line before anything is measured."""
    runs = {name: samples([0.01, 0.02], [0.01]) for name in models.IMPLEMENTATIONS}
    row = dict(
        config="digits",
        mode="inference",
        batch=1,
        implementation="vit_scratch",
        **report.summarise(runs["vit_scratch"], runs),
    )
    table = report.markdown([{**row, "achieved_tflops": 0.5741, "matmul_fraction_over_peak": 208.3}])
    assert table.splitlines()[2].endswith("| 0.574 | unmeasured (model above the product's rate) |")
    result = outcome("benchmark", ["--matmul_size", "64", "--json", str(tmp_path / "r.json")])
    assert result.one_line and "--matmul_size: 64 is out of range: give an integer >= 1024" in result.error
    assert list(tmp_path.iterdir()) == []


def test_int8_is_an_inference_precision_measured_on_request():
    assert models.precisions_for("inference", [torch.float32], int8=True) == ["float32", "int8"]
    assert models.precisions_for("inference", [torch.float32, torch.bfloat16]) == [
        "float32",
        "bf16-autocast",
        "bf16-weights",
    ]
    assert models.precisions_for("train", [torch.float32], int8=True) == ["float32"]  # int8 does not train
    assert command.main_parser().parse_args(["--int8"]).int8 and not command.main_parser().parse_args([]).int8


@pytest.mark.int8
@pytest.mark.parametrize(
    "implementation", ["vit_scratch", "transformers-sdpa", pytest.param("timm", marks=pytest.mark.timm)]
)
def test_an_int8_measurement_runs_int8_linear_layers_loaded_as_a_user_loads_them(implementation):
    """ours and transformers' ViT through from_pretrained's quantization_config, timm's through torchao's quantize_:
    every linear layer holds int8 weights, and the step runs on float32 images."""
    measurement = timing.Measurement(implementation, "digits-plain", "inference", batch=4, precision="int8")
    linears = [module for module in measurement.model.modules() if isinstance(module, torch.nn.Linear)]
    assert linears and all(type(linear.weight).__name__ == "Int8Tensor" for linear in linears)
    measurement.warm_up(warmup=1, min_steps=1, chunk_seconds=0.0)
    result = measurement.report(measurement.chunk())
    assert result["images_per_second"] > 0


def test_int8_without_torchao_is_one_line_before_any_measurement(monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else find_spec(name, *a)
    )
    with pytest.raises(SystemExit) as exit_info:
        command.main(["--int8", "--configs", "digits-plain"])
    assert exit_info.value.code == (
        "error: --int8 needs torchao, which is not installed: pip install 'vit-scratch[int8]'."
    )
    assert capsys.readouterr().out == ""  # refused before any measurement


CPU_FLAG_LINES = {  # the matrix flags of three CPUs as /proc/cpuinfo lists them, among others
    "AVX2 only": ["fpu", "avx", "avx2", "fma"],
    "Zen 4": ["avx2", "avx512f", "avx512_bf16", "avx512_vnni"],
    "Sapphire Rapids": [
        "avx2",
        "avx512f",
        "avx512_bf16",
        "avx512_vnni",
        "avx_vnni",
        "amx_bf16",
        "amx_tile",
        "amx_int8",
    ],
}


@pytest.mark.parametrize(
    ("cpu", "expected"),
    [
        ("AVX2 only", "flags avx2; without avx512f avx512_bf16 avx512_vnni avx_vnni amx_tile amx_bf16 amx_int8"),
        ("Zen 4", "flags avx2 avx512f avx512_bf16 avx512_vnni; without avx_vnni amx_tile amx_bf16 amx_int8"),
        ("Sapphire Rapids", "flags avx2 avx512f avx512_bf16 avx512_vnni avx_vnni amx_tile amx_bf16 amx_int8"),
    ],
)
def test_the_header_names_the_cpu_flags_that_choose_the_precision_and_kernel(monkeypatch, cpu, expected):
    """So that a reader can tell which table matches their machine: what the CPU has and what it lacks."""
    assert report.cpu_flags_text(CPU_FLAG_LINES[cpu]) == expected
    monkeypatch.setattr(report, "cpu_flags", lambda: CPU_FLAG_LINES[cpu])
    monkeypatch.setattr(report.torch.cuda, "is_available", lambda: False)
    args = command.main_parser().parse_args([])
    args.matmul_rates = {"float32": 1e11}
    assert f"CPU ({expected}), matmul float32" in report.machine_header(args, {"float32": 1e11}, {"float32": 4096})


def test_a_machine_without_proc_cpuinfo_says_its_flags_are_unknown():
    assert report.cpu_flags_text(None) == "flags unknown: no /proc/cpuinfo"
    assert report.cpu_flags_text(["neon"]).startswith("flags none of avx2 ")
