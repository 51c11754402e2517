"""Requeued entries: marked redelivered (AMQP 0-9-1 basic.deliver redelivered: "this indicates
that the message may have been previously delivered"), and with x-delivery-limit counted and
dead-lettered past the limit (RabbitMQ: "the number of allowed unsuccessful delivery
attempts"; "the x-delivery-count header")."""

from __future__ import annotations

from pamqp import commands

from batonmq.amqp.frames import encode_header_payload
from batonmq.model.message import Message, QueueEntry
from batonmq.queues.redelivery import requeued


def entry(sequence: int, delivery_count: int) -> QueueEntry:
    header = encode_header_payload(commands.Basic.Properties(headers={"a": 1}), 1)
    return QueueEntry(Message("", "q", header, b"x"), sequence, delivery_count=delivery_count)


def test_without_a_limit_every_entry_comes_back_redelivered_and_unchanged():
    entries = [entry(0, 1), entry(1, 7)]
    messages = [one.message for one in entries]
    back = list(requeued(entries, None, lambda _: None))
    assert back == entries
    assert all(one.redelivered for one in back)
    assert [one.message for one in back] == messages


def test_with_a_limit_entries_carry_their_count_and_those_past_it_go_elsewhere():
    over: list[int] = []
    entries = [entry(0, 2), entry(1, 3)]
    original_id = entries[0].message.id
    back = list(requeued(entries, 2, lambda one: over.append(one.sequence)))
    assert [one.sequence for one in back] == [0]
    assert over == [1]
    [kept] = back
    assert kept.message.id == original_id
    assert kept.message.properties.headers == {"a": 1, "x-delivery-count": 2}
    assert not entries[1].redelivered


def test_an_entry_never_delivered_comes_back_as_it_was():
    """An entry taken back on its way to a client never reached one: not marked redelivered
    ("may have been previously delivered"), and under a delivery limit not counted."""
    entries = [entry(0, 0)]
    message = entries[0].message
    back = list(requeued(entries, 2, lambda _: None))
    assert back == entries
    assert not back[0].redelivered
    assert back[0].message is message
