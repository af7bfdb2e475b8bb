"""Output names: every command that writes (train, explain, convert) refuses an output path that its file system
cannot name, a part over NAME_MAX or a whole path with no room left under PATH_MAX for the files written inside, in
one line naming it, before any work and without making anything. Tried over every entry point of `OUTPUT_ARGUMENT`."""

import os

import pytest
from entry_points import OUTPUT_ARGUMENT, Scenario, outcome
from hypothesis import given, settings
from hypothesis import strategies as st

from modeling_vit_scratch.common.folders import ROOM_INSIDE

WRITERS = sorted(OUTPUT_ARGUMENT)


def with_output(name: str, argv: list[str], output) -> list[str]:
    argv = list(argv)
    argv[argv.index(OUTPUT_ARGUMENT[name]) + 1] = str(output)
    return argv


@pytest.mark.parametrize("name", WRITERS)
@settings(max_examples=4, deadline=None)
@given(extra=st.integers(1, 40), wide=st.booleans(), depth=st.integers(0, 2))
def test_a_name_part_over_the_file_system_limit_is_one_line_naming_it(tmp_path_factory, name, extra, wide, depth):
    root = tmp_path_factory.mktemp("names")
    limit = os.pathconf(root, "PC_NAME_MAX")
    part = ("é" * ((limit + extra) // 2 + 1)) if wide else "a" * (limit + extra)
    output = root.joinpath(*["sub"] * depth, part, "inner")
    result = outcome(name, with_output(name, Scenario(root).argv(name), output))
    assert result.code == 1 and result.one_line, result
    size = len(os.fsencode(part))
    assert f"{OUTPUT_ARGUMENT[name]}: the name {part[:24]!r}... is {size} bytes, more than the {limit}" in result.error
    assert not (root / "sub").exists() and not list(root.glob(f"{part[:8]}*"))


@pytest.mark.parametrize("name", WRITERS)
def test_a_path_with_no_room_for_the_files_inside_is_one_line(tmp_path, name):
    path_max, name_max = os.pathconf(tmp_path, "PC_PATH_MAX"), os.pathconf(tmp_path, "PC_NAME_MAX")
    parts, length = [], len(os.fsencode(str(tmp_path)))
    while length + ROOM_INSIDE <= path_max:  # each part within NAME_MAX, the whole just past the room left
        parts.append("c" * min(name_max, 200))
        length += len(parts[-1]) + 1
    output = tmp_path.joinpath(*parts)
    result = outcome(name, with_output(name, Scenario(tmp_path).argv(name), output))
    assert result.code == 1 and result.one_line, result
    assert f"{OUTPUT_ARGUMENT[name]}: the path " in result.error and f"passes the {path_max}" in result.error
    assert not (tmp_path / parts[0]).exists()


@pytest.mark.parametrize("name", [*WRITERS, "benchmark"])
@pytest.mark.parametrize(
    "part, said",
    [
        ("o\udcff", "is not valid UTF-8 (the safetensors and JSON writers, and every line that names it, need UTF-8)"),
        ("o\nx", "holds a control character (a newline, tab or escape)"),
    ],
    ids=["not-utf8", "newline"],
)
def test_an_output_path_not_in_utf8_or_with_a_control_character_is_one_line_before_any_work(tmp_path, name, part, said):
    """Bytes that are not UTF-8 (`$'o\\xff'`) make a name the file system takes and the writers do not: before, a
    run trained, then failed in safetensors with a traceback, leaving a lock and a checkpoint."""
    argument = OUTPUT_ARGUMENT.get(name, "--json")
    output = tmp_path / part
    argv = Scenario(tmp_path).argv(name)
    argv[argv.index(argument) + 1] = str(output)
    result = outcome(name, argv)
    assert result.code == 1 and result.one_line, result
    assert result.error.startswith(f"error: {argument} '") and said in result.error, result.error
    assert result.error.endswith(f"give {argument} a name {'in UTF-8' if 'UTF' in said else 'without one'}.")
    assert "\udcff" not in result.error and not os.path.lexists(output)
