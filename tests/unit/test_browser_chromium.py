"""tests/browser/chromium.py: the browser tests are skipped for a developer without Chromium
and failed in CI, which installs it (as tests that need root are: tests/needs_root.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.chromium import require_chromium, screenshot_dir


def test_an_executable_browser_is_used(tmp_path: Path) -> None:
    browser = tmp_path / "chromium"
    browser.write_text("#!/bin/sh\n")
    browser.chmod(0o755)
    assert require_chromium(str(browser), environ={"CI": "true"}) == str(browser)


def test_a_developer_without_chromium_is_told_how_to_get_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "chromium")
    with pytest.raises(pytest.skip.Exception) as skipped:
        require_chromium(missing, environ={})

    assert str(skipped.value) == (
        f"needs Chromium at {missing} (apt-get install chromium; CI installs it)"
    )


def test_ci_without_chromium_fails_rather_than_skips(tmp_path: Path) -> None:
    missing = tmp_path / "chromium"
    missing.write_text("not executable")
    with pytest.raises(pytest.fail.Exception) as failed:
        require_chromium(str(missing), environ={"CI": "true"})

    assert str(failed.value).startswith("CI=true but no browser: needs Chromium at")


def test_screenshots_go_where_batonmq_screenshots_says(tmp_path: Path) -> None:
    chosen = tmp_path / "kept" / "shots"
    assert screenshot_dir(tmp_path / "default", {"BATONMQ_SCREENSHOTS": str(chosen)}) == chosen
    assert chosen.is_dir()
    assert screenshot_dir(tmp_path / "default", {}) == tmp_path / "default"
