"""The `bench` extra installs every third-party module the benchmark harness imports."""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
FIRST_PARTY = {"batonmq", "benchmarks", "tests"}


def _module_file(name: str) -> Path | None:
    """The source file of a first-party module, or None for a name that is not a module."""
    base = ROOT / "src" if name.partition(".")[0] == "batonmq" else ROOT
    path = base.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of a tree but those under `if TYPE_CHECKING:` (never imported when run)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            continue
        yield node
        yield from _runtime_nodes(node)


def _imports(path: Path, module: str) -> Iterator[str]:
    """Every module a file imports when it runs, at any depth (a lazy import is still needed)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                origin = f"{base}.{node.module}" if node.module else base
            else:
                origin = node.module or ""
            yield origin
            yield from (f"{origin}.{alias.name}" for alias in node.names)


def _third_party_imports(entry: str) -> set[str]:
    """The top-level names of the third-party modules reachable from a first-party module."""
    seen: set[str] = set()
    pending = [entry]
    found: set[str] = set()
    while pending:
        module = pending.pop()
        if module in seen:
            continue
        seen.add(module)
        path = _module_file(module)
        if path is None:
            continue
        for imported in _imports(path, module):
            top = imported.split(".")[0]
            if top in FIRST_PARTY:
                pending.append(imported)
            elif top not in sys.stdlib_module_names and top != "__future__":
                found.add(top)
    return found


def _declared(extra: str) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    texts = project["dependencies"] + project["optional-dependencies"][extra]
    return {canonicalize_name(Requirement(text).name) for text in texts}


def test_every_module_the_benchmark_harness_imports_comes_with_the_bench_extra() -> None:
    """The Hardening requirements: `pip install -e '.[bench]'` is all a benchmark run needs. The
    harness (benchmarks.compare) starts BatonMQ through tests.brokerproc, which imports pika: every
    third-party module it reaches is a dependency of the broker or of the bench extra."""
    distributions = packages_distributions()
    declared = _declared("bench")

    missing = {
        module: distributions.get(module, [module])
        for module in _third_party_imports("benchmarks.compare")
        if not any(canonicalize_name(name) in declared for name in distributions.get(module, []))
    }

    assert missing == {}


def test_the_walk_finds_a_module_imported_only_through_the_test_helpers() -> None:
    """The check above reaches pika only through tests.brokerproc: it follows first-party
    imports."""
    assert "pika" in _third_party_imports("benchmarks.compare")
    assert "pika" not in _third_party_imports("benchmarks.results")
