"""The registry of queue types, keyed by the `x-queue-type` declare argument (RabbitMQ's name for
it): "classic", the default, and "stream" (RabbitMQ's streams over AMQP 0-9-1).

RabbitMQ's rules: an unknown type is refused with 406 PRECONDITION_FAILED, "invalid arg
'x-queue-type' for queue ...: unsupported queue type '...'"; a queue declared without the
argument is of the default type, so that redeclaring it with `x-queue-type: classic` is
equivalent and with any other type is not ("inequivalent arg 'x-queue-type'").
"""

from __future__ import annotations

from typing import Final

from pamqp.common import FieldTable

from batonmq.queues.arguments import DEFAULT_QUEUE_TYPE, QUEUE_TYPE_ARGUMENT, InvalidArgument
from batonmq.queues.classic import ClassicQueue
from batonmq.queues.protocol import QueueType
from batonmq.queues.streams.arguments import STREAM_TYPE
from batonmq.queues.streams.queue import StreamQueue

#: Each queue type's name and the class of its queues: the one place a queue class is named.
QUEUE_TYPES: Final[dict[str, QueueType]] = {
    DEFAULT_QUEUE_TYPE: ClassicQueue,
    STREAM_TYPE: StreamQueue,
}


def declared_type(arguments: FieldTable) -> str:
    """The queue type `arguments` ask for (the default when they name none); InvalidArgument
    for one that is not a string or not a known type."""
    value = arguments.get(QUEUE_TYPE_ARGUMENT, DEFAULT_QUEUE_TYPE)
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument(QUEUE_TYPE_ARGUMENT, "not a UTF-8 string") from None
    if not isinstance(value, str):
        raise InvalidArgument(QUEUE_TYPE_ARGUMENT, f"{value!r} is not a string")
    if value not in QUEUE_TYPES:
        raise InvalidArgument(QUEUE_TYPE_ARGUMENT, f"unsupported queue type '{value}'")
    return value


def queue_type(arguments: FieldTable) -> QueueType:
    """The type `arguments` ask for (checked by `declared_type`)."""
    return QUEUE_TYPES[declared_type(arguments)]
