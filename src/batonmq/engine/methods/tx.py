"""tx.select, tx.commit, tx.rollback."""

from __future__ import annotations

from collections.abc import Callable

from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import amqp_error
from batonmq.engine.channel import Channel
from batonmq.engine.dispatch import handles
from batonmq.engine.publish import all_done, commit_transaction
from batonmq.queues.protocol import RoutedQueue

Tx = commands.Tx


@handles(Tx.Select)
def select(channel: Channel, method: commands.Tx.Select) -> None:
    channel.select_transactions()
    channel.reply(Tx.SelectOk())


@handles(Tx.Commit)
def commit(channel: Channel, method: commands.Tx.Commit) -> None:
    writers = commit_transaction(channel, channel.current_transaction())
    if writers:
        _reply_when_written(channel, writers)
    else:
        channel.reply_when_durable(Tx.CommitOk(), "tx.commit")


def _reply_when_written(channel: Channel, writers: list[RoutedQueue]) -> None:
    """tx.commit-ok once the queues that write their messages themselves (streams) have
    written the transaction's, and the store has the rest; input waits meanwhile."""
    session = channel.session

    def register(release_input: Callable[[], None]) -> None:
        def written(ok: bool) -> None:
            try:
                if channel.closed:
                    return
                if ok:
                    channel.reply_when_durable(Tx.CommitOk(), "tx.commit")
                else:
                    session.close_channel(
                        channel.number,
                        amqp_error(
                            ReplyCode.PRECONDITION_FAILED,
                            "tx.commit failed: a stream could not write its messages",
                        ),
                    )
            finally:
                release_input()

        one_written = all_done(len(writers), written)
        for queue in writers:
            queue.when_written(one_written)

    session.hold_input_until(register)


@handles(Tx.Rollback)
def rollback(channel: Channel, method: commands.Tx.Rollback) -> None:
    channel.current_transaction().clear()
    channel.reply(Tx.RollbackOk())
