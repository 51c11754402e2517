"""The server's side of `quiesce bkr`, `unquiesce bkr` and `shutdown bkr` (MQ 4.1 HA guide,
Table 7, and the states of Example 1)."""

from __future__ import annotations

import asyncio

from batonmq.cluster.states import BrokerState
from batonmq.server.control import Administration
from batonmq.server.listeners import Listening


def _refuse_protocols(_listener: object) -> object:
    raise AssertionError("no client is accepted in these tests")


def test_quiesce_refuses_new_clients_and_is_complete_once_the_open_ones_have_gone() -> None:
    """Table 7: quiesce bkr: "The broker will stop accepting new connections; existing
    connections will continue to operate"; unquiesce bkr: "The broker will resume accepting new
    connections, returning to normal operation". Example 1 shows QUIESCING, then QUIESCE
    COMPLETE."""
    listening = Listening([], _refuse_protocols, lambda _protocol: None)  # type: ignore[arg-type]
    clients = {"one open connection"}
    control = Administration(listening, clients)
    assert (control.state, listening.quiesced) == (BrokerState.OPERATING, False)

    control.quiesce()
    assert (control.state, listening.quiesced) == (BrokerState.QUIESCING, True)
    clients.clear()
    assert control.state is BrokerState.QUIESCE_COMPLETE
    control.quiesce()  # again: no change
    assert control.state is BrokerState.QUIESCE_COMPLETE

    control.unquiesce()
    assert (control.state, listening.quiesced) == (BrokerState.OPERATING, False)


def test_a_shutdown_sets_the_stop_serve_waits_for_and_shows_shutdown_started() -> None:
    """Example 1 shows a broker being shut down as SHUTDOWN_STARTED; quiesced or not, that is
    what it is from then on."""
    listening = Listening([], _refuse_protocols, lambda _protocol: None)  # type: ignore[arg-type]
    control = Administration(listening, set())
    control.quiesce()

    control.shut_down()

    assert control.stop.is_set()
    assert control.state is BrokerState.SHUTDOWN_STARTED


def test_a_quiesced_broker_of_several_workers_is_complete_only_once_no_worker_has_a_client() -> (
    None
):
    """MQ 4.1 HA guide, Example 1: QUIESCING while clients are connected, QUIESCE_COMPLETE once
    none is: with several workers, none of any worker. Until the siblings have answered, and
    while one does not (it answers as having clients), they may have clients."""
    listening = Listening([], _refuse_protocols, lambda _protocol: None)  # type: ignore[arg-type]
    asked: list[bool] = []
    siblings_answer = [True]

    async def siblings_serve() -> bool:
        asked.append(listening.quiesced)
        return siblings_answer[0]

    control = Administration(listening, set(), siblings_serve=siblings_serve)
    asyncio.run(control.count_siblings())
    assert (control.state, asked) == (BrokerState.OPERATING, [])  # not asked unless quiesced

    control.quiesce()
    assert control.state is BrokerState.QUIESCING  # not asked yet
    asyncio.run(control.count_siblings())
    assert (control.state, asked) == (BrokerState.QUIESCING, [True])
    siblings_answer[0] = False
    asyncio.run(control.count_siblings())
    assert control.state is BrokerState.QUIESCE_COMPLETE

    control.unquiesce()
    control.quiesce()  # a new quiesce: the siblings are asked again
    assert control.state is BrokerState.QUIESCING
