"""Dead-lettering decisions as pure functions, against RabbitMQ's documented effects
(https://www.rabbitmq.com/docs/dlx, "Dead-Lettered Effects on Messages")."""

from __future__ import annotations

import datetime

from pamqp import commands

from batonmq.queues.deadletter import DeadLetter, Reason, dead_letter, is_cycle

NOW = datetime.datetime(2026, 11, 21, 12, 0, 0, 123456, tzinfo=datetime.UTC)
LATER = NOW + datetime.timedelta(seconds=5)


def die(
    properties: commands.Basic.Properties,
    reason: Reason = Reason.REJECTED,
    queue: str = "work",
    routing_key: str = "task",
    dead_letter_routing_key: str | None = None,
    now: datetime.datetime = NOW,
) -> DeadLetter:
    return dead_letter(
        properties,
        reason=reason,
        queue=queue,
        exchange="jobs",
        routing_key=routing_key,
        dead_letter_routing_key=dead_letter_routing_key,
        now=now,
    )


def test_the_first_death_adds_x_death_and_the_first_death_headers() -> None:
    """x-death: "an entry for each dead lettering event ... queue, reason, time, exchange,
    routing-keys, count"; "Three top-level headers are added for the very first dead-lettering
    event"."""
    dead = die(commands.Basic.Properties(headers={"app": "kept"}, content_type="text/plain"))
    headers = dead.properties.headers
    assert headers == {
        "app": "kept",
        "x-death": [
            {
                "count": 1,
                "reason": "rejected",
                "queue": "work",
                "time": NOW.replace(microsecond=0),
                "exchange": "jobs",
                "routing-keys": ["task"],
            }
        ],
        "x-first-death-reason": "rejected",
        "x-first-death-queue": "work",
        "x-first-death-exchange": "jobs",
    }
    assert dead.properties.content_type == "text/plain"
    assert dead.routing_keys == ["task"]


def test_expiration_is_removed_and_kept_as_original_expiration() -> None:
    """ "The expiration property is removed from the message on dead-lettering in order to
    prevent it from expiring again"; original-expiration keeps it."""
    original = commands.Basic.Properties(expiration="60000")
    dead = die(original, reason=Reason.EXPIRED)
    assert dead.properties.expiration is None
    assert dead.properties.headers["x-death"][0]["original-expiration"] == "60000"
    assert original.expiration == "60000"  # the original message is not changed


def test_a_repeated_death_counts_up_and_moves_to_the_front() -> None:
    """ "In case x-death already contains an entry with the same queue and dead lettering reason,
    its count field will be incremented and it will be moved to the beginning of the array";
    the x-first-death headers are "never modified"."""
    first = die(commands.Basic.Properties(), reason=Reason.EXPIRED, queue="a")
    second = die(first.properties, reason=Reason.REJECTED, queue="b", now=LATER)
    third = die(second.properties, reason=Reason.EXPIRED, queue="a", now=LATER)
    deaths = third.properties.headers["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [
        ("a", "expired", 2),
        ("b", "rejected", 1),
    ]
    assert third.properties.headers["x-first-death-queue"] == "a"
    assert third.properties.headers["x-first-death-reason"] == "expired"


def test_cc_keys_are_kept_and_bcc_removed() -> None:
    """routing-keys: "the routing keys (including CC keys but excluding BCC ones)"; without a
    dead-letter routing key the message goes with all its original keys."""
    properties = commands.Basic.Properties(headers={"CC": ["c1", b"c2"], "BCC": ["secret"]})
    dead = die(properties)
    assert dead.routing_keys == ["task", "c1", "c2"]
    assert "BCC" not in dead.properties.headers
    assert dead.properties.headers["CC"] == ["c1", b"c2"]
    assert dead.properties.headers["x-death"][0]["routing-keys"] == ["task", "c1", "c2"]


def test_a_dead_letter_routing_key_replaces_the_keys_and_drops_cc() -> None:
    """ "the routing key may be replaced with that specified in a queue performing dead
    lettering, if the above happens, the CC header will also be removed"."""
    dead = die(commands.Basic.Properties(headers={"CC": ["c1"]}), dead_letter_routing_key="dead")
    assert dead.routing_keys == ["dead"]
    assert "CC" not in dead.properties.headers


def test_a_cycle_without_a_rejection_is_detected() -> None:
    """ "Messages in such cycles (i.e. messages that reach the same queue twice) will be dropped
    if there was no rejections in the entire cycle"."""
    expired_in_a = die(commands.Basic.Properties(), reason=Reason.EXPIRED, queue="a")
    assert is_cycle(expired_in_a.properties.headers, "a")
    assert not is_cycle(expired_in_a.properties.headers, "b")
    then_b = die(expired_in_a.properties, reason=Reason.MAXLEN, queue="b")
    assert is_cycle(then_b.properties.headers, "a")
    rejected_in_a = die(commands.Basic.Properties(), reason=Reason.REJECTED, queue="a")
    assert not is_cycle(rejected_in_a.properties.headers, "a")
    rejected_then_b = die(rejected_in_a.properties, reason=Reason.EXPIRED, queue="b")
    assert not is_cycle(rejected_then_b.properties.headers, "a")
    assert not is_cycle(None, "a")
    assert not is_cycle({"x-death": "junk"}, "a")
