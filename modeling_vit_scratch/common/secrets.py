"""What keeps a model folder trustworthy: secrets kept out of it, and a digest that says which weights it holds.

- `known_secrets` collects every Hub token this machine holds (given explicitly, `HF_TOKEN`, the token files, every
  stored login), `redact` removes them from a text, and `find_secrets` lists the files of a folder that contain one, so a writer
  can refuse before anything is published. This is the one redaction path: files, printed and error lines, log
  records (`redacting_logs`) and the strings a push sends go through it. `refuse_secret` refuses a value the user
  typed into a field that is sent or written (a commit message, a repo id, a label name) without echoing it;
  `refuse_token_in_path` refuses one in a path a command writes (a token never becomes a file name). Every command's
  printed lines, tracebacks included, pass through `redact` too (`common/commands.py`).
- `weights_sha256` is the SHA-256 of a folder's weights (a line per tensor with its name, dtype, shape and
  the SHA-256 of its bytes, in name order), independent of how the safetensors files are sharded: the training
  record keeps it, the push checks it.

Training glue, never imported by the model files.
"""

import argparse
import hashlib
import json
import logging
import os
import re
import sys
import urllib.parse
from contextlib import contextmanager
from pathlib import Path

from modeling_vit_scratch.common.blank import refuse_blank_options
from modeling_vit_scratch.common.repeated import repeated_option

TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN", "HF_API_TOKEN")
MIN_SECRET_LENGTH = 8  # shorter values are too common to search for (and are no real token)
MASK = "***"
TOKEN_SHAPE = re.compile(r"hf_[A-Za-z0-9]{30,}")  # what the Hub's access tokens look like
# the same shape in a file's bytes, as UTF-8 (or ASCII) and as UTF-16
TOKEN_SHAPE_BYTES = (re.compile(rb"hf_[A-Za-z0-9]{30,}"), re.compile(rb"h\x00f\x00_\x00(?:[A-Za-z0-9]\x00){30,}"))
# the user name and password of a URL (`scheme://user:password@host`): never shown
URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]+@")
# a model folder's settings: every reader copies them into what it writes (checkpoints, cards, converted folders)
SETTINGS_FILES = ("config.json", "preprocessor_config.json")
# an argument whose name holds one of these takes a secret: its value is never shown (`--hub_token`, `--api_key`)
SECRET_WORDS = ("token", "password", "passwd", "secret", "key")


def known_secrets(*given: str | None) -> list[str]:
    """Every token this machine holds, wherever it is kept, longest first: given explicitly (`--hub_token`), the
    token variables, the active login (`get_token`), the token files (HF_TOKEN_PATH's and HF_HOME/token, which
    HF_TOKEN hides from `get_token`) and every login `hf auth login` stored (`stored_tokens`, active or not, whatever
    its shape: an old `api_org_...` token is no Hub-token shape)."""
    from huggingface_hub import constants, get_token
    from huggingface_hub.utils import get_stored_tokens

    values = set(given) | {os.environ.get(name) for name in TOKEN_VARIABLES}
    for read in (get_token, get_stored_tokens):
        try:
            found = read()
        except Exception:  # noqa: BLE001, S112 (a broken login, e.g. an OIDC exchange that fails, holds no secret)
            continue
        values |= set(found.values()) if isinstance(found, dict) else {found}
    for path in {constants.HF_TOKEN_PATH, os.path.join(constants.HF_HOME, "token")}:
        try:
            values.add(Path(path).read_text(errors="replace"))
        except OSError:  # no such file (no login), or one this user cannot read
            pass
    return sorted({v.strip() for v in values if v and len(v.strip()) >= MIN_SECRET_LENGTH}, key=len, reverse=True)


def redact(text: str, secrets: list[str]) -> str:
    """`text` with every secret, anything shaped like a Hub token, and a URL's user name and password replaced by
    `***`."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return URL_USERINFO.sub(rf"\1{MASK}@", TOKEN_SHAPE.sub(MASK, text))


def shown_url(url: str) -> str:
    """`url` as a line may print it: no user name or password, no query (where a signed URL keeps its key), and no
    known token."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = (f"{MASK}@" if "@" in parts.netloc else "") + host + (f":{parts.port}" if parts.port else "")
    shown = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, MASK if parts.query else "", ""))
    return redact(shown, known_secrets())


def error_line(error: BaseException | str, secrets: list[str] | None = None) -> str:
    """`error: MESSAGE` on one line without any secret (default: every token this process knows): what a command's
    `main` passes to `sys.exit`."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else error  # KeyError's str() adds quotes
    return "error: " + redact(" ".join(str(text).split()), known_secrets() if secrets is None else secrets)


class RedactingArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors (an unknown argument, a value it cannot read: which may be a token) are one
    redacted `error:` line instead of the usage and argparse's own line. argparse may echo a piece of an argument
    (`--hf_...` is read as `-h` with `f_...`), so every piece of a known token, and of an argument shaped like one,
    is masked; the value of an argument whose name holds a secret's word (`--hub_token VALUE`, `--api_key=VALUE`) is
    masked whatever it looks like, and the line says where the command reads a token from. An argument given an empty
    value is one line too (`blank.py`), never read as its default. No option is taken by a prefix of its name
    (`--model` is never `--model_only`): a prefix is refused as an unknown argument."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        self.given = list(sys.argv[1:] if args is None else args)
        repeated = repeated_option(self, self.given)
        if repeated:
            self.error(repeated)
        namespace, extras = super().parse_known_args(args, namespace)
        refuse_blank_options(self, namespace)
        return namespace, extras

    def error(self, message: str):
        given = getattr(self, "given", [])
        secrets = known_secrets(*(arg for arg in given if TOKEN_SHAPE.search(arg)), *secrets_in_argv(given))
        pieces = {
            secret[start:end]
            for secret in secrets
            for start in range(len(secret))
            for end in range(start + MIN_SECRET_LENGTH, len(secret) + 1)
        }
        for index, value in token_value_positions(given):  # however short: `--password pw`
            named = given[index] if given[index] != value else f"{given[index - 1]} {value}"
            message = message.replace(named, named[: -len(value)] + MASK)
        unknown = [
            arg.split("=", 1)[0]
            for arg in given
            if arg.startswith("-")
            and any(word in arg.split("=", 1)[0].lower() for word in SECRET_WORDS)
            and arg.split("=", 1)[0] not in self._option_string_actions
        ]
        where = (
            f": {self.prog} takes no {unknown[0]}; it reads a Hub token from HF_TOKEN or `hf auth login`, never from "
            "its arguments"
            if unknown
            else ""
        )
        sys.exit(
            error_line(f"{message}{where}; `{self.prog} --help` lists the arguments.", sorted(pieces, key=len)[::-1])
        )


def holds_secret(value: str, secrets: list[str]) -> bool:
    """Whether `value` holds one of `secrets` or anything shaped like a Hub token."""
    return bool(TOKEN_SHAPE.search(value)) or any(secret in value for secret in secrets)


def refuse_secret(what: str, value: str | None, secrets: list[str], fix: str) -> None:
    """A ValueError naming `what` (never its value) when `value` holds or looks like a token: for text the user
    typed into a field that is sent or written, where redacting would change what they asked for."""
    if value and holds_secret(value, secrets):
        raise ValueError(
            f"{what} holds or looks like a Hub token, which would be sent to the Hub or written to files: {fix}."
        )


def refuse_token_in_path(argument: str, path: str | os.PathLike, *, read: bool = False) -> None:
    """A ValueError when a path a command is given holds or looks like a token, checked before any work: one it
    writes (`argument`: --output_dir, --out, --output, --json), where the token would become a file name, or with
    `read` one it reads (a model folder: convert --input, explain --model, push FOLDER; a file: explain --image, a
    recipe), whose name is printed in every line naming it and copied into what is made from it. Names the argument;
    never echoed; the fix fits the kind of value (`token_in_path_fix`)."""
    secrets = known_secrets()
    text = os.fspath(path)
    fix = (
        token_in_path_fix(argument, text, secrets)
        if read
        else f"give {argument} a name without it (a token never becomes a file or folder name)"
    )
    refuse_secret(f"The value of {argument}", text, secrets, f"{fix}; tokens belong in HF_TOKEN or `hf auth login`")


def token_in_path_fix(argument: str, value: str, secrets: list[str]) -> str:
    """What to do with a read path or URL holding a token, by what it is: a URL (its query is where a signed URL
    keeps its key) loses the token, or is downloaded and given by path; a file whose own name holds it is renamed; a
    folder (the value's last name, or one above it) is renamed or given by another path."""
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", value):
        return (
            f"remove the token from the URL of {argument} (a signed URL: download the file and give {argument} its "
            "path)"
        )
    if holds_secret(os.path.basename(value.rstrip("/")), secrets) and os.path.isfile(value):
        return f"rename the file, or give {argument} a path that does not hold the token"
    return f"give {argument} a path without it: rename the folder, or give it by a path that does not hold the token"


def token_value_positions(argv: list[str]) -> list[tuple[int, str]]:
    """(index, value) of every value given to an argument whose name holds a secret's word (`SECRET_WORDS`: a
    token, password or key), in any spelling: `--x value` or `--x=value`; for `--x=value` the index is that of the
    whole argument."""
    found = []
    for index, arg in enumerate(argv):
        name, equals, value = arg.partition("=")
        if arg.startswith("-") and any(word in name.lower() for word in SECRET_WORDS):
            if equals:
                found.append((index, value))
            elif index + 1 < len(argv):
                found.append((index + 1, argv[index + 1]))
    return [(index, value) for index, value in found if value]


def secrets_in_argv(argv: list[str]) -> list[str]:
    """The secret values given on a command line (see `token_value_positions`)."""
    return [value for _, value in token_value_positions(argv)]


def mask_token_values(argv: list[str]) -> list[str]:
    """`argv` with every secret value replaced by ***, whatever its length."""
    masked = list(argv)
    for index, value in token_value_positions(argv):
        masked[index] = masked[index][: -len(value)] + MASK if masked[index] != value else MASK
    return masked


@contextmanager
def redacting_logs(secrets: list[str]):
    """While inside, every log record of every logger is created with its message already redacted (so no handler,
    file or TensorBoard writer that reads it sees a secret); the previous record factory comes back on exit."""
    previous = logging.getLogRecordFactory()

    def redacted_record(*args, **kwargs) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a malformed call: logging reports it when the record is emitted
            return record
        if holds_secret(message, secrets):
            record.msg, record.args = redact(message, secrets), None
        return record

    logging.setLogRecordFactory(redacted_record)
    try:
        yield
    finally:
        logging.setLogRecordFactory(previous)


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The most a scan decompresses of one file (a zlib bomb is read this far, never whole): far above any figure the
# package writes or pushes
MAX_DECODED_BYTES = 64 << 20


def find_secrets(folder: str | Path, secrets: list[str]) -> list[Path]:
    """Files under `folder` (recursively) that hold a secret or anything shaped like a Hub token (`holds_secret`)
    in what they say as text: their bytes, and every part a reader decodes from them (`decoded_parts`), each as
    text or UTF-16."""
    needles = [form for secret in secrets for form in (secret.encode(), secret.encode("utf-16-le"))]
    found = []
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if any(
                any(needle in part for needle in needles) or any(shape.search(part) for shape in TOKEN_SHAPE_BYTES)
                for part in [data, *decoded_parts(path, data)]
            ):
                found.append(path)
    return found


def decoded_parts(path: Path, data: bytes) -> list[bytes]:
    """What a reader decodes from a file beyond its raw bytes, by the file's format (its first bytes, never its
    name): for a PNG every zlib stream of every chunk (iCCP's profile, zTXt, compressed iTXt, a private chunk's,
    the pixels of IDAT), and for any picture PIL opens (PNG, JPEG, WebP, GIF, TIFF, ...) the metadata it gives
    (`info`: the ICC profile put back together, EXIF, XMP, comments; a PNG's text), each decompressed up to
    `MAX_DECODED_BYTES`. A token there is in the file for anyone who opens it, though its bytes never show it."""
    parts = png_zlib_streams(data) if data.startswith(PNG_SIGNATURE) else []
    from modeling_vit_scratch.common.images import open_bounded

    try:
        with open_bounded(path, str(path)) as image:
            info = dict(image.info)
            if data.startswith(PNG_SIGNATURE):
                info.update(image.text)  # the text chunks after the pixels: read once the image is loaded
    except Exception:  # noqa: BLE001 (not a picture PIL reads, or a broken one: its raw bytes are scanned)
        return parts
    for value in info.values():
        if isinstance(value, bytes):
            parts.append(value)
        elif isinstance(value, str):
            parts.append(value.encode("utf-8", "replace"))
    return parts


def png_zlib_streams(data: bytes) -> list[bytes]:
    """Every zlib stream in a PNG's chunks, decompressed (at most `MAX_DECODED_BYTES` in all): the IDAT chunks as
    one stream, and in every other chunk each place a zlib header starts (iCCP, zTXt and iTXt put theirs after a
    keyword; a private chunk may put one anywhere)."""
    import struct
    import zlib

    streams, pixels, offset, budget = [], [], len(PNG_SIGNATURE), MAX_DECODED_BYTES
    while offset + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[offset : offset + 8])
        body = data[offset + 8 : offset + 8 + length]
        offset += 12 + length
        if kind == b"IDAT":
            pixels.append(body)
            continue
        for start in range(len(body) - 1):
            if budget > 0 and body[start] & 0x0F == 8 and (body[start] << 8 | body[start + 1]) % 31 == 0:
                try:
                    part = zlib.decompressobj().decompress(body[start:], budget)
                except zlib.error:
                    continue
                streams.append(part)
                budget -= len(part)
    if pixels and budget > 0:
        try:
            streams.append(zlib.decompressobj().decompress(b"".join(pixels), budget))
        except zlib.error:
            pass
    return streams


def secret_keys(value, secrets: list[str], key: str = "") -> list[str]:
    """The keys (dotted, e.g. `id2label.0`) of a JSON value whose key or value holds a secret (`holds_secret`)."""
    if isinstance(value, dict):
        return [
            found
            for name, item in value.items()
            for found in ([f"{key}{name}"] if holds_secret(str(name), secrets) else [])
            + secret_keys(item, secrets, f"{key}{name}.")
        ]
    if isinstance(value, list):
        return [found for index, item in enumerate(value) for found in secret_keys(item, secrets, f"{key}{index}.")]
    return [key.rstrip(".") or "(the whole file)"] if isinstance(value, str) and holds_secret(value, secrets) else []


def refuse_secrets_in_settings(folder: str | Path, shown: str | None = None) -> None:
    """A ValueError naming the file and the key (never the value) when a model folder's settings (`SETTINGS_FILES`)
    hold a secret or anything shaped like a Hub token: every reader (train --model and --teacher, explain, convert,
    push) copies them into what it writes, as a file name, a figure, a card or a Hub file. `shown` names the folder
    in the line (a hub repo's id for its cached copy)."""
    secrets = known_secrets()
    for name in SETTINGS_FILES:
        path = Path(folder) / name
        text = path.read_text(errors="replace") if path.is_file() else ""
        if not holds_secret(text, secrets):
            continue
        try:
            keys = secret_keys(json.loads(text), secrets)
        except ValueError:
            keys = []
        where = f" at key {redact(keys[0], secrets)!r}" if keys else ""  # a label2id key is the label itself
        raise ValueError(
            f"{shown or folder}/{name} holds or looks like a Hub token{where}, which would be copied into every file "
            "written from it: remove it from that file (tokens belong in HF_TOKEN or `hf auth login`)."
        )


def weights_sha256(folder: str | Path) -> str:
    """SHA-256 of the weights stored in `folder`'s safetensors files, whatever their sharding."""
    import torch
    from safetensors import safe_open

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder} holds no .safetensors weights.")
    entries = []  # one line per tensor: name, dtype, shape and the SHA-256 of its bytes
    for path in files:
        with safe_open(str(path), framework="pt") as weights:
            for name in weights.keys():  # noqa: SIM118 (safe_open is no dict)
                tensor = weights.get_tensor(name).contiguous()
                data = tensor.reshape(-1).view(torch.uint8).numpy().tobytes()
                entries.append(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|{hashlib.sha256(data).hexdigest()}\n")
    return hashlib.sha256("".join(sorted(entries)).encode()).hexdigest()


def credential_free_env(hub_home: str | Path) -> dict[str, str]:
    """This process's environment for a child that must reach no Hub credential: the token variables (and any
    variable holding a known token) dropped, huggingface_hub's home and token files moved to the empty folder
    `hub_home` (so the saved login cannot be read), and offline."""
    secrets = known_secrets()
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in TOKEN_VARIABLES and not any(secret in value for secret in secrets)
    }
    hub_home = Path(hub_home)
    env.update(
        HF_HOME=str(hub_home),
        HF_TOKEN_PATH=str(hub_home / "token"),
        HF_STORED_TOKENS_PATH=str(hub_home / "stored_tokens"),
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_IMPLICIT_TOKEN="1",
    )
    return env
