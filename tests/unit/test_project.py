"""The repository itself: what it holds, and how its tools are pinned."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


def _requirements(extra: str) -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = (Requirement(text) for text in project["optional-dependencies"][extra])
    return {requirement.name: requirement for requirement in requirements}


def test_the_tools_that_judge_the_code_are_pinned_exactly() -> None:
    """The Hardening requirements: "Pin the tools that judge the code (ruff, mypy) to exact versions
    so a new release cannot turn CI red overnight." """
    requirements = _requirements("test")

    for tool in ("ruff", "mypy"):
        (specifier,) = requirements[tool].specifier
        assert specifier.operator == "==", f"{tool} is not pinned: {requirements[tool]}"


def test_no_wheel_is_committed() -> None:
    """The Hardening requirements: "Three wheel files (3.3 MB) are committed at the repository root:
    remove them; dependencies come from the package index." """
    tracked = subprocess.run(
        ["git", "ls-files", "*.whl"], cwd=ROOT, capture_output=True, text=True, check=True
    )

    assert tracked.stdout.split() == []
