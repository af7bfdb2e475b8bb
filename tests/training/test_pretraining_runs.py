"""`scripts/train.py --objective masked_image_modeling` end to end, in this process: pretraining on a folder of images
without labels writes a masked autoencoder's folder that the Auto classes load, resumes to the weights of a run never
stopped, and a classifier fine-tuned with `--model` on it starts from its encoder."""

import contextlib
import io
import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import in_process, made_once, tiny_model_file, write_imagefolder
from hub_server import TOKEN, USER, local_hub  # noqa: F401  (local_hub is a fixture)
from PIL import Image
from safetensors.torch import load_file, save_file
from test_training import train_args
from transformers import AutoModelForImageClassification, AutoModelForPreTraining, pipeline

from modeling_vit_scratch.explanation.command import main as explain
from modeling_vit_scratch.explanation.prediction import explain_image
from modeling_vit_scratch.training.command import main

DECODER = '{"decoder_hidden_size": 8, "decoder_num_hidden_layers": 1, "decoder_num_attention_heads": 2, "decoder_intermediate_size": 16}'


def pretrain_args(data: Path, output: Path, model: str, *extra: str) -> list[str]:
    return [
        *train_args(data, output, model), "--objective", "masked_image_modeling", "--config_overrides", DECODER,
        *extra,
    ]  # fmt: skip


def write_unlabelled(root: Path, count: int = 20) -> Path:
    """A folder of images and nothing else: no class sub-folders."""
    rng = np.random.default_rng(1)
    root.mkdir(parents=True)
    for index in range(count):
        Image.fromarray(rng.integers(0, 255, (10, 12, 3), dtype=np.uint8)).save(root / f"{index:03}.png")
    return root


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> tuple[Path, str, Path]:
    """A pretraining run's folder on unlabelled images, what it printed, and a labelled folder to fine-tune on."""

    def make(folder: Path) -> None:
        data, model = write_unlabelled(folder / "unlabelled"), tiny_model_file(folder)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            main(pretrain_args(data, folder / "run", model))
        (folder / "printed.txt").write_text(out.getvalue())
        write_imagefolder(folder / "labelled", per_class=8)

    folder = made_once(tmp_path_factory, "pretrained", make)
    return folder / "run", (folder / "printed.txt").read_text(), folder / "labelled"


def test_pretraining_on_images_without_labels_writes_a_masked_autoencoder_the_auto_class_loads(pretrained):
    folder, printed, _ = pretrained
    model = AutoModelForPreTraining.from_pretrained(folder, trust_remote_code=True)
    assert type(model).__name__ == "ViTScratchForPreTraining" and model.config.decoder_hidden_size == 8
    results = json.loads((folder / "all_results.json").read_text())
    assert np.isfinite(results["test_loss"]) and np.isfinite(results["eval_loss"]) and "test_accuracy" not in results
    record = json.loads((folder / "training_record.json").read_text())
    assert record["objective"] == "masked_image_modeling" and record["finished_at_step"] == 2
    assert (folder / "README.md").is_file() and (folder / "training_curves.png").is_file()
    assert "reconstruction loss" in printed and f"--model {folder}" in printed


@contextlib.contextmanager
def loading_warnings(folder: Path) -> Iterator[list[str]]:
    """The warnings transformers' loggers (and the model's, on the same logger) give about loading `folder`."""
    said: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage()) if str(folder) in record.getMessage() else None
    logging.getLogger("transformers").addHandler(handler)
    try:
        yield said
    finally:
        logging.getLogger("transformers").removeHandler(handler)


def test_loaded_as_a_classifier_it_warns_that_the_head_is_untrained_and_names_the_fine_tune(pretrained):
    folder = pretrained[0]
    with loading_warnings(folder) as said:
        model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True)
    assert model.config.num_labels and len(said) == 1 and f"--model {folder}" in said[0]
    with loading_warnings(folder) as said:
        pipeline("image-classification", model=str(folder), trust_remote_code=True)
    assert len(said) == 1 and f"--model {folder}" in said[0]


def test_a_classifier_fine_tuned_from_it_starts_from_its_encoder(tmp_path, pretrained):
    """Without a warning about the new head or the decoder left out: that is what fine-tuning from it means."""
    folder, _, labelled = pretrained
    encoder = {
        name: tensor for name, tensor in load_file(folder / "model.safetensors").items() if name.startswith("vit.")
    }
    out = tmp_path / "classifier"
    with loading_warnings(folder) as said:
        main(train_args(labelled, out, str(folder), "--learning_rate", "1e-12", "--weight_decay", "0"))
    assert said == []
    tuned = load_file(out / "model.safetensors")
    assert not any(name.startswith("decoder") for name in tuned) and tuned["classifier.weight"].shape[0] == 3
    for name, tensor in encoder.items():
        torch.testing.assert_close(tuned[name], tensor, atol=1e-6, rtol=0)
    record = json.loads((out / "training_record.json").read_text())
    assert record["initial_weights"] == str(folder) and record["objective"] == "classification"
    assert "starting from the weights of run" in (out / "README.md").read_text()


@pytest.mark.parametrize("change", ["an encoder tensor missing", "a tensor of no place", "a tensor reshaped"])
def test_fine_tuning_from_it_refuses_or_reports_weights_that_differ_beyond_the_decoder(tmp_path, pretrained, change):
    """Only the decoder left out and the head made new go unsaid: a tensor missing or of no place is refused, one of
    another shape (which transformers' loading re-initialises on a new head) is in transformers' report."""
    folder, _, labelled = pretrained
    broken = shutil.copytree(folder, tmp_path / "broken")
    weights = load_file(broken / "model.safetensors")
    if change == "an encoder tensor missing":
        del weights["vit.layernorm.bias"]
    elif change == "a tensor of no place":
        weights["vit.stray.weight"] = torch.zeros(2)
    else:
        weights["vit.layernorm.bias"] = torch.zeros(5)
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    with loading_warnings(broken) as said:
        ended = in_process(main, *train_args(labelled, tmp_path / "out", str(broken)))
    if change == "a tensor reshaped":
        assert said and "vit.layernorm.bias" in said[0]
    else:
        assert isinstance(ended, str) and ended.startswith("error: ") and "\n" not in ended
        assert not (tmp_path / "out" / "model.safetensors").exists()


@pytest.mark.parametrize(
    "start, objective, overrides",
    [
        ("pretrained", "classification", {"pooling": "mean", "attention_probs_dropout_prob": 0.2}),
        ("pretrained", "pretraining", {**json.loads(DECODER), "mask_ratio": 0.5}),  # the recipe's decoder, as saved
        pytest.param("classifier", "pretraining", json.loads(DECODER), marks=pytest.mark.slow),  # a new decoder
    ],
    ids=["fine-tuned", "pretrained further", "a classifier pretrained"],
)
def test_config_overrides_on_a_saved_model_change_how_it_runs(tmp_path, pretrained, start, objective, overrides):
    """A fine-tune with mean pooling and more dropout, a pretraining continued or started from a classifier with the
    recipe's decoder overrides: every saved tensor of the encoder is where it was, the config says what was
    overridden."""
    folder, _, labelled = pretrained
    if start == "classifier":
        folder = tmp_path / "classifier"
        main(train_args(labelled, folder, tiny_model_file(tmp_path)))
    else:  # a checkpoint's folder: its EMA's weights, which loading does not read, beside the model's
        folder = shutil.copytree(folder, tmp_path / "saved")
        save_file({"module.vit.layernorm.weight": torch.ones(3)}, folder / "ema.safetensors")
    encoder = {name: tensor for name, tensor in load_file(folder / "model.safetensors").items() if "vit." in name}
    still = ["--learning_rate", "1e-12", "--weight_decay", "0", "--config_overrides", json.dumps(overrides)]
    make = train_args if objective == "classification" else pretrain_args
    main(make(labelled, tmp_path / "out", str(folder), *still))
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert {key: config[key] for key in overrides} == overrides
    tuned = load_file(tmp_path / "out" / "model.safetensors")
    assert any(name.startswith("decoder.") for name in tuned) == (objective == "pretraining")
    for name, tensor in encoder.items():
        torch.testing.assert_close(tuned[name], tensor, atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "objective, overrides, named",
    [
        ("classification", "hidden_size=12,num_attention_heads=2", "saved as"),
        ("classification", "num_hidden_layers=1", "dropped"),
        ("classification", "num_register_tokens=2", "not saved"),
        ("pretraining", '{"decoder_hidden_size": 16}', "decoder_hidden_size=16 (saved: 8)"),
        ("pretraining", "mask_ratio=0.5", "decoder.stray.weight: dropped"),
    ],
    ids=["reshaped", "a block dropped", "a new tensor", "another decoder", "a decoder tensor unused"],
)
def test_config_overrides_that_would_change_a_saved_models_tensors_are_refused_before_any_work(
    tmp_path, pretrained, objective, overrides, named
):
    folder, _, labelled = pretrained
    if "stray" in named:
        folder = shutil.copytree(folder, tmp_path / "saved")
        weights = load_file(folder / "model.safetensors")
        save_file({**weights, "decoder.stray.weight": torch.zeros(2)}, folder / "model.safetensors", {"format": "pt"})
    make = train_args if objective == "classification" else pretrain_args
    line = in_process(main, *make(labelled, tmp_path / "out", str(folder), "--config_overrides", overrides))
    assert isinstance(line, str) and line.startswith("error: ") and "--config_overrides" in line and named in line
    assert not (tmp_path / "out").exists()


def test_a_stopped_pretraining_run_resumes_to_the_weights_of_one_never_stopped(tmp_path, pretrained):
    """Masks and augmentation are drawn in the training step: a resumed run draws what an unstopped one does. The
    labelled folder's labels are not read."""
    labelled, model = pretrained[2], tiny_model_file(tmp_path)
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    main([*pretrain_args(labelled, whole, model), "--max_steps", "3"])
    stopped.mkdir()
    shutil.copy(whole / ".vit-scratch-output", stopped)
    shutil.copytree(whole / "checkpoint-2", stopped / "checkpoint-2")
    main([*pretrain_args(labelled, stopped, model, "--resume_from_checkpoint", "true"), "--max_steps", "3"])
    resumed, uninterrupted = load_file(stopped / "model.safetensors"), load_file(whole / "model.safetensors")
    assert resumed.keys() == uninterrupted.keys()
    for name in uninterrupted:
        torch.testing.assert_close(resumed[name], uninterrupted[name])


def test_a_stream_of_images_without_labels_pretrains(tmp_path, pretrained):
    data = write_unlabelled(tmp_path / "flat")
    args = pretrain_args(data, tmp_path / "run", tiny_model_file(tmp_path), "--streaming", "true")
    main([*args, "--max_steps", "2", "--save_steps", "1"])
    results = json.loads((tmp_path / "run" / "all_results.json").read_text())
    assert np.isfinite(results["test_loss"]) and results["streamed_train_images"] >= 8


@pytest.mark.parametrize(
    "extra",
    [["--mixup", "0.5"], ["--teacher", "some/teacher"], ["--label_smoothing_factor", "0.1"], ["--eval_flip", "true"]]
    + [["--validation_views", "3"]],
    ids=["mixup", "teacher", "label_smoothing", "eval_flip", "validation_views"],
)
def test_what_needs_labels_is_refused_before_any_work(tmp_path, pretrained, extra):
    line = in_process(main, *pretrain_args(pretrained[2], tmp_path / "out", tiny_model_file(tmp_path), *extra))
    assert isinstance(line, str) and line.startswith("error: ") and extra[0] in line
    assert not (tmp_path / "out").exists()


def test_a_model_selection_on_a_metric_it_does_not_report_is_refused_before_any_work(tmp_path, pretrained):
    best = ["--load_best_model_at_end", "true", "--eval_strategy", "steps", "--eval_steps", "1"]
    model = tiny_model_file(tmp_path)
    line = in_process(
        main, *pretrain_args(pretrained[2], tmp_path / "out", model, *best, "--metric_for_best_model", "accuracy")
    )
    assert isinstance(line, str) and line.startswith("error: ") and "--metric_for_best_model" in line
    assert not (tmp_path / "out").exists()
    main(pretrain_args(pretrained[2], tmp_path / "loss", model, *best, "--metric_for_best_model", "loss"))
    assert json.loads((tmp_path / "loss" / "training_record.json").read_text())["finished_at_step"] == 2


@pytest.mark.slow  # RandAugment on every batch
def test_the_photos_policy_pretrains_once_its_label_mixing_is_turned_off(tmp_path, pretrained):
    """The policy turns Mixup and CutMix on by default: the refusal comes without either being given, and giving them
    0 keeps the rest of the policy."""
    data, model = pretrained[2], tiny_model_file(tmp_path)
    line = in_process(main, *pretrain_args(data, tmp_path / "out", model, "--augmentation", "photos"))
    assert isinstance(line, str) and line.startswith("error: ") and "--augmentation" in line
    assert not (tmp_path / "out").exists()
    main(pretrain_args(data, tmp_path / "run", model, "--augmentation", "photos", "--mixup", "0", "--cutmix", "0"))
    record = json.loads((tmp_path / "run" / "training_record.json").read_text())
    assert record["finished_at_step"] == 2 and "RandAugment" in record["augmentation"]


@pytest.mark.slow  # two runs
def test_a_resumed_runs_card_agrees_with_its_results_and_its_record(tmp_path, pretrained):
    """A conv stem (BatchNorm statistics in the weights file, no parameters), a batch larger than the training split,
    and two commands: the card states the results' parameters, the record's batch, and the sum of both legs' time."""
    labelled, model = pretrained[2], tiny_model_file(tmp_path, stem="conv", stem_channels=[4, 6], patch_size=1)
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    batch = ["--total_train_batch_size", "64", "--max_steps", "3"]
    main([*pretrain_args(labelled, whole, model), *batch])
    stopped.mkdir()
    shutil.copy(whole / ".vit-scratch-output", stopped)
    shutil.copytree(whole / "checkpoint-2", stopped / "checkpoint-2")
    main([*pretrain_args(labelled, stopped, model, "--resume_from_checkpoint", "true"), *batch])
    card = (stopped / "README.md").read_text()
    results = json.loads((stopped / "all_results.json").read_text())
    record = json.loads((stopped / "training_record.json").read_text())
    assert f"| parameters | {results['num_parameters']:,} |" in card
    assert record["total_batch"] == record["num_train"] < 64 == record["batch_asked"]
    assert f"global batch size {record['total_batch']} ({record['batch_asked']} asked" in card
    times = [leg["wall_time_seconds"] for leg in record["legs"]]
    assert len(times) == 2 and all(time > 0 for time in times)
    assert record["wall_time_seconds"] == round(sum(times), 1)
    assert "in {} min {} s of wall time".format(*divmod(int(sum(times)), 60)) in card


def test_explain_draws_its_reconstruction_and_the_encoders_maps(tmp_path, pretrained):
    folder, _, labelled = pretrained
    image = next((labelled / "cat").iterdir())
    found = explain_image(model=str(folder), image=str(image), out=str(tmp_path / "explained"))
    names = {path.name for path in found.written}
    assert {"reconstruction.png", "attention_rollout.png", "token_norms.png"} <= names
    assert not found.ranking and np.isfinite(found.reconstruction_loss)


@pytest.mark.slow  # explain twice and a masked autoencoder's figures
def test_explains_own_folder_is_its_again_and_a_pretraining_folder_is_refused_untouched(tmp_path, pretrained):
    """The reconstruction explain drew is explain's figure, not the sign of a model: the same --out works again, for
    this model or another; a pretraining run's folder (which holds a reconstruction.png too) is refused."""
    folder, _, labelled = pretrained
    image, out = next((labelled / "cat").iterdir()), tmp_path / "explained"
    assert in_process(explain, "--model", folder, "--image", image, "--out", out) == 0
    assert in_process(explain, "--model", folder, "--image", image, "--out", out) == 0
    classifier = tmp_path / "classifier"
    main(train_args(labelled, classifier, str(folder), "--max_steps", "1"))
    assert in_process(explain, "--model", classifier, "--image", image, "--out", out) == 0
    assert not (out / "reconstruction.png").exists() and (out / "attention_rollout.png").is_file()
    taken = shutil.copytree(folder, tmp_path / "taken")
    before = {path: path.read_bytes() for path in taken.rglob("*") if path.is_file()}
    line = in_process(explain, "--model", folder, "--image", image, "--out", taken)
    assert isinstance(line, str) and line.startswith("error: --out") and "\n" not in line
    assert {path: path.read_bytes() for path in taken.rglob("*") if path.is_file()} == before


def test_its_card_describes_an_encoder_to_fine_tune_with_its_reconstructions(pretrained):
    card = (pretrained[0] / "README.md").read_text()
    assert "masked autoencoder" in card.lower() and "AutoModelForPreTraining" in card
    assert "](reconstruction.png)" in card and (pretrained[0] / "reconstruction.png").is_file()
    assert "| classes |" not in card and "pipeline_tag" not in card and "reconstruction loss" in card


@pytest.mark.slow  # three new processes
@pytest.mark.integration
def test_it_pushes_and_reloads_from_the_hub_without_the_package(tmp_path, pretrained, local_hub):  # noqa: F811
    folder = pretrained[0]
    pushed = local_hub.run(
        "scripts/push_to_hub.py", str(folder), f"{USER}/pretrained", hf_home=tmp_path / "push", env={"HF_TOKEN": TOKEN}
    )
    assert pushed.returncode == 0, pushed.stderr[-2000:]
    files = local_hub.files(f"{USER}/pretrained")
    assert {"model.safetensors", "reconstruction.png", "modeling_vit_scratch.py", "README.md"} <= files.keys()
    script = tmp_path / "reload.py"
    script.write_text(RELOAD)
    loaded = local_hub.run(script, f"{USER}/pretrained", hf_home=tmp_path / "load")
    assert loaded.returncode == 0 and "ViTScratchForPreTraining transformers_modules" in loaded.stdout, loaded.stderr


RELOAD = """
import sys
sys.modules["modeling_vit_scratch"] = None  # the package is absent: the repo's own code is what runs
import torch
from transformers import AutoModelForPreTraining
model = AutoModelForPreTraining.from_pretrained(sys.argv[1], trust_remote_code=True)
assert torch.isfinite(model(torch.randn(2, 3, 8, 8)).loss)
print(type(model).__name__, type(model).__module__.split(".")[0])
"""
