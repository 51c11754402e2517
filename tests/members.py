"""Waiting on the members of an HA cluster as the shared store records them."""

from __future__ import annotations

import asyncio

from batonmq.store.postgres import PostgresStore


async def lease_run_out(store: PostgresStore, broker_id: str) -> int:
    """Wait until `broker_id`'s lease has run out on the database's clock; its epoch."""
    for _ in range(200):
        found = {m.broker_id: m for m in await store.members()}[broker_id]
        if not found.lease_live:
            return found.epoch
        await asyncio.sleep(0.02)
    raise AssertionError(f"the lease of {broker_id} never ran out")
