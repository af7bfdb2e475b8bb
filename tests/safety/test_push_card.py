"""`push FOLDER` whose README.md was edited by hand: the Hub gets the generated card (its metrics vouched for by the
record, its loading example pinned), and the push's line says that the local text was not sent and how to publish
it; an unedited card is not mentioned. A pull request that would change nothing (main holds the same model) is not
opened, and the push says so."""

import json
import re

import pytest
from entry_points import Scenario, command_env, hub_repo, outcome, run_command, with_argument
from helpers import REPO, pushed_card
from hub_server import local_hub  # noqa: F401  (the fixture)

from modeling_vit_scratch import ViTScratchForImageClassification
from modeling_vit_scratch.common.model_folder import content_sha256, described_sha256
from modeling_vit_scratch.common.secrets import weights_sha256
from modeling_vit_scratch.sharing.card import render_model_card
from modeling_vit_scratch.sharing.push import local_card_note, measured_training_files, metrics_note
from modeling_vit_scratch.training.output import write_model_card


def trained_folder(root):
    """A saved model with its training record and results, as training leaves it."""
    folder = Scenario(root).model()
    results = {"eval_accuracy": 0.5, "test_accuracy": 0.25}
    (folder / "all_results.json").write_text(json.dumps(results))
    record = dict(command="vit-scratch train", dataset="images", num_train=30, num_validation=3, num_test=3)
    record |= dict(epochs=1.0, learning_rate=1e-3, weight_decay=0.05, scheduler="cosine", total_batch=8, seed=0)
    record |= dict(world_size=1, precision=None, augmentation=None, wall_time_seconds=1.0)
    record |= dict(weights_sha256=weights_sha256(folder), results_sha256=content_sha256(results))
    (folder / "training_record.json").write_text(json.dumps(record))
    return folder


def test_a_hand_edited_readme_is_said_not_to_be_sent(tmp_path):
    folder = trained_folder(tmp_path)
    write_model_card(folder)  # as training writes it
    config = ViTScratchForImageClassification.from_pretrained(folder).config  # as the push loads it
    assert local_card_note(folder, config) == []
    readme = folder / "README.md"
    readme.write_text(readme.read_text() + "\nMy own notes.\n")
    line = (
        f"{readme} differs from the card training wrote (edited by hand): it was not sent; the Hub gets the generated "
        "card (metrics from the training record, loading example pinned to the pushed commit). To publish your text, "
        "edit README.md on the Hub: later pushes keep a card edited there unless --overwrite_card."
    )
    assert local_card_note(folder, config) == [line]


@pytest.mark.parametrize("lost", [(), ("all_results.json",), ("all_results.json", "README.md")])
def test_a_trained_folder_whose_results_are_lost_has_a_card_that_says_its_metrics_are_not_known(lost, tmp_path):
    folder = trained_folder(tmp_path)
    write_model_card(folder)
    for name in lost:
        (folder / name).unlink()
    metrics, record, measured = measured_training_files(folder, weights_sha256(folder), allow_unmeasured_weights=False)
    config = ViTScratchForImageClassification.from_pretrained(folder).config
    card = str(render_model_card(config, metrics, record, unmeasured=not measured))
    note = "the metrics of this training run are not known (its `all_results.json` is missing)"
    line = (
        f"{folder / 'all_results.json'} is missing: the metrics of this model are not known, and its card says so (no "
        "results section); to publish them, restore all_results.json (from a backup, or the repo it was pushed to), "
        "or retrain."
    )
    if lost:
        assert note in card and "## Results" not in card
        assert metrics_note(folder, metrics, record, measured) == [line]
    else:
        assert note not in card and "## Results" in card
        assert metrics_note(folder, metrics, record, measured) == []


def test_a_push_publishes_only_the_metrics_the_run_wrote(tmp_path):
    """all_results.json is vouched for by the record's digest of its content: written again in another layout it
    passes; a changed value is refused in one line, before the model is loaded or the Hub asked."""
    folder = trained_folder(tmp_path)
    results = folder / "all_results.json"
    results.write_text(json.dumps(json.loads(results.read_text()), indent=4, sort_keys=True))  # the same values
    metrics, _, measured = measured_training_files(folder, weights_sha256(folder), allow_unmeasured_weights=False)
    assert metrics["test_accuracy"] == 0.25 and measured
    results.write_text(json.dumps({"eval_accuracy": 0.5, "test_accuracy": 0.99}))
    for allow in ([], ["--allow_unmeasured_weights"]):
        result = outcome("push", [str(folder), "local-user/edited", *allow])
        assert result.one_line and result.error == (
            f"error: {results} changed since the run wrote it: restore it, or push with its metrics left out by "
            "deleting it."
        )


@pytest.mark.parametrize(
    "name, field, value, wanted",
    [
        ("all_results.json", "test_per_class_accuracy", 0.5, "an object of class name -> accuracy (or null)"),
        ("all_results.json", "test_accuracy", "0.99", "a number"),
        ("all_results.json", "test_confusion_matrix", {"labels": ["a"], "matrix": [["1"]]}, "an object {"),
        ("training_record.json", "epochs", "two", "a number"),
        ("training_record.json", "legs", "all of them", "a list of {command, wall_time_seconds}"),
    ],
)
def test_a_field_the_card_reads_of_the_wrong_type_is_one_line_naming_file_and_field(
    tmp_path, name, field, value, wanted
):
    """Checked before the model is loaded or the card rendered (no traceback from the card halfway through)."""
    folder = trained_folder(tmp_path)
    content = json.loads((folder / name).read_text()) | {field: value}
    (folder / name).write_text(json.dumps(content))
    result = outcome("push", [str(folder), "local-user/typed"])
    assert result.one_line and result.error.startswith(f"error: {folder / name}: {field} is {json.dumps(value)}, not ")
    assert wanted in result.error and result.error.endswith(
        "restore the file the run wrote, or delete it (the card then claims none of it)."
    )


PUSHES = """
import json, sys
from modeling_vit_scratch.sharing.push import push_to_hub
outcomes = []
for folder, kwargs in ((1, {}), (1, {"create_pr": True}), (2, {"create_pr": True}), (2, {"create_pr": True})):
    result = push_to_hub(sys.argv[folder], "local-user/same", **kwargs)
    outcomes.append(dict(notes=result.notes, commit=result.commit_id, pr=result.pull_request_url))
print(json.dumps(outcomes))
"""


@pytest.mark.integration
def test_a_pull_request_that_would_change_nothing_is_not_opened(local_hub, tmp_path):  # noqa: F811
    """Nor is one whose files an open pull request holds already: `--create_pr` run twice opens one, names it."""
    model, other = Scenario(tmp_path / "a").model(), Scenario(tmp_path / "b").model()  # other weights
    done = local_hub.run("-c", PUSHES, model, other, hf_home=tmp_path / "hf_home", env={"PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-3000:]
    pushed, again, opened, twice = json.loads(done.stdout.splitlines()[-1])
    line = "local-user/same's main already holds this model (the same files): no pull request was opened."
    assert again["pr"] is None and again["notes"] == [line], again
    assert pushed["pr"] is None
    assert opened["pr"].endswith("/local-user/same/discussions/1") and twice["pr"] == opened["pr"], twice
    named = f"local-user/same's open pull request #1 ({opened['pr']}) already holds this model (the same files)"
    assert twice["notes"] == [f"{named}: no new pull request was opened."] and twice["commit"] == opened["commit"]
    assert local_hub.commit_requests == 4  # each model and its card's pin: no more


PUSH_DOWNLOAD_PUSH = """
import sys
from huggingface_hub import snapshot_download
from modeling_vit_scratch.sharing.push import push_to_hub
push_to_hub(sys.argv[1], "local-user/first")
push_to_hub(snapshot_download("local-user/first", local_dir=sys.argv[2]), "local-user/again")
"""


@pytest.mark.integration
def test_a_pushed_repo_downloaded_again_pushes_again(local_hub, tmp_path):  # noqa: F811
    """The push saves config.json again (dropping what no config field holds, like the Trainer's `use_cache`): the
    record describes the config as loaded, so what a push uploads is what its record vouches for."""
    folder = trained_folder(tmp_path)
    config = json.loads((folder / "config.json").read_text()) | {"use_cache": False}
    (folder / "config.json").write_text(json.dumps(config))
    record = json.loads((folder / "training_record.json").read_text())
    (folder / "training_record.json").write_text(json.dumps(record | {"files_sha256": described_sha256(folder)}))
    done = local_hub.run(
        "-c",
        PUSH_DOWNLOAD_PUSH,
        folder,
        tmp_path / "downloaded",
        hf_home=tmp_path / "hf_home",
        env={"PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "use_cache" not in json.loads((tmp_path / "downloaded" / "config.json").read_text())
    assert "0.2500" in local_hub.files("local-user/again")["README.md"].decode()  # measured: its metrics published


def test_the_card_of_a_runs_checkpoint_names_its_step_run_and_the_metrics_logged_there(tmp_path):
    checkpoint = tmp_path / "run" / "checkpoint-4"
    checkpoint.parent.mkdir()
    Scenario(tmp_path).model().rename(checkpoint)
    log = [{"step": 2, "eval_accuracy": 0.25}, {"step": 4, "loss": 1.0}, {"step": 4, "eval_accuracy": 0.75}]
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 4, "epoch": 2.0, "log_history": log}))
    card = pushed_card(checkpoint)
    assert "saved at step 4, epoch 2 of the vit-scratch training run in `run` (a checkpoint of that run, not" in card
    assert "| validation | accuracy | 0.7500 |" in card and "0.2500" not in card and "unknown origin" not in card


def round_trip(folder, root):
    """`folder` exported to transformers (root/exported) and converted back (root/back, returned)."""
    exported, back = root / "exported", root / "back"
    for argv in (
        ["--to", "transformers", "--input", str(folder), "--output", str(exported)],
        ["--from", "transformers", "--input", str(exported), "--output", str(back)],
    ):
        assert outcome("convert", argv).code == 0
    return back


def test_a_round_trip_card_says_trained_then_converted_and_names_no_local_path(tmp_path):
    back = round_trip(trained_folder(tmp_path / "runs"), tmp_path)
    card = pushed_card(back)
    assert (
        "trained by vit-scratch (the run in `model`), exported to transformers from `model`, then converted by "
        "vit-scratch from `exported` (a transformers model), its weights unchanged by each conversion" in card
    )
    assert "did not train" not in card and str(tmp_path) not in card
    record = json.loads((back / "conversion_record.json").read_text())  # pushed files name no local path either
    assert str(tmp_path) not in json.dumps(record)


def test_a_round_trip_of_a_runs_checkpoint_says_which_run_and_step_trained_it(tmp_path):
    """A checkpoint's history comes from its trainer_state.json, through convert as through a push."""
    checkpoint = tmp_path / "run" / "checkpoint-9"
    checkpoint.parent.mkdir()
    Scenario(tmp_path).model().rename(checkpoint)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 9, "epoch": 3.0, "log_history": []}))
    card = pushed_card(round_trip(checkpoint, tmp_path))
    assert (
        "trained by vit-scratch (the run in `run`, checkpoint at step 9), exported to transformers from "
        "`checkpoint-9`, then converted by vit-scratch from `exported`" in card
    )
    assert "did not train" not in card


@pytest.mark.integration
def test_a_conversion_from_a_hub_repo_keeps_the_history_its_records_vouch_for(local_hub, tmp_path):  # noqa: F811
    """A hub repo's training_record.json, fetched with its weights, vouches as a local folder's does: while it names
    those weights (a repo whose record names other weights gets no history)."""
    trained = trained_folder(tmp_path / "trained")
    hub_repo(local_hub, "local-user/trained", trained)
    record = json.loads((trained / "training_record.json").read_text()) | {"weights_sha256": "0" * 64}
    (trained / "training_record.json").write_text(json.dumps(record))
    hub_repo(local_hub, "local-user/other", trained)
    env = command_env(tmp_path, **local_hub.env(tmp_path / "hf_home"))
    for name in ("trained", "other"):
        argv = ["--to", "transformers", "--input", f"local-user/{name}", "--output", str(tmp_path / name / "hf")]
        result = run_command("convert", argv, env=env)
        assert result.returncode == 0, result.stderr[-2000:]
    written = (
        json.loads((tmp_path / name / "hf" / "conversion_record.json").read_text()) for name in ("trained", "other")
    )
    trained, other = written
    assert re.fullmatch("[0-9a-f]{40}", trained["commit"]) and "revision" not in trained  # main, by its commit
    assert [trained.get("history"), other.get("history")] == [
        [{"trained": "local-user/trained", "commit": trained["commit"]}],
        None,
    ]


def test_a_hub_input_is_recorded_by_its_commit_and_the_card_keeps_its_own_lineage(tmp_path, monkeypatch):
    """`convert --input REPO --revision refs/pr/2`: the record names the commit read beside the revision given (a
    ref moves), and the history keeps what the repo's own record says (the weights its run started from), through
    a second conversion into the card."""
    import argparse

    import huggingface_hub

    from modeling_vit_scratch.common.provenance import folder_history
    from modeling_vit_scratch.conversion.command import conversion_source
    from modeling_vit_scratch.sharing.card import origin_text

    commit, start = "c" * 40, "a" * 40
    snapshot = trained_folder(tmp_path).rename(tmp_path / commit)  # a hub snapshot is named by its commit
    record = json.loads((snapshot / "training_record.json").read_text())
    record |= {"initial_weights": "local-user/m1", "initial_weights_commit": start}
    (snapshot / "training_record.json").write_text(json.dumps(record))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo, revision, **_: str(tmp_path / revision))
    args = argparse.Namespace(input="local-user/t1", target="transformers", source=None, revision="refs/pr/2")
    written = conversion_source(argparse.Namespace(**vars(args), input_commit=commit))
    trained = {"trained": "local-user/t1", "commit": commit, "from": "local-user/m1", "from_commit": start}
    assert written == {"input": "local-user/t1", "to": "transformers", "commit": commit, "revision": "refs/pr/2"} | {
        "history": [trained]
    }
    exported = Scenario(tmp_path / "hf87").model()  # the exported folder, converted back from transformers
    (exported / "conversion_record.json").write_text(json.dumps(written | {"weights_sha256": weights_sha256(exported)}))
    history = folder_history(exported, weights_sha256(exported))
    card = origin_text({}, {"input": "hf87", "from": "transformers", "history": history})
    assert card.startswith(
        f"trained by vit-scratch (the run in `local-user/t1` at commit `{commit}`, starting from the weights of "
        f"`local-user/m1` at commit `{start}`), exported to transformers from `local-user/t1` at commit `{commit}` "
        "(revision `refs/pr/2`), then converted by vit-scratch from `hf87` (a transformers model)"
    )


def test_a_card_names_local_paths_by_their_last_part(tmp_path):
    folder = trained_folder(tmp_path)
    record = json.loads((folder / "training_record.json").read_text())
    record |= dict(dataset="/home/me/data/images", initial_weights="/home/me/runs/base")
    record |= dict(command="vit-scratch train --dataset /home/me/data/images --output_dir=/home/me/runs/x --seed 0")
    (folder / "training_record.json").write_text(json.dumps(record))
    card = pushed_card(folder)
    assert "/home/me" not in card
    assert "vit-scratch train --dataset images --output_dir=x --seed 0" in card
    assert "The image-classification data set `images`" in card and "from the weights of `base`" in card


@pytest.mark.parametrize(
    "command, missing",
    [
        ("push", "training_record.json"),
        ("push", "config.json"),
        ("push", "preprocessor_config.json"),
        ("explain", "config.json"),
        ("explain", "preprocessor_config.json"),
    ],
)
def test_a_refusal_for_a_missing_file_names_it_and_says_restore_it_first(command, missing, tmp_path, monkeypatch):
    """The advice names the smallest fix that works: restore the lost file (from a backup or the repo), before
    retraining or saving again."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    scenario = Scenario(tmp_path)
    folder = trained_folder(tmp_path)
    push = [str(folder), "local-user/x"]
    argv = push if command == "push" else with_argument(scenario.argv("explain"), "--model", folder)
    (folder / missing).unlink()  # after the command line, which saves the scenario's model
    result = outcome(command, argv)
    assert result.one_line, result
    assert f"{missing} is missing" in result.error or f"has no {missing}:" in result.error
    assert f"restore {'it' if missing != 'training_record.json' else missing} (from a backup" in result.error
    assert not (tmp_path / "out-explain").exists()
