"""The amqps listener's TLS context, built from `[listeners.amqps]` (Qpid manual §2.3; the Security
requirements: "an amqps listener with certificate, key, CA bundle, client-certificate verification
none / optional / required, TLS 1.2 minimum, configurable ciphers ... Errors in TLS configuration
stop the broker with a clear message at start-up").

Every problem is a `TlsConfigError` naming the setting and, for a file, its path and what is wrong
with it ("listeners.amqps.keyfile: /etc/batonmq/server.key: no such file"), found before the
broker opens its store or any socket; OpenSSL's own words ("PEM lib") name neither.
"""

from __future__ import annotations

import dataclasses
import ssl
from pathlib import Path
from typing import Final

from batonmq.config import ConfigError, TlsListenerConfig

__all__ = ["KEY_PREFIX", "TlsConfigError", "mutual_contexts", "server_context"]

#: Where these settings live in the configuration, for the messages.
KEY_PREFIX: Final = "listeners.amqps"

_VERIFY_MODES: Final = {
    "none": ssl.CERT_NONE,
    "optional": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


class TlsConfigError(ConfigError):
    """The TLS settings cannot be used; ``key`` is the dotted setting at fault."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(problem, key=f"{KEY_PREFIX}.{setting}")


class _KeyIsEncrypted(Exception):
    """Raised from the password callback: the broker has no passphrase to give (and must never
    fall back to OpenSSL's prompt on a terminal nobody watches)."""


def _no_passphrase() -> bytes:
    raise _KeyIsEncrypted


def _readable(setting: str, path: Path | None) -> Path:
    """`path`, after checking that it names a readable file."""
    if path is None:
        raise TlsConfigError(setting, f"must be set when {KEY_PREFIX}.enabled is true")
    try:
        with path.open("rb"):
            pass
    except FileNotFoundError:
        raise TlsConfigError(setting, f"{path}: no such file") from None
    except IsADirectoryError:
        raise TlsConfigError(setting, f"{path}: is a directory, not a PEM file") from None
    except OSError as error:
        reason = error.strerror or str(error)
        raise TlsConfigError(setting, f"{path}: cannot read the file: {reason}") from None
    return path


def _check_certificates(setting: str, path: Path) -> None:
    """OpenSSL reports a certificate file without a certificate and a bad key alike ("PEM lib"):
    load the certificates alone first, so that the message can say which file is wrong."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except ssl.SSLError:
        raise TlsConfigError(setting, f"{path}: no PEM certificate in it") from None


def _check_together(config: TlsListenerConfig) -> None:
    if config.verify != "none" and config.cafile is None:
        raise TlsConfigError(
            "cafile",
            f'must be set when {KEY_PREFIX}.verify is "{config.verify}": client certificates '
            "are checked against it",
        )
    if "EXTERNAL" in config.mechanisms.upper().split() and config.verify == "none":
        raise TlsConfigError(
            "mechanisms",
            f"offers EXTERNAL, which logs in with the client certificate, but {KEY_PREFIX}.verify "
            f'is "none" so no client certificate is asked for: set {KEY_PREFIX}.verify to '
            '"optional" or "required" (with a cafile), or remove EXTERNAL',
        )


def server_context(config: TlsListenerConfig) -> ssl.SSLContext:
    """The server side of TLS 1.2 and later with `config`'s certificate, key, CA bundle, client
    certificate verification and ciphers; TlsConfigError if any of it cannot be used."""
    certfile = _readable("certfile", config.certfile)
    keyfile = _readable("keyfile", config.keyfile)
    cafile = _readable("cafile", config.cafile) if config.cafile is not None else None
    _check_together(config)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # The Security requirements: "TLS 1.2 minimum". Clients offering only TLS 1.1 or older get a
    # protocol_version alert.
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # A client may not renegotiate (a cheap way to make the server do expensive handshakes).
    context.options |= ssl.OP_NO_RENEGOTIATION

    _check_certificates("certfile", certfile)
    try:
        context.load_cert_chain(certfile, keyfile, password=_no_passphrase)
    except _KeyIsEncrypted:
        raise TlsConfigError(
            "keyfile",
            f"{keyfile}: the key is encrypted with a passphrase, which the broker cannot ask "
            "for: give it an unencrypted key and protect the file with its permissions",
        ) from None
    except ssl.SSLError as error:
        if error.reason == "KEY_VALUES_MISMATCH":
            raise TlsConfigError(
                "keyfile",
                f"{keyfile}: this key does not match the certificate in {KEY_PREFIX}.certfile "
                f"({certfile})",
            ) from None
        raise TlsConfigError("keyfile", f"{keyfile}: no PEM private key in it") from None

    if cafile is not None:
        try:
            context.load_verify_locations(cafile=cafile)
        except ssl.SSLError:
            raise TlsConfigError("cafile", f"{cafile}: no PEM certificate in it") from None
    context.verify_mode = _VERIFY_MODES[config.verify]

    if config.ciphers:
        try:
            context.set_ciphers(config.ciphers)
        except ssl.SSLError:
            raise TlsConfigError(
                "ciphers",
                f"{config.ciphers!r}: no cipher matches this OpenSSL cipher list "
                "(see `openssl ciphers -v`)",
            ) from None
    return context


def mutual_contexts(config: TlsListenerConfig) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """The server and client sides of mutual TLS between the members of a cluster (the heartbeat
    connections): each end presents `config`'s certificate and requires one that `config`'s CA
    bundle vouches for. A member is known by its CA, not by a host name: its address in the store
    may be an IP address or a name its certificate does not carry, so host names go unchecked."""
    if config.cafile is None:
        raise TlsConfigError(
            "cafile",
            "must be set when cluster.heartbeat.tls is true: the members check each other's "
            "certificates against it",
        )
    server = server_context(dataclasses.replace(config, verify="required"))
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client.minimum_version = ssl.TLSVersion.TLSv1_2
    client.check_hostname = False
    client.verify_mode = ssl.CERT_REQUIRED
    # The files were read and checked by server_context above.
    assert config.certfile is not None
    client.load_cert_chain(config.certfile, config.keyfile, password=_no_passphrase)
    client.load_verify_locations(cafile=config.cafile)
    if config.ciphers:
        client.set_ciphers(config.ciphers)
    return server, client
