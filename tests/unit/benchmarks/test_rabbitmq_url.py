"""--rabbitmq-url: compare with a RabbitMQ that is already running instead of starting one.
The Hardening requirements: "`python -m benchmarks.compare` can target an already running RabbitMQ
(`--rabbitmq-url`) as well as start its own." """

from __future__ import annotations

import pytest
from benchmarks.brokers.rabbitmq import RabbitMQ, RunningRabbitMQ
from benchmarks.compare import _parser, rabbitmq_broker
from benchmarks.loadgen.client import Endpoint


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        # The examples of RabbitMQ's "AMQP URI Specification".
        ("amqp://user:pass@host:10000/vhost", Endpoint("host", 10000, "user", "pass", "vhost")),
        (
            "amqp://user%61:%61pass@ho%61st:10000/v%2fhost",
            Endpoint("hoast", 10000, "usera", "apass", "v/host"),
        ),
        ("amqp://", None),
        ("amqp://localhost", Endpoint("localhost", 5672)),
        ("amqp://localhost/", Endpoint("localhost", 5672, vhost="")),
        ("amqp://:@/", None),
        ("amqp://guest:guest@127.0.0.1:5673/%2F", Endpoint("127.0.0.1", 5673)),
        ("amqp://[::1]:5672/prod", Endpoint("::1", 5672, vhost="prod")),
    ],
)
def test_the_url_is_read_as_the_amqp_uri_specification_says(
    url: str, endpoint: Endpoint | None
) -> None:
    if endpoint is None:  # no host: the harness has nowhere to connect
        with pytest.raises(ValueError, match="names no host"):
            Endpoint.from_url(url)
    else:
        assert Endpoint.from_url(url) == endpoint


def test_the_argument_gives_the_endpoint() -> None:
    arguments = _parser().parse_args(["--rabbitmq-url", "amqp://bench:secret@10.0.0.5:5673/perf"])

    assert arguments.rabbitmq_url == Endpoint("10.0.0.5", 5673, "bench", "secret", "perf")


def test_without_the_argument_the_harness_starts_its_own() -> None:
    assert _parser().parse_args([]).rabbitmq_url is None


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("amqps://host/", "expected an amqp:// URL"),
        ("http://host/", "expected an amqp:// URL"),
        ("amqp://host:port/", "Port could not be cast"),
        ("amqp://host/a/b", "a '/' in the virtual host is written %2F"),
        ("amqp://host/?heartbeat=5", "query and fragment are not supported"),
    ],
)
def test_a_url_the_harness_cannot_use_is_a_usage_error(
    url: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["--rabbitmq-url", url])

    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_with_a_url_the_running_rabbitmq_is_used_and_none_is_installed_or_started() -> None:
    endpoint = Endpoint("127.0.0.1", 5673, "bench", "secret", "perf")

    broker = rabbitmq_broker(endpoint)

    assert isinstance(broker, RunningRabbitMQ)
    assert (broker.name, broker.endpoint, broker.label) == (
        "rabbitmq",
        endpoint,
        "RabbitMQ at 127.0.0.1:5673",
    )
    assert broker.process is None  # nothing of its own to start or stop


def test_without_a_url_the_harness_runs_its_own_rabbitmq() -> None:
    broker = rabbitmq_broker(None)

    assert isinstance(broker, RabbitMQ)
    assert broker.endpoint.username == "guest"
