"""What training arguments need beyond the package's own dependencies, checked in one place, right after parsing and
before any argument object is built, any folder made or any data read: a missing package is one line naming the
argument, the package and the `pip install` that brings it, instead of a traceback (`--deepspeed` fails inside
`TrainingArguments` itself, `--optim` and `--report_to` only once the Trainer is built, after the data set is read).

- `--deepspeed`: transformers' own version check of `deepspeed`;
- `--optim`: transformers' own optimizer dispatch (`Trainer.get_optimizer_cls_and_kwargs`), which imports the
  optimizer's package (bitsandbytes, torchao, galore, apollo, lomo, schedulefree, grokadamw, torch-optimi, ...);
- `--use_liger_kernel`: `liger-kernel`;
- `--report_to`: each integration is one transformers knows, and its package is installed;
- `--torch_compile` on a machine without an accelerator: a C++ compiler for inductor's CPU code.
`--fsdp` needs no package but several accelerator processes: `distributed.check_fsdp`.
"""

from types import SimpleNamespace

import torch

# --report_to's integrations: the test that each can be used (transformers' own), and the package that provides it
REPORTING_PACKAGES = {
    "azure_ml": ("is_azureml_available", "azureml-core"),
    "clearml": ("is_clearml_available", "clearml"),
    "codecarbon": ("is_codecarbon_available", "codecarbon"),
    "comet_ml": ("is_comet_available", "comet_ml"),
    "dagshub": ("is_dagshub_available", "dagshub"),
    "dvclive": ("is_dvclive_available", "dvclive"),
    "flyte": ("is_flytekit_available", "flytekit"),
    "kubeflow": ("is_kubeflow_available", "kubeflow"),
    "mlflow": ("is_mlflow_available", "mlflow"),
    "neptune": ("is_neptune_available", "neptune"),
    "swanlab": ("is_swanlab_available", "swanlab"),
    "tensorboard": ("is_tensorboard_available", "tensorboard"),
    "trackio": ("is_trackio_available", "trackio"),
    "wandb": ("is_wandb_available", "wandb"),
}


def check_argument_packages(values: dict) -> None:
    """A one-line ValueError for the first argument in `values` (every argument by name, as parsed) whose package
    or tool is missing."""
    check_deepspeed(values.get("deepspeed"))
    check_optimizer(values)
    check_liger(values.get("use_liger_kernel"))
    check_report_to(values.get("report_to"))
    check_compiler(values.get("torch_compile"), values.get("torch_compile_backend"))


def check_deepspeed(config) -> None:
    """`--deepspeed CONFIG` needs deepspeed at transformers' minimum version, checked as transformers checks it."""
    if not config:
        return
    from transformers.dependency_versions_check import dep_version_check
    from transformers.dependency_versions_table import deps

    try:
        dep_version_check("deepspeed")
    except ImportError:  # PackageNotFoundError is an ImportError; so is a version below the minimum
        raise ValueError(
            f"--deepspeed needs the package deepspeed ({deps['deepspeed']}), which is not installed: "
            f"`pip install '{deps['deepspeed']}'`, or leave out --deepspeed."
        ) from None


def check_optimizer(values: dict) -> None:
    """`--optim NAME` whose optimizer lives in another package: transformers' own dispatch imports it now, without a
    model (only the package is asked for here; what the optimizer needs of the model is the Trainer's to check)."""
    from transformers import Trainer

    name = str(values.get("optim") or "")
    try:
        Trainer.get_optimizer_cls_and_kwargs(SimpleNamespace(**values), model=None)
    except ImportError as error:
        reason = " ".join(str(error).split())
    except ValueError as error:  # transformers says some of these as ValueErrors: "Please install grokadamw ..."
        reason = " ".join(str(error).split())
        if "install" not in reason.lower() and "import" not in reason.lower():
            return
    except Exception:  # noqa: BLE001 - anything else is about the model or other arguments: the Trainer's to say
        return
    else:
        return
    raise ValueError(
        f"--optim {name} needs a package that is not installed ({reason.rstrip('.')}): install it, or leave out "
        "--optim (the default, adamw_torch, needs none)."
    )


def check_liger(use_liger_kernel) -> None:
    """`--use_liger_kernel true` needs liger-kernel, checked as transformers checks it."""
    from transformers.utils import is_liger_kernel_available

    if use_liger_kernel and not is_liger_kernel_available():
        raise ValueError(
            "--use_liger_kernel true needs the package liger-kernel (>= 0.3.0), which is not installed: `pip install "
            "liger-kernel`, or leave out --use_liger_kernel."
        )


def check_report_to(report_to) -> None:
    """Each `--report_to` integration is one transformers knows and is installed, or one line naming the package to
    install: the Trainer would raise only once it is built, after the data set is read and checked."""
    from transformers.integrations import integration_utils

    from modeling_vit_scratch.training.arguments import closest  # which imports this module

    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    for name in names:
        if name in ("none", "all"):
            continue
        if name not in REPORTING_PACKAGES:
            raise ValueError(
                f"--report_to {name!r} is not an integration transformers reports to"
                f"{closest(name, list(REPORTING_PACKAGES))}: give one or more of "
                f"{', '.join(REPORTING_PACKAGES)} (separated by spaces), or none."
            )
        available, package = REPORTING_PACKAGES[name]
        if not getattr(integration_utils, available)():
            others = "tensorboard or --report_to none" if integration_utils.is_tensorboard_available() else "none"
            raise ValueError(
                f"--report_to {name}: the package {package!r} is not installed: `pip install {package}`, or give "
                f"--report_to {others}."
            )


def check_compiler(torch_compile, backend) -> None:
    """`--torch_compile true` (or a `--torch_compile_backend`) with inductor, the default, on a machine without an
    accelerator compiles C++: without a compiler the first training step would fail deep inside torch."""
    if not (torch_compile or backend) or (backend or "inductor") != "inductor" or torch.accelerator.is_available():
        return
    from torch._inductor import exc
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        raise ValueError(
            "--torch_compile true compiles the model to C++ for this CPU, and no C++ compiler was found (g++ or "
            "clang++, or the one CXX names): install one (e.g. `apt-get install g++`), or leave out --torch_compile."
        ) from None
