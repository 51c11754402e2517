"""Broker states as `list bkr` shows them (MQ 4.1 HA guide, Example 1 and Table 19)."""

from __future__ import annotations

import pytest

from batonmq.cluster.member import advertised, parse_address
from batonmq.cluster.states import BrokerState, member_state


@pytest.mark.parametrize(
    ("stored", "state"),
    [
        ("running", BrokerState.OPERATING),
        ("stopped", BrokerState.BROKER_DOWN),
        ("FAILOVER_STARTED", BrokerState.FAILOVER_STARTED),
        ("FAILOVER_COMPLETE", BrokerState.FAILOVER_COMPLETE),
    ],
)
def test_a_members_stored_state_is_named_as_the_guide_names_it(
    stored: str, state: BrokerState
) -> None:
    assert member_state(stored) is state


def test_an_address_round_trips_and_a_wildcard_bind_is_advertised_by_host_name() -> None:
    assert parse_address(advertised("127.0.0.1", 7676)) == ("127.0.0.1", 7676)
    assert parse_address("[::1]:7676") == ("::1", 7676)
    assert not advertised("0.0.0.0", 5672).startswith("0.0.0.0")
