"""What `convert --from transformers` reads, said before anything is written: a vit_scratch Hub repo names the
right direction (as a local folder does)."""

import pytest
from entry_points import Scenario, hub_repo, run_command
from hub_server import local_hub  # noqa: F401  (the fixture)


@pytest.mark.integration
def test_a_vit_scratch_hub_repo_given_to_from_transformers_names_to_transformers(local_hub, tmp_path):  # noqa: F811
    hub_repo(local_hub, "local-user/t1", Scenario(tmp_path).model())
    argv = ["--from", "transformers", "--input", "local-user/t1", "--output", str(tmp_path / "out")]
    result = run_command("convert", argv, env=local_hub.env(tmp_path / "hf_home"))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "error: --input 'local-user/t1' is a vit_scratch model already: to make a transformers folder of it, use "
        "--to transformers instead of --from."
    )
    assert not (tmp_path / "out").exists()
