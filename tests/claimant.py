"""A surviving member of an HA cluster reduced to its takeover claim, as a process of its own:
`python -m tests.claimant DSN SCHEMA BROKER_ID` opens that member's store (the real PostgreSQL
store, with its lease and epoch), says "ready", then for each line `claim FAILED SEEN_EPOCH AT`
on its standard input waits until the monotonic clock (one clock for every process of the
machine) reads AT, runs the store's real claim (`PostgresStore.take_over`) and answers with a
line of JSON: whether it won, and when its claim started and ended on that clock. An empty
line or the end of input closes the store.

Two of these, told the same AT, race for one failed member as two survivors' processes do,
without the rest of a broker (whose takeover after the claim only serves what it moved).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from batonmq.store.postgres import PostgresStore


async def main(dsn: str, schema: str, broker_id: str) -> None:
    store = PostgresStore(dsn, broker_id=broker_id, schema=schema, renew_every=3600.0)
    await store.open()
    loop = asyncio.get_running_loop()
    try:
        print("ready", flush=True)
        while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
            _, failed, seen, at = line.split()
            await asyncio.sleep(max(0.0, float(at) - time.monotonic()))
            started = time.monotonic()
            taken = await store.take_over(failed, int(seen), next_sequences={})
            ended = time.monotonic()
            answer = {"won": taken is not None, "started": started, "ended": ended}
            print(json.dumps(answer), flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
