"""The [cluster] settings: the MQ 4.1 HA guide's names and defaults (Tables 1, 4 and 6), and the
rules an HA member's configuration must follow."""

from __future__ import annotations

from pathlib import Path

import pytest

from batonmq.config import ConfigError, load_config
from batonmq.config.cluster import ClusterConfig, HeartbeatConfig, MonitorConfig
from batonmq.store.configured import postgres_schema, store_broker_id

HA_MEMBER = {
    "cluster.ha": True,
    "cluster.clusterid": "prod1",
    "cluster.brokerid": "brokerA",
    "persist.store": "postgres",
    "persist.postgres.dsn": "postgresql://localhost/batonmq",
}


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path)}


def test_defaults_are_the_ha_guides() -> None:
    """Table 6: imq.cluster.ha false, heartbeat port 7676, heartbeat interval 2 s and threshold
    3, monitor interval 30 s and threshold 2."""
    assert ClusterConfig() == ClusterConfig(
        ha=False,
        clusterid="",
        brokerid="",
        heartbeat=HeartbeatConfig(hostname="", port=7676, interval=2, threshold=3),
        monitor=MonitorConfig(interval=30, threshold=2),
    )


@pytest.mark.parametrize("key", ["cluster.clusterid", "cluster.brokerid"])
@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("broker-a", "must be alphanumeric"),
        ("broker a", "must be alphanumeric"),
        ("brökera", "must be alphanumeric"),
        ("a" * 22, "must be at most 21 characters, got 22"),
    ],
)
def test_identifiers_are_short_and_alphanumeric(
    key: str, value: str, problem: str, environ: dict[str, str]
) -> None:
    """Tables 4 and 6: each identifier "must be an alphanumeric string"."""
    with pytest.raises(ConfigError) as raised:
        load_config(environ=environ, overrides={key: value})

    assert raised.value.key == key
    assert problem in raised.value.problem


def test_an_identifier_of_21_letters_and_digits_is_accepted(environ: dict[str, str]) -> None:
    config = load_config(environ=environ, overrides={"cluster.brokerid": "broker0123456789ABCDE"})

    assert config.cluster.brokerid == "broker0123456789ABCDE"


def test_an_ha_member_needs_the_postgresql_store(environ: dict[str, str]) -> None:
    """The HA guide: "all brokers in an HA cluster share the same JDBC-based persistent store";
    SQLite is one broker's file."""
    overrides = {**HA_MEMBER, "persist.store": "sqlite"}

    with pytest.raises(ConfigError) as raised:
        load_config(environ=environ, overrides=overrides)

    assert raised.value.key == "persist.store"
    assert "HA cluster" in raised.value.problem


@pytest.mark.parametrize("missing", ["cluster.clusterid", "cluster.brokerid"])
def test_an_ha_member_needs_both_identifiers(missing: str, environ: dict[str, str]) -> None:
    """Table 1, "Required Configuration Properties for HA Clusters": imq.cluster.ha,
    imq.cluster.clusterid, imq.brokerid."""
    overrides = {**HA_MEMBER, missing: ""}

    with pytest.raises(ConfigError) as raised:
        load_config(environ=environ, overrides=overrides)

    assert raised.value.key == missing
    assert raised.value.problem == "must be set when cluster.ha is true"


def test_a_complete_ha_member_is_accepted_and_owns_the_clusters_shared_schema(
    environ: dict[str, str],
) -> None:
    """Table 1's required properties make an HA member; its rows are its broker id's, in the
    cluster's shared store (Table 8: tables suffixed C<clusterID>)."""
    config = load_config(environ=environ, overrides=HA_MEMBER)

    assert config.cluster.ha
    assert store_broker_id(config) == config.cluster.brokerid
    assert postgres_schema(config) == "batonmq_c_" + config.cluster.clusterid.lower()


def test_the_heartbeat_settings_are_checked(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(environ=environ, overrides={"cluster.heartbeat.interval": 0})

    assert raised.value.key == "cluster.heartbeat.interval"


def test_tls_heartbeats_need_a_certificate_a_key_and_a_ca_bundle(
    environ: dict[str, str], tmp_path: Path
) -> None:
    """[cluster.heartbeat] tls: mutual TLS with the [listeners.amqps] files, so a member that
    lacks one does not start, and the error names the missing setting."""
    overrides = {
        **HA_MEMBER,
        "cluster.heartbeat.tls": True,
        "listeners.amqps.certfile": str(tmp_path / "member.crt"),
        "listeners.amqps.keyfile": str(tmp_path / "member.key"),
    }

    with pytest.raises(ConfigError) as raised:
        load_config(environ=environ, overrides=overrides)

    assert raised.value.key == "listeners.amqps.cafile"
    assert "cluster.heartbeat.tls" in raised.value.problem
    # With the CA bundle too, the configuration loads (files are read when the member starts).
    load_config(
        environ=environ,
        overrides={**overrides, "listeners.amqps.cafile": str(tmp_path / "ca.crt")},
    )
