"""Write batches of messages and queue entries for the store tests: `put` persistent messages
numbered `n` (message n, entry n of queue q), `acked` their entries."""

from __future__ import annotations

from batonmq.store.base import StoredEntry, StoredMessage, WriteBatch

VHOST = "/"
#: A content header payload (its class id only: the stores keep it as given).
HEADER = b"\x00\x3c"


def message(number: int, size: int | None = None) -> StoredMessage:
    """Message `number`, its body "body <number>" or `size` zero octets."""
    body = b"body %d" % number if size is None else bytes(size)
    return StoredMessage(number, "", "q", HEADER, body)


def entry(sequence: int, message_id: int, queue: str = "q") -> StoredEntry:
    return StoredEntry(VHOST, queue, sequence, message_id)


def put(*numbers: int, queue: str = "q") -> WriteBatch:
    return WriteBatch(
        messages_put=[message(n) for n in numbers],
        entries_put=[entry(n, n, queue) for n in numbers],
    )


def acked(*numbers: int, queue: str = "q") -> WriteBatch:
    return WriteBatch(entries_deleted=[(VHOST, queue, n, n) for n in numbers])
