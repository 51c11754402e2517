"""Broker states as `list bkr` shows them (MQ 4.1 HA guide, Example 1 and Table 19)."""

from __future__ import annotations

import pytest

from batonmq.cluster.member import advertised, parse_address
from batonmq.cluster.states import BrokerState, member_state, stored_state
from batonmq.store.members import SERVING_STATES


@pytest.mark.parametrize(
    ("stored", "state"),
    [
        ("running", BrokerState.OPERATING),
        ("stopped", BrokerState.BROKER_DOWN),
        ("FAILOVER_STARTED", BrokerState.FAILOVER_STARTED),
        ("FAILOVER_COMPLETE", BrokerState.FAILOVER_COMPLETE),
        ("QUIESCING", BrokerState.QUIESCING),
        ("QUIESCE_COMPLETE", BrokerState.QUIESCE_COMPLETE),
        ("SHUTDOWN_STARTED", BrokerState.SHUTDOWN_STARTED),
    ],
)
def test_a_members_stored_state_is_named_as_the_guide_names_it(
    stored: str, state: BrokerState
) -> None:
    assert member_state(stored, lease_live=True, no_failover=False) is state


@pytest.mark.parametrize("stored", ["running", "QUIESCING", "SHUTDOWN_STARTED"])
def test_a_member_whose_lease_ran_out_is_pending_failover(stored: str) -> None:
    """The issue's FAILOVER_PENDING, as seen from the failed broker's side: judged failed on
    the store's clock (its lease ran out while it recorded itself running), not yet claimed;
    one shut down with no failover is down, as no survivor will claim it."""
    assert member_state(stored, lease_live=False, no_failover=False) is (
        BrokerState.FAILOVER_PENDING
    )
    assert member_state(stored, lease_live=False, no_failover=True) is BrokerState.BROKER_DOWN
    assert member_state("FAILOVER_COMPLETE", lease_live=False, no_failover=False) is (
        BrokerState.FAILOVER_COMPLETE
    )
    assert member_state("stopped", lease_live=False, no_failover=False) is (BrokerState.BROKER_DOWN)


def test_a_running_member_records_what_the_others_cannot_see_otherwise() -> None:
    """Quiescing and shutting down are recorded for the others to list (Example 1 shows
    QUIESCING); a takeover under way is not; every recorded state still counts as running
    where the store decides who holds a lease."""
    recorded = {state: stored_state(state) for state in BrokerState}
    assert recorded[BrokerState.OPERATING] == recorded[BrokerState.TAKEOVER_STARTED] == "running"
    assert recorded[BrokerState.QUIESCING] == "QUIESCING"
    assert set(recorded.values()) == SERVING_STATES
    recorded_as_is = {BrokerState.QUIESCING, BrokerState.QUIESCE_COMPLETE}
    recorded_as_is.add(BrokerState.SHUTDOWN_STARTED)
    for state in BrokerState:
        listed = member_state(stored_state(state), lease_live=True, no_failover=False)
        assert listed is (state if state in recorded_as_is else BrokerState.OPERATING), state
        lapsed = member_state(stored_state(state), lease_live=False, no_failover=False)
        assert lapsed is BrokerState.FAILOVER_PENDING, state


def test_an_address_round_trips_and_a_wildcard_bind_is_advertised_by_host_name() -> None:
    assert parse_address(advertised("127.0.0.1", 7676)) == ("127.0.0.1", 7676)
    assert parse_address("[::1]:7676") == ("::1", 7676)
    assert not advertised("0.0.0.0", 5672).startswith("0.0.0.0")
