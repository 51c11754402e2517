"""channel.flow from the client: stop or restart deliveries to this channel.

Spec (channel.flow): "asks the peer to pause or restart the flow of content data sent by a
consumer"; the server answers flow-ok with the state it is now in.
"""

from __future__ import annotations

from pamqp import commands

from batonmq.engine.channel import Channel
from batonmq.engine.dispatch import handles


@handles(commands.Channel.Flow)
def flow(channel: Channel, method: commands.Channel.Flow) -> None:
    active = bool(method.active)
    channel.reply(commands.Channel.FlowOk(active=active))
    channel.set_flow(active)  # deliveries it restarts follow the flow-ok


@handles(commands.Channel.FlowOk)
def flow_ok(channel: Channel, method: commands.Channel.FlowOk) -> None:
    """The answer to a channel.flow the server sent; nothing to do."""
