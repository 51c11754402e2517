"""A stream's declare arguments and its consumers' arguments, as RabbitMQ checks them
(rabbit_stream_queue, rabbit_amqqueue:check_arguments_key, rabbit_queue_type_util)."""

from __future__ import annotations

import datetime

import pytest

from batonmq.queues.arguments import InvalidArgument
from batonmq.queues.streams.arguments import (
    ConsumerArguments,
    StreamArguments,
    parse_consumer_arguments,
    refused_property,
)
from batonmq.queues.streams.log import DEFAULT_SEGMENT_BYTES, Filter
from batonmq.queues.streams.offsets import At, First, Last, Next, Since

NOW = 1_700_000_000_000


def test_the_stream_arguments_are_read():
    """RabbitMQ's stream queue_arguments: x-max-length-bytes, x-max-age ("7D"),
    x-stream-max-segment-size-bytes (default 500 MB), and the cluster ones, accepted."""
    parsed = StreamArguments.parse(
        {
            "x-queue-type": "stream",
            "x-max-length-bytes": 20_000_000_000,
            "x-max-age": "12h",
            "x-stream-max-segment-size-bytes": 1_000_000,
            "x-initial-cluster-size": 3,
            "x-queue-leader-locator": "balanced",
            "x-stream-filter-size-bytes": 32,
        }
    )
    assert parsed == StreamArguments(20_000_000_000, 12 * 3_600_000, 1_000_000)
    assert StreamArguments.parse({}).max_segment_bytes == DEFAULT_SEGMENT_BYTES == 500_000_000


@pytest.mark.parametrize(
    "name",
    [
        "x-max-length",
        "x-message-ttl",
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-overflow",
        "x-max-priority",
        "x-single-active-consumer",
        "x-expires",
        "x-delivery-limit",
        "x-queue-mode",
    ],
)
def test_other_queue_types_arguments_are_refused(name):
    """rabbit_amqqueue:check_arguments_key: "invalid arg '~ts' for ~ts of queue type ~ts"."""
    with pytest.raises(InvalidArgument) as refused:
        StreamArguments.parse({name: 1})
    assert (refused.value.name, refused.value.problem) == (
        name,
        "not supported by queue type stream",
    )


def test_unknown_arguments_are_kept_and_ignored():
    """RabbitMQ refuses only the arguments some queue type declares."""
    assert StreamArguments.parse({"x-note": "hello"}) == StreamArguments()


@pytest.mark.parametrize(
    ("arguments", "name"),
    [
        ({"x-stream-max-segment-size-bytes": 3_000_000_001}, "x-stream-max-segment-size-bytes"),
        ({"x-stream-max-segment-size-bytes": "big"}, "x-stream-max-segment-size-bytes"),
        ({"x-max-age": "7 days"}, "x-max-age"),
        ({"x-max-age": 7}, "x-max-age"),
        ({"x-max-length-bytes": -1}, "x-max-length-bytes"),
    ],
)
def test_bad_values_are_refused(arguments, name):
    """rabbit_stream_queue: "Exceeded max value for x-stream-max-segment-size-bytes" (at most
    MAX_STREAM_MAX_SEGMENT_SIZE, 3,000,000,000); x-max-age is a number and one unit."""
    with pytest.raises(InvalidArgument) as refused:
        StreamArguments.parse(arguments)
    assert refused.value.name == name


@pytest.mark.parametrize(
    ("durable", "exclusive", "auto_delete", "refused"),
    [
        (True, False, False, None),
        (False, False, False, "non-durable"),
        (True, True, False, "exclusive-owner"),
        (True, False, True, "auto-delete"),
        (False, True, True, "auto-delete"),
    ],
)
def test_a_stream_is_durable_and_neither_exclusive_nor_auto_delete(
    durable, exclusive, auto_delete, refused
):
    """rabbit_queue_type_util: check_auto_delete, check_exclusive, check_non_durable, in that
    order ("invalid property 'non-durable' for queue ...")."""
    assert (
        refused_property(durable=durable, exclusive=exclusive, auto_delete=auto_delete) == refused
    )


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, ConsumerArguments(Next(), None)),
        ({"x-stream-offset": "first"}, ConsumerArguments(First(), None)),
        ({"x-stream-offset": b"last"}, ConsumerArguments(Last(), None)),
        ({"x-stream-offset": 42}, ConsumerArguments(At(42), None)),
        ({"x-stream-offset": "1h"}, ConsumerArguments(Since(NOW - 3_600_000), None)),
        (
            {"x-stream-offset": datetime.datetime.fromtimestamp(NOW / 1000, datetime.UTC)},
            ConsumerArguments(Since(NOW), None),
        ),
        (
            {"x-stream-filter": "red"},
            ConsumerArguments(Next(), Filter(frozenset({"red"}))),
        ),
        (
            {"x-stream-filter": ["red", b"blue"], "x-stream-match-unfiltered": True},
            ConsumerArguments(Next(), Filter(frozenset({"red", "blue"}), match_unfiltered=True)),
        ),
    ],
)
def test_consumer_arguments(arguments, expected):
    """RabbitMQ's consumer_arguments for streams: x-stream-offset (first, last, next, an
    offset, a timestamp, an interval), x-stream-filter (a string or a list of them),
    x-stream-match-unfiltered."""
    assert parse_consumer_arguments(arguments, NOW) == expected


@pytest.mark.parametrize(
    ("arguments", "name"),
    [
        ({"x-stream-offset": "yesterday"}, "x-stream-offset"),
        ({"x-stream-offset": -1}, "x-stream-offset"),
        ({"x-stream-filter": 7}, "x-stream-filter"),
        ({"x-stream-filter": []}, "x-stream-filter"),
        (
            {"x-stream-filter": "red", "x-stream-match-unfiltered": "yes"},
            "x-stream-match-unfiltered",
        ),
    ],
)
def test_bad_consumer_arguments_are_refused(arguments, name):
    with pytest.raises(InvalidArgument) as refused:
        parse_consumer_arguments(arguments, NOW)
    assert refused.value.name == name
