"""The one check that a saved model folder reloads to the model that wrote it.

Training runs it before a model folder is published, the push gate before anything is uploaded, and the tests on
what they save. The folder is loaded through `AutoModelForImageClassification`, as users load it:
- in this process (the classes this package registers on import), or
- with `own_code=True`, in a new process where this package cannot be imported, so the folder's own `.py` files run
  (`trust_remote_code=True`), and where no Hub credential can be read. Call that only on a folder whose code is
  known to be the package's own (`hub.check_own_code`): it runs that code.

Training glue, never imported by the model files.
"""

import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForImageClassification

from modeling_vit_scratch.common.children import DIE_WITH_PARENT, child_env, scratch_folder
from modeling_vit_scratch.common.secrets import credential_free_env

# Run with `python -c`: folder, inputs file, outputs file, the calling process's thread count.
RELOAD_WITHOUT_PACKAGE = """
import sys
sys.modules["modeling_vit_scratch"] = None  # as on a machine without the package: only the folder's own code
import torch
from huggingface_hub import get_token
from transformers import AutoModelForImageClassification
if get_token() is not None:
    sys.exit("a Hub token reached the reload check, which must run without credentials")
folder, inputs, outputs, threads = sys.argv[1:5]
torch.set_num_threads(int(threads))  # the writer's thread count: the same summation order, so bit-equal logits
model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=True).eval()
with torch.no_grad():
    torch.save(model(torch.load(inputs)).logits, outputs)
"""


class FolderReloadError(RuntimeError):
    """A saved folder does not load, or loads to another model than the one that wrote it."""


def logits_in_new_process(folder: Path, pixel_values: torch.Tensor) -> torch.Tensor:
    """Logits (batch, labels) of `folder` loaded with its own code in a new, credential-free process."""
    with scratch_folder("reload") as scratch:  # a kill leaves it to the next command to remove
        torch.save(pixel_values, scratch / "inputs.pt")
        (scratch / "hub_home").mkdir()
        env = {**credential_free_env(scratch / "hub_home"), "HF_MODULES_CACHE": str(scratch / "modules")}
        command = [
            sys.executable,
            "-c",
            DIE_WITH_PARENT + RELOAD_WITHOUT_PACKAGE,  # a killed push takes its check with it
            str(folder),
            *(str(scratch / f) for f in ("inputs.pt", "logits.pt")),
            str(torch.get_num_threads()),
        ]
        result = subprocess.run(
            command, env=child_env(env), cwd=scratch, capture_output=True, text=True, timeout=600, check=False
        )
        if result.returncode != 0:
            last_line = (result.stderr.strip().splitlines() or ["no error output"])[-1]
            raise FolderReloadError(
                f"{folder} does not load through AutoModelForImageClassification with its own code ({last_line})"
            )
        return torch.load(scratch / "logits.pt")


def reloaded_logits(folder: str | Path, pixel_values: torch.Tensor, *, own_code: bool = False) -> torch.Tensor:
    """Logits (batch, labels) of `folder` loaded through `AutoModelForImageClassification`, in float32 on the CPU:
    in this process, or with `own_code` in a new process running the folder's own code without credentials."""
    folder = Path(folder).resolve()
    if own_code:
        return logits_in_new_process(folder, pixel_values).float()
    model = AutoModelForImageClassification.from_pretrained(folder, trust_remote_code=False, use_safetensors=True)
    model = model.eval()
    with torch.no_grad():
        return model(pixel_values=pixel_values).logits.float()


def model_logits(model, pixel_values: torch.Tensor) -> torch.Tensor:
    """`model`'s float32 logits (batch, labels) on the CPU for `pixel_values`, in eval mode; `model` is left in its
    mode. A sharded model (FSDP) computes them only with every process calling this on the same batch."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        parameter = next(model.parameters())
        logits = model(pixel_values=pixel_values.to(parameter.device, parameter.dtype)).logits.float()
    model.train(was_training)
    return logits.cpu()


def check_reloads_to(
    model,
    folder: str | Path,
    pixel_values: torch.Tensor,
    *,
    own_code: bool = False,
    tolerance: float = 0.0,
    expected: torch.Tensor | None = None,
) -> None:
    """Raise a `FolderReloadError` unless `folder` reloads to `model`: the same logits on `pixel_values`
    (batch, channels, height, width) within `tolerance` (0.0: bit for bit). `model` is left in its mode.
    `expected`: `model`'s logits computed beforehand (`model_logits`), as a sharded model needs."""
    expected = model_logits(model, pixel_values) if expected is None else expected
    got = reloaded_logits(folder, pixel_values, own_code=own_code)
    difference = (expected - got).abs().max().item() if expected.shape == got.shape else float("inf")
    if not difference <= tolerance:
        how = "with its own code" if own_code else "through the Auto classes"
        raise FolderReloadError(
            f"{folder} does not reload to the model that wrote it {how} (max logit difference {difference:.2e}, "
            f"allowed {tolerance:.0e})"
        )
