"""The classic queue's limits as pure decisions (RabbitMQ "Queue Length Limit": "The default
behaviour for RabbitMQ when a maximum queue length or size is set and the maximum is reached is
to drop or dead-letter messages from the front of the queue"; with reject-publish "the most
recently published messages will be discarded"), and flow control (Qpid manual §1.5.1)."""

from __future__ import annotations

import logging
import struct

import pytest
from pamqp.common import FieldTable

from batonmq.model.message import Message, QueueEntry
from batonmq.queues.arguments import QueueArguments
from batonmq.queues.held import HeldBack
from batonmq.queues.limits import (
    Admission,
    Limits,
    admission,
    drops_head,
    over_limit,
    screens,
)
from batonmq.queues.ready import ReadyEntries


def options(arguments: FieldTable) -> QueueArguments:
    return QueueArguments.parse(arguments)


def test_a_queue_without_limits_is_never_screened_and_never_trimmed():
    plain = options({})
    assert not screens(plain)
    assert not drops_head(plain)
    assert admission(plain, 10**9, 10**9, 10**9) is Admission.TAKE


def test_drop_head_takes_everything_and_trims_when_over():
    """drop-head: the message is taken; the queue then drops from its head."""
    limited = options({"x-max-length": 2})
    assert not screens(limited)
    assert drops_head(limited)
    assert not over_limit(limited, 2, 0)
    assert over_limit(limited, 3, 0)
    by_bytes = options({"x-max-length-bytes": 10})
    assert not over_limit(by_bytes, 5, 10) and over_limit(by_bytes, 1, 11)


@pytest.mark.parametrize(
    ("overflow", "refused"),
    [("reject-publish", Admission.REFUSE), ("reject-publish-dlx", Admission.REFUSE_DEAD_LETTER)],
)
def test_reject_publish_refuses_what_there_is_no_room_for(overflow, refused):
    """RabbitMQ: "reject-publish ... the most recently published messages will be discarded";
    reject-publish-dlx also dead-letters them."""
    full_at_two = options({"x-max-length": 2, "x-max-length-bytes": 10, "x-overflow": overflow})
    assert screens(full_at_two)
    assert admission(full_at_two, 1, 1, 0) is Admission.TAKE
    assert admission(full_at_two, 1, 2, 0) is refused
    assert admission(full_at_two, 5, 1, 6) is refused  # 6 + 5 bytes > 10
    assert admission(full_at_two, 4, 1, 6) is Admission.TAKE


def test_a_body_over_the_message_size_limit_is_refused_without_dead_lettering():
    sized = options({"x-max-message-size": 4})
    assert screens(sized)
    assert admission(sized, 5, 0, 0) is Admission.REFUSE
    assert admission(sized, 4, 0, 0) is Admission.TAKE


class Limited:
    """`Limits` over real ready and held entries, recording what it drops."""

    def __init__(self, arguments: FieldTable) -> None:
        self.ready = ReadyEntries()
        self.held = HeldBack()
        self.dropped: list[int] = []
        self.page_ins = 0
        self.limits = Limits(
            options(arguments),
            self.ready,
            self.held,
            vhost="/",
            queue="q",
            drop=lambda entry: self.dropped.append(entry.sequence),
            page_in=self._page_in,
        )

    def _page_in(self) -> None:
        self.page_ins += 1

    def take_in(self, sequence: int, size: int = 100) -> None:
        self.ready.append(entry(sequence, size))
        self.limits.taken_in()

    def take_out(self) -> None:
        self.ready.pop()
        self.limits.check_under()


def entry(sequence: int, size: int = 1) -> QueueEntry:
    body = b"x" * size
    return QueueEntry(Message("", "q", struct.pack(">HHQH", 60, 0, size, 0), body), sequence)


def test_drop_head_drops_the_oldest_until_within_the_limit():
    """RabbitMQ: "drop or dead-letter messages from the front of the queue"."""
    limited = Limited({"x-max-length": 2})
    for sequence in range(4):
        limited.take_in(sequence)
    assert limited.dropped == [0, 1]
    assert len(limited.ready) == 2


def test_an_entry_to_drop_that_is_in_the_store_is_read_back_first():
    limited = Limited({"x-max-length": 1})
    limited.ready.recovered(count=3, body_bytes=3, last_sequence=2)
    limited.limits.make_room()
    assert limited.dropped == [] and limited.page_ins == 1


def test_a_refused_publish_counts_held_entries_and_reject_publish_dlx_drops_it():
    """Entries waiting for their commit count: they become ready as soon as it is done."""
    limited = Limited({"x-max-length": 2, "x-overflow": "reject-publish-dlx"})
    limited.ready.append(entry(0))
    limited.held.hold(entry(1), 5)
    assert limited.limits.refuses(entry(2))
    assert limited.dropped == [2]


def test_flow_control_is_overfull_above_capacity_and_underfull_below_resume(caplog):
    """Qpid manual §1.5.1: flow control is enforced above x-qpid-capacity and lifted "when its
    size becomes less than the flowResumeCapacity" (QUE-1003 Overfull, QUE-1004 Underfull)."""
    limited = Limited(
        {"x-overflow": "flow-control", "x-qpid-capacity": 300, "x-qpid-flow-resume-capacity": 200}
    )
    resumed: list[str] = []
    with caplog.at_level(logging.INFO, logger="batonmq.queues.limits"):
        for sequence in range(3):
            limited.take_in(sequence)
        assert not limited.limits.overfull
        limited.take_in(3)
        assert limited.limits.overfull
        limited.limits.when_underfull(lambda: resumed.append("go"))
        limited.take_out()
        limited.take_out()  # 200 bytes: not yet "less than" the resume capacity
        assert limited.limits.overfull and resumed == []
        limited.take_out()
    assert not limited.limits.overfull and resumed == ["go"]
    assert limited.dropped == []
    assert caplog.messages == [
        "QUE-1003 : Overfull : Size : 400 bytes, Capacity : 300",
        "QUE-1004 : Underfull : Size : 100 bytes, Resume Capacity : 200",
    ]


def test_a_deleted_overfull_queue_releases_its_publishers_without_a_log(caplog):
    limited = Limited({"x-overflow": "flow-control", "x-max-length": 1})
    limited.take_in(0)
    limited.take_in(1)
    resumed: list[str] = []
    limited.limits.when_underfull(lambda: resumed.append("go"))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="batonmq.queues.limits"):
        limited.limits.check_under(deleted=True)
    assert resumed == ["go"] and caplog.messages == []
