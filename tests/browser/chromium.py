"""The system's Chromium (Debian's `chromium` package), driven by Playwright without a browser
of Playwright's own: this machine and CI cannot download one. A developer without Chromium has
the browser tests skipped, saying so; CI (CI=true), which installs it, fails them instead, so
that CI can never skip them silently (as tests/needs_root.py does for root)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

#: Where Debian's package puts it.
CHROMIUM = "/usr/bin/chromium"
#: Headless, and nothing that reaches for the network on its own (the console needs only the
#: broker).
LAUNCH_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def require_chromium(path: str = CHROMIUM, *, environ: Mapping[str, str] | None = None) -> str:
    """The Chromium to drive: `path` when it is an executable. Otherwise skip the test, or fail
    it when CI=true."""
    if Path(path).is_file() and os.access(path, os.X_OK):
        return path
    reason = f"needs Chromium at {path} (apt-get install chromium; CI installs it)"
    if (os.environ if environ is None else environ).get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but no browser: {reason}", pytrace=False)
    pytest.skip(reason)


def screenshot_dir(default: Path, environ: Mapping[str, str] | None = None) -> Path:
    """Where screenshots go: $BATONMQ_SCREENSHOTS when set (kept after the run), else
    `default` (pytest's tmp_path)."""
    chosen = (os.environ if environ is None else environ).get("BATONMQ_SCREENSHOTS")
    directory = Path(chosen) if chosen else default
    directory.mkdir(parents=True, exist_ok=True)
    return directory


__all__ = ["CHROMIUM", "LAUNCH_ARGS", "require_chromium", "screenshot_dir"]
