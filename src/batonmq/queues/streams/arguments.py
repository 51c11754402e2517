"""What a stream's declare and its consumers' basic.consume may ask for, checked as RabbitMQ's
`rabbit_stream_queue` and `rabbit_amqqueue` check them.

Declare: a stream takes x-max-length-bytes, x-max-age, x-stream-max-segment-size-bytes (at most
3,000,000,000, RabbitMQ's MAX_STREAM_MAX_SEGMENT_SIZE) and, without effect on a single broker,
x-stream-filter-size-bytes, x-initial-cluster-size and x-queue-leader-locator. The queue arguments
of the other queue types are refused ("invalid arg '...' for queue '...' of queue type stream");
arguments no queue type knows are kept and ignored, as RabbitMQ does. A stream is durable, not
exclusive and not auto-delete ("invalid property 'non-durable' for queue ...").

Consume: x-stream-offset (see `offsets.py`), x-stream-filter (a string or a list of strings) and
x-stream-match-unfiltered (a boolean).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pamqp.common import FieldTable

from batonmq.queues.arguments import (
    EQUIVALENT_ARGUMENTS,
    InvalidArgument,
    integer_argument,
)
from batonmq.queues.streams.log import DEFAULT_SEGMENT_BYTES, Filter
from batonmq.queues.streams.offsets import (
    MAX_AGE_ARGUMENT,
    OFFSET_ARGUMENT,
    OffsetSpec,
    parse_max_age,
    parse_offset,
)

STREAM_TYPE: Final = "stream"
MAX_SEGMENT_ARGUMENT: Final = "x-stream-max-segment-size-bytes"
#: RabbitMQ's MAX_STREAM_MAX_SEGMENT_SIZE.
MAX_SEGMENT_LIMIT: Final = 3_000_000_000
FILTER_ARGUMENT: Final = "x-stream-filter"
MATCH_UNFILTERED_ARGUMENT: Final = "x-stream-match-unfiltered"
#: The `queue_arguments` RabbitMQ's stream type declares.
STREAM_ARGUMENTS: Final = frozenset(
    {
        "x-queue-type",
        "x-max-length-bytes",
        MAX_AGE_ARGUMENT,
        MAX_SEGMENT_ARGUMENT,
        "x-stream-filter-size-bytes",
        "x-initial-cluster-size",
        "x-queue-leader-locator",
    }
)
#: Queue arguments of the other queue types (RabbitMQ's and BatonMQ's classic ones): refused.
_OTHER_TYPES_ARGUMENTS: Final = (
    frozenset(EQUIVALENT_ARGUMENTS)
    | {
        "x-queue-mode",
        "x-queue-version",
        "x-queue-master-locator",
        "x-dead-letter-strategy",
        "x-quorum-initial-group-size",
        "x-quorum-target-group-size",
    }
) - STREAM_ARGUMENTS


@dataclass(frozen=True, slots=True)
class StreamArguments:
    #: x-max-length-bytes: retention keeps the log under this many bytes (whole segments).
    max_length_bytes: int | None = None
    #: x-max-age in milliseconds: segments whose newest message is older go.
    max_age: int | None = None
    #: x-stream-max-segment-size-bytes.
    max_segment_bytes: int = DEFAULT_SEGMENT_BYTES

    @classmethod
    def parse(cls, arguments: FieldTable) -> StreamArguments:
        """The typed arguments; InvalidArgument for the first one a stream does not take."""
        for name in arguments:
            if name in _OTHER_TYPES_ARGUMENTS:
                raise InvalidArgument(name, f"not supported by queue type {STREAM_TYPE}")
        max_segment = integer_argument(arguments, MAX_SEGMENT_ARGUMENT, minimum=1)
        if max_segment is not None and max_segment > MAX_SEGMENT_LIMIT:
            raise InvalidArgument(
                MAX_SEGMENT_ARGUMENT,
                f"Exceeded max value for x-stream-max-segment-size-bytes ({MAX_SEGMENT_LIMIT})",
            )
        max_age = arguments.get(MAX_AGE_ARGUMENT)
        return cls(
            max_length_bytes=integer_argument(arguments, "x-max-length-bytes", minimum=0),
            max_age=None if max_age is None else parse_max_age(max_age),
            max_segment_bytes=max_segment or DEFAULT_SEGMENT_BYTES,
        )


def refused_property(*, durable: bool, exclusive: bool, auto_delete: bool) -> str | None:
    """The queue property a stream cannot have, in RabbitMQ's order of checks
    (rabbit_queue_type_util: check_auto_delete, check_exclusive, check_non_durable)."""
    if auto_delete:
        return "auto-delete"
    if exclusive:
        return "exclusive-owner"
    if not durable:
        return "non-durable"
    return None


@dataclass(frozen=True, slots=True)
class ConsumerArguments:
    start: OffsetSpec
    #: x-stream-filter with x-stream-match-unfiltered; None reads every message.
    only: Filter | None


def parse_consumer_arguments(arguments: FieldTable, now: int) -> ConsumerArguments:
    """A stream consumer's arguments (`now` in ms, for an interval offset); InvalidArgument."""
    start = parse_offset(arguments.get(OFFSET_ARGUMENT), now)
    values = _filter_values(arguments.get(FILTER_ARGUMENT))
    unfiltered = arguments.get(MATCH_UNFILTERED_ARGUMENT, False)
    if not isinstance(unfiltered, bool):
        raise InvalidArgument(MATCH_UNFILTERED_ARGUMENT, f"{unfiltered!r} is not a boolean")
    only = None if values is None else Filter(values, unfiltered)
    return ConsumerArguments(start, only)


def _filter_values(value: object) -> frozenset[str] | None:
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    values: set[str] = set()
    for item in items:
        text = item.decode("utf-8", errors="replace") if isinstance(item, bytes) else item
        if not isinstance(text, str):
            raise InvalidArgument(FILTER_ARGUMENT, f"{value!r} is not a string or list of strings")
        values.add(text)
    if not values:
        raise InvalidArgument(FILTER_ARGUMENT, "an empty list filters out every message")
    return frozenset(values)
