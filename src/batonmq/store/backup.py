"""What the two stores' backups have in common: an empty directory to write into, and the
manifest.json each store writes last (a directory without one is not a backup).

Each store writes its own data files and its own manifest fields; `batonctl db` reads the
manifest's `messages`, `entries` and `schema_version`, whichever store wrote it, and a restore
checks `kind`, `schema_version` and `broker_id` (`checked_manifest`) before it changes anything.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from batonmq.store.base import SCHEMA_VERSION, SchemaTooNew, StoreError

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


def checked_manifest(directory: Path, kind: str, broker_id: str) -> dict[str, object]:
    """The manifest of the backup in `directory`, once it says the backup is one that store
    `kind` of broker `broker_id` may restore: of that kind of store, of that broker, and of a
    schema version this code reads (SchemaTooNew otherwise); StoreError for anything else."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text())
        found, version = manifest["kind"], int(manifest["schema_version"])
        owner = manifest["broker_id"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise StoreError(f"{directory} holds no readable backup manifest: {error}") from error
    if found != kind:
        raise StoreError(f"{directory} holds a {found} backup, not a {kind} one")
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(f"the backup in {directory} has schema version {version}")
    if owner != broker_id:
        raise StoreError(f"the backup in {directory} is broker {owner!r}'s, not {broker_id!r}'s")
    return dict(manifest)
