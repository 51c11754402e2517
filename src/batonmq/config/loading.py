"""Loading the configuration: a TOML file, then the environment, then overrides (the command line),
each value checked and turned into its setting's type, and rules that involve more than one key."""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from batonmq.config.checks import ConfigError, Invalid, default_data_dir, home
from batonmq.config.durability import parse_durability
from batonmq.config.schema import SETTINGS, TABLES, Config, Setting

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

#: Names the configuration file when `load_config` is given no path.
CONFIG_FILE_VARIABLE = "BATONMQ_CONFIG"
#: Prefix of the environment variables that set one key each: BATONMQ__LOG__LEVEL=debug.
ENV_PREFIX = "BATONMQ__"

_DC = TypeVar("_DC", bound="DataclassInstance")


_EXPECTED: dict[object, str] = {
    int: "an integer",
    float: "a number",
    bool: "a boolean (true or false)",
    str: "a string",
    Path: "a string (a path)",
    Path | None: "a string (a path)",
    tuple[str, ...]: "an array of strings",
}


def _describe(value: object) -> str:
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"{type(value).__name__} {value!s}"


def _coerce(setting: Setting, value: object, base_dir: Path, environ: Mapping[str, str]) -> object:
    """`value` as the setting's type, or Invalid. Booleans are not integers."""
    kind = setting.kind
    ok = False
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value, ok = float(value), True
    elif kind is str:
        ok = isinstance(value, str)
    elif kind is Path or kind == Path | None:
        if isinstance(value, str | os.PathLike):
            value, ok = _resolve_path(os.fspath(value), base_dir, environ), True
            if kind != Path and value == "":
                value = None  # an optional path left empty is unset
    elif kind == tuple[str, ...]:
        if isinstance(value, list) and all(isinstance(each, str) for each in value):
            value, ok = tuple(value), True
    else:  # pragma: no cover - a field of a type _coerce does not know is a programming error
        raise TypeError(f"{setting.key}: unsupported setting type {kind!r}")
    if not ok:
        raise Invalid(f"expected {_EXPECTED[kind]}, got {_describe(value)}")
    return value


def _resolve_path(text: str | bytes, base_dir: Path, environ: Mapping[str, str]) -> Path | str:
    """An absolute path: ``~`` is the home directory; relative is relative to `base_dir`."""
    text = os.fsdecode(text)
    if not text:
        return text  # the check reports it
    if text == "~" or text.startswith("~/"):
        path = home(environ) / text[2:]
    else:
        path = Path(text).expanduser()
    return path if path.is_absolute() else base_dir / path


# ---------------------------------------------------------------------------------------------
# Loading.


@dataclass(frozen=True, slots=True)
class _Value:
    """A validated value and the source it came from, for errors that involve two keys."""

    value: object
    source: str | None


def _not_a_setting(
    key: str, source: str | None, *, kind: str = "key", spell: Callable[[str], str] = repr
) -> ConfigError:
    """The error for a key that is not a setting: a section, or unknown (with the closest key,
    spelled as the source spells keys)."""
    if key in TABLES:
        example = next(name for name in SETTINGS if name.startswith(f"{key}."))
        problem = f"is a section, not a key: set one of its keys, as in {spell(example)}"
    else:
        suggestion = _closest(key)
        problem = f"unknown {kind}" + (f"; did you mean {spell(suggestion)}?" if suggestion else "")
    return ConfigError(problem, source=source, key=key)


def _closest(key: str) -> str | None:
    """The known key the user most likely meant by `key`, if any is close."""
    known = sorted(SETTINGS)
    leaf = key.rpartition(".")[2]
    # A known key in the wrong section ("frame_max" under [listeners.amqp]): name its section,
    # the first declared where several have that name ("port": the AMQP listener's).
    for name in SETTINGS:
        if name.rpartition(".")[2] == leaf:
            return name
    matches = difflib.get_close_matches(key, sorted({*known, *TABLES}), n=1, cutoff=0.6)
    if matches:
        return matches[0]
    # A misspelt key in the wrong section ("prot" at the top level): match its last part alone.
    by_leaf = {name.rpartition(".")[2]: name for name in known}
    leaf_matches = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.75)
    return by_leaf[leaf_matches[0]] if leaf_matches else None


def _flatten(table: Mapping[str, object], prefix: str, source: str) -> dict[str, object]:
    """A parsed TOML document as {dotted key: value}, refusing unknown sections and keys."""
    flat: dict[str, object] = {}
    for name, value in table.items():
        key = f"{prefix}{name}"
        if key in SETTINGS:
            flat[key] = value
        elif key in TABLES:
            if not isinstance(value, dict):
                raise ConfigError(
                    f"is a section: expected a table, got {_describe(value)}",
                    source=source,
                    key=key,
                )
            flat.update(_flatten(value, f"{key}.", source))
        else:
            raise _not_a_setting(key, source, kind="section" if isinstance(value, dict) else "key")
    return flat


_TOML_POSITION = re.compile(r"^(?P<reason>.*) \(at line (?P<line>\d+), column (?P<column>\d+)\)$")


def _read_file(path: Path, source: str) -> dict[str, object]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except FileNotFoundError:
        raise ConfigError("no such file", source=source) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, not a configuration file", source=source) from None
    except PermissionError:
        raise ConfigError("cannot read the file: permission denied", source=source) from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise ConfigError(f"cannot read the file: {reason}", source=source) from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"not valid UTF-8 text (byte {error.start}): TOML files are UTF-8", source=source
        ) from None
    except tomllib.TOMLDecodeError as error:
        # Python 3.11's TOMLDecodeError has no lineno/colno attributes (3.14 adds them); its
        # message ends "(at line L, column C)".
        message = str(error)
        position = _TOML_POSITION.match(message)
        if position:
            message = (
                f"TOML syntax error at line {position['line']}, column {position['column']}: "
                f"{position['reason']}"
            )
        else:
            message = f"TOML syntax error: {message}"
        raise ConfigError(message, source=source) from None


def _environment_layer(environ: Mapping[str, str]) -> list[tuple[str, object, str]]:
    """[(key, value, source)] from the BATONMQ__SECTION__KEY variables, sorted by name."""
    layer: list[tuple[str, object, str]] = []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX):
            continue
        source = f"environment variable {name}"
        key = name[len(ENV_PREFIX) :].replace("__", ".").lower()
        if key not in SETTINGS:
            raise _not_a_setting(key, source, spell=_variable_name)
        layer.append((key, _environment_value(SETTINGS[key], environ[name]), source))
    return layer


def _variable_name(key: str) -> str:
    """The environment variable that sets `key`: listeners.amqp.port -> BATONMQ__LISTENERS__..."""
    return ENV_PREFIX + key.replace(".", "__").upper()


def _environment_value(setting: Setting, text: str) -> object:
    """The variable's text read as a TOML value (5674, true, "x"), else the text itself."""
    try:
        document = tomllib.loads(f"value = {text}")
    except tomllib.TOMLDecodeError:
        return text
    if document.keys() != {"value"}:  # "1\nother = 2" is not one value
        return text
    value = document["value"]
    # A name or a path that happens to read as a number (broker name "42") stays as written.
    if setting.kind in (str, Path) and not isinstance(value, str):
        return text
    return value


def load_config(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> Config:
    """Load, merge and validate the configuration; raises ConfigError.

    `path` is the TOML file (``BATONMQ_CONFIG`` names one when `path` is None; no file is read
    when neither does). `environ` defaults to ``os.environ``. `overrides` maps dotted keys to
    values of the setting's type (a None value means "not given"). Overrides take precedence over
    the environment, which takes precedence over the file. Relative paths are relative to the
    file's directory for values from the file, to the working directory otherwise.
    """
    env = os.environ if environ is None else environ
    cwd = Path.cwd()
    layers: list[tuple[str, object, str | None, Path]] = []

    if path is None and env.get(CONFIG_FILE_VARIABLE):
        path = Path(env[CONFIG_FILE_VARIABLE])
        file_source = f"{path} (named by {CONFIG_FILE_VARIABLE})"
    else:
        file_source = str(path)
    if path is not None:
        document = _read_file(path, file_source)
        base_dir = (cwd / path).parent
        for key, value in _flatten(document, "", file_source).items():
            layers.append((key, value, file_source, base_dir))

    for key, value, variable in _environment_layer(env):
        layers.append((key, value, variable, cwd))

    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key not in SETTINGS:
            raise _not_a_setting(key, "overrides")
        layers.append((key, value, "overrides", cwd))

    values: dict[str, _Value] = {
        "broker.data_dir": _Value(default_data_dir(env), None),
    }
    for key, raw, source, base_dir in layers:
        setting = SETTINGS[key]
        try:
            value = _coerce(setting, raw, base_dir, env)
            if setting.check is not None:
                value = setting.check(value)
        except Invalid as invalid:
            raise ConfigError(str(invalid), source=source, key=key) from None
        values[key] = _Value(value, source)

    config = _build(Config(), (), {SETTINGS[k].attribute_path: v.value for k, v in values.items()})
    _check_together(config, values)
    return config


def _build(
    instance: _DC, attribute_path: tuple[str, ...], values: Mapping[tuple[str, ...], object]
) -> _DC:
    changes: dict[str, object] = {}
    for dataclass_field in dataclasses.fields(instance):
        path = (*attribute_path, dataclass_field.name)
        current = getattr(instance, dataclass_field.name)
        if dataclasses.is_dataclass(current) and not isinstance(current, type):
            changes[dataclass_field.name] = _build(current, path, values)
        elif path in values:
            changes[dataclass_field.name] = values[path]
    return dataclasses.replace(instance, **changes)


def _source(values: Mapping[str, _Value], *keys: str) -> str | None:
    """Where the first of `keys` that was set came from (None: all are defaults)."""
    return next((values[key].source for key in keys if key in values), None)


def _check_together(config: Config, values: Mapping[str, _Value]) -> None:
    """Rules that involve more than one key."""
    low, high = config.server.write_buffer_low, config.server.write_buffer_high
    if low >= high:
        raise ConfigError(
            f"must be less than server.write_buffer_high ({high}), got {low}",
            source=_source(values, "server.write_buffer_low", "server.write_buffer_high"),
            key="server.write_buffer_low",
        )
    memory = config.memory
    if not memory.yellow_threshold < memory.orange_threshold < memory.red_threshold:
        raise ConfigError(
            "the thresholds must rise from yellow to orange to red, got "
            f"{memory.yellow_threshold}, {memory.orange_threshold}, {memory.red_threshold}",
            source=_source(
                values,
                "memory.yellow_threshold",
                "memory.orange_threshold",
                "memory.red_threshold",
            ),
            key="memory.orange_threshold",
        )
    disk = config.disk
    if disk.store_underfull > disk.store_overfull:
        raise ConfigError(
            f"must not exceed disk.store_overfull ({disk.store_overfull}), "
            f"got {disk.store_underfull}",
            source=_source(values, "disk.store_underfull", "disk.store_overfull"),
            key="disk.store_underfull",
        )
    try:
        re.compile(config.autocreate.pattern)
    except re.error as error:
        raise ConfigError(
            f"is not a regular expression: {error}",
            source=_source(values, "autocreate.pattern"),
            key="autocreate.pattern",
        ) from None
    persist = config.persist
    if persist.store == "postgres" and not persist.postgres.dsn:
        raise ConfigError(
            'must be set when persist.store is "postgres"',
            source=_source(values, "persist.store"),
            key="persist.postgres.dsn",
        )
    _check_durability(config, values)
    _check_cluster(config, values)


def _check_durability(config: Config, values: Mapping[str, _Value]) -> None:
    """persist.postgres.durability beside persist.sync and coalescing_sync (Qpid broker manual
    §1.6.6: "the combination of a master sync policy of SYNC and coalescing-sync true ... cannot
    be used")."""
    persist = config.persist
    durability = persist.postgres.durability
    if not durability:
        return
    if not persist.sync:
        raise ConfigError(
            "must be true when persist.postgres.durability is set (the durability policy says "
            "what a commit waits for): set one or the other",
            source=_source(values, "persist.sync"),
            key="persist.sync",
        )
    if parse_durability(durability).master == "SYNC" and persist.postgres.coalescing_sync:
        raise ConfigError(
            "must be false with a master sync policy of SYNC: the primary flushes every commit "
            "anyway, and coalescing would only delay them (Qpid broker manual, Durability "
            "Guarantees)",
            source=_source(values, "persist.postgres.durability"),
            key="persist.postgres.coalescing_sync",
        )


def _check_cluster(config: Config, values: Mapping[str, _Value]) -> None:
    """The MQ 4.1 HA guide, Table 1: an HA broker needs imq.cluster.clusterid and imq.brokerid,
    and its cluster's brokers share one JDBC store (here PostgreSQL)."""
    cluster = config.cluster
    if not cluster.ha:
        return
    if config.spread_vhosts:
        raise ConfigError(
            "must be empty when cluster.ha is true: a takeover moves a failed broker's virtual "
            "hosts whole, and cannot yet move a spread one's queues to each of its owners",
            source=_source(values, "broker.spread_vhosts", "cluster.ha"),
            key="broker.spread_vhosts",
        )
    if config.persist.store != "postgres":
        raise ConfigError(
            'must be "postgres" when cluster.ha is true: the brokers of an HA cluster share '
            f"one PostgreSQL store, and {config.persist.store} is one broker's own",
            source=_source(values, "persist.store", "cluster.ha"),
            key="persist.store",
        )
    for name in ("clusterid", "brokerid"):
        if not getattr(cluster, name):
            raise ConfigError(
                "must be set when cluster.ha is true",
                source=_source(values, "cluster.ha"),
                key=f"cluster.{name}",
            )
    if cluster.heartbeat.tls:
        amqps = config.listeners.amqps
        for name in ("certfile", "keyfile", "cafile"):
            if getattr(amqps, name) is None:
                raise ConfigError(
                    "must be set when cluster.heartbeat.tls is true: the members present "
                    "their certificates to each other and check them against the CA bundle",
                    source=_source(values, "cluster.heartbeat.tls"),
                    key=f"listeners.amqps.{name}",
                )
