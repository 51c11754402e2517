"""A broker with several worker processes is one member of its HA cluster: its workers' store
identities (each with a lease and an epoch of its own) are listed as that one member (MQ 4.1 HA
guide, Example 1: `list bkr` lists brokers, one row each)."""

from __future__ import annotations

import datetime

from batonmq.store.members import Member, as_members

T0 = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)


def record(
    broker_id: str,
    *,
    epoch: int = 1,
    address: str | None = None,
    silent_for: float = 0.5,
    live: bool = True,
    no_failover: bool = False,
    messages: int | None = None,
    state: str = "running",
) -> Member:
    return Member(
        broker_id,
        state,
        address,
        None if address is None else address.replace(":5672", ":7676"),
        None if address is None else "1.0",
        epoch,
        None,
        T0 - datetime.timedelta(seconds=silent_for),
        silent_for,
        live,
        no_failover,
        None if address is None else "{}",
        messages,
    )


def test_a_broker_of_one_process_is_listed_as_it_is_recorded() -> None:
    alone = record("B", address="b:5672")

    assert as_members([(alone, None)]) == [alone]


def test_the_workers_of_a_member_are_one_member_speaking_through_worker_0() -> None:
    """Its address, heartbeat endpoint, version and settings are those worker 0 registered; it
    is silent only as long as its least silent worker, alive while any lease runs, and its epoch
    is the sum of its identities' (any claim or restart changes it)."""
    worker0 = record("Aw0", epoch=3, address="a:5672", silent_for=9.0, live=False, messages=2)
    worker1 = record("Aw1", epoch=5, silent_for=0.25, messages=3)
    other = record("B", address="b:5672")

    listed = as_members([(worker0, "A"), (worker1, "A"), (other, None)])

    assert [member.broker_id for member in listed] == ["A", "B"]
    member = listed[0]
    assert (member.address, member.heartbeat_address, member.settings) == (
        "a:5672",
        "a:7676",
        "{}",
    )
    assert (member.epoch, member.silent_for, member.lease_live) == (8, 0.25, True)
    assert member.last_heartbeat == worker1.last_heartbeat
    assert (member.messages, member.identities) == (5, ("Aw0", "Aw1"))


def test_a_members_own_record_from_before_it_had_workers_is_one_of_its_identities() -> None:
    """Its rows are the member's too: a takeover claims them with the workers'."""
    own = record("A", epoch=4, address="old:5672", live=False, silent_for=600.0)
    worker0 = record("Aw0", epoch=1, address="a:5672", no_failover=True)

    (member,) = as_members([(own, None), (worker0, "A")])

    assert member.identities == ("A", "Aw0")
    assert (member.address, member.epoch, member.no_failover) == ("a:5672", 5, True)
    assert member.messages is None  # not counted


def test_a_member_that_ran_with_workers_and_now_runs_one_process_speaks_through_it() -> None:
    """Started again with one process, the member registers as its own identity; the records of
    the workers it ran before keep the addresses they registered, which are not its own any
    more: its peers reach the member where it registered last."""
    own = record("A", epoch=6, address="a:5672", silent_for=0.5)
    worker0 = record("Aw0", epoch=3, address="old:5672", live=False, silent_for=60.0)
    worker1 = record("Aw1", epoch=2, live=False, silent_for=60.0, state="stopped")

    (member,) = as_members([(own, None), (worker0, "A"), (worker1, "A")])

    assert (member.address, member.heartbeat_address, member.state) == (
        "a:5672",
        "a:7676",
        "running",
    )
    assert (member.epoch, member.identities) == (11, ("A", "Aw0", "Aw1"))
