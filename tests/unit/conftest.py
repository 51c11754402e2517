"""Fixtures shared by the unit tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put the logging set-up back as it was: for tests that configure the broker's logging."""
    root = logging.getLogger()
    batonmq_logger = logging.getLogger("batonmq")
    handlers, level = list(root.handlers), batonmq_logger.level
    yield
    root.handlers[:] = handlers
    batonmq_logger.setLevel(level)
