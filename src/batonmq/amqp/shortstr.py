"""The AMQP 0-9-1 short string's limit: 255 octets of UTF-8 (§4.2.5.3, "Short strings …
limited to 255 octets"). Exchange and queue names and routing keys that come in over AMQP are
short strings already; those that come in other ways (the management API, definitions, queue
arguments) must fit one too, or a message carrying them could never be delivered (basic.deliver
carries its exchange and routing key as short strings), nor cross between workers.
"""

from __future__ import annotations

from typing import Final

#: The most octets of a short string.
SHORT_STRING_MAX: Final = 255


def fits_short_string(*values: str) -> bool:
    """Whether each of `values` fits a short string: at most 255 octets of UTF-8, and UTF-8 at
    all (a lone surrogate, which JSON can spell, is not)."""
    for value in values:
        if value.isascii():
            if len(value) > SHORT_STRING_MAX:
                return False
            continue
        try:
            if len(value.encode()) > SHORT_STRING_MAX:
                return False
        except UnicodeEncodeError:
            return False
    return True


def not_short_string(what: str) -> str:
    """Why `what` (a name or key that does not fit) is refused."""
    return f"{what} must be at most {SHORT_STRING_MAX} octets of UTF-8 (an AMQP short string)"
