"""The backlog bound shared by the load generator's processes."""

import ctypes
import math

from benchmarks.loadgen.backlog import Backlog


def counters(*values):
    return (ctypes.c_int64 * len(values))(*values)


def test_room_is_the_limit_less_what_is_in_flight_over_every_process():
    """Published by every process, less delivered by every process (per publish: a fanout's
    deliveries count once), leaves this much room below the limit."""
    published, delivered = counters(300, 200), counters(400, 200)
    backlog = Backlog(published, delivered, 0, 2, 1000)
    assert backlog.room() == 1000 - (500 - 600 / 2)
    backlog.add_published(50)
    assert backlog.room() == 1000 - 250
    backlog.add_delivered(100)
    assert backlog.room() == 1000 - 200


def test_a_backlog_without_a_limit_always_has_room():
    backlog = Backlog(counters(10**9), counters(0), 0, 1, 0)
    assert backlog.room() == math.inf


def test_only_the_peers_messages_count_against_the_bound():
    """Slots 0 and 2 publish to and consume from one queue, 1 and 3 from another: the first
    group's backlog leaves the second's room as it was."""
    published, delivered = counters(900, 100, 0, 0), counters(0, 0, 100, 100)
    first = Backlog(published, delivered, 0, 1, 1000, (0, 2))
    second = Backlog(published, delivered, 1, 1, 1000, (1, 3))
    assert (first.room(), second.room()) == (200, 1000)
