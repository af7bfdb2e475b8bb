"""The model card: `model_card.md` (a Jinja template at the top of the repository, shipped inside the package)
rendered with measured values.

The YAML front matter is built by `huggingface_hub.ModelCardData` (library, pipeline tag, tags, license, data set and
a `model-index` with the measured metrics). Values that are not known are left out, never invented; rendering
fails if the template refers to anything that was not given, so no placeholder survives.

User text (label names, the data set's path, the command, the repo id) is data: it reaches the template only as
values, which jinja never parses, and the check for a leftover placeholder reads the template's own output with each
value held out (`render_template`), so a class named `{{ x }}` is written as it is. Every such value goes through
`user_text` once, which writes it as text (Markdown and HTML escaped, or a code span or block that holds it whole),
so a name holding `<script>`, a link or an image shows as the characters it is and renders nothing on the Hub.
"""

import html
import json
import math
import re
import uuid
from collections.abc import Collection
from pathlib import Path

import jinja2
from huggingface_hub import EvalResult, ModelCard, ModelCardData

from modeling_vit_scratch.common.folders import CONFUSION_FILE, CURVES_FILE, RESULTS_FILE
from modeling_vit_scratch.common.provenance import public_command, public_name
from modeling_vit_scratch.common.sources import DIGITS
from modeling_vit_scratch.configuration_vit_scratch import MODEL_SIZES, ViTScratchConfig, to_pair
from modeling_vit_scratch.training.precision import precision_words, training_precision

TEMPLATE = Path(__file__).with_name(
    "model_card.md"
)  # a link to the repository's model_card.md, shipped as package data
DIGITS_TEXT = (
    "The handwritten digits bundled with scikit-learn (`sklearn.datasets.load_digits`, a copy of the test set of the "
    "UCI ML hand-written digits data set): 1,797 grayscale 8x8 images of the digits 0-9 written by 43 people, "
    "pixel values 0-16 scaled to 8 bits. The test split is the stratified 20% of "
    "`train_test_split(..., stratify=y, random_state=0)`; the validation split comes from the training part only."
)
METRIC_NAMES = {"accuracy": "accuracy", "top5_accuracy": "top-5 accuracy", "loss": "cross-entropy loss"}
# the files the card may point at, as a training run writes them: the numbers, the curves, the confusion matrix
DESCRIBING_FILES = (RESULTS_FILE, CURVES_FILE, CONFUSION_FILE)
CARD_CLASSES = 10  # the per-class table lists every class up to this many, else this many of the worst


def size_name(config: ViTScratchConfig) -> str:
    """'ViT-B/16' for a paper-sized model, 'R50+ViT-B/16' for a hybrid (the pixels a token covers), else
    'custom, patch 2'."""
    dims = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads")
    patch = config.cell_size  # the patch size itself without a stem
    patch_text = str(patch[0]) if patch[0] == patch[1] else f"{patch[0]}x{patch[1]}"
    stem = {"none": "", "conv": "conv-stem "}.get(config.stem, f"R{resnet_depth(config) or ''}+")
    for name, size in MODEL_SIZES.items():
        if all(getattr(config, dim) == size[dim] for dim in dims):
            return f"{stem}ViT-{name[0].upper()}/{patch_text}"
    return f"a custom size, {stem}patch {patch_text}"


def resnet_depth(config: ViTScratchConfig) -> int:
    """The layer count in a ResNet's name (R50: 16 bottlenecks of 3 convs, the root conv and the head; 0 for the
    root alone)."""
    return 2 + 3 * sum(config.stem_depths) if config.stem_depths else 0


def stem_text(config: ViTScratchConfig) -> str:
    """One line on the stem for the card, '' without one."""
    if config.stem == "conv":
        convs = ", ".join(str(channels) for channels in config.stem_channels)
        return f"a convolutional stem (Xiao et al., 2021): 3x3 convolutions of stride 2 with {convs} channels"
    if config.stem == "resnetv2":
        form = "pre-activation" if config.stem_preactivation else "post-activation"
        blocks = f"stages of {config.stem_depths} {form} bottlenecks" if config.stem_depths else "no stages"
        return f"a ResNet-V2 (BiT) stem of root width {config.stem_width} and {blocks}"
    return ""


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_text(value) -> bool:
    return isinstance(value, str)


def is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def maybe(check):
    """`check`, or the value is null."""
    return lambda value: value is None or check(value)


def is_confusion(value) -> bool:
    """`{"labels": [...], "matrix": [[count, ...], ...]}`, one row and one column per label."""
    if not isinstance(value, dict) or not isinstance(value.get("labels"), list):
        return False
    size, matrix = len(value["labels"]), value.get("matrix")
    return (
        isinstance(matrix, list)
        and len(matrix) == size
        and all(isinstance(row, list) and len(row) == size and all(map(is_count, row)) for row in matrix)
    )


def is_leg(value) -> bool:
    return (
        isinstance(value, dict)
        and maybe(is_text)(value.get("command"))
        and maybe(is_number)(value.get("wall_time_seconds"))
        and all(maybe(is_number)(value.get(name)) for name in ("resumed_from_step", "finished_at_step"))
    )


# What the card reads from all_results.json and training_record.json: field -> (check, the type in words). A field of
# the record the template reads without a default must be there.
METRIC_FIELDS = {
    **{f"{prefix}{key}": (is_number, "a number") for prefix in ("test_", "eval_") for key in METRIC_NAMES},
    "test_confusion_matrix": (is_confusion, 'an object {"labels": [...], "matrix": [[counts], ...]}, a row per label'),
    "test_per_class_accuracy": (
        lambda value: isinstance(value, dict) and all(map(maybe(is_number), value.values())),
        "an object of class name -> accuracy (or null)",
    ),
}
RECORD_FIELDS = {
    **dict.fromkeys(("epochs", "learning_rate", "weight_decay", "world_size"), (is_number, "a number")),
    **dict.fromkeys(("num_train", "num_validation", "num_test", "total_batch", "seed"), (maybe(is_number), "a number")),
    **dict.fromkeys(
        ("command", "dataset", "initial_weights", "scheduler", "precision", "augmentation", "model_selection"),
        (maybe(is_text), "text"),
    ),
    **dict.fromkeys(("precision_choice", "distillation", "layer_decay", "weight_average"), (maybe(is_text), "text")),
    "batch_asked": (maybe(is_number), "a number"),
    **dict.fromkeys(("streamed_images", "steps", "finished_at_step"), (maybe(is_number), "a number")),
    "wall_time_seconds": (maybe(is_number), "a number of seconds"),
    "legs": (
        lambda value: isinstance(value, list) and all(map(is_leg, value)),
        "a list of {command, wall_time_seconds}",
    ),
}
REQUIRED_RECORD_FIELDS = (
    "epochs",
    "learning_rate",
    "weight_decay",
    "world_size",
    "num_train",
    "num_validation",
    "num_test",
    "total_batch",
    "seed",
    "scheduler",
)


def check_card_fields(path: Path, content: dict, fields: dict, required: tuple[str, ...] = ()) -> None:
    """Refuse, in one line naming the file and the field, a value of `content` (read from `path`) that the card reads
    and that is not of the type it needs (`METRIC_FIELDS`, `RECORD_FIELDS`), or a `required` field that is missing:
    before anything is loaded, never a traceback halfway through rendering the card."""
    fix = "restore the file the run wrote, or delete it (the card then claims none of it)"
    for name in required:
        if name not in content:
            raise ValueError(f"{path} has no {name}, which the card reads: {fix}.")
    for name, (check, wanted) in fields.items():
        if name in content and not check(content[name]):
            shown = json.dumps(content[name])
            shown = shown if len(shown) <= 60 else f"{shown[:57]}..."
            raise ValueError(f"{path}: {name} is {shown}, not {wanted}: {fix}.")


def result_rows(metrics: dict) -> list[dict]:
    """Table rows for every measured test/validation metric."""
    rows = []
    for split, prefix in (("test", "test_"), ("validation", "eval_")):
        for key, name in METRIC_NAMES.items():
            if prefix + key in metrics:
                rows.append(dict(split=split, metric=name, value=f"{metrics[prefix + key]:.4f}"))
    return rows


# what Markdown reads in running text: emphasis, code, links and images (`[`), a table cell's end, strikethrough, a
# heading's closing `#`, and the backslash itself (`<`, `>`, `&` are HTML-escaped instead)
MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_\[\]|~#])")


def user_text(value, form: str = "text") -> str:
    """User text (a label, a path, a name, a command) as the card writes it: shown as the characters it is, never
    read as Markdown or HTML (the Hub renders a card's HTML, so a label `<b onmouseover=...>` would be live).

    `form` "text": on one line, each Markdown punctuation character backslash-escaped and `<`, `>`, `&`, quotes
    HTML-escaped (so it also holds in a table cell); "code": a code span on one line, fenced by more backticks than
    the text holds; "block": a fenced `bash` code block whose fence is longer than any backtick run in the text."""
    text = str(value)
    if form == "block":
        fence = "`" * max(3, 1 + max(map(len, re.findall("`+", text)), default=0))
        return f"{fence}bash\n{text}\n{fence}"
    text = " ".join(text.split())
    if form == "code":
        ticks = "`" * (1 + max(map(len, re.findall("`+", text)), default=0))
        return f"{ticks} {text} {ticks}" if "`" in text else f"{ticks}{text}{ticks}"
    return html.escape(MARKDOWN_PUNCTUATION.sub(r"\\\1", text))


def table_cell(text: str) -> str:
    """User text (a class name) as one cell of a Markdown table (`user_text`: one line, `|` escaped)."""
    return user_text(text)


def class_rows(metrics: dict) -> list[dict]:
    """Rows of the card's per-class table (class, test images, accuracy or n/a, the class it is most often taken
    for) from `test_confusion_matrix` and `test_per_class_accuracy`: every class in label order up to
    `CARD_CLASSES`, else the `CARD_CLASSES` with the lowest accuracy (classes without test images last)."""
    confusion = metrics.get("test_confusion_matrix")
    if not confusion:
        return []
    names, accuracy = confusion["labels"], metrics.get("test_per_class_accuracy") or {}
    rows = []
    for index, (name, counts) in enumerate(zip(names, confusion["matrix"], strict=True)):
        value = accuracy.get(name)
        mistaken = [(count, other) for other, count in enumerate(counts) if other != index and count > 0]
        count, other = max(mistaken, key=lambda item: (item[0], -item[1])) if mistaken else (0, None)
        rows.append(
            dict(
                label=table_cell(name),
                images=sum(counts),
                accuracy="n/a" if value is None else f"{value:.4f}",
                confused_with="-" if other is None else f"{table_cell(names[other])} ({count})",
                order=math.inf if value is None else value,
            )
        )
    return sorted(rows, key=lambda row: row["order"])[:CARD_CLASSES] if len(rows) > CARD_CLASSES else rows


def card_data(config: ViTScratchConfig, metrics: dict, dataset: str | None, model_name: str) -> ModelCardData:
    """Front matter the Hub reads, with the test metrics as `model-index` results when they are known."""
    # a hub data set's id: no local path (one that is not here any more is no hub id either)
    on_hub = (
        dataset is not None and dataset != DIGITS and public_name(dataset) == dataset and not Path(dataset).exists()
    )
    dataset_type = "sklearn-digits" if dataset == DIGITS else dataset if on_hub else Path(dataset or "data").name
    dataset_name = "scikit-learn handwritten digits" if dataset == DIGITS else dataset_type
    eval_results = [
        EvalResult(
            task_type="image-classification",
            task_name="Image Classification",
            dataset_type=dataset_type,
            dataset_name=dataset_name,
            dataset_split="test",
            metric_type=key,
            metric_name=METRIC_NAMES[key],
            metric_value=round(float(metrics[f"test_{key}"]), 4),
        )
        for key in ("accuracy", "top5_accuracy")
        if f"test_{key}" in metrics
    ]
    return ModelCardData(
        library_name="transformers",
        pipeline_tag="image-classification",
        license="apache-2.0",
        tags=["vision-transformer", "vit", "vit_scratch", "image-classification", "custom_code"],
        datasets=[dataset] if on_hub else None,
        metrics=[result.metric_type for result in eval_results] or None,
        model_name=model_name,
        eval_results=eval_results or None,
    )


def training_record(
    command: str, dataset: str, splits: dict[str, int], training_args, metrics: dict, augmentation: str | None
) -> dict:
    """What the card says about training, saved beside the model (training_record.json) so a later push can
    render the same card. The batch is the one each step used: a training split smaller than the batch asked for
    makes every step one batch of the whole split (`batch_asked` then keeps what was asked)."""
    asked, num_train = metrics.get("total_train_batch_size"), splits["train"]
    used = min(asked, num_train) if asked and num_train else asked
    streamed = metrics.get("streamed_train_images")  # a stream: its size is not known, the images it read are
    return dict(
        command=command,
        dataset=dataset,
        num_train=None if streamed is not None else splits["train"],
        streamed_images=streamed,
        steps=training_args.max_steps if streamed is not None else None,  # a stream needs --max_steps
        num_validation=splits["validation"],
        num_test=splits["test"],
        epochs=float(metrics.get("epoch", training_args.num_train_epochs)),
        learning_rate=training_args.learning_rate,
        weight_decay=training_args.weight_decay,
        scheduler=str(getattr(training_args.lr_scheduler_type, "value", training_args.lr_scheduler_type)),
        total_batch=used,
        batch_asked=asked if used != asked else None,
        seed=training_args.seed,
        world_size=metrics.get("world_size", 1),
        precision=training_precision(training_args),
        augmentation=augmentation,
        wall_time_seconds=metrics.get("wall_time_seconds"),
        model_selection=model_selection_text(training_args),
    )


def counted(number: float, noun: str) -> str:
    """`number` and `noun`, plural unless it is 1: "1 epoch", "2.5 epochs", "1,000 images"."""
    shown = f"{number:,}" if isinstance(number, int) else f"{number:g}"
    return f"{shown} {noun}{'s' * (number != 1)}"


def splits_text(record: dict) -> str:
    """The card's sizes of the splits: a stream's training split by what was read ("streamed: N images seen over S
    steps"), never a size that is not the set's."""
    held_out = (
        f"{counted(record['num_validation'], 'validation image')} and {counted(record['num_test'], 'test image')}"
    )
    if record.get("streamed_images") is not None:
        seen = f"{counted(record['streamed_images'], 'image')} seen over {counted(record.get('steps') or 0, 'step')}"
        return f"training streamed ({seen}; the set's size is not known), {held_out}"
    return f"{counted(record['num_train'], 'training image')}, {held_out}"


def schedule_text(record: dict) -> str:
    """How long it trained: the epochs, or for a stream (which has none) the steps."""
    if record.get("streamed_images") is not None:
        return f"{counted(record.get('steps') or 0, 'step')} over a stream"
    return counted(record["epochs"], "epoch")


def origin_text(record: dict, conversion: dict | None) -> str:
    """Where the weights come from, as far as the folder can show it: its training record (trained, and from which
    weights when it says), else a run's checkpoint (its step and run), else its conversion record (converted, with
    the history the converted input's records vouched for: trained by vit-scratch, exported and imported back),
    else nothing claimed. Local paths are named by their last part (`public_name`)."""
    if record:
        start = starting_weights(record)
        return "trained with vit-scratch" + (f", starting from the weights of {start}" if start else "") + ","
    if conversion and "checkpoint" in conversion:
        epoch = conversion.get("epoch")
        at = f"step {conversion['checkpoint']}" + (f", epoch {epoch:g}" if isinstance(epoch, (int, float)) else "")
        return (
            f"saved at {at} of the vit-scratch training run in {user_text(conversion['run'], 'code')} (a checkpoint of that run, not "
            "its final model); vit-scratch is"
        )
    if conversion:
        steps = [history_step(step) for step in conversion.get("history") or []]
        if steps and steps[0].startswith("trained"):
            return (
                f"{', '.join(steps)}, then converted by vit-scratch from {conversion_source(conversion)}, its weights "
                "unchanged by each conversion; vit-scratch is"
            )
        return (
            f"converted by vit-scratch from {conversion_source(conversion)}: its weights are that model's, "
            "unchanged (vit-scratch did not train them); vit-scratch is"
        )
    return (
        "of unknown origin: its folder holds no training or conversion record, so this card claims neither training "
        "nor results. It runs on vit-scratch,"
    )


def history_step(step: dict) -> str:
    """One step of a converted model's history (`common/provenance.py` `folder_history`) in words."""
    if "trained" in step:
        checkpoint = f", checkpoint at step {step['checkpoint']}" if "checkpoint" in step else ""
        start = starting_weights(
            {"initial_weights": step.get("from"), "initial_weights_commit": step.get("from_commit")}
        )
        start = f", starting from the weights of {start}" if start else ""
        return f"trained by vit-scratch (the run in {hub_version(step, step['trained'])}{checkpoint}{start})"
    if step.get("converted") == "to transformers":
        return f"exported to transformers from {hub_version(step, step.get('input'))}"
    return f"converted {step.get('converted', '')} from {hub_version(step, step.get('input'))}"


def hub_version(step: dict, name: str | None) -> str:
    """`name` as a card names a model it read: a hub repo at the full commit that was read (`commit`), with the
    revision the user gave beside it (a branch, tag or `refs/pr/N`, which moves); a local folder by its name."""
    text = user_text(public_name(name), "code")
    if step.get("commit"):
        text += f" at commit {user_text(step['commit'], 'code')}"
    revision = step.get("revision")
    if revision and revision != step.get("commit"):
        shown = user_text(revision, "code")
        text += f" (revision {shown})" if step.get("commit") else f" at revision {shown}"
    return text


def conversion_source(conversion: dict) -> str:
    """The converted model in words: `NAME` (a transformers ViT), or `FILE` (timm's ARCHITECTURE)."""
    source = hub_version(conversion, conversion.get("input"))
    if conversion.get("timm_model"):
        return f"{source} (timm's {user_text(conversion['timm_model'], 'code')})"
    return f"{source} (a {user_text(conversion.get('from', 'another library'))} model)"


def scale_text(record: dict, num_parameters: int) -> str:
    """What kind of model this is; 'trained from scratch' only where the record says it started from random
    weights."""
    if num_parameters >= 5_000_000:
        return "a research model"
    from_scratch = bool(record) and "initial_weights" in record and not record["initial_weights"]
    trained = " trained from scratch on a small data set" if from_scratch else ""
    return f"a small model{trained}: a teaching and research model, not a production classifier"


def model_selection_text(training_args) -> str:
    """Which checkpoint the folder holds, in words: the best on validation or the last one trained."""
    if training_args.load_best_model_at_end:
        return f"the epoch with the best validation {training_args.metric_for_best_model or 'loss'}"
    return "the last epoch (validation is measured and reported, not used to pick an epoch)"


def render_model_card(
    config: ViTScratchConfig,
    metrics: dict | None = None,
    record: dict | None = None,
    model_id: str | None = None,
    revision: str | None = None,
    template: str | Path = TEMPLATE,
    unmeasured: bool = False,
    conversion: dict | None = None,
    files: Collection[str] | None = None,
) -> ModelCard:
    """The card for a model folder. `metrics` (all_results.json) and `record` (training_record.json) are left out
    of the card when unknown; `model_id`/`revision` fill the loading example once the repo is known; `unmeasured`
    says the weights were changed after training, so the training metrics are not theirs; a record without metrics
    (all_results.json lost) makes the card say the metrics are not known; `conversion`
    (conversion_record.json, for a folder without a training record) says what the weights were converted from.
    A folder with neither record gets a card that claims no training. `files` names the describing files the folder
    (or the pushed repo) holds: the card speaks only of those (`files_sentences`); None: all of them."""
    template = Path(template)
    if not template.is_file():
        raise FileNotFoundError(f"Model card template {template} not found: reinstall vit-scratch.")
    metrics, record = metrics or {}, dict(record or {})
    dataset = record.get("dataset")
    model_name = model_id.split("/")[-1] if model_id else f"vit-scratch-{Path(dataset).name if dataset else 'model'}"
    (height, width), (patch_h, patch_w) = to_pair(config.image_size), to_pair(config.patch_size)
    grid_h, grid_w = config.grid_size
    labels = [str(label) for label in config.id2label.values()]
    if record:
        record.update(legs=leg_rows(record.get("legs") or []))
        minutes, seconds = divmod(int(record.get("wall_time_seconds") or 0), 60)
        record.update(
            splits_text=splits_text(record),
            schedule_text=schedule_text(record),
            epochs=f"{record['epochs']:g}",
            learning_rate=f"{record['learning_rate']:g}",
            weight_decay=f"{record['weight_decay']:g}",
            wall_time=f"{minutes} min {seconds} s",
            dataset_text=DIGITS_TEXT
            if dataset == DIGITS
            else f"The image-classification data set {user_text(public_name(dataset), 'code')}.",
            command=user_text(public_command(record.get("command") or ""), "block"),
        )
    values = dict(
        card_data=card_data(config, metrics, dataset, model_name).to_yaml(),
        model_name=user_text(model_name),
        origin_text=origin_text(record, conversion),
        scale_text=scale_text(record, parameter_count(config)),
        size_name=size_name(config),
        patch=f"{patch_h}x{patch_w}",
        stem_text=stem_text(config),
        cell=f"{config.cell_size[0]}x{config.cell_size[1]}",
        num_patches=grid_h * grid_w,
        image_size=f"{height}x{width}",
        num_channels=config.num_channels,
        hidden_size=config.hidden_size,
        depth=config.num_hidden_layers,
        heads=config.num_attention_heads,
        mlp_size=config.intermediate_size,
        pooling=config.pooling,
        pooling_text="class token" if config.pooling == "cls" else "mean of the patch tokens",
        position_embedding=config.position_embedding,
        distillation_token=config.distillation_token,
        num_labels=len(labels),
        label_preview=", ".join(map(user_text, labels[:10])) + (", ..." if len(labels) > 10 else ""),
        num_parameters=parameter_count(config),
        record=record,
        result_rows=result_rows(metrics),
        class_rows=class_rows(metrics),
        num_classes_shown=CARD_CLASSES,
        model_id=model_id or "path/to/this/folder",
        revision=revision,
        unmeasured=unmeasured,
        metrics_unknown=bool(record) and not metrics and not unmeasured,  # a trained model whose results are lost
        **files_sentences(DESCRIBING_FILES if files is None else files),
    )
    return ModelCard(render_template(template.read_text(), values, name=template.name))


def files_sentences(files: Collection[str]) -> dict[str, str]:
    """The card's words about the describing files (`DESCRIBING_FILES`), naming only those in `files`, so that a card
    never points at a file its folder or repo does not hold: where the curves and the numbers are (`files_text`),
    where every class is (`all_classes_in`) and where the confusion matrix is (`confusion_in`); empty where none is."""
    results, curves, confusion = (name in files for name in DESCRIBING_FILES)
    said = [
        *([f"The curves of loss and accuracy per epoch are in `{CURVES_FILE}`"] if curves else []),
        *([f"every number is in `{RESULTS_FILE}`"] if results else []),
    ]
    text = "; ".join(said)
    return dict(
        files_text=f"{text[:1].upper()}{text[1:]}." if text else "",
        all_classes_in=" and ".join(
            [
                *([f"`{RESULTS_FILE}` (`test_per_class_accuracy`, `test_confusion_matrix`)"] if results else []),
                *([f"`{CONFUSION_FILE}`"] if confusion else []),
            ]
        ),
        confusion_in=" and ".join(
            [
                *([f"`{CONFUSION_FILE}`"] if confusion else []),
                *([f"`{RESULTS_FILE}` (`test_confusion_matrix`)"] if results else []),
            ]
        ),
    )


def leg_rows(legs: list[dict]) -> list[dict]:
    """The card's lines for a run's legs (its first command, then each that resumed it): the command and its wall
    time, or that a leg is not recorded (its checkpoint was written before the run kept its legs)."""
    rows = []
    for leg in legs:
        seconds = leg.get("wall_time_seconds")
        rows.append(
            dict(
                command=user_text(
                    leg.get("command") or "(not recorded: its checkpoint was written before commands were kept)",
                    "block",
                ),
                wall_time="time not recorded" if seconds is None else "{} min {} s".format(*divmod(int(seconds), 60)),
                how=leg_how(leg),
            )
        )
    return rows


def leg_how(leg: dict) -> str:
    """How a leg went on from the one before, in words: from which step, and whether the run had finished there (a
    finished run trained on is never said to have stopped)."""
    step, finished = leg.get("resumed_from_step"), leg.get("finished_at_step")
    if step is None:
        return "resumed with"
    if finished is None:
        return f"the run stopped, then resumed from step {step} with"
    if finished == step:
        return f"the run finished at step {finished}, then trained on from there with"
    return f"the run finished at step {finished}, then trained again from its checkpoint at step {step} with"


def render_template(source: str, values: dict, name: str = "the template") -> str:
    """`source` rendered with `values`, which are inserted as they are (never parsed as template syntax).

    Every `{{ ... }}` output first becomes a marker, so the text checked for a leftover placeholder (`{{`, `{%`,
    `{#`) is only what the template itself wrote; then the markers are replaced by the values."""
    marker = f"\x00{uuid.uuid4().hex}:"
    outputs: list[str] = []

    def held_out(value) -> str:
        outputs.append(str(value))
        return f"{marker}{len(outputs) - 1}\x00"

    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, finalize=held_out)
    text = environment.from_string(source).render(**values)
    if any(syntax in text for syntax in ("{{", "{%", "{#")):
        raise ValueError(f"The rendered model card still holds a template placeholder: fix {name}.")
    for index, output in enumerate(outputs):
        text = text.replace(f"{marker}{index}\x00", output)
    return text


def parameter_count(config: ViTScratchConfig) -> int:
    """Parameters of the classification model for `config`, counted without allocating them."""
    import torch

    from modeling_vit_scratch.modeling_vit_scratch import (
        ViTScratchForImageClassification,
        ViTScratchForImageClassificationWithTeacher,
    )

    two_heads = config.distillation_token
    with torch.device("meta"):
        model = (ViTScratchForImageClassificationWithTeacher if two_heads else ViTScratchForImageClassification)(config)
        return model.num_parameters()


def render_other_model_card(config, metrics: dict, record: dict) -> ModelCard:
    """A short card for a transformers model (not a vit_scratch one) that scripts/train.py trained, e.g. a teacher:
    its type, the data, the command and the measured results."""
    rows = "".join(f"| {row['split']} | {row['metric']} | {row['value']} |\n" for row in result_rows(metrics))
    data = ModelCardData(library_name="transformers", pipeline_tag="image-classification", license="apache-2.0")
    precision = precision_words(record.get("precision") or "float32", record.get("precision_choice"))
    text = (
        f"---\n{data.to_yaml()}\n---\n\n# {config.model_type} image classifier\n\n"
        f"A transformers {user_text(config.architectures[0] if config.architectures else config.model_type, 'code')} trained"
        f"{other_start(record)} by vit-scratch's `scripts/train.py` on {user_text(public_name(record['dataset']), 'code')} ({splits_text(record)}), "
        f"for {schedule_text(record)}, seed {record['seed']}, {precision}, e.g. as a teacher for a distilled ViT. The "
        "command:\n\n"
        f"{user_text(public_command(record['command']), 'block')}\n\n## Results\n\n| split | metric | value |\n| --- | --- | --- |\n{rows}"
    )
    return ModelCard(text)


def other_start(record: dict) -> str:
    """Where a transformers model's training started, as the record says: from scratch, or from a model's weights."""
    if "initial_weights" not in record:
        return ""
    start = starting_weights(record)
    return f" from the weights of {start}" if start else " from scratch"


def starting_weights(record: dict) -> str | None:
    """The weights a run started from, as a card names them: `owner/name` at the full commit it was read at (a hub
    repo's, recorded), or a local folder by its last part; None for a new model."""
    start = public_name(record.get("initial_weights"))
    if not start:
        return None
    commit = record.get("initial_weights_commit")
    return user_text(start, "code") + (f" at commit {user_text(commit, 'code')}" if commit else "")
