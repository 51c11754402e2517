"""Routing through a virtual host's exchanges: alternate exchanges, exchange-to-exchange bindings
and selector bindings, with the 406s their arguments can earn (engine/vhost.py)."""

from __future__ import annotations

import pytest
from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import ProtocolError
from batonmq.amqp.frames import encode_header_payload
from batonmq.engine.vhost import VirtualHost
from batonmq.model.destination import Destination
from batonmq.model.message import Message
from batonmq.routing.router import SELECTOR_ARGUMENT
from batonmq.store.base import StoredExchange

OWNER = object()
AE = "alternate-exchange"


def message(routing_key: str = "k", **properties: object) -> Message:
    payload = encode_header_payload(commands.Basic.Properties(**properties), 0)
    return Message("x", routing_key, payload, b"")


def routed(vhost: VirtualHost, exchange: str, msg: Message | None = None) -> list[str]:
    return sorted(queue.name for queue in vhost.route(vhost.exchange(exchange), msg or message()))


def vhost_with_queues(*names: str) -> VirtualHost:
    vhost = VirtualHost("/")
    for name in names:
        vhost.declare_queue(name, owner=OWNER).apply()
    return vhost


def refused(reply_code: ReplyCode, call, *args, **kwargs) -> str:
    with pytest.raises(ProtocolError) as error:
        call(*args, **kwargs)
    assert error.value.reply_code is reply_code
    return error.value.reply_text


# Alternate exchanges ---------------------------------------------------------------------------


def test_a_message_no_binding_matches_goes_to_the_alternate_exchange():
    """RabbitMQ (ae.html): "Whenever an exchange with a configured AE cannot route a message to
    any queue, it publishes the message to the specified AE instead"."""
    vhost = vhost_with_queues("matched", "unrouted")
    vhost.declare_exchange("unrouted-ae", "fanout").apply()
    vhost.declare_exchange("orders", "direct", arguments={AE: "unrouted-ae"}).apply()
    vhost.bind("orders", Destination.queue("matched"), "eu", {}).apply()
    vhost.bind("unrouted-ae", Destination.queue("unrouted"), "", {}).apply()
    assert routed(vhost, "orders", message("eu")) == ["matched"]
    assert routed(vhost, "orders", message("us")) == ["unrouted"]


def test_alternate_exchanges_chain_and_a_cycle_ends():
    """rabbit_exchange:route/2 routes through an AE as through a bound exchange: its own AE is
    used in turn when it matches nothing, and an exchange is never routed through twice."""
    vhost = vhost_with_queues("end")
    vhost.declare_exchange("a", "direct", arguments={AE: "b"}).apply()
    vhost.declare_exchange("b", "topic", arguments={AE: "c"}).apply()
    vhost.declare_exchange("c", "direct", arguments={AE: "a"}).apply()
    assert routed(vhost, "a") == []
    vhost.bind("c", Destination.queue("end"), "k", {}).apply()
    assert routed(vhost, "a") == ["end"]
    assert routed(vhost, "b") == ["end"]
    vhost.declare_exchange("self", "direct", arguments={AE: "self"}).apply()
    assert routed(vhost, "self") == []


def test_an_alternate_exchange_that_does_not_exist_drops_the_message():
    """RabbitMQ accepts an AE that does not exist (yet); until it does, unroutable messages are
    dropped. The AE named "" is the default exchange, which routes nothing there (3.10.8)."""
    vhost = vhost_with_queues("k", "late")
    vhost.declare_exchange("x", "direct", arguments={AE: "missing"}).apply()
    assert routed(vhost, "x") == []
    vhost.declare_exchange("missing", "fanout").apply()
    vhost.bind("missing", Destination.queue("late"), "", {}).apply()
    assert routed(vhost, "x") == ["late"]
    vhost.declare_exchange("to-default", "direct", arguments={AE: ""}).apply()
    assert routed(vhost, "to-default") == []


def test_the_alternate_exchange_is_not_used_when_a_binding_matched():
    """RabbitMQ's process_alternate: the AE is used only when the exchange's own bindings match
    no destination at all. A binding to an exchange that routes nowhere is a match (3.10.8:
    the message is returned to a mandatory publisher), and that exchange's own AE applies."""
    vhost = vhost_with_queues("ae-queue", "inner-ae-queue")
    vhost.declare_exchange("ae", "fanout").apply()
    vhost.bind("ae", Destination.queue("ae-queue"), "", {}).apply()
    vhost.declare_exchange("outer", "direct", arguments={AE: "ae"}).apply()
    vhost.declare_exchange("inner", "direct").apply()
    vhost.bind("outer", Destination.exchange("inner"), "k", {}).apply()
    assert routed(vhost, "outer") == []
    vhost.declare_exchange("inner-ae", "fanout").apply()
    vhost.bind("inner-ae", Destination.queue("inner-ae-queue"), "", {}).apply()
    vhost.delete_exchange("inner").apply()
    vhost.declare_exchange("inner", "direct", arguments={AE: "inner-ae"}).apply()
    vhost.bind("outer", Destination.exchange("inner"), "k", {}).apply()
    assert routed(vhost, "outer") == ["inner-ae-queue"]
    assert routed(vhost, "outer", message("other")) == ["ae-queue"]


def test_an_internal_exchange_may_be_an_alternate_exchange():
    """ "internal: ... the exchange may not be used directly by publishers, but only when bound
    to other exchanges" (spec, exchange.declare); RabbitMQ routes to an internal AE."""
    vhost = vhost_with_queues("q")
    vhost.declare_exchange("hidden", "fanout", internal=True).apply()
    vhost.bind("hidden", Destination.queue("q"), "", {}).apply()
    vhost.declare_exchange("x", "direct", arguments={AE: "hidden"}).apply()
    assert routed(vhost, "x") == ["q"]


def test_a_selector_that_rejects_the_message_leaves_it_to_the_alternate_exchange():
    vhost = vhost_with_queues("red", "rest")
    vhost.declare_exchange("rest-ae", "fanout").apply()
    vhost.bind("rest-ae", Destination.queue("rest"), "", {}).apply()
    vhost.declare_exchange("x", "direct", arguments={AE: "rest-ae"}).apply()
    vhost.bind("x", Destination.queue("red"), "k", {SELECTOR_ARGUMENT: "colour = 'red'"}).apply()
    assert routed(vhost, "x", message(headers={"colour": "red"})) == ["red"]
    assert routed(vhost, "x", message(headers={"colour": "blue"})) == ["rest"]


def test_redeclaring_with_another_alternate_exchange_is_precondition_failed():
    """RabbitMQ compares one exchange argument on redeclaration: "The only arg we care about is
    alternate-exchange"; its texts are those of rabbit_misc:assert_args_equivalence (3.10.8)."""
    vhost = VirtualHost("/")
    vhost.declare_exchange("x", "direct", arguments={AE: "ae"}).apply()
    vhost.declare_exchange("plain", "direct").apply()
    prefix = "PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange"
    assert (
        refused(
            ReplyCode.PRECONDITION_FAILED,
            vhost.declare_exchange,
            "x",
            "direct",
            arguments={AE: "other"},
        )
        == f"{prefix} 'x' in vhost '/': received 'other' but current is 'ae'"
    )
    assert refused(ReplyCode.PRECONDITION_FAILED, vhost.declare_exchange, "x", "direct") == (
        f"{prefix} 'x' in vhost '/': received none but current is the value 'ae' of type 'longstr'"
    )
    assert refused(
        ReplyCode.PRECONDITION_FAILED,
        vhost.declare_exchange,
        "plain",
        "direct",
        arguments={AE: "a"},
    ) == (
        f"{prefix} 'plain' in vhost '/': received the value 'a' of type 'longstr' but current is "
        "none"
    )


def test_redeclaring_with_the_same_alternate_exchange_ignores_other_arguments():
    vhost = VirtualHost("/")
    declared = vhost.declare_exchange("x", "direct", arguments={AE: "ae"}).apply()
    assert (
        vhost.declare_exchange("x", "direct", arguments={AE: "ae", "x-other": 1}).apply()
        is declared
    )
    assert (
        vhost.declare_exchange("x", "direct", passive=True, arguments={AE: "zz"}).apply()
        is declared
    )
    assert declared.arguments == {AE: "ae"}


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        (5, "signedint"),
        (2**40, "long"),
        (True, "bool"),
        (bytearray(b"ae"), "binary"),
        (None, "void"),
        (1.5, "double"),
        ({"name": "ae"}, "table"),
        (["ae"], "array"),
    ],
)
def test_an_alternate_exchange_that_is_not_a_string_is_refused(value, type_name):
    """RabbitMQ (rabbit_channel, exchange.declare): "invalid type '~ts' for arg '~ts' in ~ts"."""
    vhost = VirtualHost("/")
    assert refused(
        ReplyCode.PRECONDITION_FAILED, vhost.declare_exchange, "x", "direct", arguments={AE: value}
    ) == (
        f"PRECONDITION_FAILED - invalid type '{type_name}' for arg 'alternate-exchange' in "
        "exchange 'x' in vhost '/'"
    )
    assert "x" not in vhost.exchanges


def test_a_long_string_that_is_not_utf8_names_the_exchange_by_its_octets():
    """pamqp decodes such a long string to bytes; RabbitMQ names exchanges by octets."""
    vhost = VirtualHost("/")
    exchange = vhost.declare_exchange("x", "direct", arguments={AE: b"ae-\xff"}).apply()
    assert exchange.alternate_exchange == b"ae-\xff".decode("utf-8", "surrogateescape")


def test_a_restored_exchange_keeps_its_alternate_exchange():
    vhost = vhost_with_queues("q")
    vhost.restore_exchange(StoredExchange("/", "x", "direct", False, False, {AE: "ae"}))
    vhost.declare_exchange("ae", "fanout").apply()
    vhost.bind("ae", Destination.queue("q"), "", {}).apply()
    assert routed(vhost, "x") == ["q"]


# Selector bindings -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["queue", "exchange"])
def test_a_selector_that_does_not_parse_is_precondition_failed_naming_its_position(kind):
    """queue.bind and exchange.bind with an x-filter-jms-selector that is not a selector: 406,
    with the position of the error in the reply text."""
    vhost = vhost_with_queues("q")
    vhost.declare_exchange("x", "direct").apply()
    vhost.declare_exchange("y", "fanout").apply()
    destination = Destination.queue("q") if kind == "queue" else Destination.exchange("y")
    text = refused(
        ReplyCode.PRECONDITION_FAILED,
        vhost.bind,
        "x",
        destination,
        "k",
        {SELECTOR_ARGUMENT: "price > 10 AND"},
    )
    assert "selector syntax error at position 14" in text
    assert len(vhost.exchange("x").router) == 0


def test_an_exchange_to_exchange_binding_filters_by_selector():
    vhost = vhost_with_queues("q")
    vhost.declare_exchange("x", "fanout").apply()
    vhost.declare_exchange("y", "fanout").apply()
    vhost.bind("x", Destination.exchange("y"), "", {SELECTOR_ARGUMENT: "JMSPriority >= 5"}).apply()
    vhost.bind("y", Destination.queue("q"), "", {}).apply()
    assert routed(vhost, "x", message(priority=5)) == ["q"]
    assert routed(vhost, "x", message(priority=4)) == []


def test_a_restored_binding_gets_its_selector_back():
    """Bindings are persisted with their arguments (store/fields.py); recovery binds them again
    through restore_binding, which parses the selector again."""
    vhost = vhost_with_queues("q")
    vhost.declare_exchange("x", "topic").apply()
    vhost.restore_binding("x", Destination.queue("q"), "#", {SELECTOR_ARGUMENT: "n = 1"})
    assert routed(vhost, "x", message(headers={"n": 1})) == ["q"]
    assert routed(vhost, "x", message(headers={"n": 2})) == []
    vhost.unbind("x", Destination.queue("q"), "#", {SELECTOR_ARGUMENT: "n = 1"}).apply()
    assert len(vhost.exchange("x").router) == 0


def test_deleting_a_queue_removes_its_selector_bindings_and_auto_deletes_the_exchange():
    vhost = vhost_with_queues("q")
    vhost.declare_exchange("x", "direct", auto_delete=True).apply()
    vhost.bind("x", Destination.queue("q"), "k", {SELECTOR_ARGUMENT: "n = 1"}).apply()
    vhost.bind("x", Destination.queue("q"), "k", {SELECTOR_ARGUMENT: "n = 2"}).apply()
    vhost.delete_queue("q", owner=OWNER).apply()
    assert "x" not in vhost.exchanges
