"""Publisher confirms: `ConfirmTracker` as a pure decision (BatonMQ style §5), and confirm mode
through a `Session` (RabbitMQ's confirm.select extension: "the broker confirms messages as it
handles them by sending a basic.ack on the same channel")."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.broker import Broker
from batonmq.engine.confirms import ConfirmFrame, ConfirmTracker
from tests.memclient import MemClient, connect, describe

Basic = commands.Basic

ACK, NACK = True, False


def settle_all(tracker: ConfirmTracker, outcomes: dict[int, bool]) -> list[ConfirmFrame]:
    for sequence, ack in outcomes.items():
        tracker.settle(sequence, ack)
    return tracker.take_frames()


def published(count: int) -> ConfirmTracker:
    tracker = ConfirmTracker()
    assert [tracker.publish() for _ in range(count)] == list(range(1, count + 1))
    return tracker


# ConfirmTracker ----------------------------------------------------------------------------------


def test_sequence_numbers_start_at_1():
    """RabbitMQ confirms: "both the broker and the client count messages (counting starts at 1
    on the first confirm.select)"."""
    tracker = ConfirmTracker()
    assert tracker.publish() == 1
    assert tracker.publish() == 2
    assert tracker.next_sequence == 3


def test_nothing_settled_gives_no_frame():
    """Nothing is confirmed before its outcome is known."""
    tracker = published(3)
    assert not tracker.has_settled
    assert tracker.take_frames() == []


def test_a_run_of_acks_collapses_into_one_multiple_ack():
    """basic.ack, multiple: "the delivery tag is treated as 'up to and including'"."""
    tracker = published(3)
    assert settle_all(tracker, {1: ACK, 2: ACK, 3: ACK}) == [ConfirmFrame(3, True, ACK)]
    assert not tracker.has_settled


def test_a_single_settled_publish_is_confirmed_alone():
    """basic.ack, multiple: "If set to zero, the delivery tag refers to a single message"."""
    tracker = published(1)
    assert settle_all(tracker, {1: ACK}) == [ConfirmFrame(1, False, ACK)]


def test_a_run_continues_from_what_was_confirmed_before():
    """basic.ack, multiple: "up to and including" covers only what is still outstanding, so a run
    may start after an earlier confirm."""
    tracker = published(4)
    assert settle_all(tracker, {1: ACK}) == [ConfirmFrame(1, False, ACK)]
    assert settle_all(tracker, {2: ACK, 3: ACK, 4: ACK}) == [ConfirmFrame(4, True, ACK)]


def test_a_gap_keeps_later_confirms_single():
    """A multiple frame must not cover publish 2, which is still pending: 3 and 4 are confirmed
    one by one; once 2 settles it is confirmed alone too."""
    tracker = published(5)
    assert settle_all(tracker, {1: ACK, 3: ACK, 4: ACK}) == [
        ConfirmFrame(1, False, ACK),
        ConfirmFrame(3, False, ACK),
        ConfirmFrame(4, False, ACK),
    ]
    assert settle_all(tracker, {2: ACK}) == [ConfirmFrame(2, False, ACK)]
    assert settle_all(tracker, {5: ACK}) == [ConfirmFrame(5, False, ACK)]


def test_nacks_are_never_merged_with_acks():
    """basic.nack (RabbitMQ extension) and basic.ack are different answers; a run of one never
    swallows the other."""
    tracker = published(5)
    assert settle_all(tracker, {1: ACK, 2: NACK, 3: NACK, 4: ACK, 5: ACK}) == [
        ConfirmFrame(1, False, ACK),
        ConfirmFrame(3, True, NACK),
        ConfirmFrame(5, True, ACK),
    ]


@st.composite
def settle_orders(draw: st.DrawFn) -> tuple[int, list[tuple[int, bool, bool]]]:
    """How many publishes, and for each in settle order: sequence, ack?, take frames after?"""
    count = draw(st.integers(1, 40))
    order = draw(st.permutations(range(1, count + 1)))
    steps = [(sequence, draw(st.booleans()), draw(st.booleans())) for sequence in order]
    return count, steps


@settings(max_examples=400, deadline=None)
@given(plan=settle_orders())
def test_any_settle_order_confirms_exactly_what_was_settled(plan):
    """Whatever the order of settlement and of take_frames: a client applying the frames (a
    multiple frame settles every outstanding tag up to and including its own) sees each
    publish confirmed exactly once, with its own outcome, as soon as frames are taken after it
    settled; no frame ever covers a publish that was not settled yet."""
    count, steps = plan
    tracker = published(count)
    outstanding = set(range(1, count + 1))
    settled: dict[int, bool] = {}
    confirmed: dict[int, bool] = {}

    def apply(frames: list[ConfirmFrame]) -> None:
        for confirm in frames:
            assert confirm.delivery_tag in outstanding, f"{confirm} names a confirmed tag"
            covered = (
                {tag for tag in outstanding if tag <= confirm.delivery_tag}
                if confirm.multiple
                else {confirm.delivery_tag}
            )
            for tag in covered:
                assert tag in settled, f"{confirm} covers unsettled publish {tag}"
                assert settled[tag] is confirm.ack, f"{confirm} has the wrong outcome for {tag}"
                confirmed[tag] = confirm.ack
            outstanding.difference_update(covered)
        assert confirmed == settled

    for sequence, ack, take in steps:
        tracker.settle(sequence, ack)
        settled[sequence] = ack
        if take:
            apply(tracker.take_frames())
    apply(tracker.take_frames())
    assert outstanding == set()
    assert tracker.take_frames() == []


# Confirm mode through a Session ------------------------------------------------------------------


def confirming(broker: Broker | None = None) -> MemClient:
    client, _session = connect(broker or Broker())
    client.call(1, commands.Confirm.Select(), commands.Confirm.SelectOk)
    client.declare_queue(1, "q")
    return client


def test_publishes_in_confirm_mode_are_acked_coalesced_per_flush():
    """Consecutive confirms with nothing flushed between them go as one basic.ack multiple=true;
    routed and unroutable messages alike are acked (RabbitMQ: an unroutable message is
    confirmed once the exchange has found no queue)."""
    client = confirming()
    client.publish(1, b"a", routing_key="q")
    client.publish(1, b"b", routing_key="q")
    client.publish(1, b"c", routing_key="nowhere")
    ack = client.expect(Basic.Ack, channel=1)
    assert (ack.delivery_tag, ack.multiple) == (3, True)
    client.expect_nothing()
    client.publish(1, b"d", routing_key="q")
    ack = client.expect(Basic.Ack, channel=1)
    assert (ack.delivery_tag, ack.multiple) == (4, False)
    client.expect_nothing()


def test_confirm_select_nowait_gets_no_select_ok():
    """confirm.select, nowait (RabbitMQ extension): "If set, the server will not respond to the
    method"; confirms still follow."""
    client, _session = connect(Broker())
    client.send(1, commands.Confirm.Select(nowait=True))
    client.expect_nothing()
    client.publish(1, b"x", routing_key="any")
    assert client.expect(Basic.Ack, channel=1).delivery_tag == 1


def test_mandatory_unroutable_gets_basic_return_312_before_the_ack():
    """basic.publish, mandatory: "This flag tells the server how to react if the message cannot
    be routed to a queue. If this flag is set, the server will return an unroutable message with
    a Return method"; reply code 312 NO_ROUTE. RabbitMQ sends basic.return before basic.ack."""
    client = confirming()
    client.publish(1, b"lost", exchange="amq.direct", routing_key="nobody", mandatory=True)
    returned = client.expect_content(Basic.Return, channel=1)
    assert isinstance(returned.method, Basic.Return)
    assert returned.method.reply_code == ReplyCode.NO_ROUTE
    assert returned.method.reply_text == "NO_ROUTE"
    assert (returned.method.exchange, returned.method.routing_key) == ("amq.direct", "nobody")
    assert returned.body == b"lost"
    ack = client.expect(Basic.Ack, channel=1)
    assert (ack.delivery_tag, ack.multiple) == (1, False)
    client.expect_nothing()


def test_mandatory_routed_gets_no_return():
    """basic.publish, mandatory: only a message that "cannot be routed to a queue" is returned."""
    client = confirming()
    client.publish(1, b"kept", routing_key="q", mandatory=True)
    client.expect(Basic.Ack, channel=1)
    client.expect_nothing()


def test_immediate_is_not_implemented_540():
    """basic.publish, immediate: RabbitMQ 3.0 dropped it and closes the connection with 540
    NOT_IMPLEMENTED, as the spec allows for functionality a server does not implement."""
    client = confirming()
    client.publish(1, b"now", routing_key="q", immediate=True)
    close = client.expect(commands.Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.NOT_IMPLEMENTED
    assert (close.class_id, close.method_id) == (60, 40)
    client.expect_nothing()


def test_a_refused_publish_in_confirm_mode_closes_the_channel_and_is_not_acked():
    """basic.publish, exchange, rule "must-exist" (404): the publish was refused, not handled, so no
    basic.ack follows."""
    client = confirming()
    client.publish(1, b"x", exchange="missing", routing_key="q")
    close = client.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.NOT_FOUND
    assert describe(client.receive()) == []


def test_confirm_select_on_a_transactional_channel_is_406():
    """RabbitMQ: "a channel in transactional mode cannot be put into confirm mode"."""
    client, _session = connect(Broker())
    client.call(1, commands.Tx.Select(), commands.Tx.SelectOk)
    client.send(1, commands.Confirm.Select())
    close = client.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED


def test_tx_select_on_a_confirm_channel_is_406():
    """RabbitMQ: a channel in confirm mode cannot be made transactional (406 PRECONDITION_FAILED).
    RabbitMQ: a channel in confirm mode cannot be made transactional (406 PRECONDITION_FAILED)."""
    client = confirming()
    client.send(1, commands.Tx.Select())
    close = client.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED
