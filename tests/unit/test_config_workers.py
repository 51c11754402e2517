"""`[broker] workers`: how many worker processes a broker runs, and what more than one needs
for now (README, "Worker processes")."""

from __future__ import annotations

from pathlib import Path

import pytest

from batonmq.config import ConfigError, load_config
from batonmq.store.configured import postgres_schema, store_broker_id

#: A broker with two workers, as the README's section asks.
TWO_WORKERS = {
    "broker.workers": 2,
    "persist.store": "postgres",
    "persist.postgres.dsn": "postgresql://localhost/batonmq",
}


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    return {"HOME": str(tmp_path)}


def test_one_worker_by_default(environ: dict[str, str]) -> None:
    assert load_config(environ=environ).workers == 1


@pytest.mark.parametrize(
    ("value", "problem"), [(0, "must be between 1 and 64, got 0"), (65, "got 65")]
)
def test_the_count_is_bounded(value: int, problem: str, environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(environ=environ, overrides={**TWO_WORKERS, "broker.workers": value})

    assert raised.value.key == "broker.workers"
    assert problem in raised.value.problem


def test_the_management_api_with_two_workers(environ: dict[str, str]) -> None:
    """Every worker serves the management API on the socket the supervisor binds, and answers
    for the whole broker (README, "Worker processes")."""
    config = load_config(environ=environ, overrides={**TWO_WORKERS, "listeners.http.enabled": True})

    assert config.workers == 2
    assert config.listeners.http.enabled


def test_two_workers_on_postgresql(environ: dict[str, str]) -> None:
    config = load_config(environ=environ, overrides=TWO_WORKERS)

    assert config.workers == 2
    # Each worker is a member of the one store, with an identity of its own.
    assert [store_broker_id(config, worker) for worker in (0, 1)] == ["batonmqw0", "batonmqw1"]
    assert store_broker_id(config) == "batonmq"
    assert postgres_schema(config) == "batonmq_s_batonmq"


def test_two_workers_on_sqlite(environ: dict[str, str]) -> None:
    """The workers share the SQLite file, each a member with an identity of its own."""
    config = load_config(
        environ=environ,
        overrides={"broker.workers": 2, "persist.store": "sqlite", "listeners.http.enabled": False},
    )

    assert config.workers == 2
    assert [store_broker_id(config, worker) for worker in (0, 1)] == ["batonmqw0", "batonmqw1"]


def test_an_ha_member_with_two_workers(environ: dict[str, str]) -> None:
    """One member of its cluster (cluster.brokerid) whose workers write as store identities of
    their own in the cluster's schema (docs/multi-core.md, "What the choice means for HA
    clusters")."""
    config = load_config(
        environ=environ,
        overrides={
            **TWO_WORKERS,
            "cluster.ha": True,
            "cluster.clusterid": "c1",
            "cluster.brokerid": "b1",
        },
    )

    assert [store_broker_id(config, worker) for worker in (0, 1)] == ["b1w0", "b1w1"]
    assert postgres_schema(config) == "batonmq_c_c1"


def test_no_virtual_host_is_spread_by_default(environ: dict[str, str]) -> None:
    assert load_config(environ=environ).spread_vhosts == ()


def test_spread_virtual_hosts_from_a_file_and_the_environment(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    """A TOML array in the file; the same array as a variable's TOML value."""
    path = tmp_path / "batonmq.toml"
    path.write_text('[broker]\nworkers = 2\nspread_vhosts = ["/", "orders"]\n')

    assert load_config(path, environ=environ).spread_vhosts == ("/", "orders")
    environ["BATONMQ__BROKER__SPREAD_VHOSTS"] = '["*"]'
    assert load_config(path, environ=environ).spread_vhosts == ("*",)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("/", "expected an array of strings, got string '/'"),
        (["/", 1], "expected an array of strings, got an array"),
        (["/", ""], "must not name an empty string"),
        (["a", "/", "a"], "names 'a' more than once"),
    ],
)
def test_spread_virtual_hosts_must_be_distinct_names(
    value: object, problem: str, environ: dict[str, str]
) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(environ=environ, overrides={"broker.spread_vhosts": value})

    assert (raised.value.key, raised.value.problem) == ("broker.spread_vhosts", problem)


def test_a_spread_virtual_host_is_refused_in_an_ha_member(environ: dict[str, str]) -> None:
    """A takeover moves a failed member's virtual hosts whole (MQ 4.1 HA guide: the survivor
    takes over the failed broker's store), not a spread one's queues to each owner: refused at
    start until it does, in one line naming both keys' rule."""
    with pytest.raises(ConfigError) as raised:
        load_config(
            environ=environ,
            overrides={
                **TWO_WORKERS,
                "broker.spread_vhosts": ["/"],
                "cluster.ha": True,
                "cluster.clusterid": "c1",
                "cluster.brokerid": "b1",
            },
        )

    assert raised.value.key == "broker.spread_vhosts"
    assert raised.value.problem.startswith("must be empty when cluster.ha is true")
