"""confirm.select: publisher confirms for the rest of the channel's life."""

from __future__ import annotations

from pamqp import commands

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import amqp_error
from batonmq.engine.channel import Channel
from batonmq.engine.confirms import ConfirmTracker
from batonmq.engine.dispatch import handles


@handles(commands.Confirm.Select)
def select(channel: Channel, method: commands.Confirm.Select) -> None:
    if channel.transaction is not None:
        # RabbitMQ: "a channel in transactional mode cannot be put into confirm mode".
        raise amqp_error(
            ReplyCode.PRECONDITION_FAILED,
            "transactional channels cannot be put into confirm mode",
        )
    if channel.confirms is None:
        channel.confirms = ConfirmTracker(channel.counters)
    if not method.nowait:
        channel.reply(commands.Confirm.SelectOk())
