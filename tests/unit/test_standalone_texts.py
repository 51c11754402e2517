"""The README and every --help text stand on their own: they name no file outside the
repository. Issue "Hardening" (its "Newcomer stumbles" list): "The README and `--help` texts point
at files that are not in the repository (design notes, seed documents, issue texts). The
repository stands on its own: cite a source document by its title." """

from __future__ import annotations

import argparse
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from benchmarks import compare

from batonmq.cli import broker, ctl

ROOT = Path(__file__).resolve().parents[2]

#: What names a document outside the repository, and what it is.
OUTSIDE = {
    r"\.\./": "a path above the repository",
    r"(?i)\bseeds?\s*/?\s*\d{3}": "a seed document's file",
    r"(?i)\bissues?\s*#?\d+": "an issue's number (its text is not in the repository)",
}
#: A file name: it must be a file of the repository (as a path from its root or from src/).
FILE_NAME = re.compile(r"[\w./-]*\w\.(?:md|txt|rst|pdf|html)\b")


def _tracked() -> set[str]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(listed.stdout.split())


def _parsers(name: str, parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
    """(command line, --help text) of `parser` and of each of its subcommands, recursively."""
    yield name, parser.format_help()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command, subparser in action.choices.items():
                yield from _parsers(f"{name} {command}", subparser)


def _texts() -> Iterator[tuple[str, str]]:
    yield "README.md", (ROOT / "README.md").read_text(encoding="utf-8")
    yield from _parsers("batonmq", broker._parser())
    yield from _parsers("batonctl", ctl._parser())
    yield from _parsers("python -m benchmarks.compare", compare._parser())


TEXTS = dict(_texts())
#: In comments and docstrings (every text file of the repository): the design notes, the seed
#: documents and the directory they live in, none of which is in the repository.
OUTSIDE_IN_SOURCES = {
    r"\.\./(?:shared|seeds|design)\b": "a path above the repository",
    r"(?i)\bseeds?\s*/?\s*\d{3}": "a seed document's file",
    r"\b(?:ARCHITECTURE|STYLE)\.md\b": "a design note's file",
    r"(?i)\bissues?\s*#?\d+\b": "an issue's number (its text is not in the repository)",
}


def test_every_batonctl_command_has_its_help_checked() -> None:
    assert {"batonctl", "batonctl db backup", "batonctl user add", "batonctl acl reload"} <= set(
        TEXTS
    )


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_a_text_names_no_document_outside_the_repository(name: str) -> None:
    text = TEXTS[name]
    tracked = _tracked()

    found = [
        f"{what}: {match[0]!r}"
        for pattern, what in OUTSIDE.items()
        for match in re.finditer(pattern, text)
    ]
    found += [
        f"a file that is not in the repository: {match[0]!r}"
        for match in FILE_NAME.finditer(text)
        if match[0] not in tracked and f"src/batonmq/{match[0]}" not in tracked
    ]

    assert found == []


def test_no_source_file_names_a_document_outside_the_repository() -> None:
    """The same rule for code comments and docstrings: "they are part of the repo"."""
    found = [
        f"{name}: {what}: {match[0]!r}"
        for name in sorted(_tracked())
        if name.endswith((".py", ".md", ".toml", ".cfg")) or name in ("scripts/check", ".ci/run")
        for pattern, what in OUTSIDE_IN_SOURCES.items()
        for match in re.finditer(pattern, (ROOT / name).read_text(encoding="utf-8"))
    ]

    assert found == []
