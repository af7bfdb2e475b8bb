"""Secrets: a token this process knows never reaches a person or a file that leaves the machine, in any surrounding
text, encoding, picture or log record; and shown text never carries a character a terminal would act on."""

import io
import logging
import os
import unicodedata
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from PIL import Image
from PIL.PngImagePlugin import PngInfo

from modeling_vit_scratch import secrets
from modeling_vit_scratch.secrets import files_with_secrets, redact, redact_logs, remember, shown

ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
tokens = st.text(ALPHABET, min_size=8, max_size=60)
hub_tokens = st.text(ALPHABET, min_size=30, max_size=40).map(lambda tail: f"hf_{tail}")
around = st.text(max_size=40)
ACTED_ON = ("Cc", "Cf", "Zl", "Zp")


@contextmanager
def knowing(token: str, how: str):
    """This process knows `token` only: remembered (a command line's `--hub_token`) or in HF_TOKEN."""
    with (
        mock.patch.dict(os.environ, HF_TOKEN=token if how == "env" else ""),
        mock.patch.object(secrets, "_read", None),
        mock.patch.object(secrets, "_remembered", set()),
    ):
        if how == "remembered":
            remember(token)
        yield


ways = st.sampled_from(["remembered", "env"])


@given(token=tokens | hub_tokens, how=ways, before=around, after=around, times=st.integers(1, 3))
def test_shown_and_redact_never_hold_a_known_token(token, how, before, after, times):
    text = before + (token + after) * times
    with knowing(token, how):
        assert token not in redact(text)
        for keep in ("", "\n", "\n\t"):
            assert token not in shown(text, keep=keep)


@given(token=hub_tokens, before=around, after=around)
def test_a_token_shaped_value_is_masked_unknown(token, before, after):
    with knowing("", "env"):
        assert token not in shown(before + token + after)


@given(text=st.text(), keep=st.sets(st.sampled_from("\n\t\r")).map("".join))
def test_shown_holds_no_character_a_terminal_acts_on(text, keep):
    with knowing("", "env"):
        result = shown(text, keep=keep)
    assert all(char in keep or unicodedata.category(char) not in ACTED_ON for char in result)


@given(
    token=tokens | hub_tokens,
    how=ways,
    name=st.text(ALPHABET + "._-", min_size=1, max_size=20),
    before=around,
    after=around,
    where=st.sampled_from(["msg", "args"]),
)
def test_no_log_record_of_any_logger_holds_a_token(token, how, name, before, after, where):
    """The filter is a record factory: a logger of any name, its handler added before or after, never writes it."""
    factory = logging.getLogRecordFactory()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with knowing(token, how):
            redact_logs()
            if where == "msg":
                logger.warning(before + token + after)
            else:
                logger.warning("%s %r %s", before, token, {"token": token})
                logger.error("failed: %s", ValueError(token + after))
    finally:
        logger.removeHandler(handler)
        logging.setLogRecordFactory(factory)
    assert stream.getvalue() and token not in stream.getvalue()


def png_with(path: Path, **texts) -> Path:
    info = PngInfo()
    for kind, value in texts.items():
        if kind == "tEXt":
            info.add_text("Comment", value)
        elif kind == "zTXt":
            info.add_text("Comment", value, zip=True)
        else:
            info.add_itxt("Description", value, zip=True)
    Image.new("RGB", (4, 3), (9, 8, 7)).save(path, pnginfo=info)
    return path


@settings(max_examples=30)
@given(token=tokens | hub_tokens, how=ways, before=around, after=around)
def test_files_with_secrets_finds_the_token_in_every_form_and_nothing_else(tmp_path_factory, token, how, before, after):
    folder = tmp_path_factory.mktemp("scan")
    text = before + token + after
    holding = {
        "utf8.txt": text.encode("utf-8"),
        "utf16.txt": text.encode("utf-16"),
        "utf16le.json": text.encode("utf-16-le"),
    }
    assume(token not in before and token not in after and not secrets.TOKEN_SHAPE.search(before + after))
    clean = {"other.txt": f"{before}*{token[: len(token) // 2]}*{after}".encode()}
    for name, data in {**holding, **clean}.items():
        (folder / name).write_bytes(data)
    pictures = [png_with(folder / f"{kind}.png", **{kind: text}) for kind in ("tEXt", "zTXt", "iTXt")]
    plain = png_with(folder / "plain.png", zTXt=f"{before}*{after}")
    with knowing(token, how):
        found = set(files_with_secrets([folder]))
        assert set(files_with_secrets([plain, folder / "other.txt"])) == set()
    assert found == {folder / name for name in holding} | set(pictures)
