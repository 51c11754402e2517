"""SASL responses of connection.start-ok, decoded into a username and password.

PLAIN (RFC 4616): `[authzid] NUL authcid NUL passwd`. AMQPLAIN (RabbitMQ's): a field table
without its length prefix, holding LOGIN and PASSWORD. One small function per mechanism, in a
registry, so EXTERNAL can join them (STYLE.md 4).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from pamqp import decode


class SaslError(ValueError):
    """The response does not decode for its mechanism."""


@dataclass(frozen=True, slots=True)
class Credentials:
    username: str
    password: str


def _plain(response: bytes) -> Credentials:
    parts = response.split(b"\x00")
    if len(parts) != 3:
        raise SaslError("PLAIN response is not 'authzid NUL authcid NUL passwd'")
    _authzid, username, password = parts
    try:
        return Credentials(username.decode("utf-8"), password.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise SaslError("PLAIN credentials are not UTF-8") from error


def _amqplain(response: bytes) -> Credentials:
    try:
        _size, table = decode.field_table(struct.pack(">I", len(response)) + response)
    except (ValueError, RecursionError) as error:
        raise SaslError(f"AMQPLAIN response is not a field table: {error}") from error
    login, password = table.get("LOGIN"), table.get("PASSWORD")
    if isinstance(login, bytes):
        login = login.decode("utf-8", "replace")
    if isinstance(password, bytes):
        password = password.decode("utf-8", "replace")
    if not isinstance(login, str) or not isinstance(password, str):
        raise SaslError("AMQPLAIN response lacks LOGIN or PASSWORD")
    return Credentials(login, password)


MECHANISMS: dict[str, Callable[[bytes], Credentials]] = {"PLAIN": _plain, "AMQPLAIN": _amqplain}


def decode_response(mechanism: str, response: bytes) -> Credentials:
    decoder = MECHANISMS.get(mechanism)
    if decoder is None:
        raise SaslError(f"unsupported mechanism {mechanism}")
    return decoder(response)
