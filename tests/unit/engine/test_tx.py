"""Transactions through a `Session` (tx class: "the server ... holds the messages and
acknowledgements until the client commits or rolls back")."""

from __future__ import annotations

from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.broker import Broker
from tests.memclient import MemClient, connect

Basic = commands.Basic
Tx = commands.Tx


def transactional() -> MemClient:
    """Channel 1 transactional, channel 2 plain; queue "q"."""
    client, _session = connect(Broker(), channels=(1, 2))
    client.declare_queue(2, "q")
    client.call(1, Tx.Select(), Tx.SelectOk)
    return client


def close_channel(client: MemClient, channel: int) -> None:
    client.send(
        channel,
        commands.Channel.Close(reply_code=200, reply_text="", class_id=0, method_id=0),
    )
    client.expect(commands.Channel.CloseOk, channel=channel)


def test_a_publish_is_invisible_until_commit():
    """tx class: published messages are held until tx.commit; spec 4.6: the effects of a
    request "MUST NOT be visible on the channel before the response method, and MUST be
    visible thereafter"."""
    client = transactional()
    client.publish(1, b"m0", routing_key="q")
    client.publish(1, b"m1", routing_key="q")
    assert client.get(2, "q") is None
    client.call(1, Tx.Commit(), Tx.CommitOk)
    got = [client.get(2, "q", no_ack=True) for _ in range(2)]
    assert [g.body for g in got if g is not None] == [b"m0", b"m1"]


def test_rollback_drops_the_held_publishes():
    """tx.rollback: "This method abandons all message publications and acknowledgements
    performed in the current transaction"."""
    client = transactional()
    client.publish(1, b"m0", routing_key="q")
    client.call(1, Tx.Rollback(), Tx.RollbackOk)
    client.call(1, Tx.Commit(), Tx.CommitOk)
    assert client.get(2, "q") is None


def test_a_transaction_goes_on_after_commit():
    """tx.commit: "A new transaction starts immediately after a commit"."""
    client = transactional()
    client.call(1, Tx.Commit(), Tx.CommitOk)
    client.publish(1, b"m1", routing_key="q")
    assert client.get(2, "q") is None
    client.call(1, Tx.Commit(), Tx.CommitOk)
    assert client.get(2, "q") is not None


def test_an_ack_is_applied_at_commit():
    """tx.commit: "This method commits all message publications and acknowledgments performed in the
    current transaction"."""
    client = transactional()
    client.publish(2, b"m0", routing_key="q")
    got = client.get(1, "q")
    assert got is not None
    client.send(1, Basic.Ack(delivery_tag=got.method.delivery_tag))
    client.call(1, Tx.Commit(), Tx.CommitOk)
    close_channel(client, 1)
    assert client.get(2, "q") is None, "the committed ack settled the delivery"


def test_an_ack_is_not_applied_before_commit():
    """The ack rolled back leaves the delivery unsettled; closing the channel requeues it."""
    client = transactional()
    client.publish(2, b"m0", routing_key="q")
    got = client.get(1, "q")
    assert got is not None
    client.send(1, Basic.Ack(delivery_tag=got.method.delivery_tag))
    client.call(1, Tx.Rollback(), Tx.RollbackOk)
    close_channel(client, 1)
    again = client.get(2, "q")
    assert again is not None
    assert (again.body, again.method.redelivered) == (b"m0", True)


def test_an_uncommitted_ack_is_undone_when_the_channel_closes():
    """tx class: acknowledgements are held until commit; a channel that closes first never commits
    them, so the delivery is requeued."""
    client = transactional()
    client.publish(2, b"m0", routing_key="q")
    got = client.get(1, "q")
    assert got is not None
    client.send(1, Basic.Ack(delivery_tag=got.method.delivery_tag))
    close_channel(client, 1)
    again = client.get(2, "q")
    assert again is not None
    assert again.method.redelivered is True


def test_a_nack_with_requeue_is_applied_at_commit():
    """tx class: a requeue named by nack is an acknowledgement held until commit."""
    client = transactional()
    client.publish(2, b"m0", routing_key="q")
    got = client.get(1, "q")
    assert got is not None
    client.send(1, Basic.Nack(delivery_tag=got.method.delivery_tag, requeue=True))
    assert client.get(2, "q") is None, "still held by the transaction"
    client.call(1, Tx.Commit(), Tx.CommitOk)
    again = client.get(2, "q")
    assert again is not None
    assert (again.body, again.method.redelivered) == (b"m0", True)


def test_an_unknown_tag_in_a_transaction_is_406_at_once():
    """basic.ack, multiple, rule "exists": "On a transacted channel, this check MUST be done
    immediately and not delayed until a Tx.Commit"."""
    client = transactional()
    client.send(1, Basic.Ack(delivery_tag=5))
    close = client.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED


def test_acking_twice_in_one_transaction_is_406():
    """basic.ack, multiple, rule "exists": "a client MUST not acknowledge the same message more
    than once" - also when the first ack is still held by the transaction."""
    client = transactional()
    client.publish(2, b"m0", routing_key="q")
    got = client.get(1, "q")
    assert got is not None
    client.send(1, Basic.Ack(delivery_tag=got.method.delivery_tag))
    client.send(1, Basic.Ack(delivery_tag=got.method.delivery_tag))
    close = client.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED


def test_commit_without_select_is_406():
    """tx.commit, rule "transacted": "The client MUST NOT use the Commit method on
    non-transacted channels" - RabbitMQ: 406 PRECONDITION_FAILED, naming tx.commit."""
    client, _session = connect(Broker())
    client.send(1, Tx.Commit())
    close = client.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED
    assert (close.class_id, close.method_id) == (90, 20)


def test_rollback_without_select_is_406():
    """tx.rollback, rule "transacted": "The client MUST NOT use the Rollback method on
    non-transacted channels"."""
    client, _session = connect(Broker())
    client.send(1, Tx.Rollback())
    close = client.expect(commands.Channel.Close, channel=1)
    assert close.reply_code == ReplyCode.PRECONDITION_FAILED
    assert (close.class_id, close.method_id) == (90, 30)


def test_a_mandatory_unroutable_publish_is_returned_at_commit():
    """tx class: a held publish is routed at commit, and basic.return for a mandatory one comes
    then, before commit-ok."""
    client = transactional()
    client.publish(1, b"lost", routing_key="nobody", mandatory=True)
    client.expect_nothing()
    client.send(1, Tx.Commit())
    returned = client.expect_content(Basic.Return, channel=1)
    assert returned.body == b"lost"
    client.expect(Tx.CommitOk, channel=1)
