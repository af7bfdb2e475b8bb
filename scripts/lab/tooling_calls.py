"""Count the distinct tooling functions a command calls: the measure behind docs/design.md's "A run's path".

    python scripts/lab/tooling_calls.py train  --model tiny.json --dataset ./images --output_dir /tmp/run --max_steps 2
    HF_ENDPOINT=... python scripts/lab/tooling_calls.py push /tmp/run user/repo

Runs the command's `main(argv)` in this process under `sys.setprofile` and counts the distinct code objects (functions,
methods, comprehensions, lambdas) defined in the tooling files: the package's modules other than the five model
files, and the top-level `vit_scratch_command.py`. Prints one line `TOOLING_CALLS N`, then the names by file.
"""

import importlib
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "modeling_vit_scratch"
MODEL_FILES = {
    f"{name}_vit_scratch.py" for name in ("configuration", "modeling", "stems", "loading", "image_processing")
}
COMMANDS = {
    "train": "modeling_vit_scratch.training.command",
    "push": "modeling_vit_scratch.sharing.command",
    "convert": "modeling_vit_scratch.conversion.command",
    "explain": "modeling_vit_scratch.explanation.command",
}


def is_tooling(filename: str) -> bool:
    path = Path(filename).resolve()
    if path == REPO / "vit_scratch_command.py":
        return True
    return PACKAGE in path.parents and path.name not in MODEL_FILES


def main() -> None:
    name, argv = sys.argv[1], sys.argv[2:]
    command = importlib.import_module(COMMANDS[name]).main
    seen: set = set()

    def profile(frame, event, arg):
        if event == "call" and is_tooling(frame.f_code.co_filename):
            seen.add(frame.f_code)

    sys.setprofile(profile)
    try:
        command(argv)
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise
    finally:
        sys.setprofile(None)
    by_file = defaultdict(list)
    for code in seen:
        by_file[Path(code.co_filename).relative_to(REPO)].append(code.co_qualname)
    print(f"TOOLING_CALLS {len(seen)}")
    for file, names in sorted(by_file.items()):
        print(f"{file}: {len(names)}: {', '.join(sorted(names))}")


if __name__ == "__main__":
    main()
