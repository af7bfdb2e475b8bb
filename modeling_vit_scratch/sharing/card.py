"""The model card: a folder's README.md, written from what the folder holds.

`write_card(folder)` reads config.json, and whichever of training_record.json (train), conversion_record.json
(convert) and all_results.json exist, and renders `model_card.md` (a Jinja template shipped in the package) through
huggingface_hub's `ModelCard.from_template`; the front matter (library, pipeline tag, data set, `model-index` with the
test metrics) is huggingface_hub's `ModelCardData`. Nothing unknown is claimed: no record, no training section; weights
that are not the ones the record names (`weights_sha256`) get no metrics.

User text (labels, data set names, paths, commands, anything a record holds) reaches the card only through `escaped`,
on top of `secrets.shown`: no token, no control character, and never read as Markdown or HTML (the Hub renders a
card's HTML, so a label `<img onerror=...>` would otherwise be live). Local paths are named by their last part.

Training glue, never imported by the model files.
"""

import hashlib
import html
import os
import re
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..configuration_vit_scratch import is_masked_autoencoder
from ..secrets import shown
from ..sources import read_json, weights_sha256

TEMPLATE = Path(__file__).with_name("model_card.md")  # a link to the repository's model_card.md
RECORD_FILE, CONVERSION_FILE, RESULTS_FILE = "training_record.json", "conversion_record.json", "all_results.json"
FIGURES = ("training_curves.png", "confusion_matrix.png", "reconstruction.png")
METRICS = {"accuracy": "accuracy", "top5_accuracy": "top-5 accuracy", "loss": "cross-entropy loss"}
ARCHITECTURE = {
    "image_size": "input size",
    "num_channels": "channels",
    "patch_size": "patch size",
    "stem": "stem",
    "hidden_size": "hidden size",
    "num_hidden_layers": "depth (blocks)",
    "num_attention_heads": "attention heads",
    "intermediate_size": "MLP size",
    "pooling": "pooling",
    "position_embedding": "position embedding",
    "distillation_token": "distillation token",
    "num_register_tokens": "register tokens",  # this and the next: rows only where the model has them
    "layerscale_value": "layer scale (initial value)",
}
DECODER = {  # the rows a masked autoencoder adds
    "mask_ratio": "patches hidden (mask ratio)",
    "decoder_hidden_size": "decoder hidden size",
    "decoder_num_hidden_layers": "decoder depth (blocks)",
    "norm_pix_loss": "loss on per-patch normalised pixels",
}
WHEN_SET = ("num_register_tokens", "layerscale_value")
NOTES = {  # record key -> how the card introduces it
    "augmentation": "Augmentation:",
    "distillation": "Distillation:",
    "layer_decay": "Learning rates:",
    "weight_average": "Weights:",
    "precision_choice": "Precision:",
    "model_selection": "The checkpoint kept is",
}
CLASSES_SHOWN = 10  # the per-class table: every class up to this many, else this many of the lowest accuracy
DIGITS = "digits"  # the --dataset name of scikit-learn's handwritten digits
# what Markdown reads in running text: emphasis, code, links and images, a table cell's end, strikethrough, headings
# and the backslash itself (`<`, `>`, `&` and quotes are HTML-escaped instead)
MARKDOWN = re.compile(r"([\\`*_\[\]|~#])")
# the card's last line: a later push or run may replace a card whose text still has this hash, never an edited one
CARD_MARK = "<!-- written by vit-scratch; sha256 of the text above: {} -->"
ABSOLUTE = re.compile(r"(?<![\w:/])(?:~|/)[^\s'\"]*")  # an absolute (or home) path inside a command line


def escaped(value: object, block: bool = False) -> str:
    """User text as the card writes it: `shown` (no token, control characters escaped), then on one line with Markdown
    punctuation backslash-escaped and HTML escaped; `block`: a fenced code block (longer than any backtick run in the
    text), which no renderer reads as Markdown or HTML."""
    text = shown(value)
    if block:
        fence = "`" * max(3, 1 + max(map(len, re.findall("`+", text)), default=0))
        return f"{fence}bash\n{text}\n{fence}"
    return html.escape(MARKDOWN.sub(r"\\\1", " ".join(text.split())))


def public(text: object) -> str:
    """A local path by its last part (`/home/me/runs/vit` -> `vit`), a Hub id or a name as it is: where a model came
    from, not where it lay on someone's disk."""
    text = str(text)
    local = text.startswith(("/", "~", ".")) or (os.sep in text and os.path.exists(text))
    return (Path(text.rstrip("/")).name or text) if local else text


def public_command(command: str) -> str:
    """A command line with each absolute path cut to its last part."""
    return ABSOLUTE.sub(lambda found: Path(found.group(0).rstrip("/")).name or found.group(0), command)


def public_record(value: object, key: str | None = None) -> object:
    """A training or conversion record as published beside the card: each local path cut as the card cuts it (a
    command's absolute paths, a dataset's or a run's folder), every other value as recorded."""
    if isinstance(value, dict):
        return {name: public_record(item, name) for name, item in value.items()}
    if isinstance(value, list):
        return [public_record(item, key) for item in value]
    if isinstance(value, str):
        return public_command(value) if key == "command" else public(value)
    return value


def auto_class(config: dict) -> str:
    """The Auto class a folder's model loads by: a masked autoencoder's, or an image classifier's."""
    return "AutoModelForPreTraining" if is_masked_autoencoder(config) else "AutoModelForImageClassification"


def parameter_count(folder: Path) -> int:
    """The parameters of the model the folder's config.json builds, counted as transformers' `num_parameters` counts
    them (a run's all_results.json too): buffers such as a BatchNorm's running statistics, which the weights file also
    holds, are no parameters. The model is built on the meta device: nothing is allocated or read."""
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = getattr(transformers, auto_class(config.to_dict())).from_config(config)
    return model.num_parameters()


def read_optional(folder: Path, name: str) -> dict:
    return read_json(folder / name, shown(folder / name)) if (folder / name).is_file() else {}


def measured(folder: Path, record: dict | None = None) -> bool:
    """Whether the folder's weights are the ones its training record names (the metrics were measured on them); True
    where there is no record or it names no weights (nothing to contradict)."""
    record = read_optional(folder, RECORD_FILE) if record is None else record
    recorded = record.get("weights_sha256")
    return not recorded or recorded == weights_sha256(folder)


def origin(record: dict, conversion: dict) -> str:
    """Where the weights come from, as far as the folder's records say."""
    if record:
        start = record.get("initial_weights")
        commit = record.get("initial_weights_commit")
        start = f", starting from the weights of {escaped(public(start))}" if start else ""
        return f"trained with vit-scratch{start}" + (f" at commit {escaped(commit)}" if start and commit else "")
    if "checkpoint" in conversion:
        return f"saved at step {escaped(conversion['checkpoint'])} of the vit-scratch run {escaped(public(conversion.get('run', '')))}"
    if conversion:
        source = escaped(public(conversion.get("input", "another model")))
        at = f" at commit {escaped(conversion['commit'])}" if conversion.get("commit") else ""
        kind = conversion.get("timm_model") and f"timm's {escaped(conversion['timm_model'])}"
        kind = kind or f"a {escaped(conversion.get('from') or 'transformers')} model"
        return f"converted by vit-scratch from {source}{at} ({kind}), its weights unchanged"
    return "of unknown origin: its folder holds no training or conversion record, so this card claims neither"


def counted(number: object, noun: str) -> str:
    """`number` and `noun`, plural unless it is 1: "1 epoch", "2.5 epochs"."""
    text = f"{number:g}" if isinstance(number, float) else escaped(number)
    return f"{text} {noun}{'' if number == 1 else 'es' if noun.endswith('s') else 's'}"


def training_section(record: dict) -> dict:
    """The card's training section from a training record: data, splits, procedure, notes and commands."""
    dataset = record.get("dataset")
    if dataset == DIGITS:
        dataset = "scikit-learn's handwritten digits (`sklearn.datasets.load_digits`)"
    else:
        dataset = escaped(public(dataset or "not recorded"))
    held_out = f"{counted(record.get('num_validation'), 'validation image')} and {counted(record.get('num_test'), 'test image')}"
    if record.get("streamed_images") is not None:
        splits = f"training streamed ({counted(record['streamed_images'], 'image')} seen), {held_out}"
        length = f"{counted(record.get('steps'), 'step')} over a stream"
    else:
        splits = f"{counted(record.get('num_train'), 'training image')}, {held_out}"
        length = counted(record.get("epochs"), "epoch")
    values = {key: escaped(record.get(key)) for key in ("learning_rate", "weight_decay", "scheduler", "seed")}
    processes = record.get("world_size") or 1
    batch = escaped(record.get("total_batch"))
    if record.get("batch_asked"):  # the training split is smaller than the batch asked: all of it is one batch
        batch += f" ({escaped(record['batch_asked'])} asked: the {counted(record.get('num_train'), 'training image')} make one batch)"
    procedure = (
        f"Trained for {length} with the transformers `Trainer`, AdamW (learning rate {values['learning_rate']}, "
        f"weight decay {values['weight_decay']}, {values['scheduler']} schedule), global batch size {batch}, "
        f"seed {values['seed']}, {counted(processes, 'process')}"
        + (f", {escaped(record['precision'])}" if record.get("precision") else "")
    )
    legs = record.get("legs") or [{"command": record.get("command")}]
    if isinstance(record.get("wall_time_seconds"), (int, float)):
        procedure += ", in {} min {} s of wall time".format(*divmod(int(record["wall_time_seconds"]), 60))
        procedure += f" (the sum of its {len(legs)} commands)" if len(legs) > 1 else ""
    notes = [f"{said} {escaped(record[key])}" for key, said in NOTES.items() if record.get(key)]
    typed = [str(leg.get("command") or "(not recorded)") for leg in legs]
    heads = ["The first command", *["Resumed from a checkpoint with"] * (len(typed) - 1)] if len(typed) > 1 else []
    heads = heads or ["The command"]
    if any(public_command(command) != command for command in typed):  # not as typed: say how, and where it is whole
        heads[0] += " (each absolute path cut to its last part; training_record.json holds them whole)"
    commands = [
        f"{head}:\n\n" + escaped(public_command(command), block=True)
        for head, command in zip(heads, typed, strict=True)
    ]
    return dict(dataset=dataset, splits=splits, procedure=procedure, notes=notes, commands=commands)


def results(metrics: dict) -> tuple[list, list]:
    """(rows of the results table, rows of the per-class table) from all_results.json; what is not a number is left
    out."""
    rows = [
        (split, name, f"{metrics[prefix + key]:.4f}")
        for split, prefix in (("test", "test_"), ("validation", "eval_"))
        for key, name in METRICS.items()
        if isinstance(metrics.get(prefix + key), (int, float)) and not isinstance(metrics[prefix + key], bool)
    ]
    accuracy = metrics.get("test_per_class_accuracy")
    confusion = metrics.get("test_confusion_matrix") or {}
    if not isinstance(accuracy, dict):
        return rows, []
    counts = {}
    if isinstance(confusion, dict) and isinstance(confusion.get("matrix"), list):
        for label, row in zip(confusion.get("labels") or [], confusion["matrix"], strict=False):
            counts[str(label)] = sum(row) if isinstance(row, list) else "-"
    classes = sorted(accuracy.items(), key=lambda item: item[1] if isinstance(item[1], (int, float)) else float("inf"))[
        :CLASSES_SHOWN
    ]
    if len(accuracy) <= CLASSES_SHOWN:
        classes = list(accuracy.items())
    return rows, [
        (
            escaped(name),
            escaped(counts.get(str(name), "-")),
            f"{value:.4f}" if isinstance(value, (int, float)) else "n/a",
        )
        for name, value in classes
    ]


def card_data(
    config: dict, metrics: dict, dataset: object, model_name: str, pretraining: bool = False
) -> ModelCardData:
    """The front matter the Hub reads: library, task (none for a masked autoencoder, which no pipeline runs), data
    set (a Hub id only) and the test metrics."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    name = shown(public(dataset)) if dataset else None
    try:
        on_hub = bool(name) and name == shown(dataset) and dataset != DIGITS and not Path(str(dataset)).exists()
        on_hub and validate_repo_id(name)
    except HFValidationError:
        on_hub = False
    kind = name or "images"
    evals = [
        EvalResult(
            task_type="image-classification",
            dataset_type=kind,
            dataset_name=kind,
            dataset_split="test",
            metric_type=key,
            metric_name=METRICS[key],
            metric_value=round(float(metrics[f"test_{key}"]), 4),
        )
        for key in ("accuracy", "top5_accuracy")
        if isinstance(metrics.get(f"test_{key}"), (int, float))
    ]
    own = config.get("model_type") == "vit_scratch"
    return ModelCardData(
        library_name="transformers",
        pipeline_tag=None if pretraining else "image-classification",
        license="apache-2.0",
        tags=["vision-transformer", "vit", "vit_scratch", "custom_code"] if own else ["vit-scratch"],
        datasets=[name] if on_hub else None,
        metrics=[result.metric_type for result in evals] or None,
        model_name=shown(model_name),
        eval_results=evals or None,
    )


def card_text(folder: str | os.PathLike, repo_id: str | None = None, revision: str | None = None) -> str:
    """The card for `folder`, its loading example naming `repo_id` at `revision` where known."""
    folder = Path(folder)
    config = read_json(folder / "config.json", shown(folder / "config.json"))
    record, conversion = read_optional(folder, RECORD_FILE), read_optional(folder, CONVERSION_FILE)
    metrics = read_optional(folder, RESULTS_FILE)
    unmeasured = bool(record) and not measured(folder, record)
    if conversion.get("weights_sha256") and conversion["weights_sha256"] != weights_sha256(folder):
        conversion = {}  # it vouches for other weights
    dataset = record.get("dataset")
    model_name = (repo_id or "").split("/")[-1] or f"vit-scratch-{public(dataset) if dataset else 'model'}"
    result_rows, class_rows = ([], []) if unmeasured else results(metrics)
    pretraining = is_masked_autoencoder(config)
    if pretraining:  # its loss is the reconstruction's
        result_rows = [(split, "reconstruction loss", value) for split, name, value in result_rows if "loss" in name]
    labels = [] if pretraining else [str(label) for label in (config.get("id2label") or {}).values()]
    own = config.get("model_type") == "vit_scratch"
    options = (", trust_remote_code=True" if own else "") + (f', revision="{revision}"' if revision else "")
    present = [name for name in (RESULTS_FILE, RECORD_FILE, *FIGURES) if (folder / name).is_file()]
    card = ModelCard.from_template(
        card_data(config, {} if unmeasured or pretraining else metrics, dataset, model_name, pretraining),
        template_path=str(TEMPLATE),
        model_name=escaped(model_name),
        model_type=escaped(config.get("model_type", "unknown")),
        own=own,
        pretraining=pretraining,
        classes_cut=len(metrics.get("test_per_class_accuracy") or ()) > CLASSES_SHOWN,
        origin=origin(record, conversion),
        unmeasured=unmeasured,
        architecture=[
            (said, escaped(config[key]))
            for key, said in (ARCHITECTURE | (DECODER if pretraining else {})).items()
            if key in config and (config[key] or key not in WHEN_SET)
        ],
        num_parameters=parameter_count(folder),
        num_labels=len(labels),
        label_preview=", ".join(map(escaped, labels[:CLASSES_SHOWN]))
        + (", ..." if len(labels) > CLASSES_SHOWN else ""),
        record=training_section(record) if record else None,
        result_rows=result_rows,
        class_rows=class_rows,
        files=", ".join(f"`{name}`" for name in present),
        reconstruction=(folder / "reconstruction.png").is_file() and not unmeasured,
        model_id=repo_id or "path/to/this/folder",
        load_options=options,
    )
    return str(card)


def marked(text: str) -> str:
    """The card with its last line marking it as the package's own, unedited."""
    return f"{text}{CARD_MARK.format(hashlib.sha256(text.encode()).hexdigest())}\n"


def unedited(card: bytes) -> bool:
    """Whether a README.md is a card the package wrote (a run or a push) and nobody edited since."""
    body, _, last = card.decode("utf-8", errors="replace").rstrip("\n").rpartition("\n")
    found = re.fullmatch(CARD_MARK.format("([0-9a-f]{64})"), last)
    return bool(found) and hashlib.sha256(f"{body}\n".encode()).hexdigest() == found.group(1)


def write_card(folder: str | os.PathLike) -> None:
    """Write `folder/README.md` from the folder's config, records and results, marked as the package's own."""
    Path(folder, "README.md").write_text(marked(card_text(folder)), encoding="utf-8")
