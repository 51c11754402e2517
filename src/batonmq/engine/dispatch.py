"""The dispatch table: one handler per AMQP method a client may send on a channel (BatonMQ style
§4).

Handler modules under `batonmq.engine.methods` register themselves with `@handles(Method)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pamqp import base

from batonmq.engine.channel import Channel

M = TypeVar("M", bound=base.Frame)
Handler = Callable[[Channel, M], None]

#: Keyed by method class, so the handler's method argument is always of the key's type: `Any`
#: stands for "the key's type", which a dict cannot express.
HANDLERS: dict[type[base.Frame], Callable[[Channel, Any], None]] = {}


def handles(method_type: type[M]) -> Callable[[Handler[M]], Handler[M]]:
    def register(handler: Handler[M]) -> Handler[M]:
        assert method_type not in HANDLERS, method_type
        HANDLERS[method_type] = handler
        return handler

    return register
