"""The server's side of `quiesce bkr`, `unquiesce bkr` and `shutdown bkr` (MQ 4.1 HA guide,
Table 7, and the states of Example 1)."""

from __future__ import annotations

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
