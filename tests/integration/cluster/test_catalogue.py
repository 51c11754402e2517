"""Users, permissions and virtual hosts changed on one running member of an HA cluster are in
force on the others at once, not only once they restart: first the store's notification and
version (two stores of one schema), then real members over HTTP and AMQP, then across a restart
of PostgreSQL.

GlassFish MQ 4.5.2 Technical Overview, Table 4-1: in an enhanced cluster the configuration is
in the shared store every broker sees. RabbitMQ's access control guide: permissions are checked
at each operation (a revoke refuses the next one); a deleted user's and a deleted virtual host's
connections are closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pika
import pika.exceptions
import pytest

from batonmq.security.passwords import Credential
from batonmq.security.permissions import UserPermission
from batonmq.server.placement import owner_of
from batonmq.store.base import StoredUser, WriteBatch
from batonmq.store.placement import worker_id
from batonmq.store.postgres import PostgresStore
from tests.brokerproc import RunningBroker, connect, wait_until
from tests.httpapi import call
from tests.integration.cluster.conftest import StartMember
from tests.integration.cluster.test_hastore_db import operator
from tests.integration.test_batonctl_db import succeeds
from tests.members import start_member
from tests.pgthrowaway import ThrowawayServer

pytestmark = pytest.mark.integration

SCHEMA = "batonmq_c_test"
PASSWORD = "s3cret-pw"
#: The worker processes of each member the tests start (the two-worker CI job sets it).
WORKERS = int(os.environ.get("BATONMQ__BROKER__WORKERS", "1"))
EVERYTHING = {"configure": ".*", "write": ".*", "read": ".*"}


# --- the store: a notification at commit, and the version -------------------------------------


@pytest.fixture
async def two_stores(postgres_dsn: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    stores = [
        PostgresStore(postgres_dsn, broker_id=broker_id, schema=SCHEMA)
        for broker_id in ("brokerA", "brokerB")
    ]
    for store in stores:
        await store.open()
    try:
        yield stores[0], stores[1]
    finally:
        for store in stores:
            await store.close()


@contextlib.asynccontextmanager
async def watching(
    store: PostgresStore, interval: float
) -> AsyncIterator[asyncio.Queue[tuple[int, str | None]]]:
    """What `store`'s catalogue watch tells, (version, committing member), while the block
    runs; the watch reads the version every `interval` seconds."""
    heard: asyncio.Queue[tuple[int, str | None]] = asyncio.Queue()
    watch = asyncio.create_task(
        store.watch_catalogue(lambda *told: heard.put_nowait(told), interval)()
    )
    try:
        yield heard
    finally:
        watch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watch


async def test_a_commit_that_changes_the_catalogue_is_notified_to_the_other_members(
    two_stores: tuple[PostgresStore, PostgresStore],
) -> None:
    """Each commit that changes users, permissions or virtual hosts bumps the version and is
    notified with it and the committing member; other commits are neither."""
    a, b = two_stores
    # An interval far longer than the test: what comes after the first reading is notified.
    async with watching(b, 3600) as heard:
        first, by = await asyncio.wait_for(heard.get(), 10)
        assert by is None  # the reading on connecting
        bob = StoredUser("bob", Credential.from_password(PASSWORD).encode(), ())

        await a.commit(WriteBatch(users_put=[bob]))
        await a.commit(WriteBatch(vhosts_put=["v1"]))
        await a.commit(WriteBatch(exchanges_deleted=[("/", "nothing")]))
        await a.commit(WriteBatch(permissions_put=[UserPermission.full("bob", "v1")]))

        told = [await asyncio.wait_for(heard.get(), 10) for _ in range(3)]
        assert told == [(first + 1, "brokerA"), (first + 2, "brokerA"), (first + 3, "brokerA")]
        assert heard.empty()
        catalogue = await b.catalogue()
        assert catalogue.version == first + 3
        assert "bob" in {user.name for user in catalogue.users} and "v1" in catalogue.vhosts
        assert UserPermission.full("bob", "v1") in catalogue.permissions
        assert a.catalogue_writes == 3 and b.catalogue_writes == 0


async def test_a_lost_notification_is_caught_up_by_the_version_read_every_interval(
    two_stores: tuple[PostgresStore, PostgresStore], postgres_dsn: str
) -> None:
    """A change whose notification never came (here: the version bumped without one, as when
    the listening session was lost at that moment) is found at the next reading."""
    _, b = two_stores
    async with watching(b, 0.2) as heard:
        first, _ = await asyncio.wait_for(heard.get(), 10)
        connection = await asyncpg.connect(postgres_dsn)
        try:
            await connection.execute(
                f"INSERT INTO {SCHEMA}.meta (key, value) VALUES ('catalogue_version', $1)"
                " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                str(first + 1),
            )
        finally:
            await connection.close()

        deadline = time.monotonic() + 10
        while (told := await asyncio.wait_for(heard.get(), 10))[0] == first:
            assert told == (first, None) and time.monotonic() < deadline
        assert told == (first + 1, None)


async def test_a_restore_replaces_the_catalogue_and_is_notified_as_a_change(
    two_stores: tuple[PostgresStore, PostgresStore], tmp_path: Path
) -> None:
    """`batonctl db restore` puts back the users, virtual hosts and permissions the backup
    holds, the catalogue the members share (GlassFish MQ 4.5.2 Technical Overview, Table 4-1):
    it bumps the version and notifies it as a commit that changes the catalogue does, so that
    the running members read the catalogue again."""
    a, b = two_stores
    async with watching(b, 3600) as heard:
        first, _ = await asyncio.wait_for(heard.get(), 10)
        dave = StoredUser("dave", Credential.from_password(PASSWORD).encode(), ())
        await a.commit(WriteBatch(users_put=[dave]))
        await a.backup(tmp_path / "backup")
        await a.commit(WriteBatch(users_deleted=["dave"], vhosts_put=["v1"]))
        assert [await asyncio.wait_for(heard.get(), 10) for _ in range(2)] == [
            (first + 1, "brokerA"),
            (first + 2, "brokerA"),
        ]

        await a.restore(tmp_path / "backup")

        assert await asyncio.wait_for(heard.get(), 10) == (first + 3, "brokerA")
        catalogue = await b.catalogue()
        assert catalogue.version == first + 3
        assert "dave" in {user.name for user in catalogue.users}
        assert "v1" not in catalogue.vhosts
        assert a.catalogue_writes == 3


# --- real members ----------------------------------------------------------------------------


def _changes_applied(broker: RunningBroker) -> int:
    """Changes its processes applied from the store: each of its workers applies one once."""
    return broker.log().count("catalogue changed in the shared store")


def _logs_in(broker: RunningBroker, user: str, vhost: str = "/") -> bool:
    try:
        connect(broker, user, PASSWORD, vhost).close()
    except pika.exceptions.ProbableAuthenticationError:
        return False
    except pika.exceptions.ProbableAccessDeniedError:
        return False
    return True


def _add_bob(a: RunningBroker) -> None:
    assert call(a, "PUT", "/api/users/bob", {"password": PASSWORD, "tags": ""})[0] == 201
    assert call(a, "PUT", "/api/permissions/%2F/bob", EVERYTHING)[0] == 201


def test_a_user_added_on_one_member_logs_in_on_the_other(member: StartMember) -> None:
    """... without a restart, within a second or so; the member where it was added applies its
    own change once (through its API), not again from the store: only its other workers, if it
    has several, apply each of the two changes from the store."""
    a, b = member("A"), member("B")
    assert not _logs_in(b, "bob")
    added = time.monotonic()

    _add_bob(a)

    wait_until(lambda: _logs_in(b, "bob"), "bob logs in on B", timeout=10)
    print(f"bob logs in on B {time.monotonic() - added:.2f} s after he was added on A")
    status, body = call(b, "GET", "/api/users/bob")
    assert status == 200 and isinstance(body, dict) and body["name"] == "bob"
    assert _changes_applied(a) <= 2 * (WORKERS - 1)


def test_a_permission_revoked_on_one_member_refuses_the_next_operation_on_the_other(
    member: StartMember,
) -> None:
    a, b = member("A"), member("B")
    _add_bob(a)
    wait_until(lambda: _logs_in(b, "bob"), "bob logs in on B", timeout=10)
    connection = connect(b, "bob", PASSWORD)
    channel = connection.channel()
    channel.queue_declare("bobs", auto_delete=True)
    applied = _changes_applied(b)

    assert call(a, "DELETE", "/api/permissions/%2F/bob")[0] == 204
    wait_until(
        lambda: _changes_applied(b) >= applied + WORKERS,
        "every worker of B applied the revoke",
        timeout=10,
    )

    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.queue_declare("bobs", auto_delete=True)
    assert refused.value.reply_code == 403
    assert "refused for user 'bob'" in refused.value.reply_text
    connection.close()
    assert not _logs_in(b, "bob")  # no permissions in "/" any more


def test_a_virtual_host_deleted_on_one_member_is_gone_on_the_other(
    member: StartMember, postgres_dsn: str
) -> None:
    """B's own queue in it is deleted with it (from the store too), and B's connection to it
    is closed (320)."""
    a, b = member("A"), member("B")
    assert call(a, "PUT", "/api/vhosts/v1")[0] == 201
    wait_until(lambda: call(b, "GET", "/api/vhosts/v1")[0] == 200, "B has v1", timeout=10)
    connection = connect(b, vhost="v1")
    channel = connection.channel()
    channel.queue_declare("on-b", durable=True)
    channel.basic_publish("", "on-b", b"m", pika.BasicProperties(delivery_mode=2))
    # Written by B's worker that owns v1, as its own store identity.
    owner = "B" if WORKERS == 1 else worker_id("B", owner_of("v1", WORKERS))
    assert _queues_in_store(postgres_dsn, "v1") == [(owner, "on-b")]

    assert call(a, "DELETE", "/api/vhosts/v1")[0] == 204

    wait_until(lambda: call(b, "GET", "/api/vhosts/v1")[0] == 404, "v1 gone on B", timeout=10)
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        connection.process_data_events(time_limit=5)
    assert closed.value.reply_code == 320
    assert _queues_in_store(postgres_dsn, "v1") == []


def test_a_restore_of_the_shared_store_is_in_force_on_a_running_member(
    member: StartMember, postgres_dsn: str, tmp_path: Path
) -> None:
    """`batonctl db restore` run by an operator while a member runs: the member reads the
    restored users again at once, without a restart (a user only the backup has logs in, one
    added since is refused)."""
    b = member("B")
    assert call(b, "PUT", "/api/users/dave", {"password": PASSWORD, "tags": ""})[0] == 201
    assert call(b, "PUT", "/api/permissions/%2F/dave", EVERYTHING)[0] == 201
    environment, data_dir = operator(postgres_dsn), tmp_path / "operator"
    succeeds(environment, data_dir, "db", "backup", "--dir", str(tmp_path / "backup"))
    assert call(b, "DELETE", "/api/users/dave")[0] == 204
    _add_bob(b)
    assert _logs_in(b, "bob") and not _logs_in(b, "dave")
    applied = _changes_applied(b)

    succeeds(environment, data_dir, "db", "restore", "--dir", str(tmp_path / "backup"))

    wait_until(lambda: _changes_applied(b) > applied, "B read the restored catalogue", timeout=10)
    assert _logs_in(b, "dave") and not _logs_in(b, "bob")


def _queues_in_store(dsn: str, vhost: str) -> list[tuple[str, str]]:
    async def read() -> list[tuple[str, str]]:
        connection = await asyncpg.connect(dsn)
        try:
            rows = await connection.fetch(
                f"SELECT broker_id, name FROM {SCHEMA}.queues WHERE vhost = $1", vhost
            )
        finally:
            await connection.close()
        return [(row[0], row[1]) for row in rows]

    return asyncio.run(read())


@pytest.mark.timeout(180)
@pytest.mark.expected_log_errors(
    r"store \w+ failed",
    r"PostgreSQL at",
    reason="the test restarts the members' PostgreSQL under them",
)
def test_changes_still_reach_the_other_member_after_postgresql_restarts(
    tmp_path: Path, postgres_throwaway_server: ThrowawayServer
) -> None:
    """The session each member LISTENs on is lost with PostgreSQL: it connects again, and the
    version it reads then catches up with what it missed."""
    server = postgres_throwaway_server
    a, b = (start_member(tmp_path, server.admin_dsn, name, http=True) for name in ("A", "B"))
    try:
        server.stop()
        time.sleep(1.0)
        server.start()

        def added() -> bool:
            status, _ = call(a, "PUT", "/api/users/bob", {"password": PASSWORD, "tags": ""})
            return status == 201

        wait_until(added, "bob added on A once PostgreSQL is back", timeout=30)
        wait_until(
            lambda: call(a, "PUT", "/api/permissions/%2F/bob", EVERYTHING)[0] == 201,
            "bob given permissions on A",
        )
        wait_until(lambda: _logs_in(b, "bob"), "bob logs in on B", timeout=15)
    finally:
        if not server.running:
            server.start()
        a.stop()
        b.stop()
