"""confirm.select: publisher confirms for the rest of the channel's life."""

from __future__ import annotations

from pamqp import commands

from batonmq.engine.channel import Channel
from batonmq.engine.dispatch import handles


@handles(commands.Confirm.Select)
def select(channel: Channel, method: commands.Confirm.Select) -> None:
    channel.select_confirms()
    if not method.nowait:
        channel.reply(commands.Confirm.SelectOk())
