"""A Hub model that cannot be loaded is one line giving the loader's real cause: transformers says "does not appear
to have a file named model.safetensors" for any failure to get it, so the cause is asked of huggingface_hub."""

import pytest
from entry_points import Scenario, hub_repo, outcome, run_command, with_argument
from hub_server import local_hub  # noqa: F401  (the fixture)


@pytest.mark.integration
def test_weights_not_in_the_cache_while_offline_are_said_so_not_missing(local_hub, tmp_path):  # noqa: F811
    scenario = Scenario(tmp_path)
    hub_repo(local_hub, "local-user/t1", scenario.model())
    hf_home = tmp_path / "hf_home"
    fetch = "from huggingface_hub import hf_hub_download as d; [d('local-user/t1', n) for n in {names!r}]"
    cached = local_hub.run("-c", fetch.format(names=["config.json", "preprocessor_config.json"]), hf_home=hf_home)
    assert cached.returncode == 0, cached.stderr[-2000:]
    argv = ["--model", "local-user/t1", "--image", str(scenario.picture()), "--out", str(tmp_path / "out")]
    result = run_command("explain", argv, env={**local_hub.env(hf_home), "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: Cannot load the weights of 'local-user/t1': its model.safetensors is not in the Hugging Face cache "
        "and HF_HUB_OFFLINE is set, so it was not downloaded: run once online (unset HF_HUB_OFFLINE), or give a "
        "local folder."
    )


@pytest.mark.parametrize(
    "name, argument", [("explain", "--model"), ("convert", "--input"), ("train", "--model"), ("train", "--teacher")]
)
@pytest.mark.parametrize("source", ["m1", "someone/m1"])
def test_a_name_neither_a_folder_nor_cached_while_offline_says_both(name, argument, source, tmp_path, monkeypatch):
    """Offline, a model name that is no folder here (a typo) and no repo in the cache is one line saying both, from
    the one resolver every reader passes, before anything is loaded: never a line about missing weights."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.chdir(tmp_path)
    result = outcome(name, with_argument(Scenario(tmp_path).argv(name), argument, source))
    assert result.one_line, result
    if source == "m1" and name == "train":  # a bare name is a preset or no teacher to train: their own lines
        assert "Unknown preset 'm1'" in result.error or "is no folder here and no hub repo id" in result.error
        return
    assert result.error == (
        f"error: {argument} {source!r}: there is no folder {source!r} here, and no Hub repo {source!r} in the Hugging "
        "Face cache (HF_HUB_OFFLINE is set, so the Hub was not asked): check the folder's path (a folder name needs "
        "./ in front), or unset HF_HUB_OFFLINE to download the repo once (it is then read from the cache)."
    )


@pytest.mark.parametrize("name, argument", [("explain", "--model"), ("convert", "--input")])
def test_offline_by_transformers_offline_alone_names_that_variable(name, argument, tmp_path, monkeypatch):
    """With only TRANSFORMERS_OFFLINE=1 (huggingface_hub reads it where HF_HUB_OFFLINE is unset), the line said
    "HF_HUB_OFFLINE is set ... unset HF_HUB_OFFLINE", a fix that changes nothing: it names the variable really set."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # as huggingface_hub reads TRANSFORMERS_OFFLINE at import
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.chdir(tmp_path)
    result = outcome(name, with_argument(Scenario(tmp_path).argv(name), argument, "someone/m1"))
    assert result.error == (
        f"error: {argument} 'someone/m1': there is no folder 'someone/m1' here, and no Hub repo 'someone/m1' in the "
        "Hugging Face cache (TRANSFORMERS_OFFLINE is set, so the Hub was not asked): check the folder's path (a folder "
        "name needs ./ in front), or unset TRANSFORMERS_OFFLINE to download the repo once (it is then read from the "
        "cache)."
    )


def test_a_push_offline_by_transformers_offline_alone_names_that_variable(tmp_path, monkeypatch):
    """The push's token check offline: the variable really set, so that unsetting it is a fix that works."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    monkeypatch.setenv("HF_TOKEN", "hf_" + "a" * 34)
    result = outcome("push", Scenario(tmp_path).argv("push"))
    assert result.one_line, result
    assert "was not asked, as TRANSFORMERS_OFFLINE is set" in result.error, result
    assert "unset TRANSFORMERS_OFFLINE" in result.error and "HF_HUB_OFFLINE" not in result.error
