"""Graceful shutdown on SIGTERM, seen from connected clients speaking raw frames.

These need a broker process of their own: the batonmq fixture always starts one.
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.brokerproc import RunningBroker
from tests.rawclient import open_connection

pytestmark = pytest.mark.integration

CONNECTION_FORCED = 320


def test_sigterm_closes_every_connection_with_connection_forced(
    batonmq: RunningBroker,
) -> None:
    """320 CONNECTION_FORCED: "An operator intervened to close the connection for some reason.
    The client may retry at some later date." Spec 2.3.7: "When a peer decides to close a channel
    or connection, it sends a Close method. The receiving peer MUST respond to a Close with a
    Close-Ok". On SIGTERM each connected client gets connection.close 320, its close-ok lets the
    broker close the socket, and the process exits 0 within a few seconds, logging that it shut
    down."""
    with (
        open_connection(batonmq) as first,
        open_connection(batonmq, channel=None) as second,
    ):
        signalled_at = time.monotonic()
        batonmq.signal(signal.SIGTERM)

        first.expect_connection_close(CONNECTION_FORCED)
        second.expect_connection_close(CONNECTION_FORCED)

    assert batonmq.wait(timeout=10) == 0
    assert time.monotonic() - signalled_at < 10
    assert "shutdown complete" in batonmq.log()
