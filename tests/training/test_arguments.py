"""`modeling_vit_scratch.training.arguments`: what `scripts/train.py` refuses on its command line before any work."""

import json
import os
import shlex
import shutil
import sys
from pathlib import Path

import pytest

from modeling_vit_scratch.common.weights import weight_files
from modeling_vit_scratch.training.arguments import parse_arguments


@pytest.mark.parametrize("given", ["hub_token", "environment"])
@pytest.mark.parametrize("argument", ["--teacher", "--dataset", "--run_name", "--model"])
def test_a_known_token_inside_any_other_argument_is_refused(tmp_path, monkeypatch, given, argument):
    """Not only token-shaped values: any token this process knows (here one no pattern would catch), inside a path
    or a name, would reach the card, the record or the checkpoints."""
    secret = "team-token-0f1e2d3c4b5a"
    monkeypatch.delenv("HF_TOKEN", raising=False)
    argv = ["--output_dir", str(tmp_path / "out"), argument, f"/data/{secret}/resnet"]
    if given == "hub_token":
        argv += ["--hub_token", secret]
    else:
        monkeypatch.setenv("HF_TOKEN", secret)
    with pytest.raises(ValueError) as refused:
        parse_arguments(argv)
    assert f"The value of {argument} holds or looks like a Hub token" in str(refused.value)
    assert secret not in str(refused.value)


def test_a_recipe_finds_the_model_file_beside_it_from_any_working_directory(tmp_path, monkeypatch):
    """`vit-scratch train /somewhere/configs/train_x.json` run from elsewhere: the recipe's relative model path is read
    from the recipe's folder; a path that exists from the working directory is taken as given, a preset is kept."""
    import json

    from modeling_vit_scratch.training.arguments import recipe_to_argv

    configs = tmp_path / "configs"
    (configs / "models").mkdir(parents=True)
    (configs / "models" / "tiny.json").write_text("{}")
    recipe = configs / "train_tiny.json"
    recipe.write_text(json.dumps({"model": "models/tiny.json", "dataset": "digits"}))
    monkeypatch.chdir(tmp_path / "configs" / "models")  # somewhere "models/tiny.json" does not exist
    assert recipe_to_argv([str(recipe)]) == ["--model", str(configs / "models" / "tiny.json"), "--dataset", "digits"]
    monkeypatch.chdir(configs)  # here it exists from the working directory: kept as given
    assert recipe_to_argv([str(recipe)])[:2] == ["--model", "models/tiny.json"]
    recipe.write_text(json.dumps({"model": "vit-tiny-patch16-224"}))
    assert recipe_to_argv([str(recipe)]) == ["--model", "vit-tiny-patch16-224"]


@pytest.mark.parametrize("given", ["train_small_images", "train_small_images.json", "configs/train_small_images.json"])
def test_a_recipe_the_package_ships_is_found_by_name_where_no_such_file_exists(tmp_path, monkeypatch, given):
    """Outside a checkout (an installed package), the README's `configs/train_small_images.json`, its file name or
    its name read the recipe the package ships, and its model file beside it; a file of that path here is the
    user's own and wins; a path elsewhere or another name is not replaced (its line lists the shipped names)."""
    from modeling_vit_scratch.training.arguments import recipe_to_argv, with_shipped_recipe
    from modeling_vit_scratch.training.recipes import SHIPPED

    monkeypatch.chdir(tmp_path)
    argv, line = with_shipped_recipe([given, "--seed", "3"])
    assert argv == [str(SHIPPED / "train_small_images.json"), "--seed", "3"]
    assert line == f"Recipe {given}: the one the package ships, {SHIPPED / 'train_small_images.json'}"
    expanded = recipe_to_argv(argv)
    assert expanded[expanded.index("--model") + 1] == str(SHIPPED / "models" / "model_28px_convstem.json")
    assert expanded[-2:] == ["--seed", "3"]
    own = tmp_path / given
    own.parent.mkdir(parents=True, exist_ok=True)
    own.write_text(json.dumps({"seed": 1}))
    assert with_shipped_recipe([given]) == ([given], None)  # the user's own file of that path
    for other in ("elsewhere/train_small_images.json", "train_small_images.yaml", "train_nothing"):
        assert with_shipped_recipe([other]) == ([other], None)
    with pytest.raises(FileNotFoundError, match=r"or the name of one the package ships \(train_color_images, "):
        recipe_to_argv(["elsewhere/train_small_images.json"])
    own.unlink()
    from modeling_vit_scratch.benchmark.command import main_parser  # the benchmark's --end_to_end reads them alike

    assert main_parser().parse_args(["--end_to_end", given]).end_to_end == [str(SHIPPED / "train_small_images.json")]


# how a user started training -> (sys.argv the process sees, the command a user can paste to run it again)
STARTS = {
    "installed command": (
        ["/venv/bin/vit-scratch", "train", "r.json", "--seed", "3"],
        "vit-scratch train r.json --seed 3",
    ),
    "script": (["scripts/train.py", "r.json", "--seed", "3"], "python scripts/train.py r.json --seed 3"),
}


@pytest.mark.parametrize("world_size", [1, 2])
@pytest.mark.parametrize("start", sorted(STARTS))
def test_the_recorded_command_is_one_a_user_can_paste(monkeypatch, start, world_size):
    """training_record.json and the card's "The exact command": through `vit-scratch train` (cli.main) the command
    itself, through the script python and its path; under torchrun the launcher that runs each."""
    from modeling_vit_scratch import cli
    from modeling_vit_scratch.training import arguments, command

    argv, pasted = STARTS[start]
    monkeypatch.setattr(sys, "argv", list(argv))
    monkeypatch.setattr(shutil, "which", lambda name: sys.executable)  # `python` is this interpreter
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    recorded = []
    monkeypatch.setattr(command, "main", lambda rest: recorded.append(arguments.plain_command()))
    if start == "installed command":
        cli.main()
        launcher = "python -m torch.distributed.run --nproc_per_node 2 --no-python " if world_size > 1 else ""
    else:
        command.main(argv[1:])
        launcher = "python -m torch.distributed.run --nproc_per_node 2 " if world_size > 1 else ""
    expected = launcher + (pasted.removeprefix("python ") if world_size > 1 else pasted)
    here = f"cd {shlex.quote(os.getcwd())} && " if start == "script" else ""  # scripts/train.py: from this folder
    assert recorded == [here + expected]


@pytest.mark.parametrize("on_path", ["this interpreter", "another interpreter", "none"])
def test_a_printed_command_starts_with_the_interpreter_that_ran_it(monkeypatch, tmp_path, on_path):
    """A run started as `/path/to/.venv/bin/python scripts/train.py ...` prints commands (the record's, the resume
    and fix lines) that run as pasted: bare `python` only where that name finds this same interpreter (a link to it
    too), else this interpreter's path, quoted."""
    from modeling_vit_scratch.training import arguments

    executable = tmp_path / "my venv" / "bin" / "python3"
    executable.parent.mkdir(parents=True)
    executable.write_text("")
    (executable.parent / "python").symlink_to(executable)
    found = {"this interpreter": executable.parent / "python", "another interpreter": "/usr/bin/python", "none": None}
    monkeypatch.setattr(shutil, "which", lambda name: found[on_path] and str(found[on_path]))
    monkeypatch.setattr(sys, "executable", str(executable))
    monkeypatch.setattr(sys, "argv", ["scripts/train.py", "--output_dir", "o", "--resume_from_checkpoint", "o/c"])
    python = "python" if on_path == "this interpreter" else f"'{executable}'"
    here = f"cd {shlex.quote(os.getcwd())} && "  # scripts/train.py and --output_dir o: run from this folder
    assert arguments.plain_command() == f"{here}{python} scripts/train.py --output_dir o --resume_from_checkpoint o/c"
    assert arguments.resume_command() == f"{here}{python} scripts/train.py --output_dir o --resume_from_checkpoint true"
    assert arguments.new_run_command("o", "o").startswith(f"{here}{python} scripts/train.py --model o --output_dir o-2")
    assert arguments.program_name() == f"{python} scripts/train.py"
    monkeypatch.setenv("WORLD_SIZE", "2")  # under torchrun: the launcher as a module of the same interpreter
    torchrun = f"{here}{python} -m torch.distributed.run --nproc_per_node 2 scripts/train.py"
    assert arguments.plain_command().startswith(torchrun)
    (tmp_path / "pickled").mkdir()
    (tmp_path / "pickled" / "pytorch_model.bin").write_bytes(b"\x80")
    with pytest.raises(ValueError, match="convert it to safetensors with ") as refused:  # common/weights.py's fix
        weight_files(tmp_path / "pickled")
    assert f"convert it to safetensors with {python} -c " in str(refused.value)


@pytest.mark.integration
def test_a_run_through_the_command_records_it_in_the_record_and_the_card(tmp_path):
    """A real run of `python -m modeling_vit_scratch.cli train ...` (what the installed `vit-scratch` calls)."""
    from entry_points import Scenario, run_command

    argv = Scenario(tmp_path).argv("train")
    result = run_command("train", argv, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    output = Path(argv[argv.index("--output_dir") + 1])
    recorded = json.loads((output / "training_record.json").read_text())["command"]
    assert recorded == shlex.join(["vit-scratch", "train", *argv])  # the record keeps the command as run
    # the card publishes it with each absolute path cut to its last part: what the run did, not where
    published = shlex.join(["vit-scratch", "train", *(Path(a).name if a.startswith("/") else a for a in argv)])
    assert f"```bash\n{published}\n```" in (output / "README.md").read_text()


@pytest.mark.parametrize(
    ("given", "fix"),
    [
        (["--eval_strategy", "epoch"], "--save_strategy steps: give --save_strategy epoch, or leave"),
        (["--eval_strategy", "no"], "--save_strategy steps: give --eval_strategy steps, or leave"),
        (["--eval_strategy", "steps", "--save_strategy", "epoch"], "give --save_strategy steps, or leave"),
    ],
)
def test_best_model_at_end_with_strategies_that_differ_is_one_line_naming_the_option_to_give(given, fix):
    """transformers' own refusal is three lines of enum names (`IntervalStrategy.EPOCH`) and no fix."""
    argv = ["--output_dir", "/tmp/unused-out", *given, "--load_best_model_at_end", "true"]
    with pytest.raises(ValueError) as refused:
        parse_arguments([*argv, "--metric_for_best_model", "accuracy"])
    line = str(refused.value)
    assert line.startswith("--load_best_model_at_end true keeps the best of the checkpoints saved when the model is ")
    assert fix in line and "\n" not in line and "Strategy." not in line
    if "--save_strategy" not in given:  # checkpoints saved by the best metric: no evaluation to match
        parse_arguments([*argv, "--save_strategy", "best", "--metric_for_best_model", "accuracy"])


def test_a_printed_command_with_relative_paths_runs_from_the_folder_it_names(monkeypatch, tmp_path):
    """Every printed command (the record's, the resume and new-run lines, a push's) holding a relative path starts
    with `cd FOLDER && `, the folder the run started in, quoted; with absolute paths only it is the command alone."""
    from modeling_vit_scratch.common.commands import printed_command
    from modeling_vit_scratch.common.run_state import here
    from modeling_vit_scratch.training import arguments

    work = tmp_path / "my work"
    (work / "big").mkdir(parents=True)
    (work / "tiny.json").write_text("{}")
    monkeypatch.chdir(work)
    given = ["r.yaml", "--dataset", "./big", "--output_dir", "r3", "--model=tiny.json"]
    monkeypatch.setattr(sys, "argv", ["vit-scratch train", *given])
    resume = arguments.resume_command()
    assert resume == f"cd '{work}' && vit-scratch train {' '.join(given)} --resume_from_checkpoint true"
    assert arguments.new_run_command("r3/checkpoint-2", "r3").startswith(f"cd '{work}' && vit-scratch train ")
    (work / "r3").mkdir()  # the run folder a failed push names, saved
    assert printed_command("", ["vit-scratch", "push", "r3", "me/x"]) == f"cd '{work}' && vit-scratch push r3 me/x"
    absolute = ["r.yaml", "--dataset", str(work / "big"), "--output_dir", str(work / "r3"), "--seed", "3"]
    monkeypatch.setattr(sys, "argv", ["vit-scratch train", *absolute])
    assert arguments.plain_command() == shlex.join(["vit-scratch", "train", *absolute])  # r.yaml: not here
    moved = here(resume, str(work / "r3"), Path("r4"))  # the run folder moved since: still from that folder
    words = ["vit-scratch", "train", *[str(work / "r4") if word == "r3" else word for word in given]]
    assert moved == f"cd '{work}' && {shlex.join([*words, '--resume_from_checkpoint', 'true'])}"
