"""Producer flow control of one connection: what holds its publishing back, and telling it so.

A hold comes from a raised broker alarm (memory, disk: every publishing connection is held while
one is) or from an overfull queue that a channel of the connection published to (Qpid manual
§1.5.1: "Flow control is enabled on a producer when it sends a message to a Queue which is
overfull"). The first hold sends connection.blocked with its reason, to clients that support it;
while any hold is on, the session does not read the input of a client that has published
(RabbitMQ blocks publishing connections and lets the others consume); the last release sends
connection.unblocked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from batonmq.amqp.connection import ServerConnection

log = logging.getLogger(__name__)


class ProducerFlow:
    """The holds on one connection's publishing (see the module docstring)."""

    __slots__ = ("_changed", "_connection", "_log_fields", "holds")

    def __init__(
        self,
        connection: ServerConnection,
        changed: Callable[[], None],
        log_fields: Callable[[], dict[str, object]],
    ) -> None:
        """`changed` is called when there is a frame to send or the input may be read again."""
        self._connection = connection
        self._changed = changed
        self._log_fields = log_fields
        #: Why publishing is held back, by what holds it (an alarm's name, an overfull queue).
        self.holds: dict[object, str] = {}

    def hold(self, source: object, reason: str) -> None:
        """Hold publishing back for `source` until `release(source)`."""
        if source in self.holds:
            return
        self.holds[source] = reason
        if len(self.holds) == 1 and self._connection.block(reason):
            log.info("connection blocked: %s", reason, extra=self._log_fields())
            self._changed()

    def release(self, source: object) -> None:
        """`source` no longer holds publishing back."""
        if self.holds.pop(source, None) is None:
            return
        if not self.holds:
            if self._connection.unblock():
                log.info("connection unblocked", extra=self._log_fields())
            self._changed()  # the server layer goes on with held input after the flush
