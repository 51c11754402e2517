"""Making a change to a directory durable: what both the SQLite store and the stream segment
files need after they create, rename or remove a file (fsync(2): syncing a file does not sync
the directory entry that names it)."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_directory(directory: Path) -> None:
    """Make the creation, rename or removal of a file in `directory` durable."""
    directory_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(directory_fd)
    finally:
        os.close(directory_fd)
