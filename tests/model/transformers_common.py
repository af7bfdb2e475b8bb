"""transformers' own common tests, of the installed transformers version, importable as `transformers_common_tests`.

They are not in the transformers wheel. `load()` downloads the source release of the installed version from PyPI
(`pip download --no-binary :all:`, once, into the gitignored .pytest_cache), extracts the three common files
(test_modeling_common.py, test_configuration_common.py, test_image_processing_common.py) into a package and puts
it on sys.path. Nothing of theirs is committed here.

The source release lacks four helpers those files import from transformers' repository; stand-ins are written
beside them (the names they import, no more):
- exporters/test_export.py `ExportTesterMixin`, a base of ModelTesterMixin: its export tests drive the
  `transformers.exporters` backends (ONNX, ExecuTorch, TensorRT...), so an empty base class here; our tester's
  `test_torch_export` checks torch.export in its place.
- generation/test_utils.py `GenerationTesterMixin`: only used in `issubclass` checks; ViT cannot generate.
- utils/test_configuration_utils.py `config_common_kwargs`: the keyword arguments every PretrainedConfig accepts.
- utils/fetch_hub_objects_for_ci.py `url_to_local_path`: maps test-image URLs to a CI cache; only tests that skip
  here (two backends, segmentation) read those images, so a URL stays a URL.
"""

import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "transformers_common_tests"
COMMON_FILES = ("test_modeling_common.py", "test_configuration_common.py", "test_image_processing_common.py")
CACHE_ROOT = Path(__file__).resolve().parents[2] / ".pytest_cache" / "transformers-common-tests"

STAND_INS = {
    "__init__.py": '"""transformers\' common tests, from its source release (tests/model/transformers_common.py)."""\n',
    "exporters/__init__.py": "",
    "exporters/test_export.py": (
        '"""Stand-in: the export tests are not in the source release; ModelTesterMixin only subclasses this."""\n'
        "\n\nclass ExportTesterMixin:\n    pass\n"
    ),
    "generation/__init__.py": "",
    "generation/test_utils.py": (
        '"""Stand-in: only used in issubclass checks; a ViT cannot generate."""\n'
        "\n\nclass GenerationTesterMixin:\n    pass\n"
    ),
    "utils/__init__.py": "",
    "utils/test_configuration_utils.py": (
        '"""The keyword arguments every PretrainedConfig takes, and values other than their defaults."""\n\n'
        "config_common_kwargs = {\n"
        '    "return_dict": False,\n'
        '    "output_hidden_states": True,\n'
        '    "output_attentions": True,\n'
        '    "dtype": "float16",\n'
        '    "chunk_size_feed_forward": 5,\n'
        '    "architectures": ["BertModel"],\n'
        '    "id2label": {0: "label"},\n'
        '    "label2id": {"label": "0"},\n'
        '    "problem_type": "regression",\n'
        "}\n"
    ),
}
# beside the package: test_image_processing_common.py appends <package>/../utils to sys.path and imports this
URL_HELPER = (
    '"""Stand-in: a URL stays a URL (only tests that skip here read test images)."""\n'
    "\n\ndef url_to_local_path(url):\n    return url\n"
)


def download_common_tests(version: str, target: Path) -> None:
    """Fetch transformers==`version`'s sdist with pip and write the common files and stand-ins under `target`."""
    with tempfile.TemporaryDirectory() as download_dir:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"transformers=={version}",
            "--dest",
            download_dir,
        ]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(
                f"Could not download transformers=={version}'s source release from PyPI for the conformance tests "
                f"({result.stderr.strip().splitlines()[-1:]}): connect to PyPI or deselect tests/model/test_conformance.py."
            )
        (sdist,) = Path(download_dir).glob("transformers-*.tar.gz")
        staging = Path(tempfile.mkdtemp(dir=target.parent))
        with tarfile.open(sdist) as archive:
            for name in COMMON_FILES:
                member = archive.getmember(f"transformers-{version}/tests/{name}")
                (staging / PACKAGE).mkdir(exist_ok=True)
                (staging / PACKAGE / name).write_bytes(archive.extractfile(member).read())
    for relative, text in STAND_INS.items():
        (staging / PACKAGE / relative).parent.mkdir(parents=True, exist_ok=True)
        (staging / PACKAGE / relative).write_text(text)
    (staging / "utils").mkdir()
    (staging / "utils" / "fetch_hub_objects_for_ci.py").write_text(URL_HELPER)
    try:
        staging.rename(target)  # whole or not at all: a download cut short leaves no half package behind
    except OSError:  # another pytest process got there first
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / PACKAGE / "__init__.py").is_file():
            raise


def load() -> Path:
    """Make `transformers_common_tests` importable (downloading it on first use) and return its folder."""
    version = importlib.metadata.version("transformers")
    target = CACHE_ROOT / version
    if not (target / PACKAGE / "__init__.py").is_file():
        CACHE_ROOT.mkdir(parents=True, exist_ok=True)
        # each pytest-xdist worker loads this file at collection: a folder another worker just moved into place is
        # whole (never removed here); only one left half-written by something else is
        if target.exists() and not (target / PACKAGE / "__init__.py").is_file():
            shutil.rmtree(target, ignore_errors=True)
        download_common_tests(version, target)
    if str(target) not in sys.path:
        sys.path.insert(0, str(target))
    return target / PACKAGE
