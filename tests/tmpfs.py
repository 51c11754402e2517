"""A real small disk for tests: a tmpfs of a given size (mounting needs root, as CI runs)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.needs_root import require_root


@contextlib.contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of `size` ("2m") at `path` (created) for the duration."""
    require_root(f"it mounts a {size} tmpfs as a small disk")
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def grow(path: Path, size: str) -> None:
    """Make the tmpfs at `path` `size` large."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)
