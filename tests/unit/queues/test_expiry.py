"""Expiry decisions (https://www.rabbitmq.com/docs/ttl): "When both a per-queue and a per-message
TTL are specified, the lower value between the two will be chosen"; expiration is "a string
... of milliseconds"."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batonmq.queues.expiry import InvalidExpiration, expires_at, is_expired, parse_expiration


def test_the_lower_ttl_wins() -> None:
    assert expires_at(1000, 500, 200) == 1200
    assert expires_at(1000, 200, 500) == 1200
    assert expires_at(1000, None, 300) == 1300
    assert expires_at(1000, 300, None) == 1300
    assert expires_at(1000, None, None) is None


def test_a_ttl_past_what_a_store_can_hold_is_never() -> None:
    """RabbitMQ takes any string of digits as an expiration; one whose expiry time would not fit
    the store's 64-bit integer would fail the message's write (a nack), so it never expires."""
    assert expires_at(1000, None, 2**63 - 1001) == 2**63 - 1
    assert expires_at(1000, None, 10**30) is None
    assert expires_at(1000, 10**30, 10**30) is None


def test_an_entry_is_expired_once_its_time_has_passed() -> None:
    """TTL 0: "messages ... expire upon reaching a queue unless they can be delivered to a
    consumer immediately" — the same millisecond still delivers, the next does not."""
    assert not is_expired(None, 10**15)
    assert not is_expired(1000, 999)
    assert not is_expired(1000, 1000)
    assert is_expired(1000, 1001)


@given(st.integers(min_value=0, max_value=2**53))
def test_any_non_negative_integer_string_is_an_expiration(ms: int) -> None:
    assert parse_expiration(str(ms)) == ms


@pytest.mark.parametrize("text", ["", "-1", "1.5", "ten", "1e3", "١٢"])
def test_other_expirations_are_refused(text: str) -> None:
    """RabbitMQ refuses a publish whose expiration is not a non-negative integer (406)."""
    with pytest.raises(InvalidExpiration, match="invalid expiration"):
        parse_expiration(text)
