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
        (
            {"x-dead-letter-exchange": "d", "x-dead-letter-routing-key": "k" * 256},
            "x-dead-letter-routing-key",
            "at most 255 octets of UTF-8",
        ),
        ({"x-dead-letter-exchange": "é" * 128}, "x-dead-letter-exchange", "at most 255 octets"),
        ({"x-dead-letter-exchange": "\ud800"}, "x-dead-letter-exchange", "octets of UTF-8"),
        (
            {"x-qpid-capacity": 100, "x-overflow": "drop-head"},
            "x-qpid-capacity",
            "needs x-overflow flow-control",
        ),
        (
            {"x-qpid-flow-resume-capacity": 10},
            "x-qpid-flow-resume-capacity",
            "needs x-qpid-capacity",
        ),
        (
            {"x-qpid-capacity": 100, "x-qpid-flow-resume-capacity": 101},
            "x-qpid-flow-resume-capacity",
            "101 is above the capacity 100",
        ),
        ({"x-max-active-consumers": 0}, "x-max-active-consumers", "below the minimum of 1"),
        (
            {"x-max-active-consumers": 2, "x-single-active-consumer": True},
            "x-max-active-consumers",
            "x-single-active-consumer is one active consumer",
        ),
    ],
)
def test_invalid_arguments_name_the_argument_and_the_problem(
    arguments: dict[str, object], name: str, problem: str
) -> None:
    """RabbitMQ refuses a queue.declare with an argument of the wrong type or range (406
    PRECONDITION_FAILED "invalid arg ..."); a routing key without an exchange is refused too.
    A dead-letter exchange or routing key becomes the dead-lettered message's, which AMQP 0-9-1
    delivers as a short string (§4.2.5.3: at most 255 octets)."""
    with pytest.raises(InvalidArgument, match=problem) as raised:
        QueueArguments.parse(arguments)  # type: ignore[arg-type]
    assert raised.value.name == name


def test_seeds_limit_behaviours_and_qpid_flow_control_arguments() -> None:
    """MQ 3.5 admin guide's limit behaviours as x-overflow values; Qpid's capacity arguments alone
    make a flow-controlled queue (Qpid manual §1.5.1: "Where no flowResumeCapacity is set, the
    flowResumeCapacity is set to be equal to the capacity"); flow-control on x-max-length-bytes
    uses it as the capacity."""
    qpid = QueueArguments.parse({"x-qpid-capacity": 1000})
    assert (qpid.overflow, qpid.capacity, qpid.flow_resume_capacity) == (
        Overflow.FLOW_CONTROL,
        1000,
        1000,
    )
    by_bytes = QueueArguments.parse({"x-overflow": "flow-control", "x-max-length-bytes": 500})
    assert (by_bytes.capacity, by_bytes.flow_resume_capacity) == (500, 500)
    limits = QueueArguments.parse(
        {
            "x-overflow": "remove-low-priority",
            "x-max-message-size": 10240,
            "x-max-producers": 100,
            "x-max-active-consumers": 1,
            "x-max-backup-consumers": 0,
        }
    )
    assert limits == QueueArguments(
        overflow=Overflow.REMOVE_LOW_PRIORITY,
        max_message_size=10240,
        max_producers=100,
        max_active_consumers=1,
        max_backup_consumers=0,
    )


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
