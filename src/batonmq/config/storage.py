"""Settings of the persistent store and of message expiry."""

from __future__ import annotations

from dataclasses import dataclass, field

from batonmq.config.checks import Invalid, between, one_of, positive_finite, setting
from batonmq.config.durability import parse_durability, synchronous_commit

STORE_KINDS = ("sqlite", "postgres")


def _durability(value: object) -> object:
    assert isinstance(value, str)
    if not value:
        return value
    try:
        return str(parse_durability(value))
    except ValueError as error:
        raise Invalid(str(error)) from None


@dataclass(frozen=True, slots=True)
class PostgresConfig:
    #: libpq connection string or URI ("postgresql://user:pass@host:5432/db").
    dsn: str = setting("")
    #: PostgreSQL schema holding this broker's tables; empty means "batonmq_s_<broker id>"
    #: (MQ 4.1 HA guide Table 8: a standalone store's tables are suffixed S<brokerID>).
    schema: str = setting("")
    #: The Qpid broker manual's durability triplet (§1.6.6), "<master sync policy>,<replica sync
    #: policy>,<replica acknowledgement policy>", e.g. "NO_SYNC,NO_SYNC,SIMPLE_MAJORITY": how far
    #: a commit reaches (the primary, its streaming standbys) before messages are confirmed. Empty:
    #: persist.sync decides (flushed on the primary, or not waited for).
    durability: str = setting("", check=_durability)
    #: Qpid's coalescing-sync: the primary flushes once for the commits that arrive together, so a
    #: master policy of NO_SYNC or WRITE_NO_SYNC is still flushed before the confirm.
    coalescing_sync: bool = setting(True)


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

    def synchronous_commit(self) -> str:
        """PostgreSQL's synchronous_commit for this broker's write transactions."""
        postgres = self.postgres
        if postgres.durability:
            return synchronous_commit(
                parse_durability(postgres.durability), postgres.coalescing_sync
            )
        return "on" if self.sync else "off"


@dataclass(frozen=True, slots=True)
class MessageConfig:
    #: Seconds between sweeps that remove expired messages from anywhere in a queue (MQ 3.5 admin
    #: guide imq.message.expiration.interval, default 60); an expired message at the head of a queue
    #: goes at once, sweep or not.
    expiration_interval: float = setting(60.0, check=positive_finite)
