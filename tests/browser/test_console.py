"""The web console in headless Chromium against a real broker, with real pika clients beside
it: issue "Management", "Web console" — log in, create a queue, publish, browse, move a
message, purge, close a connection, with screenshots a person can look at."""

from __future__ import annotations

import re

import pika
import pytest
from playwright.sync_api import expect

from tests.brokerproc import RunningBroker, wait_until
from tests.browser.conftest import Console
from tests.httpapi import call

pytestmark = pytest.mark.integration


def connect(broker: RunningBroker) -> pika.BlockingConnection:
    return pika.BlockingConnection(
        pika.ConnectionParameters(
            broker.host,
            broker.port,
            connection_attempts=1,
            client_properties={"product": "console-test"},
        )
    )


def test_guest_logs_in_and_sees_the_overview(console: Console) -> None:
    """RabbitMQ's console: log in with a broker user (HTTP basic against the API), the
    credentials kept for the page's session; the overview is the first page."""
    console.login()
    page = console.page
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    expect(page.locator("#who")).to_have_text("guest (administrator)")
    expect(page.get_by_role("img", name="Message rates (per second)")).to_be_visible()
    console.shot("overview")


def test_a_wrong_password_is_refused_with_the_login_form(console: Console) -> None:
    """RabbitMQ's console answers a wrong password with "Login failed" and stays on the login
    form; the API refused it with 401, which Chromium reports as a failed load."""
    console.expected.append(r"status of 401 \(Unauthorized\)")
    console.login("guest", "wrong")
    page = console.page
    expect(page.get_by_role("alert")).to_have_text("Login failed")
    expect(page.get_by_role("navigation")).to_be_hidden()
    console.shot("login-failed")


def test_create_publish_browse_move_and_purge(console: Console, broker: RunningBroker) -> None:
    """The Qpid broker manual's management console, "Managing Queues": messages on a queue are
    browsed by position, "One or more messages can be selected in the table and moved to
    another queue", and "Clear Queue" deletes all its messages; RabbitMQ's "Add a new queue"
    and "Publish message". What the page did is checked with the API and a pika client."""
    console.login()
    page = console.page
    console.go("Queues")
    form = page.locator("form.add-queue")
    for name in ("orders", "orders.held"):
        form.get_by_label("Name").fill(name)
        form.get_by_role("button", name="Add queue").click()
        expect(page.get_by_role("link", name=name, exact=True)).to_be_visible()
    console.shot("queues")
    assert call(broker, "GET", "/api/queues/%2F/orders")[0] == 200

    page.get_by_role("link", name="orders", exact=True).click()
    expect(page.get_by_role("heading", name="Queue orders")).to_be_visible()
    publish = page.get_by_role("region", name="Publish message")
    for payload in ("first order", "second order", "third order"):
        publish.get_by_label("Payload", exact=True).fill(payload)
        publish.get_by_role("button", name="Publish message").click()
        expect(page.locator("#status")).to_have_text("Message published")
    # The status already read "Message published" before the third answer came: wait for it.
    wait_until(lambda: _messages(broker, "orders") == 3, "the third message")

    messages = page.get_by_role("region", name="Messages")
    messages.get_by_role("button", name="Browse").click()
    rows = messages.locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(1)).to_contain_text("second order")
    console.shot("browse")

    rows.nth(1).get_by_role("checkbox").check()
    messages.get_by_label("Selected messages to queue").select_option("orders.held")
    messages.get_by_role("button", name="Move", exact=True).click()
    expect(page.locator("#status")).to_have_text("1 message moved to orders.held")
    expect(rows).to_have_count(2)
    console.shot("moved")
    assert _bodies(broker, "orders.held") == [b"second order"]

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Purge").click()
    expect(page.locator("#status")).to_have_text("Queue orders purged")
    expect(messages.locator("tbody tr")).to_have_text(["No messages in this range"])
    console.shot("purged")
    assert _messages(broker, "orders") == 0


def test_copy_delete_selected_and_get(console: Console, broker: RunningBroker) -> None:
    """The Qpid broker manual's console: "copy the selected messages to another queue" and
    "delete the selected messages from the queue after prompting for confirmation"; RabbitMQ's
    "Get messages" with "Automatic ack" takes the message off the queue."""
    with connect(broker) as connection:
        channel = connection.channel()
        channel.queue_declare("source")
        channel.queue_declare("copies")
        for body in (b"keep", b"drop", b"take"):
            channel.basic_publish("", "source", body)
    console.login()
    page = console.page
    page.goto(f"{console.url}#/queues/%2F/source")
    messages = page.get_by_role("region", name="Messages")
    rows = messages.locator("tbody tr")
    expect(rows).to_have_count(3)

    rows.nth(0).get_by_role("checkbox").check()
    messages.get_by_role("button", name="Copy").click()
    expect(page.locator("#status")).to_have_text("1 message copied to copies")
    assert _bodies(broker, "copies") == [b"keep"]

    rows.nth(1).get_by_role("checkbox").check()
    page.once("dialog", lambda dialog: dialog.accept())
    messages.get_by_role("button", name="Delete selected").click()
    expect(page.locator("#status")).to_have_text("1 message deleted")
    expect(rows).to_have_count(2)

    got = page.get_by_role("region", name="Get messages")
    got.get_by_label("Ack mode").select_option("ack_requeue_false")
    got.get_by_label("Messages", exact=True).fill("1")
    got.get_by_role("button", name="Get messages").click()
    expect(got.locator(".got-message")).to_contain_text("keep")
    console.shot("got")
    assert _bodies(broker, "source") == [b"take"]


def test_close_a_pika_connection(console: Console, broker: RunningBroker) -> None:
    """RabbitMQ's console closes a connection with a reason (DELETE /api/connections/{name},
    X-Reason): the client is closed with 320 CONNECTION_FORCED and that reason."""
    connection = connect(broker)
    try:
        connection.channel()
        console.login()
        page = console.page
        console.go("Connections")
        row = page.locator("tr[data-connection]")
        expect(row).to_have_count(1)
        expect(row).to_contain_text("console-test")
        console.shot("connections")
        page.once("dialog", lambda dialog: dialog.accept("closed from the console"))
        row.get_by_role("button", name="Close").click()
        expect(page.locator("#status")).to_contain_text("closed")
        expect(row).to_have_count(0)
        console.shot("connection-closed")
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            connection.process_data_events(time_limit=5)
        assert (closed.value.reply_code, closed.value.reply_text) == (
            320,
            "CONNECTION_FORCED - closed from the console",
        )
    finally:
        if connection.is_open:
            connection.close()


def test_overview_charts_follow_each_poll_with_the_brokers_rates(
    console: Console, broker: RunningBroker
) -> None:
    """The overview's message-rate and queue-depth charts are redrawn from each poll of
    /api/overview and /api/queues: messages published while the page polls show as a publish
    rate, then as queued messages and the deepest queue. The rate is the broker's own
    `message_stats.publish_details.rate` (RabbitMQ's: per second over its statistics interval,
    5 s), as RabbitMQ's console charts it: a burst of 50 is at most 10 per second, where the
    difference between two polls a second apart would be about 50. A queue's page and the
    queue list show the queue's rates likewise."""
    console.login()
    page = console.page
    page.get_by_label("Refresh every").select_option("1")
    rates = page.locator(".rates-now")
    expect(rates).to_have_text(re.compile(r"^publish /s 0\.0, "), timeout=15_000)
    with connect(broker) as connection:
        channel = connection.channel()
        channel.queue_declare("deep")
        for number in range(50):
            channel.basic_publish("", "deep", f"message {number}".encode())
    expect(rates).to_have_text(re.compile(r"^publish /s [1-9]"), timeout=15_000)
    shown = re.match(r"^publish /s ([0-9.]+)", rates.inner_text())
    assert shown is not None and 0 < float(shown[1]) <= 10.0, rates.inner_text()
    expect(page.locator(".depth-now")).to_have_text("ready 50, unacknowledged 0")
    expect(page.locator(".deepest-now")).to_have_text("deep (/): 50")
    totals = page.get_by_role("region", name="Totals")
    expect(totals.locator("div", has_text="Messages ready").locator("strong")).to_have_text("50")
    console.shot("overview-charts")

    console.go("Queues")
    queue_rates = page.locator(".listing tbody tr").filter(has_text="deep").locator("td")
    expect(queue_rates.nth(8)).to_have_text(re.compile(r"^[1-9]"), timeout=10_000)  # In /s
    page.get_by_role("link", name="deep").click()
    published = page.locator("table.facts tr").filter(has_text="Published /s").locator("td")
    expect(published).to_have_text(re.compile(r"^([1-9]|0\.[1-9])"))
    expect(page.locator("table.facts tr").filter(has_text="Memory").locator("td")).to_have_text(
        re.compile(r" KiB$")
    )
    console.shot("queue-rates")


def test_a_queue_name_is_shown_as_text_never_as_markup(
    console: Console, broker: RunningBroker
) -> None:
    """Queue names are anyone's input: the console puts them in the page as text, so a name
    that is HTML stays a name (no element, no script)."""
    name = '<img src=x onerror="alert(1)">'
    assert call(broker, "PUT", "/api/queues/%2F/" + _quote(name), {})[0] == 201
    console.login()
    page = console.page
    page.on("dialog", lambda dialog: pytest.fail(f"a queue name ran a script: {dialog.message}"))
    console.go("Queues")
    expect(page.get_by_role("link", name=name)).to_be_visible()
    page.get_by_role("link", name=name).click()
    expect(page.get_by_role("heading", name=f"Queue {name}")).to_be_visible()
    assert page.locator("main img").count() == 0
    console.shot("markup-name")


def _quote(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")


def _messages(broker: RunningBroker, queue: str) -> int:
    status, info = call(broker, "GET", f"/api/queues/%2F/{queue}")
    assert status == 200 and isinstance(info, dict)
    return int(info["messages"])


def _bodies(broker: RunningBroker, queue: str) -> list[bytes]:
    with connect(broker) as connection:
        channel = connection.channel()
        bodies = []
        while True:
            method, _properties, body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                return bodies
            bodies.append(body)


def test_queues_sort_and_filter(console: Console, broker: RunningBroker) -> None:
    """RabbitMQ's queue list: sorted by a clicked column (again: the other way round), and
    filtered by name, by the API's sort, sort_reverse, name and use_regex."""
    with connect(broker) as connection:
        channel = connection.channel()
        for name, depth in (("alpha", 2), ("beta", 3), ("gamma", 1), ("other", 0)):
            channel.queue_declare(name)
            for _ in range(depth):
                channel.basic_publish("", name, b"x")
    console.login()
    page = console.page
    console.go("Queues")
    names = page.locator(".listing tbody tr td:first-child")
    expect(names).to_have_text(["alpha", "beta", "gamma", "other"])
    page.get_by_role("button", name="Total").click()
    expect(names).to_have_text(["other", "gamma", "alpha", "beta"])
    page.get_by_role("button", name="Total").click()
    expect(names).to_have_text(["beta", "alpha", "gamma", "other"])
    page.get_by_label("Filter").fill("^(alpha|gamma)$")
    page.get_by_label("Regex").check()
    page.get_by_role("button", name="Apply").click()
    expect(names).to_have_text(["alpha", "gamma"])
    expect(page.locator(".pager")).to_contain_text("(2 of 4 queues)")
    console.shot("queues-sorted-filtered")


@pytest.mark.parametrize(
    ("link", "heading"),
    [
        ("Exchanges", "Exchanges"),
        ("Connections", "Connections"),
        ("Users and virtual hosts", "Users"),
        ("Alarms", "Alarms"),
    ],
)
def test_every_page_shows_without_a_script_error(
    console: Console, broker: RunningBroker, link: str, heading: str
) -> None:
    """The other pages load their lists from the API and draw them."""
    with connect(broker) as connection:
        connection.channel().queue_declare("shown")
        console.login()
        console.go(link)
        page = console.page
        expect(page.get_by_role("heading", name=heading, exact=True)).to_be_visible()
        expect(page.locator("main table").first).to_be_visible()
        console.shot(link.lower().replace(" ", "-"))


def test_the_log_page_changes_the_level_and_shows_recent_records(
    console: Console, broker: RunningBroker
) -> None:
    """The Qpid broker manual's management console: "LoggingManagement: Dynamically control
    Qpid logging level"; the recent log shows the broker's own records."""
    console.login()
    console.go("Log")
    page = console.page
    expect(page.get_by_role("heading", name="Log level", exact=True)).to_be_visible()
    page.locator("select[name=level]").select_option("debug")
    page.get_by_role("button", name="Set level").click()
    expect(page.get_by_text("Log level set to debug")).to_be_visible()
    assert call(broker, "GET", "/api/broker/log-level") == (200, {"level": "debug"})
    expect(page.locator("main table").first).to_be_visible()
    console.shot("log")


def test_permissions_are_set_and_cleared_on_the_users_page(
    console: Console, broker: RunningBroker
) -> None:
    """RabbitMQ's Admin tab: a user's configure, write and read patterns in a virtual host are
    set from the user page and cleared there; the API answers with what the page set."""
    assert call(broker, "PUT", "/api/users/perm-user", {"password": "pw", "tags": ""})[0] == 201
    console.login()
    console.go("Users and virtual hosts")
    page = console.page
    form = page.locator("form", has=page.get_by_role("button", name="Set permissions"))
    form.get_by_label("User").fill("perm-user")
    form.get_by_label("Write").fill("^orders$")
    form.get_by_label("Read").fill("")
    form.get_by_role("button", name="Set permissions").click()
    row = page.locator("#permissions tr", has_text="perm-user")
    expect(row).to_contain_text("^orders$")
    assert call(broker, "GET", "/api/permissions/%2F/perm-user") == (
        200,
        {"user": "perm-user", "vhost": "/", "configure": ".*", "write": "^orders$", "read": ""},
    )
    console.shot("permissions-set")
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Clear").click()
    expect(row).to_have_count(0)
    assert call(broker, "GET", "/api/permissions/%2F/perm-user")[0] == 404
    assert call(broker, "DELETE", "/api/users/perm-user")[0] == 204
