"""batonmq.config: defaults, the TOML file, the environment, overrides, and every error."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from batonmq.config import (
    LIMIT_BEHAVIORS,
    SETTINGS,
    TABLES,
    AclConfig,
    AmqpConfig,
    AuthConfig,
    Config,
    ConfigError,
    LimitsConfig,
    ListenerConfig,
    ListenersConfig,
    LogConfig,
    ServerConfig,
    TlsListenerConfig,
    default_data_dir,
    load_config,
)


def write(directory: Path, text: str, name: str = "batonmq.toml") -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def environ(home: Path) -> dict[str, str]:
    """A clean environment: only HOME, so the default data_dir lands under tmp_path."""
    return {"HOME": str(home)}


FULL_FILE = """
[broker]
name = "edge-1"
data_dir = "/var/lib/batonmq"
default_vhost = "prod"

[listeners.amqp]
bind = "127.0.0.1"
port = 5673

[amqp]
frame_max = 65536
channel_max = 100
heartbeat = 0

[listeners.amqps]
enabled = true
port = 5674
mechanisms = "external plain"
certfile = "tls/server.pem"
keyfile = "/etc/batonmq/server.key"
cafile = ""
verify = "Required"

[auth]
guest_loopback_only = false
max_failures = 3

[acl]
file = "broker.acl"

[limits]
max_connections_per_user = 10
max_connections_per_vhost = 100
max_consumers_per_channel = 50

[server]
write_buffer_high = 2048
write_buffer_low = 1024
shutdown_timeout = 2.5

[log]
level = "debug"
format = "json"
"""


# --- defaults -------------------------------------------------------------------------------


def test_defaults_without_a_file(environ: dict[str, str], home: Path) -> None:
    config = load_config(environ=environ)

    assert config == Config(
        broker_name="batonmq",
        data_dir=home / ".local" / "share" / "batonmq",
        default_vhost="/",
        listeners=ListenersConfig(amqp=ListenerConfig(bind="0.0.0.0", port=5672)),
        amqp=AmqpConfig(frame_max=131072, channel_max=2047, heartbeat=60),
        auth=AuthConfig(guest_loopback_only=True),
        limits=LimitsConfig(
            max_connections_per_user=0, max_connections_per_vhost=0, max_consumers_per_channel=0
        ),
        server=ServerConfig(
            write_buffer_high=4 * 1024 * 1024, write_buffer_low=1024 * 1024, shutdown_timeout=10.0
        ),
        log=LogConfig(level="info", format="text"),
    )


def test_default_data_dir_follows_xdg_data_home(environ: dict[str, str], tmp_path: Path) -> None:
    environ["XDG_DATA_HOME"] = str(tmp_path / "xdg")

    assert load_config(environ=environ).data_dir == tmp_path / "xdg" / "batonmq"


def test_relative_xdg_data_home_is_ignored(environ: dict[str, str], home: Path) -> None:
    # The XDG base-directory spec: "If an implementation encounters a relative path in any of
    # these variables it should consider the path invalid and ignore it."
    environ["XDG_DATA_HOME"] = "relative/share"

    assert default_data_dir(environ) == home / ".local" / "share" / "batonmq"


def test_config_is_frozen() -> None:
    config = Config()

    with pytest.raises(dataclasses.FrozenInstanceError):
        config.broker_name = "other"  # type: ignore[misc]


def test_settings_table_is_derived_from_the_dataclasses() -> None:
    assert set(SETTINGS) == {
        "broker.name",
        "broker.data_dir",
        "broker.default_vhost",
        "broker.workers",
        "broker.spread_vhosts",
        "listeners.amqp.enabled",
        "listeners.amqp.bind",
        "listeners.amqp.port",
        "listeners.amqp.mechanisms",
        "listeners.amqps.enabled",
        "listeners.amqps.bind",
        "listeners.amqps.port",
        "listeners.amqps.mechanisms",
        "listeners.amqps.certfile",
        "listeners.amqps.keyfile",
        "listeners.amqps.cafile",
        "listeners.amqps.verify",
        "listeners.amqps.ciphers",
        "listeners.http.enabled",
        "listeners.http.bind",
        "listeners.http.port",
        "listeners.http.tls",
        "amqp.frame_max",
        "amqp.channel_max",
        "amqp.heartbeat",
        "amqp.max_message_size",
        "auth.guest_loopback_only",
        "auth.max_failures",
        "auth.failure_window",
        "auth.lockout",
        "acl.file",
        "acl.vhost_dir",
        "limits.max_connections_per_user",
        "limits.max_connections_per_vhost",
        "limits.max_consumers_per_channel",
        "limits.max_messages",
        "limits.max_bytes",
        "memory.budget",
        "memory.yellow_threshold",
        "memory.orange_threshold",
        "memory.red_threshold",
        "memory.green_count",
        "memory.yellow_count",
        "memory.orange_count",
        "memory.check_interval",
        "disk.store_overfull",
        "disk.store_underfull",
        "disk.free_limit",
        "disk.check_interval",
        "autocreate.pattern",
        "autocreate.max_messages",
        "autocreate.max_bytes",
        "autocreate.limit_behavior",
        "autocreate.max_message_size",
        "autocreate.max_producers",
        "autocreate.max_active_consumers",
        "autocreate.max_backup_consumers",
        "autocreate.delete_after",
        "slow_consumer.enabled",
        "slow_consumer.delay",
        "slow_consumer.depth",
        "slow_consumer.message_age",
        "slow_consumer.message_count",
        "slow_consumer.topics",
        "slow_consumer.delete_persistent",
        "alerts.max_queue_depth",
        "alerts.max_message_size",
        "alerts.max_message_age",
        "alerts.max_message_count",
        "alerts.interval",
        "alerts.repeat_gap",
        "server.write_buffer_high",
        "server.write_buffer_low",
        "server.shutdown_timeout",
        "persist.store",
        "persist.sync",
        "persist.page_window",
        "persist.postgres.dsn",
        "persist.postgres.schema",
        "persist.postgres.durability",
        "persist.postgres.coalescing_sync",
        "message.expiration_interval",
        "log.level",
        "log.format",
        "metrics.topic.enabled",
        "metrics.topic.interval",
        "metrics.topic.persist",
        "metrics.topic.timetolive",
        "cluster.ha",
        "cluster.clusterid",
        "cluster.brokerid",
        "cluster.heartbeat.hostname",
        "cluster.heartbeat.port",
        "cluster.heartbeat.interval",
        "cluster.heartbeat.threshold",
        "cluster.heartbeat.tls",
        "cluster.monitor.interval",
        "cluster.monitor.threshold",
    }
    assert set(TABLES) == {
        "broker",
        "listeners",
        "listeners.amqp",
        "listeners.amqps",
        "listeners.http",
        "amqp",
        "auth",
        "acl",
        "limits",
        "memory",
        "disk",
        "autocreate",
        "slow_consumer",
        "alerts",
        "server",
        "persist",
        "persist.postgres",
        "message",
        "log",
        "metrics",
        "metrics.topic",
        "cluster",
        "cluster.heartbeat",
        "cluster.monitor",
    }
    assert SETTINGS["listeners.amqp.port"].attribute_path == ("listeners", "amqp", "port")
    assert SETTINGS["broker.name"].attribute_path == ("broker_name",)


# --- the file -------------------------------------------------------------------------------


def test_every_key_from_a_file(tmp_path: Path, environ: dict[str, str]) -> None:
    path = write(tmp_path, FULL_FILE)

    config = load_config(path, environ=environ)

    assert config == Config(
        broker_name="edge-1",
        data_dir=Path("/var/lib/batonmq"),
        default_vhost="prod",
        listeners=ListenersConfig(
            amqp=ListenerConfig(bind="127.0.0.1", port=5673),
            amqps=TlsListenerConfig(
                enabled=True,
                port=5674,
                mechanisms="EXTERNAL PLAIN",
                certfile=tmp_path / "tls" / "server.pem",
                keyfile=Path("/etc/batonmq/server.key"),
                cafile=None,
                verify="required",
            ),
        ),
        amqp=AmqpConfig(frame_max=65536, channel_max=100, heartbeat=0),
        auth=AuthConfig(guest_loopback_only=False, max_failures=3),
        acl=AclConfig(file=tmp_path / "broker.acl"),
        limits=LimitsConfig(
            max_connections_per_user=10, max_connections_per_vhost=100, max_consumers_per_channel=50
        ),
        server=ServerConfig(write_buffer_high=2048, write_buffer_low=1024, shutdown_timeout=2.5),
        log=LogConfig(level="debug", format="json"),
    )


def test_partial_file_keeps_other_defaults(tmp_path: Path, environ: dict[str, str]) -> None:
    path = write(tmp_path, "[listeners.amqp]\nport = 0\n")

    config = load_config(path, environ=environ)

    assert config.listeners.amqp.port == 0
    assert config.listeners.amqp.bind == "0.0.0.0"
    assert config.amqp == AmqpConfig()


def test_dotted_keys_in_a_file(tmp_path: Path, environ: dict[str, str]) -> None:
    path = write(tmp_path, 'listeners.amqp.port = 6000\nlog.level = "warning"\n')

    config = load_config(path, environ=environ)

    assert (config.listeners.amqp.port, config.log.level) == (6000, "warning")


def test_relative_data_dir_is_relative_to_the_file(
    tmp_path: Path, environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    path = write(conf_dir, '[broker]\ndata_dir = "data/broker"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    config = load_config(Path("../etc/batonmq.toml"), environ=environ)

    assert config.data_dir.resolve() == (conf_dir / "data" / "broker").resolve()
    assert config.data_dir.is_absolute()
    assert load_config(path, environ=environ).data_dir == conf_dir / "data" / "broker"


def test_data_dir_tilde_is_home(tmp_path: Path, environ: dict[str, str], home: Path) -> None:
    path = write(tmp_path, '[broker]\ndata_dir = "~/batonmq-data"\n')

    assert load_config(path, environ=environ).data_dir == home / "batonmq-data"


def test_integer_accepted_for_a_float_setting(tmp_path: Path, environ: dict[str, str]) -> None:
    path = write(tmp_path, "[server]\nshutdown_timeout = 5\n")

    timeout = load_config(path, environ=environ).server.shutdown_timeout

    assert timeout == 5.0
    assert isinstance(timeout, float)


def test_log_level_and_format_are_case_insensitive(tmp_path: Path, environ: dict[str, str]) -> None:
    path = write(tmp_path, '[log]\nlevel = "DEBUG"\nformat = "JSON"\n')

    assert load_config(path, environ=environ).log == LogConfig(level="debug", format="json")


@pytest.mark.parametrize("behavior", LIMIT_BEHAVIORS)
@pytest.mark.parametrize("spelt", [str.upper, str.lower])
def test_every_limit_behavior_is_accepted_in_any_case(
    behavior: str, spelt: Callable[[str], str], tmp_path: Path, environ: dict[str, str]
) -> None:
    """The Hardening requirements: "The README's configuration file 'with every key at its default'
    does not start the broker: `[autocreate] limit_behavior` is lowercased and then compared with
    upper-case choices, so no value is accepted." Each choice is accepted, in any case, and kept as
    the choice is spelt (the engine maps it by that name)."""
    path = write(tmp_path, f'[autocreate]\nlimit_behavior = "{spelt(behavior)}"\n')

    assert load_config(path, environ=environ).autocreate.limit_behavior == behavior


@pytest.mark.parametrize("bind", ["127.0.0.1", "::", "::1", "localhost", "broker-1.example.com."])
def test_valid_bind_addresses(bind: str, environ: dict[str, str]) -> None:
    config = load_config(environ=environ, overrides={"listeners.amqp.bind": bind})

    assert config.listeners.amqp.bind == bind


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("amqp.frame_max", 4096),
        ("amqp.frame_max", 131072),
        ("amqp.channel_max", 1),
        ("amqp.channel_max", 65535),
        ("amqp.heartbeat", 0),
        ("amqp.heartbeat", 65535),
        ("listeners.amqp.port", 0),
        ("listeners.amqp.port", 65535),
    ],
)
def test_range_limits_are_inclusive(key: str, value: int, environ: dict[str, str]) -> None:
    config = load_config(environ=environ, overrides={key: value})

    section, _, name = key.rpartition(".")
    holder: object = config
    for part in section.split("."):
        holder = getattr(holder, part)
    assert getattr(holder, name) == value


# --- the environment ------------------------------------------------------------------------


def test_environment_overrides_the_file(tmp_path: Path, environ: dict[str, str]) -> None:
    path = write(tmp_path, FULL_FILE)
    environ.update(
        {
            "BATONMQ__LISTENERS__AMQP__PORT": "5674",
            "BATONMQ__LISTENERS__AMQP__BIND": "0.0.0.0",
            "BATONMQ__LOG__LEVEL": "error",
            "BATONMQ__AUTH__GUEST_LOOPBACK_ONLY": "true",
            "BATONMQ__SERVER__SHUTDOWN_TIMEOUT": "0.5",
            "BATONMQ__BROKER__NAME": '"quoted"',
        }
    )

    config = load_config(path, environ=environ)

    assert config.listeners.amqp == ListenerConfig(bind="0.0.0.0", port=5674)
    assert config.log.level == "error"
    assert config.auth.guest_loopback_only is True
    assert config.server.shutdown_timeout == 0.5
    assert config.broker_name == "quoted"
    assert config.amqp.frame_max == 65536  # from the file


def test_environment_string_that_reads_as_a_number_stays_a_string(
    environ: dict[str, str],
) -> None:
    environ["BATONMQ__BROKER__NAME"] = "42"

    assert load_config(environ=environ).broker_name == "42"


def test_environment_relative_data_dir_is_relative_to_the_working_directory(
    tmp_path: Path, environ: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    environ["BATONMQ__BROKER__DATA_DIR"] = "state"

    assert load_config(environ=environ).data_dir == tmp_path / "state"


def test_batonmq_config_names_the_file(tmp_path: Path, environ: dict[str, str]) -> None:
    path = write(tmp_path, "[amqp]\nheartbeat = 30\n")
    environ["BATONMQ_CONFIG"] = str(path)

    assert load_config(environ=environ).amqp.heartbeat == 30


def test_explicit_path_wins_over_batonmq_config(tmp_path: Path, environ: dict[str, str]) -> None:
    named = write(tmp_path, "[amqp]\nheartbeat = 30\n", name="named.toml")
    given = write(tmp_path, "[amqp]\nheartbeat = 40\n", name="given.toml")
    environ["BATONMQ_CONFIG"] = str(named)

    assert load_config(given, environ=environ).amqp.heartbeat == 40


def test_other_environment_variables_are_ignored(environ: dict[str, str]) -> None:
    environ.update({"BATONMQ_OTHER": "x", "NOT_BATONMQ__LOG__LEVEL": "debug"})

    assert load_config(environ=environ).log.level == "info"


# --- overrides and precedence ---------------------------------------------------------------


def test_overrides_win_over_environment_and_file(tmp_path: Path, environ: dict[str, str]) -> None:
    path = write(tmp_path, "[listeners.amqp]\nport = 1111\n[log]\nlevel = 'warning'\n")
    environ["BATONMQ__LISTENERS__AMQP__PORT"] = "2222"
    environ["BATONMQ__LOG__LEVEL"] = "error"

    config = load_config(
        path, environ=environ, overrides={"listeners.amqp.port": 3333, "log.level": None}
    )

    assert config.listeners.amqp.port == 3333  # override over environment over file
    assert config.log.level == "error"  # None means "not given": the environment wins


def test_override_data_dir(tmp_path: Path, environ: dict[str, str]) -> None:
    config = load_config(environ=environ, overrides={"broker.data_dir": str(tmp_path / "x")})

    assert config.data_dir == tmp_path / "x"


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "[listeners.amqp]\nprot = 5673\n",
            "listeners.amqp.prot: unknown key; did you mean 'listeners.amqp.port'?",
            id="misspelt-key",
        ),
        pytest.param(
            "[lsteners.amqp]\nport = 5673\n",
            "lsteners: unknown section; did you mean 'listeners'?",
            id="misspelt-section",
        ),
        pytest.param(
            "[listeners.amqp]\nframe_max = 4096\n",
            "listeners.amqp.frame_max: unknown key; did you mean 'amqp.frame_max'?",
            id="key-in-the-wrong-section",
        ),
        pytest.param(
            "port = 5673\n",
            "port: unknown key; did you mean 'listeners.amqp.port'?",
            id="key-at-top-level",
        ),
        pytest.param(
            "[federation]\nenabled = true\n", "federation: unknown section", id="unknown-section"
        ),
        pytest.param(
            'log = "debug"\n',
            "log: is a section: expected a table, got string 'debug'",
            id="section-not-a-table",
        ),
        pytest.param(
            "[listeners.amqp]\nport = 'abc'\n",
            "listeners.amqp.port: expected an integer, got string 'abc'",
            id="string-for-integer",
        ),
        pytest.param(
            "[amqp]\nheartbeat = true\n",
            "amqp.heartbeat: expected an integer, got boolean true",
            id="boolean-is-not-an-integer",
        ),
        pytest.param(
            "[amqp]\nheartbeat = 1.5\n",
            "amqp.heartbeat: expected an integer, got float 1.5",
            id="float-for-integer",
        ),
        pytest.param(
            "[auth]\nguest_loopback_only = 1\n",
            "auth.guest_loopback_only: expected a boolean (true or false), got integer 1",
            id="integer-for-boolean",
        ),
        pytest.param(
            "[broker]\nname = 7\n",
            "broker.name: expected a string, got integer 7",
            id="integer-for-string",
        ),
        pytest.param(
            "[broker]\ndata_dir = ['a']\n",
            "broker.data_dir: expected a string (a path), got an array",
            id="array-for-path",
        ),
        pytest.param(
            "[listeners.amqp.port]\nx = 1\n",
            "listeners.amqp.port: expected an integer, got a table",
            id="table-for-integer",
        ),
        pytest.param(
            "[amqp]\nframe_max = 4095\n",
            "amqp.frame_max: must be between 4096 and 131072, got 4095",
            id="frame-max-below-amqp-minimum",
        ),
        pytest.param(
            "[amqp]\nframe_max = 131073\n",
            "amqp.frame_max: must be between 4096 and 131072, got 131073",
            id="frame-max-too-large",
        ),
        pytest.param(
            "[amqp]\nchannel_max = 0\n",
            "amqp.channel_max: must be between 1 and 65535, got 0",
            id="channel-max-zero",
        ),
        pytest.param(
            "[amqp]\nheartbeat = -1\n",
            "amqp.heartbeat: must be between 0 and 65535, got -1",
            id="negative-heartbeat",
        ),
        pytest.param(
            "[listeners.amqp]\nport = 65536\n",
            "listeners.amqp.port: must be between 0 and 65535, got 65536",
            id="port-too-large",
        ),
        pytest.param(
            "[listeners.amqp]\nbind = 'not an address'\n",
            "listeners.amqp.bind: expected an IP address or a host name, got 'not an address'",
            id="bind-with-spaces",
        ),
        pytest.param(
            "[listeners.amqp]\nbind = '10.0.0.256'\n",
            "listeners.amqp.bind: expected an IP address or a host name, got '10.0.0.256'",
            id="bind-bad-ipv4",
        ),
        pytest.param(
            "[listeners.amqp]\nbind = '-bad.example'\n",
            "listeners.amqp.bind: expected an IP address or a host name",
            id="bind-bad-hostname",
        ),
        pytest.param(
            "[log]\nlevel = 'loud'\n",
            "log.level: expected one of 'debug', 'info', 'warning', 'error', got 'loud'",
            id="log-level",
        ),
        pytest.param(
            "[log]\nformat = 'xml'\n",
            "log.format: expected one of 'text', 'json', got 'xml'",
            id="log-format",
        ),
        pytest.param(
            "[server]\nwrite_buffer_low = 4194304\n",
            "server.write_buffer_low: must be less than server.write_buffer_high (4194304), "
            "got 4194304",
            id="low-water-not-below-high",
        ),
        pytest.param(
            "[limits]\nmax_connections_per_user = -1\n",
            "limits.max_connections_per_user: must be at least 0, got -1",
            id="negative-user-connection-limit",
        ),
        pytest.param(
            "[limits]\nmax_connections_per_vhost = -1\n",
            "limits.max_connections_per_vhost: must be at least 0, got -1",
            id="negative-vhost-connection-limit",
        ),
        pytest.param(
            "[limits]\nmax_consumers_per_channel = 1.5\n",
            "limits.max_consumers_per_channel: expected an integer, got float 1.5",
            id="float-consumer-limit",
        ),
        pytest.param(
            "[memory]\nyellow_threshold = 95\n",
            "memory.orange_threshold: the thresholds must rise from yellow to orange to red, "
            "got 95, 90, 98",
            id="memory-thresholds-out-of-order",
        ),
        pytest.param(
            "[memory]\nred_threshold = 101\n",
            "memory.red_threshold: must be between 1 and 100, got 101",
            id="memory-threshold-over-100",
        ),
        pytest.param(
            "[disk]\nstore_overfull = 100\nstore_underfull = 200\n",
            "disk.store_underfull: must not exceed disk.store_overfull (100), got 200",
            id="disk-underfull-above-overfull",
        ),
        pytest.param(
            "[autocreate]\npattern = 'tmp.('\n",
            "autocreate.pattern: is not a regular expression: missing ), unterminated "
            "subpattern at position 4",
            id="autocreate-bad-pattern",
        ),
        pytest.param(
            "[autocreate]\nlimit_behavior = 'DROP'\n",
            "autocreate.limit_behavior: expected one of 'FLOW_CONTROL', 'REMOVE_OLDEST', "
            "'REMOVE_LOW_PRIORITY', 'REJECT_NEWEST', got 'DROP'",
            id="autocreate-limit-behavior",
        ),
        pytest.param(
            "[server]\nshutdown_timeout = 0\n",
            "server.shutdown_timeout: must be a finite number greater than 0, got 0.0",
            id="zero-shutdown-timeout",
        ),
        pytest.param(
            "[server]\nshutdown_timeout = nan\n",
            "server.shutdown_timeout: must be a finite number greater than 0, got nan",
            id="nan-shutdown-timeout",
        ),
        pytest.param(
            "[broker]\nname = ''\n", "broker.name: must not be empty", id="empty-broker-name"
        ),
        pytest.param(
            "[broker]\ndata_dir = ''\n", "broker.data_dir: must not be empty", id="empty-data-dir"
        ),
    ],
)
def test_file_errors_name_the_file_and_the_key(
    text: str, expected: str, tmp_path: Path, environ: dict[str, str]
) -> None:
    path = write(tmp_path, text)

    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ)

    assert str(caught.value).startswith(f"{path}: {expected}")


def test_config_error_is_a_value_error_with_its_parts(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    path = write(tmp_path, "[amqp]\nheartbeat = 'x'\n")

    with pytest.raises(ValueError, match=r"amqp\.heartbeat") as caught:
        load_config(path, environ=environ)

    assert isinstance(caught.value, ConfigError)
    assert (caught.value.source, caught.value.key) == (str(path), "amqp.heartbeat")
    assert caught.value.problem == "expected an integer, got string 'x'"


def test_toml_syntax_error_gives_line_and_column(tmp_path: Path, environ: dict[str, str]) -> None:
    path = write(tmp_path, "[amqp]\nheartbeat = 30\nframe_max = \n")

    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ)

    assert str(caught.value).startswith(f"{path}: TOML syntax error at line 3, column ")


def test_missing_file(tmp_path: Path, environ: dict[str, str]) -> None:
    path = tmp_path / "absent.toml"

    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ)

    assert str(caught.value) == f"{path}: no such file"


def test_missing_file_named_by_environment(tmp_path: Path, environ: dict[str, str]) -> None:
    environ["BATONMQ_CONFIG"] = str(tmp_path / "absent.toml")

    with pytest.raises(ConfigError) as caught:
        load_config(environ=environ)

    assert (
        str(caught.value) == f"{tmp_path / 'absent.toml'} (named by BATONMQ_CONFIG): no such file"
    )


def test_directory_instead_of_file(tmp_path: Path, environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path, environ=environ)

    assert str(caught.value) == f"{tmp_path}: is a directory, not a configuration file"


def test_file_under_a_regular_file_cannot_be_read(tmp_path: Path, environ: dict[str, str]) -> None:
    not_a_dir = write(tmp_path, "", name="plain")
    path = not_a_dir / "batonmq.toml"

    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ)

    assert str(caught.value) == f"{path}: cannot read the file: Not a directory"


def test_file_that_is_not_utf8(tmp_path: Path, environ: dict[str, str]) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"[broker]\nname = '\xe9t\xe9'\n")

    with pytest.raises(ConfigError) as caught:
        load_config(path, environ=environ)

    assert str(caught.value).startswith(f"{path}: not valid UTF-8 text")


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        pytest.param(
            "BATONMQ__LISTENERS__AMQP__PORT",
            "abc",
            "environment variable BATONMQ__LISTENERS__AMQP__PORT: listeners.amqp.port: "
            "expected an integer, got string 'abc'",
            id="not-an-integer",
        ),
        pytest.param(
            "BATONMQ__LISTENERS__AMQP__PORT",
            "1\nlog = 2",
            "environment variable BATONMQ__LISTENERS__AMQP__PORT: listeners.amqp.port: "
            "expected an integer, got string '1\\nlog = 2'",
            id="more-than-one-toml-value",
        ),
        pytest.param(
            "BATONMQ__LISTENERS__AMQP__PROT",
            "5674",
            "environment variable BATONMQ__LISTENERS__AMQP__PROT: listeners.amqp.prot: "
            "unknown key; did you mean BATONMQ__LISTENERS__AMQP__PORT?",
            id="unknown-key",
        ),
        pytest.param(
            "BATONMQ__LOG",
            "debug",
            "environment variable BATONMQ__LOG: log: is a section, not a key: set one of its "
            "keys, as in BATONMQ__LOG__LEVEL",
            id="section",
        ),
        pytest.param(
            "BATONMQ__AMQP__FRAME_MAX",
            "1024",
            "environment variable BATONMQ__AMQP__FRAME_MAX: amqp.frame_max: must be between "
            "4096 and 131072, got 1024",
            id="out-of-range",
        ),
    ],
)
def test_environment_errors_name_the_variable(
    variable: str, value: str, expected: str, environ: dict[str, str]
) -> None:
    environ[variable] = value

    with pytest.raises(ConfigError) as caught:
        load_config(environ=environ)

    assert str(caught.value) == expected


def test_bad_file_value_is_an_error_even_when_overridden(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    # Every value given is checked, so that a broken file is noticed before the flag goes away.
    path = write(tmp_path, "[listeners.amqp]\nport = 'abc'\n")

    with pytest.raises(ConfigError, match=r"listeners\.amqp\.port: expected an integer"):
        load_config(path, environ=environ, overrides={"listeners.amqp.port": 5672})


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        pytest.param(
            {"listeners.amqp.prot": 1},
            "overrides: listeners.amqp.prot: unknown key; did you mean 'listeners.amqp.port'?",
            id="unknown",
        ),
        pytest.param(
            {"listeners.amqp": 1},
            "overrides: listeners.amqp: is a section, not a key: set one of its keys, as in "
            "'listeners.amqp.bind'",
            id="section",
        ),
        pytest.param(
            {"listeners.amqp.port": "abc"},
            "overrides: listeners.amqp.port: expected an integer, got string 'abc'",
            id="wrong-type",
        ),
        pytest.param(
            {"server.write_buffer_high": 100},
            "overrides: server.write_buffer_low: must be less than server.write_buffer_high "
            "(100), got 1048576",
            id="high-below-default-low",
        ),
    ],
)
def test_override_errors(
    overrides: dict[str, object], expected: str, environ: dict[str, str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ=environ, overrides=overrides)

    assert str(caught.value) == expected


def test_postgres_store_needs_a_dsn(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(environ=environ, overrides={"persist.store": "postgres"})

    assert raised.value.key == "persist.postgres.dsn"
    assert "must be set" in raised.value.problem


def test_persist_keys_from_the_environment(environ: dict[str, str]) -> None:
    environ["BATONMQ__PERSIST__STORE"] = "postgres"
    environ["BATONMQ__PERSIST__POSTGRES__DSN"] = "postgresql://db/batonmq"
    environ["BATONMQ__PERSIST__SYNC"] = "false"

    persist = load_config(environ=environ).persist

    assert (persist.store, persist.postgres.dsn, persist.sync) == (
        "postgres",
        "postgresql://db/batonmq",
        False,
    )


def test_an_unknown_sasl_mechanism_is_refused(tmp_path: Path, environ: dict[str, str]) -> None:
    path = write(tmp_path, '[listeners.amqp]\nmechanisms = "PLAIN CRAM-MD5"\n')

    with pytest.raises(ConfigError, match="unknown SASL mechanism 'CRAM-MD5'"):
        load_config(path, environ=environ)


def test_a_tls_verify_mode_must_be_known(tmp_path: Path, environ: dict[str, str]) -> None:
    path = write(tmp_path, '[listeners.amqps]\nverify = "sometimes"\n')

    with pytest.raises(ConfigError, match="expected one of 'none', 'optional', 'required'"):
        load_config(path, environ=environ)


def test_limits_from_the_environment(environ: dict[str, str]) -> None:
    # What tests/integration/test_limits.py sets: BATONMQ__LIMITS__<KEY>.
    environ["BATONMQ__LIMITS__MAX_CONNECTIONS_PER_USER"] = "2"
    environ["BATONMQ__LIMITS__MAX_CONNECTIONS_PER_VHOST"] = "3"
    environ["BATONMQ__LIMITS__MAX_CONSUMERS_PER_CHANNEL"] = "4"

    assert load_config(environ=environ).limits == LimitsConfig(
        max_connections_per_user=2, max_connections_per_vhost=3, max_consumers_per_channel=4
    )
