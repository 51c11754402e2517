"""The handlers of AMQP methods, one module per AMQP class; importing this registers them all."""

from batonmq.engine.methods import basic, channel_flow, confirm, exchange, queue, tx

__all__ = ["basic", "channel_flow", "confirm", "exchange", "queue", "tx"]
