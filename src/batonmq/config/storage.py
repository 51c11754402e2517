"""Settings of the persistent store and of message expiry."""

from __future__ import annotations

from dataclasses import dataclass, field

from batonmq.config.checks import between, one_of, positive_finite, setting

STORE_KINDS = ("sqlite", "postgres")


@dataclass(frozen=True, slots=True)
class PostgresConfig:
    #: libpq connection string or URI ("postgresql://user:pass@host:5432/db").
    dsn: str = setting("")
    #: PostgreSQL schema holding this broker's tables; empty means "batonmq_s_<broker id>"
    #: (MQ 4.1 HA guide Table 8: a standalone store's tables are suffixed S<brokerID>).
    schema: str = setting("")


@dataclass(frozen=True, slots=True)
class PersistConfig:
    """The persistent store (MQ 3.5 admin guide Table 2-5, imq.persist.*)."""

    #: "sqlite" (one file under the data directory) or "postgres" (imq.persist.store).
    store: str = setting("sqlite", check=one_of(*STORE_KINDS))
    #: Flush each commit to the disk before confirming it (imq.persist.file.sync.enabled); false
    #: leaves writes to the operating system, which survives a broker crash but not a power cut.
    sync: bool = setting(True)
    #: Entries a queue keeps in memory; a longer backlog waits in the store (paging).
    page_window: int = setting(10_000, check=between(16))
    postgres: PostgresConfig = field(default_factory=PostgresConfig)


@dataclass(frozen=True, slots=True)
class MessageConfig:
    #: Seconds between sweeps that remove expired messages from anywhere in a queue (MQ 3.5 admin
    #: guide imq.message.expiration.interval, default 60); an expired message at the head of a queue
    #: goes at once, sweep or not.
    expiration_interval: float = setting(60.0, check=positive_finite)
