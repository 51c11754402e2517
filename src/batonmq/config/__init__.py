"""The broker's one configuration: typed, frozen, loaded once, validated with clear errors.

Sources, lowest precedence first:

1. the defaults, declared once, on the dataclasses of `schema` and the modules it gathers, one
   per concern (`network`, `security`, `protection`, `storage`);
2. a TOML file (``load_config(path)``, or the file named by ``BATONMQ_CONFIG``);
3. environment variables ``BATONMQ__SECTION__KEY`` (``BATONMQ__LISTENERS__AMQP__PORT=5674``),
   whose value is read as a TOML value when it parses as one, else taken as a string;
4. ``overrides``: dotted keys (``{"listeners.amqp.port": 5673}``), which is what command-line
   flags become.

`loading` merges them (file, environment and flags take one path) and checks each value with
the validator its field declares (`checks`), then the rules that involve more than one key.
"""

from batonmq.config.checks import ConfigError, default_data_dir
from batonmq.config.loading import CONFIG_FILE_VARIABLE, ENV_PREFIX, load_config
from batonmq.config.network import (
    FRAME_MAX,
    FRAME_MIN,
    AmqpConfig,
    HttpListenerConfig,
    ListenerConfig,
    ListenersConfig,
    ServerConfig,
    TlsListenerConfig,
)
from batonmq.config.protection import (
    LIMIT_BEHAVIORS,
    MEMORY_STATES,
    AlertsConfig,
    AutocreateConfig,
    DiskConfig,
    LimitsConfig,
    MemoryConfig,
    SlowConsumerConfig,
)
from batonmq.config.schema import SETTINGS, TABLES, Config, LogConfig, Setting
from batonmq.config.security import AclConfig, AuthConfig
from batonmq.config.storage import STORE_KINDS, MessageConfig, PersistConfig, PostgresConfig

__all__ = [
    "CONFIG_FILE_VARIABLE",
    "ENV_PREFIX",
    "FRAME_MAX",
    "FRAME_MIN",
    "LIMIT_BEHAVIORS",
    "MEMORY_STATES",
    "SETTINGS",
    "STORE_KINDS",
    "TABLES",
    "AclConfig",
    "AlertsConfig",
    "AmqpConfig",
    "AuthConfig",
    "AutocreateConfig",
    "Config",
    "ConfigError",
    "DiskConfig",
    "HttpListenerConfig",
    "LimitsConfig",
    "ListenerConfig",
    "ListenersConfig",
    "LogConfig",
    "MemoryConfig",
    "MessageConfig",
    "PersistConfig",
    "PostgresConfig",
    "ServerConfig",
    "Setting",
    "SlowConsumerConfig",
    "TlsListenerConfig",
    "default_data_dir",
    "load_config",
]
