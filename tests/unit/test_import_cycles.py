"""No import cycle inside `engine/` or `queues/` (the foundation requirements: "No import cycle
inside `engine/` or `queues/`: a test walks the imports and fails on a cycle"). The imports are
read from the source with `ast`, as Python runs them: at module level and inside functions;
those only for type checkers (under `if TYPE_CHECKING:`) do not run and are left out."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[2] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(path): path for path in SOURCE.rglob("*.py")}


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool) -> None:
        self.module, self.is_package = module, is_package
        self.found: set[str] = set()

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.orelse:
                self.visit(statement)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found.update(alias.name for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            package = self.module.split(".")
            if not self.is_package:
                package.pop()
            package = package[: len(package) - node.level + 1]
            source = ".".join([*package, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        submodules = {f"{source}.{alias.name}" for alias in node.names} & MODULES.keys()
        # `from package import submodule` imports the submodule (and the package, unless it is
        # the importing package itself, whose own __init__ is running).
        if source != self.module:
            self.found.add(source)
        self.found.update(submodules)


def import_graph(package: str) -> dict[str, set[str]]:
    """Each module of `package` and the modules of `package` it imports when it runs."""
    graph = {}
    for module, path in MODULES.items():
        if module == package or module.startswith(package + "."):
            visitor = _Imports(module, path.name == "__init__.py")
            visitor.visit(ast.parse(path.read_text()))
            graph[module] = {
                found
                for found in visitor.found
                if found != module and (found == package or found.startswith(package + "."))
            }
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk meets, each as the modules along it."""
    found: list[list[str]] = []
    state: dict[str, str] = {}
    path: list[str] = []

    def walk(module: str) -> None:
        state[module] = "on path"
        path.append(module)
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == "on path":
                found.append([*path[path.index(imported) :], imported])
            elif imported not in state:
                walk(imported)
        path.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            walk(module)
    return found


@pytest.mark.parametrize("package", ["batonmq.engine", "batonmq.queues"])
def test_no_import_cycle_inside_the_package(package):
    graph = import_graph(package)
    assert len(graph) > 5 and any(graph.values()), "the walk found the modules and their imports"
    assert cycles(graph) == []


def test_the_walk_finds_a_cycle_when_there_is_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
