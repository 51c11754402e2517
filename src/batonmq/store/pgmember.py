"""The calls of an HA cluster's member on the PostgreSQL store they share: its record (address,
state, no failover), the list of members, the takeover of a failed member's rows and their
adoption by a sibling worker (`batonmq.store.takeover`), and the shared catalogue
(`batonmq.store.postgres_catalogue`). Each is a call of the store's lane, fenced by the member's
epoch when it writes (`batonmq.store.pgcalls`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from functools import partial

import asyncpg

from batonmq.store.base import ObjectKey, StoreError
from batonmq.store.members import (
    Catalogue,
    CatalogueChanged,
    Member,
    StreamTail,
    TakenOver,
    as_members,
)
from batonmq.store.pgcalls import PostgresCalls
from batonmq.store.pgsession import Connection, row_count
from batonmq.store.plan import stored_permission, stored_user
from batonmq.store.postgres_catalogue import CatalogueWatch, channel
from batonmq.store.postgres_log import counts_with_log
from batonmq.store.takeover import adopt, claim_lock_timeout, member_record, take_over


class PostgresMember(PostgresCalls):
    """A PostgreSQL store with the calls of an HA member (see the module docstring)."""

    async def register(
        self, address: str, heartbeat_address: str, version: str, settings: str
    ) -> None:
        """Record where this member serves AMQP and heartbeats, its version and the settings
        every member must share (JSON); StoreFenced if it no longer owns its record."""
        await self._write_record(
            "registering in", "register", address, heartbeat_address, version, settings
        )

    async def refuse_failover(self) -> None:
        """Mark this member's record so that no survivor takes it over once it stops (`shutdown
        bkr -nofailover`) until it starts again; StoreFenced if it no longer owns its record."""
        await self._write_record("marking no failover in", "no_failover")

    async def record_state(self, state: str) -> None:
        """Record this member's state (one of SERVING_STATES) in its record, where the other
        members list it; StoreFenced if it no longer owns its record."""
        await self._write_record("recording the state in", "record_state", state)

    async def _write_record(self, what: str, statement: str, *arguments: object) -> None:
        """Run `statement` on this identity's record in `brokers`, given its id, its epoch and
        `arguments`; StoreFenced if the record has a newer epoch."""

        async def work(connection: Connection) -> None:
            self._require_current(write=True)
            status = await connection.execute(
                self._sql[statement], self._broker_id, self._lease.epoch, *arguments
            )
            if row_count(status) == 0:
                raise self._lease.fence("its broker record has a newer epoch")

        await self._call(what, work, write=True)

    async def members(self, *, count_messages: bool = False) -> list[Member]:
        """Every member recorded in the store, by id, a member with workers once
        (`batonmq.store.members.as_members`); with `count_messages`, what each holds (a scan
        of the messages, and of its append log's rows, in one snapshot: for an operator, not
        for the failure detector)."""

        async def work(connection: Connection) -> list[Member]:
            self._require_current(write=False)
            if not count_messages:
                rows = await connection.fetch(self._sql["members"])
                return as_members(member_record(row) for row in rows)
            async with connection.transaction(isolation="repeatable_read", readonly=True):
                rows = await connection.fetch(self._sql["members_counted"])
                logging = {row[0] for row in await connection.fetch(self._sql["logging_brokers"])}
                records = [member_record(row) for row in rows]
                for index, (found, member_of) in enumerate(records):
                    if found.broker_id in logging:
                        messages, _, _ = await counts_with_log(
                            connection,
                            self._sql,
                            found.broker_id,
                            (found.messages or 0, 0, 0),
                            quota=False,
                        )
                        records[index] = dataclasses.replace(found, messages=messages), member_of
                return as_members(records)

        return await self._call("reading the members of", work, write=False)

    async def take_over(
        self,
        failed: str,
        seen_epoch: int,
        *,
        force: bool = False,
        next_sequences: Mapping[ObjectKey, int],
        stream_tails: Mapping[ObjectKey, StreamTail] | None = None,
        owns: Callable[[str], bool] | None = None,
    ) -> TakenOver | None:
        """Claim broker `failed` (seen at `seen_epoch`) and take its rows over, in one
        transaction (`batonmq.store.takeover.take_over`); None when another broker won the claim,
        or `failed` renewed its lease meanwhile (and `force` is off). StoreError when the claim
        waited longer than `claim_lock_timeout` for a lock: nothing moved. With `owns`, the
        rows of the virtual hosts it owns only: this store's identity is a worker's, whose
        siblings adopt the others (`adopt`)."""
        timeout = claim_lock_timeout(self._lease_seconds, self._renew_every)
        move = partial(
            take_over,
            sql=self._sql,
            plan=self._plan,
            claimant=self._broker_id,
            member=self.member_id,
            failed=failed,
            seen_epoch=seen_epoch,
            force=force,
            next_sequences=next_sequences,
            stream_tails=stream_tails or {},
            owns=owns,
        )
        try:
            return await self._move_rows(f"takeover of {failed!r} in", move, lock_timeout=timeout)
        except StoreError as error:
            if not isinstance(error.__cause__, asyncpg.LockNotAvailableError):
                raise
            raise StoreError(
                f"the claim of broker {failed!r} waited {timeout:g} s for a lock on its record "
                f"in {self._location} (a statement of that broker, or another claim, still "
                "holds it) and was given up, so that this broker's own lease renewal is not "
                "held up; it is tried again at a later monitor round"
            ) from error

    async def adopt(
        self,
        owns: Callable[[str], bool],
        *,
        next_sequences: Mapping[ObjectKey, int],
        stream_tails: Mapping[ObjectKey, StreamTail] | None = None,
    ) -> TakenOver | None:
        """Take over the rows of the virtual hosts it `owns` that the identities this worker's
        member claimed still hold, in one transaction fenced by this identity's epoch
        (`batonmq.store.takeover.adopt`); None when there are none."""
        move = partial(
            adopt,
            sql=self._sql,
            claimant=self._broker_id,
            member=self.member_id,
            next_sequences=next_sequences,
            stream_tails=stream_tails or {},
            owns=owns,
        )
        return await self._move_rows("adopting taken-over rows in", move)

    async def _move_rows(
        self,
        what: str,
        move: Callable[[Connection], Awaitable[TakenOver | None]],
        *,
        lock_timeout: float | None = None,
    ) -> TakenOver | None:
        """Rows moved to this identity by `move` (a takeover's or an adoption's), in one
        transaction fenced by its epoch, whose locks are waited for `lock_timeout` seconds at
        most (None: as long as they are held)."""

        async def work(connection: Connection) -> TakenOver | None:
            self._require_current(write=True)
            async with connection.transaction():
                if lock_timeout is not None:
                    await connection.execute(
                        self._sql["claim_lock_timeout"], str(max(1, round(lock_timeout * 1000)))
                    )
                await self._lease.check_epoch(connection)
                taken = await move(connection)
                if taken is not None:
                    self._message_bytes = None
            return taken

        return await self._call(what, work, write=True)

    async def catalogue(self) -> Catalogue:
        """The users, virtual hosts and permissions, and the catalogue version, as one snapshot
        (a repeatable-read transaction), after the writes called before."""

        async def work(connection: Connection) -> Catalogue:
            self._require_current(write=False)
            async with connection.transaction(isolation="repeatable_read", readonly=True):
                users = await connection.fetch(self._sql["users"])
                vhosts = await connection.fetch(self._sql["vhosts"])
                permissions = await connection.fetch(self._sql["permissions"])
                version = await connection.fetchval(self._sql["catalogue_version"])
            return Catalogue(
                [stored_user(row) for row in users],
                [row[0] for row in vhosts],
                [stored_permission(row) for row in permissions],
                version,
            )

        return await self._call("reading the catalogue of", work, write=False)

    def watch_catalogue(
        self, on_change: CatalogueChanged, interval: float
    ) -> Callable[[], Coroutine[object, object, None]]:
        """See `batonmq.store.members.SharedStore.watch_catalogue`."""
        return CatalogueWatch(
            self._sessions.connect,
            channel(self._schema),
            self._sql["catalogue_version"],
            on_change,
            interval,
        ).run
