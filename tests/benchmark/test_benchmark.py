"""The benchmark compares like with like, pairs its ratios chunk by chunk, writes its JSON file whole, and ends with
a non-zero status when a bar is not met. No speed is asserted: the fast tests replace the measuring processes by
made-up chunk times (`fake_round`); one integration test runs them for real on a small config."""

import hashlib
import json
import statistics
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from transformers import Dinov2ForImageClassification, Dinov2WithRegistersForImageClassification

from modeling_vit_scratch.benchmark import command, end_to_end, measure, models, report

TOKEN = "hf_" + "Zq7" * 12  # shaped like a Hub token: never printed nor written
# seconds per step of each chunk: ours 20% faster than transformers' SDPA, eager and timm in between
CHUNKS = {"vit_scratch": [0.8, 0.9], "transformers-sdpa": [1.0, 1.1], "transformers-eager": [0.9, 1.0], "timm": [1, 1]}
FAST_ARGS = ["--configs", "digits-plain", "--modes", "inference", "--rounds", "2", "--dtype", "float32"]
FAST_ARGS += ["--implementations", "vit_scratch", "transformers-sdpa", "transformers-eager"]


def fake_round(variants, config_name, mode, batch, args):
    """What `measure_round` returns, without a process: every variant's chunks, the same memory for all."""
    results = {}
    for name, precision in variants:
        chunks = [seconds * (0.5 if precision != "float32" else 1) for seconds in CHUNKS[name]]
        results[(name, precision)] = dict(
            images_per_second=batch / min(chunks),
            milliseconds_per_batch=1000 * min(chunks),
            peak_memory_mb=100.0,
            steps_per_chunk=1,
            achieved_tflops=1e-3,
            compiled=False,
            chunk_seconds=chunks,
        )
    return results


@pytest.fixture
def no_processes(monkeypatch):
    """The rounds and the matrix products without their processes."""
    monkeypatch.setattr(measure, "measure_round", fake_round)
    monkeypatch.setattr(command, "once", lambda name, request, args: {name: 1e12 for name in request[1]})


def run(argv: list[str]) -> int:
    """`main(argv)` as a user's command: its exit status."""
    try:
        command.main(argv)
    except SystemExit as stop:
        return 1 if isinstance(stop.code, str) else stop.code or 0
    return 0


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.usefixtures("no_processes")
def test_a_run_prints_the_table_and_writes_every_sample(tmp_path, capsys):
    output = tmp_path / "results.json"
    assert run([*FAST_ARGS, "--json", str(output), "--min_speedup_vs_sdpa", "1.0"]) == 0
    result = json.loads(output.read_text())
    assert set(result) == {"machine", "argv", "matmul_flops", "matmul_sizes", "rows", "bars"}
    rows = {row["implementation"]: row for row in result["rows"]}
    assert set(rows) == {"vit_scratch", "transformers-sdpa", "transformers-eager"}
    assert len(rows["vit_scratch"]["samples"]) == 2 and rows["transformers-sdpa"]["ratio"] == 1.0
    assert rows["vit_scratch"]["ratio"] == pytest.approx(statistics.median([1.0 / 0.8, 1.1 / 0.9]))
    assert rows["vit_scratch"]["ratio_to_fastest_peer"] == pytest.approx(statistics.median([0.9 / 0.8, 1.0 / 0.9]))
    assert result["bars"] and result["bars"][0].endswith(": met")
    printed = capsys.readouterr().out
    assert "| digits-plain | inference | float32 | 256 | vit_scratch |" in printed
    assert result["bars"][0] in printed
    assert not list(tmp_path.glob(".*partial"))  # the staged file was moved into place


@pytest.mark.usefixtures("no_processes")
def test_pretraining_rows_sit_beside_the_training_rows_with_their_ratios(tmp_path, capsys):
    output = tmp_path / "results.json"
    assert run([*FAST_ARGS, "--modes", "train", "pretrain", "--json", str(output)]) == 0
    rows = [(row["mode"], row["implementation"], row["ratio"]) for row in json.loads(output.read_text())["rows"]]
    assert [mode for mode, _, _ in rows] == ["train"] * 3 + ["pretrain"] * 3
    assert rows[3] == ("pretrain", "vit_scratch", pytest.approx(statistics.median([1.0 / 0.8, 1.1 / 0.9])))
    assert "| digits-plain | pretrain | float32 | 256 | vit_scratch |" in capsys.readouterr().out


@pytest.mark.usefixtures("no_processes")
def test_a_bar_not_met_ends_with_a_non_zero_status_after_writing_the_results(tmp_path):
    output = tmp_path / "results.json"
    assert run([*FAST_ARGS, "--json", str(output), "--min_speedup_vs_sdpa", "1.5"]) != 0
    assert json.loads(output.read_text())["bars"][0].endswith("NOT met")
    assert run([*FAST_ARGS, "--json", str(output), "--max_memory_ratio", "0.9"]) != 0
    assert run([*FAST_ARGS, "--json", str(output)]) == 0  # no bar: no verdict
    assert json.loads(output.read_text())["bars"] == []


@pytest.mark.usefixtures("no_processes")
def test_bf16_rows_are_paired_with_the_same_model_in_float32(tmp_path):
    output = tmp_path / "results.json"
    argv = [*FAST_ARGS, "--dtype", "float32,bfloat16", "--json", str(output), "--min_bf16_speedup", "2.5"]
    assert run(argv) != 0  # the fake bf16 chunks are twice as fast: 2.0x < 2.5x
    rows = {(row["implementation"], row["precision"]): row for row in json.loads(output.read_text())["rows"]}
    assert {precision for _, precision in rows} == {"float32", "bf16-autocast", "bf16-weights"}
    assert rows[("vit_scratch", "bf16-autocast")]["ratio_to_float32"] == pytest.approx(2.0)
    assert rows[("transformers-sdpa", "bf16-weights")]["ratio"] == 1.0  # against SDPA in bf16, not in float32


@pytest.mark.usefixtures("no_processes")
def test_an_earlier_result_is_replaced_whole_and_a_users_file_never(tmp_path):
    output = tmp_path / "results.json"
    assert run([*FAST_ARGS, "--json", str(output)]) == 0
    earlier = digest(output)
    assert run([*FAST_ARGS, "--rounds", "1", "--json", str(output)]) == 0
    assert digest(output) != earlier and len(json.loads(output.read_text())["rows"][0]["samples"]) == 1
    for users in ({"rows": []}, "notes", None):  # JSON without the result's keys, text, a folder
        path = tmp_path / "users"
        path.mkdir() if users is None else path.write_text(json.dumps(users) if isinstance(users, dict) else users)
        before = sorted(tmp_path.iterdir())
        assert run([*FAST_ARGS, "--json", str(path)]) == 1
        assert sorted(tmp_path.iterdir()) == before
        path.rmdir() if users is None else path.unlink()


def test_an_interrupted_run_leaves_the_earlier_result_as_it_was(tmp_path, monkeypatch, no_processes):
    output = tmp_path / "results.json"
    assert run([*FAST_ARGS, "--json", str(output)]) == 0
    earlier = digest(output)

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(measure, "measure_round", interrupted)
    assert run([*FAST_ARGS, "--json", str(output)]) == 130
    assert digest(output) == earlier and sorted(tmp_path.iterdir()) == [output]


def test_end_to_end_reads_the_training_runs_files_and_shows_no_token(tmp_path, monkeypatch, capsys):
    """The end-to-end rows come from the training command's files; a token given to it is in no line and no file."""
    runs = iter([12.0, 10.0, 11.0])

    def training_run(recipe, steps, extra, folder, args):
        return dict(folder=folder, seconds=next(runs), fit=(steps, 64, False))

    monkeypatch.setattr(end_to_end, "training_run", training_run)
    monkeypatch.setattr(end_to_end, "once", lambda name, request, args: 10.0)
    output = tmp_path / "results.json"
    argv = ["--end_to_end", "configs/train_digits.json", "--end_to_end_steps", "5", "--rounds", "3"]
    argv += ["--json", str(output), "--max_end_to_end_ratio", "1.05", "--train_args", "--hub_token", TOKEN]
    assert run(argv) != 0  # the median ratio, 1.1x, is above the bar
    printed, written = capsys.readouterr(), output.read_text()
    assert TOKEN not in printed.out + printed.err + written
    (row,) = json.loads(written)["rows"]
    assert (row["steps"], row["batch"], row["ratio"]) == (5, 64, pytest.approx(1.1))


def test_the_training_run_is_read_from_all_results_and_the_record(tmp_path, monkeypatch):
    """What `training_run` reads of a finished run: the Trainer's runtime plus data preparation, its batch, its
    steps (the Trainer's count where the whole recipe ran), its precision; and the arguments it gives after the user's."""
    given = []

    def finished(command, **kwargs):
        given.append(command)
        folder = tmp_path / "run"
        folder.mkdir()
        metrics = dict(train_runtime=20.0, train_steps_per_second=2.2, data_preparation_seconds=1.5)
        (folder / "all_results.json").write_text(json.dumps(dict(metrics, total_train_batch_size=32)))
        (folder / "training_record.json").write_text(json.dumps(dict(precision="bf16 mixed precision")))
        return SimpleNamespace(returncode=0, stdout="", stderr="")

    monkeypatch.setattr(end_to_end.subprocess, "run", finished)
    args = SimpleNamespace(glibc_malloc_defaults=False)
    trained = end_to_end.training_run("r.json", None, ["--output_dir", "x"], tmp_path / "run", args)
    assert (trained["seconds"], trained["fit"]) == (21.5, (44, 32, True))
    assert given[0][given[0].index("r.json") :].count("--output_dir") == 2  # the benchmark's comes last
    assert given[0][-1] == "false" and given[0][-2] == "--push_to_hub"


@given(st.lists(st.floats(0.01, 10), min_size=1, max_size=6), st.floats(0.1, 10))
def test_a_ratio_pairs_each_chunk_with_the_reference_chunk_timed_next_to_it(chunks, factor):
    sample = dict(chunk_seconds=chunks)
    assert report.speed_ratio(sample, chunks) == pytest.approx(1.0)
    assert report.speed_ratio(sample, [seconds * factor for seconds in chunks]) == pytest.approx(factor)


def test_unknown_values_are_argparse_errors_before_anything_runs(tmp_path, capsys):
    for wrong in (["--dtype", "float16"], ["--rounds", "0"], ["--configs", "huge"], ["--rounds_", "1"]):
        assert run([*wrong, "--json", str(tmp_path / "r.json")]) == 2
    assert run(["--implementations", "vit_scratch", "--json", str(tmp_path / "r.json")]) == 1  # no baseline
    assert list(tmp_path.iterdir()) == []


def parameter_count(implementation: str, config_name: str | dict) -> int:
    config = models.CONFIGS[config_name] if isinstance(config_name, str) else config_name
    with torch.device("meta"):  # shapes only: base224 costs nothing to build
        model = models.build(implementation, config)
    return sum(parameter.numel() for parameter in model.parameters())


@pytest.mark.parametrize("config_name", ["digits-plain", "mnist28", "tiny224", "base224"])
def test_ours_and_transformers_are_built_with_the_same_hyper_parameters(config_name):
    ours = parameter_count("vit_scratch", config_name)
    assert (
        ours == parameter_count("transformers-sdpa", config_name) == parameter_count("transformers-eager", config_name)
    )


@pytest.mark.parametrize("registers", [0, 4])
@pytest.mark.parametrize("config_name", ["dinov2_s14", "dinov2_b14"])
def test_a_dinov2_shape_is_measured_against_transformers_dinov2_classifier(config_name, registers):
    """Dinov2's classifier at the same hyper-parameters: ours' parameters, plus its mask token (D) and a head that
    reads 2 D features (D x labels more)."""
    config = dict(models.CONFIGS[config_name], num_register_tokens=registers)
    with torch.device("meta"):
        theirs = models.build("transformers-eager", config)
    expected = Dinov2WithRegistersForImageClassification if registers else Dinov2ForImageClassification
    assert type(theirs) is expected and theirs.config._attn_implementation == "eager"
    assert theirs.config.layerscale_value == config["layerscale_value"] == 1e-5
    extra = config["hidden_size"] * (1 + models.NUM_LABELS)
    assert parameter_count("transformers-sdpa", config) == parameter_count("vit_scratch", config) + extra


def test_a_hybrid_is_measured_against_timm_alone_and_pretrained_alone():
    """timm has no masked autoencoder; transformers' ViTMAE has no stem, no layer scale and no registers."""
    built = lambda config, mode: [impl for impl in models.IMPLEMENTATIONS if models.builds(impl, config, mode)]
    for name in ("digits", "r26s32_224"):
        assert built(models.CONFIGS[name], "train") == ["vit_scratch", "timm"]
        assert built(models.CONFIGS[name], "pretrain") == ["vit_scratch"]
    assert built(models.CONFIGS["dinov2_s14"], "pretrain") == ["vit_scratch"]
    assert built(models.CONFIGS["mnist28"], "pretrain") == ["vit_scratch", "transformers-sdpa", "transformers-eager"]


@pytest.mark.parametrize("config_name", ["mnist28", "tiny224", "base224"])
def test_ours_and_transformers_masked_autoencoders_have_the_same_hyper_parameters(config_name):
    """The same parameters but ViTMAE's decoder position table, a frozen parameter where ours has a buffer; a small
    decoder below 224 pixels, MAE's own at 224."""
    config = models.CONFIGS[config_name]
    with torch.device("meta"):
        ours, theirs = (models.build(name, config, mode="pretrain") for name in ("vit_scratch", "transformers-sdpa"))
    table = (1 + (config["image_size"] // config["patch_size"]) ** 2) * ours.config.decoder_hidden_size
    count = lambda model: sum(parameter.numel() for parameter in model.parameters())
    assert count(theirs) == count(ours) + table
    assert ours.config.decoder_hidden_size == theirs.config.decoder_hidden_size == (512 if "224" in config_name else 64)


@pytest.mark.parametrize(
    "implementation, model_class, kernel",
    [("vit_scratch", "ViTScratchForPreTraining", "sdpa"), ("transformers-sdpa", "ViTMAEForPreTraining", "sdpa"),
     ("transformers-eager", "ViTMAEForPreTraining", "eager")],
)  # fmt: skip
def test_a_pretraining_step_trains_every_weight_of_the_autoencoder(implementation, model_class, kernel, monkeypatch):
    """One step of `make_step` in `pretrain` at a tiny config: the model's own loss reaches every trainable weight."""
    tiny = dict(models.CONFIGS["mnist28"], image_size=12, hidden_size=24, num_hidden_layers=1, num_attention_heads=2)
    built, build = [], models.build
    monkeypatch.setattr(models, "build", lambda *args: built.append(build(*args)) or built[0])
    step = measure.make_step(implementation, dict(tiny, intermediate_size=36), "pretrain", "float32", 2, False)
    (model,) = built
    before = {name: weight.detach().clone() for name, weight in model.named_parameters() if weight.requires_grad}
    step()
    assert (type(model).__name__, model.config._attn_implementation) == (model_class, kernel)
    weights = dict(model.named_parameters())
    assert [name for name, weight in before.items() if torch.equal(weights[name], weight)] == []


@pytest.mark.timm
@pytest.mark.parametrize("config_name", list(models.CONFIGS))
def test_timm_is_built_with_the_same_hyper_parameters(config_name):
    assert parameter_count("timm", config_name) == parameter_count("vit_scratch", config_name)


@pytest.mark.slow
@pytest.mark.integration
def test_the_measuring_processes_measure_a_small_config(tmp_path):
    """The real workers, one round of two implementations; and a worker that fails is one line naming it."""
    output = tmp_path / "results.json"
    argv = ["--configs", "digits-plain", "--modes", "inference", "--dtype", "float32", "--rounds", "1"]
    argv += ["--chunks", "2", "--chunk_seconds", "0", "--steps", "1", "--warmup", "1", "--matmul_size", "64"]
    argv += ["--implementations", "vit_scratch", "transformers-sdpa", "--json", str(output)]
    assert run(argv) == 0
    rows = json.loads(output.read_text())["rows"]
    assert [row["implementation"] for row in rows] == ["vit_scratch", "transformers-sdpa"]
    assert all(len(row["samples"][0]["chunk_seconds"]) == 2 and row["median"] > 0 for row in rows)
    args = SimpleNamespace(glibc_malloc_defaults=False)
    with pytest.raises(command.UserError, match="vit_scratch nowhere"):
        measure.once(
            "vit_scratch nowhere", ("measure", "vit_scratch", "no such config", "train", "float32", 2, 0), args
        )
