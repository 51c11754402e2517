"""What the two stores' backups have in common: an empty directory to write into, and the
manifest.json each store writes last (a directory without one is not a backup).

Each store writes its own data files and its own manifest fields; `batonctl db` reads the
manifest's `messages`, `entries` and `schema_version`, whichever store wrote it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from batonmq.store.base import StoreError

#: The file every backup directory holds, whichever store wrote it.
MANIFEST: Final = "manifest.json"


def make_empty_directory(directory: Path) -> None:
    """Create `directory` (and its parents) if need be; StoreError if it holds anything: a
    backup never mixes with other files."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        empty = not any(directory.iterdir())
    except OSError as error:
        raise StoreError(f"cannot back up into {directory}: {error}") from error
    if not empty:
        raise StoreError(f"cannot back up into {directory}: the directory is not empty")


def write_manifest(directory: Path, manifest: dict[str, object]) -> None:
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
