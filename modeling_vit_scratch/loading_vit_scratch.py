"""Loading a saved model strictly: transformers' `from_pretrained` fills a missing or misshapen tensor with random
weights and says so in a log line; a model folder here either loads as saved or is refused with the tensor named.

HF glue for `ViTScratchPreTrainedModel.from_pretrained`; it travels with the model files (`trust_remote_code`), so
it imports only the standard library.
"""

import json
import logging
import os
from contextlib import contextmanager, nullcontext

# transformers' loading logger: its LOAD REPORT and its warning on newly initialised weights go here, and so does ours
# on an untrained head, under the same verbosity settings
LOADING_LOGGER = "transformers.modeling_utils"


def weights_file_name(folder: str) -> str:
    """The weights file of a saved folder (its shard index when sharded), or `folder` itself (a hub repo id)."""
    for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"):
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    return folder


def incomplete_weights_file(folder: str) -> str:
    """The first `.safetensors` file of `folder` whose header does not cover its bytes (a copy cut short), else a
    description naming `folder`. Format: 8-byte little-endian header length, JSON header, then the tensor data."""
    names = os.listdir(folder) if os.path.isdir(folder) else []
    for name in sorted(name for name in names if name.endswith(".safetensors")):
        path = os.path.join(folder, name)
        with open(path, "rb") as file:
            header_length = int.from_bytes(file.read(8), "little")
            try:
                header = json.loads(file.read(header_length))
                data_end = max((e["data_offsets"][1] for k, e in header.items() if k != "__metadata__"), default=0)
            except (ValueError, TypeError, KeyError, AttributeError, IndexError):  # not JSON, or not a header
                return path
        if os.path.getsize(path) != 8 + header_length + data_end:
            return path
    return f"A weights file of {folder}"


# safetensors' dtypes that hold no fraction: a floating-point parameter stored in one was cast, or is no weight at all
INTEGER_DTYPES = ("BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64")


def stored_dtypes(folder: str) -> dict[str, str]:
    """Tensor name -> dtype as written in the headers of `folder`'s `.safetensors` files (empty for a hub repo id)."""
    names = os.listdir(folder) if os.path.isdir(folder) else []
    dtypes = {}
    for name in sorted(name for name in names if name.endswith(".safetensors")):
        with open(os.path.join(folder, name), "rb") as file:
            header = json.loads(file.read(int.from_bytes(file.read(8), "little")))
        dtypes |= {key: entry["dtype"] for key, entry in header.items() if key != "__metadata__"}
    return dtypes


def integer_stored_parameter(folder: str, model) -> str | None:
    """The first tensor of `folder`'s weights stored with an integer or bool dtype where `model` has a floating-point
    parameter (transformers would cast it silently: 0.7 stored as 0), else None."""
    floating = {name for name, tensor in model.state_dict().items() if tensor.is_floating_point()}
    prefix = f"{model.base_model_prefix}."
    for key, dtype in sorted(stored_dtypes(folder).items()):
        names = {key, key.removeprefix(prefix), prefix + key}
        if dtype in INTEGER_DTYPES and names & floating:
            return f"{key!r} ({dtype})"
    return None


class LoadReportFilter(logging.Filter):
    """Keeps transformers' LOAD REPORT (a multi-line table with terminal escape codes) out of the log, in `held`."""

    def __init__(self):
        super().__init__()
        self.held: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if "LOAD REPORT" in str(record.msg):
            self.held.append(record)
            return False
        return True


@contextmanager
def without_load_report():
    """While inside, transformers' loading logs no LOAD REPORT: `checked_loading` names what does not load as saved
    in one line, and fine-tuning replaces the head on purpose. Yields the filter, whose `held` records a caller may
    log after all (when transformers' own error refers to the report)."""
    logger, report_filter = logging.getLogger(LOADING_LOGGER), LoadReportFilter()
    logger.addFilter(report_filter)
    try:
        yield report_filter
    finally:
        logger.removeFilter(report_filter)


def warn_untrained_head(folder: str, model_class: str) -> None:
    """A classifier built from a masked-image pretraining folder has a new head: without fine-tuning its predictions
    are random. Loading it that way is allowed (it is how fine-tuning starts), so it is said, as transformers says
    what it initialised; a caller that asked for new heads (`ignore_mismatched_sizes=True`) is not told."""
    logging.getLogger(LOADING_LOGGER).warning(
        f"{folder} is a masked-image pretraining checkpoint: the classifier head of this {model_class} is new and "
        f"untrained, so its predictions are random; fine-tune it on labelled images first with vit-scratch's "
        f"scripts/train.py --model {folder} (docs/training.md#few-labels-many-images)"
    )


class WeightsError(ValueError):
    """Saved weights that do not make the model config.json describes (a tensor missing, unexpected, of another shape
    or stored as integers): the message names the file, the tensor and the fix."""


class WeightsShapeMismatchError(WeightsError, RuntimeError):
    """A tensor of the weights has another shape than config.json asks for. A `ValueError` naming it, and the
    `RuntimeError` transformers raises for a size mismatch, so code written for either catches it."""


def checked_loading(load, pretrained_model_name_or_path, *args, **kwargs):
    """`load` (a `PreTrainedModel.from_pretrained`), refusing what it would fill with random weights: a tensor
    missing from the weights or of another shape than config.json asks for, an unexpected tensor, a truncated
    weights file. Returns what `load` returns.

    `ignore_mismatched_sizes=True` (fine-tuning with a new head) lets shapes differ and the head be missing; the
    differing keys are in `output_loading_info=True`'s `mismatched_keys` for the caller to check.
    `output_loading_info=True` alone returns missing and unexpected keys in the info instead of raising: the
    caller asked to check them (transformers' contract, which its common tests rely on); with
    `ignore_mismatched_sizes=True` as well (fine-tuning), every tensor but the head must still load. An in-memory
    `state_dict` with no folder (`from_pretrained(None, config=..., state_dict=...)`) is the caller's own too.
    """
    new_head = kwargs.get("ignore_mismatched_sizes", False)
    wants_info = kwargs.pop("output_loading_info", False)
    kwargs["ignore_mismatched_sizes"] = True  # transformers raises a RuntimeError without names; the check is below
    try:
        # what the report would say is checked below and said in one line; a caller that asked to ignore
        # mismatched sizes (a new head) gets transformers' report, as transformers promises
        with nullcontext(LoadReportFilter()) if new_head else without_load_report() as report:
            model, info = load(pretrained_model_name_or_path, *args, output_loading_info=True, **kwargs)
    except Exception as error:
        if type(error).__name__ != "SafetensorError":  # safetensors' error names no file
            for record in report.held:  # an error of transformers' own may refer to "the above report"
                logging.getLogger(LOADING_LOGGER).handle(record)
            raise
        where = incomplete_weights_file(str(pretrained_model_name_or_path))
        fix = "re-save the model or download it again"
        raise OSError(f"{where} is incomplete or corrupt ({error}): {fix}.") from None
    in_memory = pretrained_model_name_or_path is None
    weights = "The state_dict" if in_memory else weights_file_name(str(pretrained_model_name_or_path))
    is_head = lambda key: key.split(".")[0] in ("classifier", "distillation_classifier", "decoder")
    # a masked autoencoder's folder (its decoder unexpected here) has no classifier: a classifier gets a new head
    from_pretraining = any(key.startswith("decoder.") for key in info["unexpected_keys"])
    missing = sorted(key for key in info["missing_keys"] if not ((new_head or from_pretraining) and is_head(key)))
    # a head this model has not (the encoder alone, or the class head alone of a two-headed model) is left out
    unexpected = sorted(
        key for key in info["unexpected_keys"] if not (is_head(key) and not hasattr(model, key.split(".")[0]))
    )
    mismatched = [] if new_head else sorted(info["mismatched_keys"])
    more = lambda keys: f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
    different = "the config and the weights describe different models; re-save the model with both"
    if mismatched:
        key, stored, wanted = mismatched[0]
        raise WeightsShapeMismatchError(
            f"{weights} holds {key!r}{more(mismatched)} of shape {tuple(stored)} "
            f"where config.json asks for {tuple(wanted)}: {different}."
        )
    integer = None if in_memory else integer_stored_parameter(str(pretrained_model_name_or_path), model)
    if integer:
        raise WeightsError(
            f"{weights} stores the floating-point parameter {integer} as integers, which would be cast and lose "
            "every fraction: re-save the model with save_pretrained (weights in float32, float16 or bfloat16)."
        )
    if from_pretraining and not new_head and any(is_head(key) for key in info["missing_keys"]):
        warn_untrained_head(str(pretrained_model_name_or_path), type(model).__name__)
    if (wants_info and not new_head) or in_memory:  # the caller checks missing and unexpected keys itself
        return (model, info) if wants_info else model
    if missing:
        raise WeightsError(
            f"{weights} has no tensor {missing[0]!r}{more(missing)} that config.json asks for: {different}."
        )
    if unexpected:
        raise WeightsError(
            f"{weights} has a tensor {unexpected[0]!r}{more(unexpected)} that config.json has no "
            f"place for: {different}."
        )
    return (model, info) if wants_info else model
