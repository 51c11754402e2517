"""Who may log in. For now the built-in guest user only (guest/guest), which RabbitMQ accepts from
loopback addresses only ("loopback_users"); the user store of the security issue replaces the
in-memory table."""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass, field

from batonmq.security.sasl import SaslError, decode_response

GUEST = "guest"


class AuthenticationError(Exception):
    """Login refused; the text goes to the client in connection.close 403."""


def is_loopback(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


@dataclass
class Authenticator:
    guest_loopback_only: bool = True
    passwords: dict[str, str] = field(default_factory=lambda: {GUEST: GUEST})

    def authenticate(self, mechanism: str, response: bytes, peer_host: str) -> str:
        """The authenticated username, or AuthenticationError with a reason fit for the client."""
        try:
            credentials = decode_response(mechanism, response)
        except SaslError as error:
            raise AuthenticationError(str(error)) from error
        expected = self.passwords.get(credentials.username)
        # compare_digest on every path, so a wrong user and a wrong password take the same time.
        if (
            not hmac.compare_digest(
                (expected or "").encode("utf-8"), credentials.password.encode("utf-8")
            )
            or expected is None
        ):
            raise AuthenticationError(
                f"Login was refused using authentication mechanism {mechanism}. "
                "For details see the broker logfile."
            )
        if (
            credentials.username == GUEST
            and self.guest_loopback_only
            and not is_loopback(peer_host)
        ):
            raise AuthenticationError(
                "user 'guest' can only connect via localhost (auth.guest_loopback_only)"
            )
        return credentials.username
