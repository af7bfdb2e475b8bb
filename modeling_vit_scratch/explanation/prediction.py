"""Explain one prediction: load a model and an image, print the top classes, write the pictures (attention rollout, a
class-specific gradient rollout, per-layer attention from the class token, the paper's Fig. 7 panels)."""

import http.client
import io
import re
import socket
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import torch
from PIL import Image, UnidentifiedImageError
from transformers import AutoImageProcessor, AutoModelForImageClassification

from modeling_vit_scratch.common.dtypes import parse_dtype
from modeling_vit_scratch.common.folders import (
    check_output_folder,
    explain_figures,
    file_sha256,
    mark_as_ours,
    model_contents,
    refuse_unvouched_figures,
)
from modeling_vit_scratch.common.images import frame_count, open_bounded, upright
from modeling_vit_scratch.common.model_folder import (
    PROCESSOR_FILE,
    check_processor_fits,
    check_processor_fits_config,
    check_settings_files,
    check_vit_scratch_type,
)
from modeling_vit_scratch.common.remote_code import check_no_foreign_code, foreign_code, settings_of_repo
from modeling_vit_scratch.common.secrets import refuse_secrets_in_settings, shown_url
from modeling_vit_scratch.common.sources import check_folder_path, check_hub_model, check_not_url
from modeling_vit_scratch.common.user_paths import is_http_url
from modeling_vit_scratch.common.weights import check_finite, unreadable_weights, weight_files
from modeling_vit_scratch.configuration_vit_scratch import PRESETS
from modeling_vit_scratch.explanation import attention as explain
from modeling_vit_scratch.explanation import figures as plots
from modeling_vit_scratch.image_processing_vit_scratch import to_model_mode

# A download of --image is bounded in time and in bytes: a server that trickles or streams without end is refused.
DOWNLOAD_SECONDS = 60
# The most bytes an image file may have: 4 per pixel (RGBA, uncompressed) of the largest image PIL opens.
DOWNLOAD_BYTES = 4 * (Image.MAX_IMAGE_PIXELS or 2**28)


def download_cause(error: OSError) -> str:
    """Why a download failed, in words: the server's HTTP answer, a refused connection, an unknown host, a timeout."""
    if isinstance(error, urllib.error.HTTPError):
        return f"the server answered HTTP {error.code} {error.reason}"
    reason = getattr(error, "reason", error)  # a URLError wraps the socket's error
    if isinstance(reason, socket.gaierror):
        return "its host name could not be resolved (a typo in the host, or no network)"
    if isinstance(reason, ConnectionRefusedError):
        return "the server refused the connection (nothing listens at that host and port)"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"the server sent nothing for {min(30, DOWNLOAD_SECONDS)} s"
    if isinstance(reason, ssl.SSLError):
        return f"its TLS connection failed ({' '.join(str(reason).split())})"
    text = reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
    return f"{type(reason).__name__}: {' '.join(str(text).split())}"


def download(url: str) -> tuple[bytes, str]:
    """The body at `url` and its declared content type, refused in one line when the download fails (naming the URL
    and why), takes more than `DOWNLOAD_SECONDS` in all or holds more than `DOWNLOAD_BYTES` (a socket's own timeout
    bounds only each read)."""
    fix = "download it yourself and give --image the file"
    shown = shown_url(url)
    if "@" in urllib.parse.urlsplit(url).netloc:  # urllib would take the user name for part of the host
        raise ValueError(f"{shown} carries a user name or password, which explain never sends: {fix}.")
    too_large = ValueError(
        f"{shown} is larger than {DOWNLOAD_BYTES:,} bytes, the most an image file may have here (4 bytes per "
        f"pixel of PIL's Image.MAX_IMAGE_PIXELS): {fix}."
    )
    deadline = time.monotonic() + DOWNLOAD_SECONDS
    body = bytearray()
    try:
        with urllib.request.urlopen(url, timeout=min(30, DOWNLOAD_SECONDS)) as response:
            if int(response.headers.get("Content-Length") or 0) > DOWNLOAD_BYTES:
                raise too_large
            content_type = response.headers.get_content_type() if response.headers.get("Content-Type") else ""
            while chunk := response.read1(1 << 16):
                body += chunk
                if len(body) > DOWNLOAD_BYTES:
                    raise too_large
                if time.monotonic() > deadline:
                    raise ValueError(f"Downloading {shown} took more than {DOWNLOAD_SECONDS} s, the limit: {fix}.")
    except (OSError, http.client.HTTPException) as error:  # URLError, HTTPError, a reset or timeout mid-body
        cause = download_cause(error) if isinstance(error, OSError) else f"{type(error).__name__}: {error}"
        raise ValueError(f"Downloading {shown} failed: {cause}: check the URL and the network, or {fix}.") from None
    return bytes(body), content_type


def downloaded_image(url: str) -> Image.Image:
    """The image at `url`; a body that is not an image (a web page, say) is one line naming its content type."""
    body, content_type = download(url)
    try:
        image = open_bounded(io.BytesIO(body), f"Image {shown_url(url)!r}")
    except UnidentifiedImageError:
        sent = f"{content_type or 'no content type'}, {len(body):,} bytes"
        raise ValueError(
            f"{shown_url(url)} sent {sent}, which is not an image PIL can read: give the URL of the image file "
            "itself (not of a page that shows it), or download it and give --image the file."
        ) from None
    print(  # what was taken: the URL's bytes, never a file of that name here
        f"image: downloaded from {shown_url(url)} ({content_type or 'no content type'}, {len(body):,} bytes), a "
        f"{image.format or 'image'} of {image.width}x{image.height} pixels"
    )
    return image


def load_image(source: str) -> Image.Image:
    """A local file or an http(s) URL, as a PIL image; a clear error if it cannot be read as one."""
    try:
        if is_http_url(source):
            image = downloaded_image(source)
        else:
            if Path(source).is_dir():
                raise ValueError(
                    f"Image {source!r} is a folder: --image takes one image file (PNG, JPEG, ...) or an http(s) URL."
                )
            if Path(source).exists() and not Path(source).is_file():  # a device, a pipe, a socket: never read
                raise ValueError(
                    f"Image {source!r} is not a regular file (a device, pipe or socket): --image takes one image "
                    "file (PNG, JPEG, ...) or an http(s) URL."
                )
            scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", source)
            if scheme and not Path(source).exists():
                raise ValueError(
                    f"Image {source!r} is a {scheme.group(1)}: URL, and explain downloads http(s) URLs only: download "
                    "it yourself and give --image the file (a file:// URL is read as the path it names)."
                )
            if not Path(source).is_file():
                raise FileNotFoundError(f"Image {source!r} does not exist: give an image file or an http(s) URL.")
            image = open_bounded(source, f"Image {source!r}")
        frames = frame_count(image)
        image.load()
        image = upright(image)  # as training and the pipeline see it: a phone's photo turned by its EXIF orientation
    except (UnidentifiedImageError, OSError) as error:
        if isinstance(error, FileNotFoundError):
            raise
        raise ValueError(
            f"Cannot read {source!r} as an image ({error}): give a PNG, JPEG or other image file."
        ) from None
    try:  # its values checked as the processor will read them, before any model is loaded
        to_model_mode(image, 3)
    except ValueError as error:
        shown = shown_url(source) if is_http_url(source) else source
        raise ValueError(f"Image {shown!r} cannot be used: {error}") from None
    if frames > 1:  # an animation or a multi-page file: only its first frame is explained, and said so
        shown = shown_url(source) if is_http_url(source) else source
        print(f"{shown} has {frames} frames: explained frame 1", file=sys.stderr)
    return image


def check_model_source(model_source: str, trust_remote_code: bool = False, revision: str | None = None) -> None:
    """Classify `--model` before any image is read or model loaded: refuse a preset name (an architecture without
    trained weights), a file or a missing local folder, a folder or repo naming code other than the package's own
    (unless `trust_remote_code`), one whose config.json names a model type explain does not read (only vit_scratch
    models have the patch grid and attention explain draws; with `trust_remote_code`, a model that brings code of
    its own is left to that code), and a vit_scratch folder whose processor does not fit its model. A repo's two settings files are fetched for it; a repo that cannot be reached is left to the load."""
    if model_source in PRESETS and not Path(model_source).exists():
        raise ValueError(
            f"{model_source!r} is a preset name: presets are architectures with no trained weights, so there is "
            "nothing to explain; give --model a folder saved by training, or the hub repo id of a trained model."
        )
    check_not_url(model_source, "--model")
    check_folder_path(model_source, "--model", "explain")
    check_hub_model(model_source, "--model", revision)
    check_no_foreign_code(
        model_source,
        "read that code, then pass --trust_remote_code if you trust it",
        trust_remote_code=trust_remote_code,
        revision=revision,
    )
    if Path(model_source).is_dir() and not trust_remote_code:  # after the code check; trusted code loads its own way
        check_settings_files(model_source, f"--model {model_source!r}")
    settings = Path(model_source) if Path(model_source).is_dir() else settings_of_repo(model_source, revision)
    trusted_code = trust_remote_code and settings is not None and foreign_code(settings) is not None
    if settings is not None:  # its labels become file names, figure titles and printed lines
        refuse_secrets_in_settings(settings, model_source)
    if settings is not None and (settings / "config.json").is_file() and not trusted_code:
        check_vit_scratch_type(
            settings,
            model_source,
            "explain --model",
            "explain draws the patch grid and attention of vit_scratch models only: give --model a folder or repo "
            "that vit-scratch saved",
        )
    if Path(model_source).is_dir():
        check_processor_fits(model_source)


# The most bytes (UTF-8) of a label in a file name: with the rest of the name, far below the 255 a name may take
LABEL_IN_FILE_NAME = 48


def file_name_part(text: str) -> str:
    """`text` as part of a file name: letters, digits, - and _ kept (others become _), cut to at most
    `LABEL_IN_FILE_NAME` bytes at a whole character; never a path separator, never empty."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in text)
    return safe.encode()[:LABEL_IN_FILE_NAME].decode(errors="ignore") or "_"


def load_model(
    model_source: str, trust_remote_code: bool = False, dtype: torch.dtype = torch.float32, revision: str | None = None
):
    """Model (in `dtype`) and image processor of a folder or repo (at `revision`, default main); its own code runs
    only if `trust_remote_code`.
    A local folder is checked first: its auto_map names only the package's code (unless trusted), its weights are
    safetensors that fit their files."""
    check_model_source(model_source, trust_remote_code, revision)
    if Path(model_source).is_dir():
        weight_files(model_source)
    try:
        model = AutoModelForImageClassification.from_pretrained(
            model_source, trust_remote_code=trust_remote_code, dtype=dtype, use_safetensors=True, revision=revision
        )
        processor = AutoImageProcessor.from_pretrained(
            model_source, trust_remote_code=trust_remote_code, revision=revision
        )
    except OSError as error:  # a repo without safetensors weights, or out of reach
        raise unreadable_weights(model_source, error) from None
    except ValueError as error:
        if trust_remote_code or "trust_remote_code" not in str(error):
            raise
        raise ValueError(
            f"{model_source} is not a vit_scratch model and needs its own code to load, which runs "
            "only if you trust it: read that code, then pass --trust_remote_code."
        ) from None
    check_finite(model.state_dict(), model_source)  # NaN weights would give NaN scores and blank figures
    if model.config.model_type == "vit_scratch":  # a hub repo's files are read only now
        check_processor_fits_config(
            model.config.to_dict(), processor.to_dict(), f"{model_source}'s preprocessor_config.json"
        )
    return model.eval(), processor


def refuse_a_model_folder(out: Path) -> None:
    """A ValueError when `out` holds a model (another run's training folder, a saved model): the figures would sit
    among that model's files as if they explained it."""
    held = model_contents(out) if out.is_dir() else []
    if held:
        raise ValueError(
            f"--out {str(out)!r} holds a model ({', '.join(held[:3])}), and the figures written among its files would "
            f"read as that model's: give --out a folder of its own, e.g. {str(out.parent / (out.name + '-explain'))!r}."
        )


def explain_image(
    model_source: str,
    image_source: str,
    out_dir: str,
    head_fusion: str = "mean",
    discard_ratio: float = 0.0,
    trust_remote_code: bool = False,
    dtype: str = "float32",
    revision: str | None = None,
) -> list[Path]:
    """Everything the script does, with the model in `dtype` ("float32" or "bfloat16"); returns the paths of the
    pictures written. `out_dir` is checked first (`check_output_folder`: new, empty or one explain or training wrote;
    apart from the model and the image; no links; holding no model), then the image, so a refusal costs no loading."""
    out = check_output_folder(out_dir, "--out", {"--model": model_source, "--image": image_source})
    refuse_a_model_folder(out)
    refuse_unvouched_figures(out, "--out")  # a user's file of a figure's name is never replaced nor removed
    torch_dtype = parse_dtype(dtype)
    check_model_source(model_source, trust_remote_code, revision)  # a preset, foreign code, another type: first
    image = load_image(image_source)  # the image's errors before the model is loaded
    model, processor = load_model(model_source, trust_remote_code, torch_dtype, revision)
    config = model.config
    pixel_values, shown = explain.model_inputs(image, processor, config.num_channels)
    check_unresized(pixel_values, model, processor, model_source)
    pixel_values = pixel_values.to(model.dtype)
    embeddings = model.base_model.embeddings

    with torch.no_grad():
        probabilities = model(pixel_values=pixel_values).logits.float().softmax(-1)[0]
    top = probabilities.topk(min(5, probabilities.numel()))
    print("top classes:")
    for score, index in zip(top.values.tolist(), top.indices.tolist()):
        print(f"  {config.id2label[index]:>20}  {score:.4f}")

    mark_as_ours(out)
    attentions = explain.attention_maps(model, pixel_values)
    grid = embeddings.grid_size
    rollout = explain.attention_rollout(attentions, head_fusion, discard_ratio)
    rollout_map = explain.token_to_patch_map(rollout, grid, config.pooling)[0]
    best = top.indices[0].item()
    relevance = explain.gradient_rollout(model, pixel_values, best)
    relevance_map = explain.token_to_patch_map(relevance, grid, config.pooling)[0]
    prefix = embeddings.num_prefix_tokens  # the class token's row, patch columns
    per_layer = torch.stack([a[0].float().mean(0)[0, prefix:].reshape(grid) for a in attentions])  # (L, gh, gw)
    label = config.id2label[best]
    safe_label = file_name_part(str(label))
    cell_size = embeddings.patch_embeddings.cell_size  # pixels per token: the patch size times a stem's stride
    filters = []  # Fig. 7 left: a hybrid's projection reads feature maps, not pixels, so it has no such picture
    if config.stem == "none":
        filters.append(
            plots.plot_embedding_filters(
                explain.patch_embedding_components(model), out / "fig7_patch_embedding_pca.png"
            )
        )
    written = [
        plots.plot_patch_grid(shown, cell_size, out / "patch_grid.png"),
        plots.plot_overlay(shown, rollout_map, f"attention rollout ({head_fusion})", out / "attention_rollout.png"),
        plots.plot_overlay(
            shown, relevance_map, f"gradient rollout for {label!r}", out / f"gradient_rollout_class_{safe_label}.png"
        ),
        plots.plot_layer_attention(per_layer, out / "attention_per_layer.png"),
        *filters,
        plots.plot_position_similarity(
            explain.position_embedding_similarity(model), out / "fig7_position_embedding_similarity.png"
        ),
        plots.plot_attention_distance(
            explain.mean_attention_distance(attentions, grid, cell_size),
            out / "fig7_mean_attention_distance.png",
        ),
    ]
    remove_stale_figures(out, written)
    mark_as_ours(out, {path.name: file_sha256(path) for path in written})  # vouches for them: explain's own
    return written


def check_unresized(pixel_values: torch.Tensor, model, processor, model_source: str) -> None:
    """A one-line ValueError, before the model runs, where the folder's processor does not resize (`do_resize`
    false in its preprocessor_config.json) and the image is not the size the model takes: the line names the key,
    the file and the fixes explain can take (an image of that size, or the file restored)."""
    made = tuple(pixel_values.shape[-2:])
    size = model.config.image_size
    wanted = (size, size) if isinstance(size, int) else tuple(size)
    if made == wanted or getattr(processor, "do_resize", True):
        return
    where = Path(model_source) / PROCESSOR_FILE if Path(model_source).is_dir() else f"{model_source}'s {PROCESSOR_FILE}"
    raise ValueError(
        f"{where} gives do_resize false, so the {made[1]}x{made[0]} image is not resized to the {wanted[1]}x{wanted[0]} "
        f"the model takes: give --image a {wanted[1]}x{wanted[0]} image, or set do_resize to true in that file "
        "(restore it, or save the folder again)."
    )


def remove_stale_figures(out: Path, written: list[Path]) -> None:
    """Remove from `out` (a folder explain or training wrote, without links) the figures an earlier explain run wrote
    that this run did not (another model's class, a hybrid's missing filters), so that every figure in the folder is
    of this run; said in one line."""
    kept = {path.name for path in written}
    stale = sorted({path.name for path in explain_figures(out)} - kept)  # only those explain wrote
    for name in stale:
        (out / name).unlink()
    if stale:
        print(
            f"Removed from {out} the figures of an earlier explain run that this one does not write: {', '.join(stale)}."
        )
