"""The queue-type registry, keyed by `x-queue-type` (RabbitMQ's argument): "classic" is the
default; anything else unknown is an invalid argument (406 PRECONDITION_FAILED on the wire)."""

from __future__ import annotations

import pytest

from batonmq.queues.arguments import InvalidArgument, inequivalent
from batonmq.queues.classic import ClassicQueue
from batonmq.queues.types import QUEUE_TYPES, declared_type, queue_type


def test_classic_is_the_default_and_may_be_named():
    assert declared_type({}) == "classic"
    assert declared_type({"x-queue-type": "classic"}) == "classic"
    assert declared_type({"x-queue-type": b"classic"}) == "classic"
    assert queue_type({}) is ClassicQueue
    assert set(QUEUE_TYPES) == {"classic", "stream"}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("quorum", "unsupported queue type 'quorum'"),
        (7, "7 is not a string"),
        (b"\xff", "not a UTF-8 string"),
    ],
)
def test_an_unknown_or_malformed_type_is_an_invalid_argument(value, problem):
    with pytest.raises(InvalidArgument) as refused:
        declared_type({"x-queue-type": value})
    assert (refused.value.name, refused.value.problem) == ("x-queue-type", problem)


def test_a_redeclaration_compares_the_type_with_the_default_filled_in():
    """RabbitMQ injects the default type when a queue is declared without one."""
    assert inequivalent({"x-queue-type": "classic"}, {}) is None
    assert inequivalent({}, {"x-queue-type": b"classic"}) is None
    assert inequivalent({"x-queue-type": "stream"}, {}) == (
        "x-queue-type",
        "the value 'stream'",
        "the value 'classic'",
    )
