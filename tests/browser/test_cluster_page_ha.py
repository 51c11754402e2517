"""The console's Cluster page on a member of a two-broker HA cluster (MQ 4.1 HA guide, Example 1):
both members with their states; "Take over" on a member that still runs asks the guide's
confirmation ("The broker associated with brokerID last accessed the database # seconds ago. Do
you want to take over for this broker?"), and accepted, forces the takeover (-f)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Dialog, expect

from tests.brokerproc import RunningBroker
from tests.browser.conftest import Console
from tests.httpapi import call
from tests.members import start_member

pytestmark = pytest.mark.integration


@pytest.fixture
def broker(tmp_path: Path, postgres_dsn: str) -> Iterator[RunningBroker]:
    """Member A, whose console the test uses, and member B beside it."""
    first = start_member(tmp_path, postgres_dsn, "A", http=True)
    second = start_member(tmp_path, postgres_dsn, "B")
    try:
        yield first
    finally:
        second.stop()
        first.stop()


@pytest.mark.expected_log_errors(
    r"no longer owns its store",
    r"store write failed",
    reason="B, still running, is taken over by force: it finds its store taken over and stops",
)
def test_the_cluster_page_lists_the_members_and_takes_one_over_after_the_confirmation(
    console: Console, broker: RunningBroker
) -> None:
    console.login()
    console.go("Cluster")
    page = console.page
    members = page.locator("#view tbody tr")
    expect(members).to_have_count(2)
    own, other = page.locator('tr[data-broker="A"]'), page.locator('tr[data-broker="B"]')
    expect(own).to_contain_text("A (this broker)")
    expect(own).to_contain_text("OPERATING")
    expect(other).to_contain_text("OPERATING")
    console.shot("cluster-members")

    questions: list[str] = []

    def answer(dialog: Dialog) -> None:
        questions.append(dialog.message)
        dialog.accept()

    page.on("dialog", answer)
    other.get_by_role("button", name="Take over").click()
    expect(page.locator("#status")).to_have_text("Broker B taken over")
    assert questions and questions[0].startswith("The broker associated with B last accessed")
    assert questions[0].endswith("Do you want to take over for this broker?")
    expect(other).to_contain_text("FAILOVER_COMPLETE")
    status, row = call(broker, "GET", "/api/cluster/brokers/B")
    assert status == 200 and isinstance(row, dict) and row["taken_over_by"] == "A"
    console.shot("cluster-taken-over")
