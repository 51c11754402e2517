"""What the journal logs when its store fails, over each real store."""

from __future__ import annotations

import asyncio
import logging

import pytest

from batonmq.model.message import Message
from batonmq.store.base import StoredEntry, StoredQueue
from batonmq.store.journal import Journal
from tests.integration.store.conftest import StoreFactory

HEADER = b"\x00\x3c\x00\x00" + b"\x00" * 8 + b"\x00\x00"


async def settle(journal: Journal) -> bool:
    done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    journal.when_durable(done.set_result)
    return await asyncio.wait_for(done, 10)


async def test_a_store_that_fails_every_commit_is_logged_once_then_counted(
    store_factory: StoreFactory, caplog: pytest.LogCaptureFixture
):
    """Hardening: "One failed commit per message floods the log (39,000 identical lines in one
    outage): coalesce repeats ("store commit failed: ... (xN in the last 10 s)")"; the count
    comes out when the condition ends (the next commit succeeds)."""
    caplog.set_level(logging.INFO, "batonmq.store.journal")
    store = await store_factory()
    await store.recover()
    journal = Journal(store)
    journal.start()
    journal.put_queue(StoredQueue("/", "q", False, {}))
    assert await settle(journal)
    for number in range(20):
        message = Message("", "q", HEADER, b"body", id=1000 + number)
        journal.put_entry(StoredEntry("/", "q", 2**64, message.id), message)  # no store takes it
        assert not await settle(journal)
    assert journal.counters.failures == 20
    message = Message("", "q", HEADER, b"body", id=2000)
    journal.put_entry(StoredEntry("/", "q", 1, message.id), message)
    assert await settle(journal)
    await journal.stop()

    failed = [
        record.getMessage() for record in caplog.records if "write failed" in record.getMessage()
    ]
    assert len(failed) == 2, failed
    assert failed[0].startswith("store write failed: ")
    assert failed[1].startswith(failed[0]) and failed[1].endswith("(x19 in the last 1 s)")
