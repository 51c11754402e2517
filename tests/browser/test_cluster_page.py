"""The console's Cluster page (issue "HA clusters", "Administration": "The HTTP API shows the
cluster on /api/nodes and the console draws it"), on a standalone broker: the page renders
itself and says the broker is its one node."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import Console

pytestmark = pytest.mark.integration


def test_the_cluster_page_of_a_standalone_broker_shows_its_one_node(console: Console) -> None:
    console.login()
    console.go("Cluster")
    page = console.page
    expect(page.get_by_role("heading", name="Cluster")).to_be_visible()
    expect(page.get_by_text("not a member of an HA cluster")).to_be_visible()
    row = page.locator("#view tbody tr")
    expect(row).to_have_count(1)
    expect(row.locator("td").first).to_contain_text("@")
    expect(row.locator("td").nth(1)).to_have_text("yes")
    console.shot("cluster-standalone")
