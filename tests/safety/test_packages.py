"""Every argument of train that needs a package (or a tool) beyond the package's own dependencies is checked in one
place (`training/packages.py`), right after parsing and before any argument object is built, any folder made or any
data read: a missing one is one line naming the argument, the package and how to install it, never a traceback.

The optimizers are taken from transformers' own list (`OptimizerNames`): each one whose package is missing here is
tried, so an optimizer transformers adds is covered without a new case.
"""

import importlib.metadata
import sys

import pytest
from entry_points import Scenario, outcome, run_command, with_argument
from transformers import Trainer
from transformers.training_args import OptimizerNames

import modeling_vit_scratch.training.trainer as trainer_module
from modeling_vit_scratch.training.arguments import parse_arguments


@pytest.fixture
def never_trains(monkeypatch):
    """A refusal comes before the data set is read: reading it fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("the data set was read")

    monkeypatch.setattr(trainer_module, "load_image_dataset", refuse)


def missing_package(optim: str) -> bool:
    """Whether transformers' dispatch of `--optim optim` fails here for want of a package."""
    *_, args = parse_arguments(["--output_dir", "unused", "--optim", "adamw_torch"])
    args.optim = optim
    try:
        Trainer.get_optimizer_cls_and_kwargs(args, model=None)
    except ImportError:
        return True
    except ValueError as error:
        return "install" in str(error).lower() or "import" in str(error).lower()
    except Exception:  # noqa: BLE001 - it got past the import: it needs a model, not a package
        return False
    return False


OPTIMIZERS_MISSING_HERE = [name.value for name in OptimizerNames if missing_package(name.value)]


@pytest.mark.parametrize("optim", OPTIMIZERS_MISSING_HERE)
def test_an_optimizer_whose_package_is_missing_is_one_line_before_any_work(tmp_path, optim, never_trains):
    result = outcome("train", with_argument(Scenario(tmp_path).argv("train"), "--optim", optim))
    assert result.code == 1 and result.one_line, result
    assert result.error.startswith(f"error: --optim {optim} needs a package that is not installed (")
    assert "install" in result.error.lower()
    assert result.error.endswith("install it, or leave out --optim (the default, adamw_torch, needs none).")
    assert not (tmp_path / "out-train").exists()


@pytest.mark.parametrize(
    "argument, value, patch, said",
    [
        (
            "--deepspeed",
            "ds.json",
            ("transformers.dependency_versions_check.dep_version_check", "missing"),
            "error: --deepspeed needs the package deepspeed (deepspeed>=",
        ),
        (
            "--use_liger_kernel",
            "true",
            ("transformers.utils.is_liger_kernel_available", "false"),
            (
                "error: --use_liger_kernel true needs the package liger-kernel (>= 0.3.0), which is not installed: "
                "`pip install liger-kernel`"
            ),
        ),
        (
            "--torch_compile",
            "true",
            ("torch._inductor.cpp_builder.get_cpp_compiler", "no compiler"),
            "error: --torch_compile true compiles the model to C++ for this CPU, and no C++ compiler was found",
        ),
    ],
    ids=["deepspeed", "liger", "torch_compile"],
)
def test_an_argument_whose_package_is_missing_is_one_line_before_any_work(
    tmp_path, monkeypatch, argument, value, patch, said, never_trains
):
    import torch
    from torch._inductor import exc

    target, how = patch

    def missing(*args, **kwargs):
        if how == "no compiler":
            raise exc.InvalidCxxCompiler
        raise importlib.metadata.PackageNotFoundError("not installed")

    monkeypatch.setattr(target, (lambda: False) if how == "false" else missing)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    if argument == "--deepspeed":  # a settings file that reads as one, so that only the package is missing
        value = tmp_path / value
        value.write_text("{}")
    result = outcome("train", with_argument(Scenario(tmp_path).argv("train"), argument, value))
    assert result.code == 1 and result.one_line, result
    assert result.error.startswith(said)
    assert f"leave out {argument}." in result.error
    assert not (tmp_path / "out-train").exists()


@pytest.mark.integration
def test_deepspeed_without_the_package_is_one_line_not_a_traceback(tmp_path):
    """The reviewer's case as a user runs it: `TrainingArguments` itself would fail in 50 lines of traceback."""
    try:
        importlib.metadata.version("deepspeed")
        pytest.skip("deepspeed is installed here")
    except importlib.metadata.PackageNotFoundError:
        pass
    (tmp_path / "ds.json").write_text("{}")
    argv = with_argument(Scenario(tmp_path).argv("train"), "--deepspeed", tmp_path / "ds.json")
    done = run_command("train", argv, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert (
        done.stderr.strip().splitlines()[-1].startswith("error: --deepspeed needs the package deepspeed (deepspeed>=")
    ), done.stderr
    assert "`pip install 'deepspeed>=" in done.stderr
    assert not (tmp_path / "out-train").exists()


@pytest.mark.parametrize("implementation", ["timm", "timm-compiled"])
def test_a_benchmark_implementation_whose_package_is_missing_is_one_line_before_measuring(
    implementation, tmp_path, monkeypatch
):
    from modeling_vit_scratch.benchmark import command as benchmark_command

    def measured(*args, **kwargs):
        raise AssertionError("the benchmark measured")

    monkeypatch.setitem(sys.modules, "timm", None)  # timm cannot be imported, wherever the tests run
    monkeypatch.setattr(benchmark_command, "run_measurements", measured)
    argv = [*Scenario(tmp_path).argv("benchmark"), "--implementations", "vit_scratch", "transformers-sdpa"]
    result = outcome("benchmark", [*argv, implementation])
    assert result.one_line, result
    assert result.error.startswith(f"error: --implementations {implementation} needs the timm package, which cannot")
    assert result.error.endswith(
        "install it with pip install 'vit-scratch[timm]', or measure without it: --implementations vit_scratch "
        "transformers-sdpa."
    )


def test_the_benchmark_s_default_list_leaves_out_what_is_not_installed_and_says_so(tmp_path, monkeypatch, capsys):
    from modeling_vit_scratch.benchmark import command as benchmark_command
    from modeling_vit_scratch.benchmark.models import IMPLEMENTATIONS

    measured = []
    monkeypatch.setitem(sys.modules, "timm", None)  # timm cannot be imported, wherever the tests run
    monkeypatch.setattr(benchmark_command, "run_measurements", lambda args, argv: measured.append(args.implementations))
    assert outcome("benchmark", Scenario(tmp_path).argv("benchmark")).code == 0
    assert measured == [[name for name in IMPLEMENTATIONS if name != "timm"]]
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "Not measured: timm, whose package is not installed (pip install 'vit-scratch[timm]')."
    )
