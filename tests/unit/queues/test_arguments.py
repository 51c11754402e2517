"""Queue arguments (queue.declare `arguments`) checked and typed as RabbitMQ does
(https://www.rabbitmq.com/docs/queues#optional-arguments)."""

from __future__ import annotations

import pytest

from batonmq.queues.arguments import InvalidArgument, Overflow, QueueArguments, inequivalent


def test_no_arguments_is_a_plain_queue() -> None:
    options = QueueArguments.parse({})
    assert options == QueueArguments()
    assert not options.limits_length
    assert options.overflow is Overflow.DROP_HEAD


def test_every_argument_is_read() -> None:
    options = QueueArguments.parse(
        {
            "x-message-ttl": 1000,
            "x-expires": 5000,
            "x-dead-letter-exchange": "dlx",
            "x-dead-letter-routing-key": b"dead",
            "x-max-length": 10,
            "x-max-length-bytes": 4096,
            "x-overflow": "reject-publish-dlx",
            "x-max-priority": 9,
            "x-single-active-consumer": True,
            "x-delivery-limit": 3,
            "x-queue-mode": "lazy",  # unknown to BatonMQ: kept and ignored, as RabbitMQ
        }
    )
    assert options == QueueArguments(
        message_ttl=1000,
        expires=5000,
        dead_letter_exchange="dlx",
        dead_letter_routing_key="dead",
        max_length=10,
        max_length_bytes=4096,
        overflow=Overflow.REJECT_PUBLISH_DLX,
        max_priority=9,
        single_active_consumer=True,
        delivery_limit=3,
    )


@pytest.mark.parametrize(
    ("arguments", "name", "problem"),
    [
        ({"x-message-ttl": -1}, "x-message-ttl", "below the minimum of 0"),
        ({"x-message-ttl": "1000"}, "x-message-ttl", "not an integer"),
        ({"x-message-ttl": 1.5}, "x-message-ttl", "not an integer"),
        ({"x-message-ttl": True}, "x-message-ttl", "not an integer"),
        ({"x-expires": 0}, "x-expires", "below the minimum of 1"),
        ({"x-max-length": -1}, "x-max-length", "below the minimum of 0"),
        ({"x-max-priority": 256}, "x-max-priority", "above the maximum of 255"),
        ({"x-overflow": "drop-tail"}, "x-overflow", "not one of drop-head"),
        ({"x-single-active-consumer": 1}, "x-single-active-consumer", "not a bool"),
        ({"x-dead-letter-exchange": 5}, "x-dead-letter-exchange", "not a string"),
        (
            {"x-dead-letter-routing-key": "k"},
            "x-dead-letter-routing-key",
            "x-dead-letter-exchange must be set",
        ),
    ],
)
def test_invalid_arguments_name_the_argument_and_the_problem(
    arguments: dict[str, object], name: str, problem: str
) -> None:
    """RabbitMQ refuses a queue.declare with an argument of the wrong type or range (406
    PRECONDITION_FAILED "invalid arg ..."); a routing key without an exchange is refused too."""
    with pytest.raises(InvalidArgument, match=problem) as raised:
        QueueArguments.parse(arguments)  # type: ignore[arg-type]
    assert raised.value.name == name


def test_redeclaring_with_other_values_is_inequivalent() -> None:
    """RabbitMQ: a redeclaration whose x-arguments differ is 406 "inequivalent arg"."""
    current = {"x-message-ttl": 1000, "x-custom": 1}
    assert inequivalent({"x-message-ttl": 1000, "x-custom": 2}, current) is None
    assert inequivalent({"x-message-ttl": 2000}, current) == (
        "x-message-ttl",
        "the value 2000",
        "the value 1000",
    )
    assert inequivalent({}, current) == ("x-message-ttl", "none", "the value 1000")
    assert inequivalent({"x-single-active-consumer": 1}, {"x-single-active-consumer": True})
