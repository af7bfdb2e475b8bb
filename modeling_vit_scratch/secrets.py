"""Secrets and text that reaches a person: one place for each.

- `known_secrets` is every Hub token this process can see (the token variables, the login files and stored logins,
  and any value `remember` was given, such as `--hub_token`), read once per process.
- `shown` is the one function that turns text from outside (a name, a label, a path, a library's message) into
  text that may be printed or written into a card: tokens and a URL's password masked, control and bidi characters
  escaped. The error formatter (`errors.py`) and the log filter (`redact_logs`) use it; so do the card and every line
  a command prints of user text.
- `files_with_secrets` scans files before they leave the machine (a push) or are published (an output folder).
- `credential_free_env` is the environment of a process that must see no token (the push's reload check).

Training glue, never imported by the model files.
"""

import logging
import os
import re
import struct
import unicodedata
import zlib
from pathlib import Path

TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN", "HF_API_TOKEN")
MIN_SECRET_LENGTH = 8  # shorter values are too common to search for, and no real token
MASK = "***"
TOKEN_SHAPE = re.compile(r"hf_[A-Za-z0-9]{30,}")  # what the Hub's access tokens look like
TOKEN_SHAPE_BYTES = (re.compile(rb"hf_[A-Za-z0-9]{30,}"), re.compile(rb"h\x00f\x00_\x00(?:[A-Za-z0-9]\x00){30,}"))
URL_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]+@")  # scheme://user:password@host
TERMINAL_STYLE = re.compile(r"\x1b\[[0-9;]*m")  # colour and bold (SGR) sequences, as transformers' load report uses
SECRET_OPTIONS = re.compile(r"^--?[\w-]*(token|password|secret|api_key)[\w-]*$", re.IGNORECASE)
MAX_DECODED_BYTES = 64 << 20  # the most a scan decompresses of one file (a zlib bomb is read this far, never whole)

_remembered: set[str] = set()
_read: list[str] | None = None  # the machine's tokens, read once


def remember(*values: str | None) -> None:
    """Treat each value as a secret from now on (a token given on a command line or to a function)."""
    _remembered.update(value.strip() for value in values if value and len(value.strip()) >= MIN_SECRET_LENGTH)


def known_secrets() -> list[str]:
    """Every token this process can see, longest first: remembered values, the token variables, the active login and
    every stored one, and the token files (which HF_TOKEN hides from `get_token`)."""
    global _read
    if _read is None:
        from huggingface_hub import constants, get_token
        from huggingface_hub.utils import get_stored_tokens

        values = {os.environ.get(name) for name in TOKEN_VARIABLES}
        for read in (get_token, get_stored_tokens):
            try:
                found = read()
            except Exception:  # noqa: BLE001, S112 (a broken login holds no secret we could read)
                continue
            values |= set(found.values()) if isinstance(found, dict) else {found}
        for path in {constants.HF_TOKEN_PATH, os.path.join(constants.HF_HOME, "token")}:
            try:
                values.add(Path(path).read_text(errors="replace"))
            except OSError:
                pass
        _read = [value.strip() for value in values if value and len(value.strip()) >= MIN_SECRET_LENGTH]
    return sorted(set(_read) | _remembered, key=len, reverse=True)


def secrets_in_argv(argv: list[str]) -> list[str]:
    """The values of a command line's secret options (`--hub_token X`, `--token=X`) and anything shaped like a token."""
    found = []
    for index, word in enumerate(argv):
        name, equals, value = word.partition("=")
        if SECRET_OPTIONS.match(name):
            found.append(value if equals else (argv[index + 1] if index + 1 < len(argv) else ""))
        found += TOKEN_SHAPE.findall(word)
    return [value for value in found if value]


def redact(text: str) -> str:
    """`text` with every known secret, anything shaped like a Hub token and a URL's user and password masked."""
    for secret in known_secrets():
        text = text.replace(secret, MASK)
    return URL_USERINFO.sub(rf"\1{MASK}@", TOKEN_SHAPE.sub(MASK, text))


def escape_controls(text: str, keep: str = "") -> str:
    """Control, format (bidi overrides, zero-width) and separator characters escaped as `\\xNN` / `\\uNNNN`, except
    those in `keep`: what a terminal or a Markdown renderer would act on instead of showing."""
    return "".join(
        char
        if char in keep or not (unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"))
        else (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")
        for char in text
    )


def shown(text: object, keep: str = "") -> str:
    """Outside text as it may reach a person: secrets masked, control characters escaped (`keep` names the ones
    allowed through, e.g. a newline in a multi-line block)."""
    return escape_controls(redact(str(text)), keep)


class _RedactingRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = shown(TERMINAL_STYLE.sub("", message), keep="\n\t")  # a library's bold or colour: dropped, not shown
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def redact_logs() -> None:
    """Every log record, whichever library logs it, is redacted before any handler sees it (a record factory, so
    handlers added later are covered too). Idempotent."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "redacts", False):
        return

    def redacting(*args, **kwargs):
        record = factory(*args, **kwargs)
        _RedactingRecords().filter(record)
        return record

    redacting.redacts = True
    logging.setLogRecordFactory(redacting)


def files_with_secrets(paths: list[Path]) -> list[Path]:
    """The files among `paths` (folders are walked) that hold a known secret or anything shaped like a token, in their
    bytes as UTF-8 or UTF-16, or in a PNG's compressed chunks (text, profile, pixels)."""
    needles = [form for secret in known_secrets() for form in (secret.encode(), secret.encode("utf-16-le"))]
    files = [file for path in map(Path, paths) for file in ([path] if path.is_file() else sorted(path.rglob("*")))]
    found = []
    for file in files:
        if not file.is_file() or file.is_symlink():
            continue
        data = file.read_bytes()
        parts = [data, *(png_streams(data) if data.startswith(b"\x89PNG\r\n\x1a\n") else [])]
        if any(needle in part for part in parts for needle in needles) or any(
            shape.search(part) for part in parts for shape in TOKEN_SHAPE_BYTES
        ):
            found.append(file)
    return found


def png_streams(data: bytes) -> list[bytes]:
    """Every zlib stream in a PNG's chunks, decompressed (at most `MAX_DECODED_BYTES` in all): what a reader of the
    picture sees though the file's bytes never show it."""
    streams, pixels, offset, budget = [], [], 8, MAX_DECODED_BYTES
    while offset + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[offset : offset + 8])
        body = data[offset + 8 : offset + 8 + length]
        offset += 12 + length
        if kind == b"IDAT":
            pixels.append(body)
            continue
        for start in range(len(body) - 1):  # iCCP, zTXt and iTXt put the stream after a keyword
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


def credential_free_env(hub_home: str | Path) -> dict[str, str]:
    """This process's environment without any token, its Hub home an empty folder: a child started with it can
    reach no login."""
    env = {key: value for key, value in os.environ.items() if key not in TOKEN_VARIABLES and key != "HF_TOKEN_PATH"}
    env.update(HF_HOME=str(hub_home), HF_TOKEN_PATH=str(Path(hub_home, "token")))
    return env
