"""The stream writer thread held idle while the event loop works on the logs' media itself (a
takeover merging a failed member's stream): what was asked for before has run, what is asked
for meanwhile waits, and what the hold was given runs first once it ends."""

from __future__ import annotations

import asyncio
from pathlib import Path

from batonmq.queues.streams.storage import StreamStorage


async def test_a_hold_runs_after_the_jobs_before_it_and_its_own_before_those_asked_meanwhile(
    tmp_path: Path,
) -> None:
    storage = StreamStorage(tmp_path)
    ran: list[str] = []
    done: list[object] = []
    storage.run(lambda: ran.append("before"), done.append)
    try:
        async with storage.held() as hold:
            assert ran == ["before"]
            storage.run(lambda: ran.append("meanwhile"), done.append)
            hold.then(lambda: ran.append("held job") or "result", done.append)
            hold.then(_failing, done.append)
            await asyncio.sleep(0.05)
            assert ran == ["before"]
        for _ in range(100):
            if len(done) == 4:
                break
            await asyncio.sleep(0.01)
        assert ran == ["before", "held job", "meanwhile"]
        assert done[:1] == [None] and done[1] == "result"
        assert isinstance(done[2], OSError) and str(done[2]) == "the medium failed"
    finally:
        await asyncio.to_thread(storage.close)


def _failing() -> None:
    raise OSError("the medium failed")
