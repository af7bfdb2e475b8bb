"""The shape of the tooling as a property: small modules, imports at the top, no cycle between them, and model files
that import nothing of the tooling (docs/design.md)."""

import ast
from pathlib import Path

from helpers import REPO

PACKAGE = REPO / "modeling_vit_scratch"
MODEL_FILES = {
    f"{name}_vit_scratch.py" for name in ("configuration", "modeling", "stems", "loading", "image_processing")
}
TOOLING = sorted(path for path in PACKAGE.rglob("*.py") if path.name not in MODEL_FILES or path.parent != PACKAGE)
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def own_imports(path: Path) -> list[tuple[str, bool]]:
    """(the package module imported, whether the import is inside a function) for each import of the package."""
    tree, name = ast.parse(path.read_text()), module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    inside = {
        id(node)
        for func in ast.walk(tree)
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(func)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            if base.startswith("modeling_vit_scratch"):
                found.append((base, id(node) in inside))
        elif isinstance(node, ast.Import):
            found += [
                (alias.name, id(node) in inside)
                for alias in node.names
                if alias.name.startswith("modeling_vit_scratch")
            ]
    return found


def test_no_tooling_module_is_over_the_line_budget():
    long = {str(path.relative_to(REPO)): n for path in TOOLING if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long


def test_the_package_is_imported_at_the_top_of_each_module_only():
    inside = [f"{path.relative_to(REPO)}: {name}" for path in TOOLING for name, nested in own_imports(path) if nested]
    assert not inside


def test_the_tooling_modules_import_one_another_without_a_cycle():
    modules = {module_name(path): path for path in TOOLING}
    graph = {
        name: {target for target, _ in own_imports(path) if target in modules and target != name}
        for name, path in modules.items()
    }
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = "open"
        for target in graph[node]:
            if state.get(target) == "open":
                return [*trail, node, target]
            if target not in state and (cycle := visit(target, [*trail, node])):
                return cycle
        state[node] = "done"
        return None

    cycles = [cycle for name in graph if name not in state and (cycle := visit(name, []))]
    assert not cycles


def test_the_model_files_import_only_torch_transformers_and_each_other():
    for name in MODEL_FILES:
        tree = ast.parse((PACKAGE / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module.split(".")[0] not in ("modeling_vit_scratch", "timm", "einops"), (name, node.module)
            if isinstance(node, ast.ImportFrom) and node.level:
                assert f"{node.module}.py" in MODEL_FILES, (name, node.module)
