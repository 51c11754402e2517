"""The engine's event feed (the counterpart of the Sun MQ HA guide's JMX notifications):
connection, channel, consumer, queue, exchange and alarm events, in the order they happen, to
every subscriber; a subscriber that raises is logged and breaks nothing."""

from __future__ import annotations

import logging

from pamqp import commands

from batonmq.engine.broker import Broker
from batonmq.engine.events import Event, EventKind
from tests.memclient import connect


def test_what_happens_to_connections_channels_consumers_queues_and_exchanges_is_told():
    broker = Broker()
    seen: list[Event] = []
    broker.events.subscribe(seen.append)
    client, session = connect(broker)
    client.declare_queue(1, "work")
    client.call(
        1,
        commands.Exchange.Declare(exchange="orders", exchange_type="fanout"),
        commands.Exchange.DeclareOk,
    )
    client.consume(1, "work", "c1")
    client.call(1, commands.Basic.Cancel(consumer_tag="c1"), commands.Basic.CancelOk)
    client.call(1, commands.Queue.Delete(queue="work"), commands.Queue.DeleteOk)
    client.call(1, commands.Exchange.Delete(exchange="orders"), commands.Exchange.DeleteOk)
    client.send(1, commands.Channel.Close(200, "bye", 0, 0))
    session.teardown()

    assert [(event.kind, event.name) for event in seen] == [
        (EventKind.CONNECTION_CREATED, session.name),
        (EventKind.CHANNEL_CREATED, f"{session.name} (1)"),
        (EventKind.QUEUE_CREATED, "work"),
        (EventKind.EXCHANGE_CREATED, "orders"),
        (EventKind.CONSUMER_CREATED, "c1"),
        (EventKind.CONSUMER_DELETED, "c1"),
        (EventKind.QUEUE_DELETED, "work"),
        (EventKind.EXCHANGE_DELETED, "orders"),
        (EventKind.CHANNEL_CLOSED, f"{session.name} (1)"),
        (EventKind.CONNECTION_CLOSED, session.name),
    ]
    assert {event.vhost for event in seen} == {"/"}
    assert seen[0].details == {"id": session.id, "user": "guest"}
    assert seen[4].details["queue"] == "work"


def test_alarms_raised_and_cleared_are_told_once_each():
    broker = Broker()
    seen: list[Event] = []
    broker.events.subscribe(seen.append)
    broker.raise_alarm("memory", "memory is red")
    broker.raise_alarm("memory", "memory is red")
    broker.clear_alarm("memory")
    assert [(event.kind, event.name) for event in seen] == [
        (EventKind.ALARM_RAISED, "memory"),
        (EventKind.ALARM_CLEARED, "memory"),
    ]
    assert seen[0].details == {"reason": "memory is red"}


def test_a_subscriber_that_raises_is_logged_and_the_others_still_hear(caplog):
    broker = Broker()
    seen: list[Event] = []

    def broken(event: Event) -> None:
        raise RuntimeError("subscriber defect")

    broker.events.subscribe(broken)
    unsubscribe = broker.events.subscribe(seen.append)
    with caplog.at_level(logging.ERROR, logger="batonmq.engine.events"):
        broker.raise_alarm("disk", "disk is full")
    assert [event.kind for event in seen] == [EventKind.ALARM_RAISED]
    assert "event subscriber failed" in caplog.text
    unsubscribe()
    broker.clear_alarm("disk")
    assert len(seen) == 1
