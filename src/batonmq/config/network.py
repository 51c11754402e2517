"""Settings of the network side: the listeners, what connection.tune proposes, socket buffers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from batonmq.config.checks import Invalid, between, bind_address, one_of, positive_finite, setting

# The AMQP 0-9-1 spec, section 4.2.3: "The minimum frame size is 4096 octets"; 131072 is the
# largest frame this broker negotiates (RabbitMQ's default frame_max).
FRAME_MIN = 4096
FRAME_MAX = 131072


SASL_MECHANISMS = ("PLAIN", "AMQPLAIN", "EXTERNAL")
TLS_VERIFY_MODES = ("none", "optional", "required")


def mechanisms(value: object) -> object:
    """A space-separated list of SASL mechanisms, as connection.start's `mechanisms` field."""
    assert isinstance(value, str)
    names = value.upper().split()
    if not names:
        raise Invalid("must name at least one SASL mechanism")
    unknown = [name for name in names if name not in SASL_MECHANISMS]
    if unknown:
        raise Invalid(f"unknown SASL mechanism {unknown[0]!r}: use {', '.join(SASL_MECHANISMS)}")
    return " ".join(dict.fromkeys(names))


@dataclass(frozen=True, slots=True)
class ListenerConfig:
    """One listening socket (MQ 3.5 admin guide "connection services": the jms/ssljms pair maps onto
    amqp/amqps)."""

    bind: str = setting("0.0.0.0", check=bind_address)
    #: 0 asks the operating system for a free port.
    port: int = setting(5672, check=between(0, 65535))
    #: false turns the plain listener off, so that clients must use amqps (Qpid manual sslOnly).
    enabled: bool = setting(True)
    #: SASL mechanisms offered on this listener, space-separated.
    mechanisms: str = setting("PLAIN AMQPLAIN", check=mechanisms)


@dataclass(frozen=True, slots=True)
class TlsListenerConfig:
    """The amqps listener: AMQP over TLS 1.2 or later (Qpid manual §2.3)."""

    enabled: bool = setting(False)
    bind: str = setting("0.0.0.0", check=bind_address)
    port: int = setting(5671, check=between(0, 65535))
    #: Add EXTERNAL to log in as the client certificate's subject CN (it needs verify =
    #: "optional" or "required").
    mechanisms: str = setting("PLAIN AMQPLAIN", check=mechanisms)
    #: PEM files: the server's certificate chain and its private key.
    certfile: Path | None = field(default=None)
    keyfile: Path | None = field(default=None)
    #: PEM bundle of the certificate authorities that client certificates are checked against.
    cafile: Path | None = field(default=None)
    #: Client certificates: "none" (not asked for), "optional" (checked if sent), "required".
    verify: str = setting("none", check=one_of(*TLS_VERIFY_MODES))
    #: OpenSSL cipher list for TLS 1.2 (TLS 1.3 suites are OpenSSL's); empty keeps the default.
    ciphers: str = setting("")


@dataclass(frozen=True, slots=True)
class HttpListenerConfig:
    """The management HTTP API, on RabbitMQ's management port (15672) by default."""

    enabled: bool = setting(True)
    bind: str = setting("0.0.0.0", check=bind_address)
    #: 0 asks the operating system for a free port.
    port: int = setting(15672, check=between(0, 65535))
    #: HTTPS, with the certificate, key and client-certificate settings of `[listeners.amqps]`.
    tls: bool = setting(False)


@dataclass(frozen=True, slots=True)
class ListenersConfig:
    amqp: ListenerConfig = field(default_factory=ListenerConfig)
    amqps: TlsListenerConfig = field(default_factory=TlsListenerConfig)
    http: HttpListenerConfig = field(default_factory=HttpListenerConfig)


@dataclass(frozen=True, slots=True)
class AmqpConfig:
    """What the broker proposes in connection.tune."""

    frame_max: int = setting(FRAME_MAX, check=between(FRAME_MIN, FRAME_MAX))
    channel_max: int = setting(2047, check=between(1, 65535))
    #: Seconds; 0 turns heartbeats off.
    heartbeat: int = setting(60, check=between(0, 65535))
    #: Largest message body accepted, in bytes (MQ 3.5 admin guide imq.message.max_size, default
    #: 70m); a larger one is refused with 406 before its body is read.
    max_message_size: int = setting(70 * 1024 * 1024, check=between(1, 512 * 1024 * 1024))


@dataclass(frozen=True, slots=True)
class ServerConfig:
    #: Bytes buffered for a client's socket above which the broker stops reading from it...
    write_buffer_high: int = setting(4 * 1024 * 1024, check=between(1))
    #: ...and below which it resumes.
    write_buffer_low: int = setting(1024 * 1024, check=between(0))
    #: Seconds a graceful shutdown waits for connections to close before closing them.
    shutdown_timeout: float = setting(10.0, check=positive_finite)
