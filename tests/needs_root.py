"""Tests that need root (to mount a tmpfs, to install a package): skipped, saying so, for a
developer who is not root; failed in CI, which runs as root, so that CI can never skip them."""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest


def require_root(
    why: str, *, euid: int | None = None, environ: Mapping[str, str] | None = None
) -> None:
    """Return when the process is root (`euid`, default the process's own). Otherwise skip the
    test with a reason naming root and `why`, or fail it when CI=true (`environ`, default the
    process's own)."""
    if (os.geteuid() if euid is None else euid) == 0:
        return
    reason = f"needs root: {why} (CI runs it as root)"
    if (os.environ if environ is None else environ).get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but not root: {reason}", pytrace=False)
    pytest.skip(reason)
