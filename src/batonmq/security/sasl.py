"""SASL responses of connection.start-ok, decoded into a username and password, or for EXTERNAL
into the username a TLS client certificate proves.

PLAIN (RFC 4616): `[authzid] NUL authcid NUL passwd`. AMQPLAIN (RabbitMQ's): a field table
without its length prefix, holding LOGIN and PASSWORD. One small function per password
mechanism, in a registry (BatonMQ style §4).

EXTERNAL (RFC 4422 appendix A) has no password: the TLS handshake already verified the client's
certificate, and the username is its subject's CN, as RabbitMQ's rabbitmq_auth_mechanism_ssl
(`ssl_cert_login_from = common_name`). It needs the certificate, not just the response bytes, so
it is `external_username` beside the registry rather than in it. Offer EXTERNAL only on a TLS
listener that verifies client certificates: `getpeercert()` is empty otherwise.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping
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


#: What `ssl.SSLSocket.getpeercert()` returns for a verified certificate; its "subject" is a tuple
#: of relative distinguished names, each a tuple of (attribute name, value) pairs, e.g.
#: `((("countryName", "GB"),), (("commonName", "alice"),))`.
PeerCertificate = Mapping[str, object]


def _subject_attributes(subject: object) -> Iterator[tuple[str, str]]:
    if not isinstance(subject, tuple):
        raise SaslError("the client certificate has no subject")
    for relative_name in subject:
        if not isinstance(relative_name, tuple):
            raise SaslError("the client certificate's subject is not a sequence of names")
        for attribute in relative_name:
            match attribute:
                case (str() as name, str() as value):
                    yield name, value
                case _:
                    raise SaslError("the client certificate's subject is not (name, value) pairs")


def username_from_certificate(peer_certificate: PeerCertificate | None) -> str:
    """The commonName of the certificate's subject. SaslError without a (verified) certificate,
    without a CN, or with several: which one would be the user is ambiguous, so none is."""
    if not peer_certificate:
        raise SaslError("EXTERNAL needs a verified TLS client certificate, and there is none")
    common_names = [
        value
        for name, value in _subject_attributes(peer_certificate.get("subject"))
        if name == "commonName"
    ]
    if len(common_names) != 1 or not common_names[0]:
        raise SaslError(
            f"EXTERNAL needs exactly one non-empty CN in the client certificate's subject, "
            f"not {common_names}"
        )
    return common_names[0]


def external_username(response: bytes, peer_certificate: PeerCertificate | None) -> str:
    """The user EXTERNAL logs in as: the certificate's CN. The response is the authorization
    identity (RFC 4422 appendix A); empty asks for the CN, and anything else must equal it, since
    a certificate does not entitle its holder to act as another user."""
    username = username_from_certificate(peer_certificate)
    try:
        authorization_identity = response.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SaslError("EXTERNAL authorization identity is not UTF-8") from error
    if authorization_identity and authorization_identity != username:
        raise SaslError(
            f"EXTERNAL authorization identity '{authorization_identity}' is not the client "
            f"certificate's CN '{username}'"
        )
    return username
