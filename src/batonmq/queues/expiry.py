"""When a message expires: pure decisions on wall-clock milliseconds (so that an expiry time
written to the store still means the same after a restart).

RabbitMQ's rules (https://www.rabbitmq.com/docs/ttl): a queue's x-message-ttl and a message's
`expiration` property (a string of milliseconds) both apply and the lower wins; the TTL counts
from when the message entered the queue; a message with TTL 0 expires at once unless it can be
delivered straight away; an expired message is never delivered.
"""

from __future__ import annotations

from typing import Final


class InvalidExpiration(ValueError):
    """An `expiration` property that is not a string of non-negative milliseconds."""


def parse_expiration(expiration: str) -> int:
    """The milliseconds an `expiration` property gives (RabbitMQ: a non-negative integer as a
    string; anything else is a 406 at publish)."""
    text = expiration.strip()
    if not text.isdigit() or not text.isascii():
        raise InvalidExpiration(f"invalid expiration '{expiration}': not a non-negative integer")
    return int(text)


#: The latest expiry time kept: a store holds it in a signed 64-bit integer. A TTL that reaches
#: past it (any string of digits is an `expiration`) is "never", some 292 million years on.
LATEST_EXPIRY_MS: Final = 2**63 - 1


def expires_at(entered_ms: int, queue_ttl: int | None, message_ttl: int | None) -> int | None:
    """When a message that entered the queue at `entered_ms` expires; None for never."""
    ttls = [ttl for ttl in (queue_ttl, message_ttl) if ttl is not None]
    if not ttls:
        return None
    expiry = entered_ms + min(ttls)
    return expiry if expiry <= LATEST_EXPIRY_MS else None


def is_expired(expiry_ms: int | None, now: int) -> bool:
    """An entry is expired once its expiry time has passed: with TTL 0, a consumer with room
    still gets it on arrival, and it is gone by the next millisecond."""
    return expiry_ms is not None and now > expiry_ms
