"""tests/needs_root.py: a test that needs root is skipped for a developer, failed in CI."""

from __future__ import annotations

import pytest

from tests.needs_root import require_root

WHY = "it mounts a tmpfs"


def test_root_runs_the_test() -> None:
    require_root(WHY, euid=0, environ={"CI": "true"})
    require_root(WHY, euid=0, environ={})


def test_a_developer_who_is_not_root_is_told_the_test_needs_root() -> None:
    """The Hardening requirements: "`scripts/check` runs for a non-root developer too: tests that
    need root (tmpfs mounts) say so in their skip reason"."""
    with pytest.raises(pytest.skip.Exception) as skipped:
        require_root(WHY, euid=1000, environ={})

    assert str(skipped.value) == f"needs root: {WHY} (CI runs it as root)"


@pytest.mark.parametrize("ci", ["true", "TRUE"])
def test_ci_that_is_not_root_fails_rather_than_skips(ci: str) -> None:
    """The Hardening requirements: tests that need root "still run in CI, which is root": in CI a
    missing root is a failure, so that CI cannot skip them silently."""
    with pytest.raises(pytest.fail.Exception) as failed:
        require_root(WHY, euid=1000, environ={"CI": ci})

    assert str(failed.value) == f"CI=true but not root: needs root: {WHY} (CI runs it as root)"
