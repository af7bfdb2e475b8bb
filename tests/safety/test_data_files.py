"""Every entry of an image folder is accounted for, and every line that names one is safe to print.

- A name quoted in a line (the left-out line, the pre-flight's, a stream's) shows its control and invisible
  characters escaped (`common/names.py`'s `shown_name`): an escape sequence in a file name never reaches a terminal
  raw.
"""

import pytest
from helpers import write_imagefolder

import modeling_vit_scratch.training.data as data_module
from modeling_vit_scratch.common.names import shown_name
from modeling_vit_scratch.training.preflight import check_images

ESCAPING = ["a\x1b]0;PWNED\x07\x1b[2J", "a\nsecond line", "a\u202egnp", "a\u200b"]


@pytest.mark.parametrize("name", ESCAPING)
def test_a_name_with_control_characters_is_shown_escaped_in_every_line_naming_it(tmp_path, name):
    root = write_imagefolder(tmp_path / "images", per_class=2)
    (root / "fox" / f"{name}.png.bak").write_bytes(b"old")
    (root / "fox" / f"{name}.png").write_bytes(b"not an image")
    escaped = repr(name)[1:-1]
    assert shown_name(name) == escaped
    line = data_module.left_out_line(str(root))
    assert line == f"Left out 1 file that is not an image by its extension (e.g. fox/{escaped}.png.bak)."
    with pytest.raises(ValueError) as refused:
        check_images(data_module.load_image_dataset(str(root)), progress=False)
    assert f"fox/{escaped}.png) cannot be decoded" in str(refused.value)
    assert name not in str(refused.value)
