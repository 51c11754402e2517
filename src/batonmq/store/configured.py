"""The store the configuration names (persist.store): SQLite under the data directory by
default, or PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Final

from batonmq.config import Config
from batonmq.config.durability import parse_durability
from batonmq.store.base import Store
from batonmq.store.placement import Placement, worker_id

if TYPE_CHECKING:
    from batonmq.queues.streams.storage import StreamTables

#: The SQLite store's file in the broker's data directory.
SQLITE_FILE: Final = "batonmq.sqlite3"


def sqlite_path(data_dir: Path) -> Path:
    return data_dir / SQLITE_FILE


def postgres_schema(config: Config) -> str:
    """persist.postgres.schema, or "batonmq_s_<broker name>" (MQ 4.1 HA guide Table 8: a standalone
    broker's tables carry the suffix S<brokerID>), or in an HA cluster "batonmq_c_<cluster id>"
    (a cluster's shared store: C<clusterID>)."""
    if config.cluster.ha and not config.persist.postgres.schema:
        return "batonmq_c_" + config.cluster.clusterid.lower()
    return standalone_postgres_schema(config)


def standalone_postgres_schema(config: Config) -> str:
    """The schema of the broker's store were it not an HA member (`batonctl db upgrade
    hastore` turns it into the cluster's)."""
    schema = config.persist.postgres.schema
    return schema or "batonmq_s_" + re.sub(r"[^a-z0-9_]", "_", config.broker_name.lower())


def store_broker_id(config: Config, worker: int | None = None) -> str:
    """Whose rows the broker owns: cluster.brokerid in an HA cluster, else broker.name; with
    that and "w<worker>" for a worker of a broker with broker.workers above 1 (each worker a
    member of the store, with a lease and a fencing epoch of its own)."""
    broker_id = config.cluster.brokerid if config.cluster.ha else config.broker_name
    return broker_id if worker is None else worker_id(broker_id, worker)


def configured_store(
    config: Config,
    worker: int | None = None,
    *,
    held_lock: int | None = None,
    placement: Placement | None = None,
    run: str | None = None,
) -> Store:
    """`worker`: the index of the worker process this store is for (None: the broker has one
    process). For the SQLite store: `held_lock`, the store's lock as a worker inherited it
    from the supervisor. `placement`, for a broker of one process, or the supervisor of a
    broker's workers, that starts on it: where each virtual host's rows go (see
    `batonmq.store.sqlite.SQLiteStore` and `batonmq.store.pgfamily`). `run`: for a worker, the
    token of the broker's run, which its PostgreSQL lease names (`batonmq.store.pglease`)."""
    persist = config.persist
    if persist.store == "postgres":
        from batonmq.store.pglease import LEASE_SECONDS
        from batonmq.store.postgres import PostgresStore

        monitor = config.cluster.monitor
        # An HA member's lease renewal is its update in the store, which the other members
        # watch (MQ 4.1 HA guide: "fails to update its state within the number of monitor
        # intervals specified by imq.cluster.monitor.threshold"); renewed at least twice a lease.
        lease = monitor.interval * monitor.threshold if config.cluster.ha else LEASE_SECONDS
        return PostgresStore(
            persist.postgres.dsn,
            broker_id=store_broker_id(config, worker),
            schema=postgres_schema(config),
            synchronous_commit=persist.synchronous_commit(),
            lease_seconds=lease,
            renew_every=min(monitor.interval, lease / 2) if config.cluster.ha else None,
            member_of=config.cluster.brokerid if config.cluster.ha and worker is not None else None,
            family=None if config.cluster.ha else config.broker_name,
            placement=placement,
            run=run,
        )
    from batonmq.store.sqlite import SQLiteStore

    return SQLiteStore(
        sqlite_path(config.data_dir),
        broker_id=store_broker_id(config, worker),
        sync=persist.sync,
        worker=worker,
        held_lock=held_lock,
        placement=placement,
    )


def configured_stream_tables(store: Store) -> StreamTables | None:
    """Where the stream queues of a broker on `store` are kept if not in segment files under
    its data directory: the PostgreSQL store's tables (SQLite's streams stay in files)."""
    if store.kind != "postgres":
        return None
    from batonmq.store.postgres import PostgresStore
    from batonmq.store.streamtables import PostgresStreamTables

    assert isinstance(store, PostgresStore)
    return PostgresStreamTables(store)


def waits_for_no_standby(config: Config, settings: dict[str, str]) -> bool:
    """Whether the durability policy asks for replica acknowledgements while the PostgreSQL
    server (`settings`, the store's connection_settings) names no synchronous standby:
    PostgreSQL then waits for none, whatever synchronous_commit says."""
    durability = config.persist.postgres.durability
    return (
        config.persist.store == "postgres"
        and bool(durability)
        and parse_durability(durability).waits_for_replicas
        and not settings.get("synchronous_standby_names", "").strip()
    )
