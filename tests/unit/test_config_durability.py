"""The PostgreSQL store's durability policy: the Apache Qpid broker manual's triplet ("Durability
Guarantees": "<master sync policy>,<replica sync policy>,<replica acknowledgement policy>"),
checked when the configuration loads and mapped onto PostgreSQL's synchronous_commit."""

from __future__ import annotations

import pytest

from batonmq.config import ConfigError, load_config
from batonmq.config.durability import parse_durability, synchronous_commit


@pytest.mark.parametrize(
    ("policy", "coalescing", "level"),
    [
        # Replica acknowledgement: the standby's sync policy decides how far it must have it.
        ("NO_SYNC,SYNC,ALL", True, "on"),
        ("SYNC,SYNC,SIMPLE_MAJORITY", False, "on"),
        ("NO_SYNC,WRITE_NO_SYNC,ALL", True, "remote_write"),
        # Qpid's default; PostgreSQL has no wait for mere receipt: the write is the least.
        ("NO_SYNC,NO_SYNC,SIMPLE_MAJORITY", True, "remote_write"),
        # No replica acknowledgement: the primary alone.
        ("SYNC,NO_SYNC,NONE", False, "local"),
        # "the transaction will be written/sync'd to the Master's disk (effect of coalescing-sync)"
        ("NO_SYNC,NO_SYNC,NONE", True, "local"),
        # Qpid's example 3: "neither guaranteed to be written to the disk of the master nor
        # received by any of the replicas".
        ("NO_SYNC,NO_SYNC,NONE", False, "off"),
        ("WRITE_NO_SYNC,NO_SYNC,NONE", False, "off"),
    ],
)
def test_each_policy_maps_onto_the_synchronous_commit_that_keeps_its_promise(
    policy: str, coalescing: bool, level: str
) -> None:
    assert synchronous_commit(parse_durability(policy), coalescing) == level


def test_a_policy_is_read_in_any_case_and_with_spaces() -> None:
    assert str(parse_durability(" no_sync, Sync ,all")) == "NO_SYNC,SYNC,ALL"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("SYNC,SYNC", "expected <master sync policy>,<replica sync policy>"),
        ("FSYNC,SYNC,ALL", "the master sync policy must be one of SYNC, WRITE_NO_SYNC, NO_SYNC"),
        ("SYNC,LATER,ALL", "the replica sync policy must be one of"),
        ("SYNC,SYNC,MOST", "the replica acknowledgement policy must be one of ALL"),
    ],
)
def test_a_malformed_policy_stops_the_configuration_naming_the_key(
    text: str, complaint: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(None, environ={}, overrides={"persist.postgres.durability": text})
    assert refused.value.key == "persist.postgres.durability"
    assert complaint in str(refused.value)


def test_the_configured_policy_becomes_the_stores_synchronous_commit() -> None:
    config = load_config(
        None, environ={}, overrides={"persist.postgres.durability": "no_sync,write_no_sync,all"}
    )
    assert config.persist.postgres.durability == "NO_SYNC,WRITE_NO_SYNC,ALL"
    assert config.persist.synchronous_commit() == "remote_write"


@pytest.mark.parametrize(("sync", "level"), [(True, "on"), (False, "off")])
def test_without_a_policy_persist_sync_decides_as_before(sync: bool, level: str) -> None:
    config = load_config(None, environ={}, overrides={"persist.sync": sync})
    assert config.persist.synchronous_commit() == level


def test_sync_as_the_master_policy_with_coalescing_sync_is_refused() -> None:
    """Qpid: "the combination of a master sync policy of SYNC and coalescing-sync true would
    result in poor performance with no corresponding increase in durability guarantee. It cannot
    be used." """
    with pytest.raises(ConfigError) as refused:
        load_config(None, environ={}, overrides={"persist.postgres.durability": "SYNC,SYNC,ALL"})
    assert refused.value.key == "persist.postgres.coalescing_sync"
    config = load_config(
        None,
        environ={},
        overrides={
            "persist.postgres.durability": "SYNC,SYNC,ALL",
            "persist.postgres.coalescing_sync": False,
        },
    )
    assert config.persist.synchronous_commit() == "on"


def test_a_policy_beside_persist_sync_false_is_refused_as_a_contradiction() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(
            None,
            environ={},
            overrides={"persist.sync": False, "persist.postgres.durability": "NO_SYNC,SYNC,ALL"},
        )
    assert refused.value.key == "persist.sync"
