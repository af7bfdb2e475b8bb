"""What keeps a model folder trustworthy: secrets kept out of it, and a digest that says which weights it holds.

- `known_secrets` collects every Hub token this process can see (given explicitly, `HF_TOKEN`, the saved login),
  `redact` removes them from a text, and `find_secrets` lists the files of a folder that contain one, so a writer
  can refuse before anything is published.
- `weights_sha256` is the SHA-256 of a folder's weights (a line per tensor with its name, dtype, shape and
  the SHA-256 of its bytes, in name order), independent of how the safetensors files are sharded: the training
  record keeps it, the push checks it.

Training glue, never imported by the model files.
"""

import hashlib
import os
from pathlib import Path

TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN", "HF_API_TOKEN")
MIN_SECRET_LENGTH = 8  # shorter values are too common to search for (and are no real token)
MASK = "***"


def known_secrets(*given: str | None) -> list[str]:
    """Token values given explicitly, in the environment, or saved by `hf auth login`: longest first."""
    from huggingface_hub import get_token

    values = set(given) | {os.environ.get(name) for name in TOKEN_VARIABLES}
    try:
        values.add(get_token())
    except Exception:  # noqa: BLE001, S110 (a broken login, e.g. an OIDC exchange that fails, holds no secret)
        pass
    return sorted((v.strip() for v in values if v and len(v.strip()) >= MIN_SECRET_LENGTH), key=len, reverse=True)


def redact(text: str, secrets: list[str]) -> str:
    """`text` with every secret replaced by `***`."""
    for secret in secrets:
        text = text.replace(secret, MASK)
    return text


def find_secrets(folder: str | Path, secrets: list[str]) -> list[Path]:
    """Files under `folder` (recursively) whose bytes contain a secret, as text or UTF-16."""
    needles = [form for secret in secrets for form in (secret.encode(), secret.encode("utf-16-le"))]
    if not needles:
        return []
    found = []
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if any(needle in data for needle in needles):
                found.append(path)
    return found


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
