"""A queue's optional arguments (queue.declare `arguments`), checked and typed.

The names and their rules are RabbitMQ's (https://www.rabbitmq.com/docs/queues#optional-arguments),
so that what clients and frameworks already declare works unchanged; arguments BatonMQ does not
know are kept and ignored, as RabbitMQ does. A redeclaration must give the same values for the
arguments named here (RabbitMQ: "inequivalent arg").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

from pamqp.common import FieldTable, FieldValue

from batonmq.amqp.shortstr import fits_short_string, not_short_string


class Overflow(Enum):
    """x-overflow: what a full queue (x-max-length, x-max-length-bytes) does with a new message.

    RabbitMQ's three values are MQ 3.5 admin guide's REMOVE_OLDEST (drop-head) and REJECT_NEWEST
    (reject-publish); BatonMQ adds the other two limit behaviours of MQ 3.5 admin guide."""

    #: Drop (dead-letter) the oldest messages to make room: the default. REMOVE_OLDEST.
    DROP_HEAD = "drop-head"
    #: Refuse the new message: basic.nack to a publisher in confirm mode. REJECT_NEWEST.
    REJECT_PUBLISH = "reject-publish"
    #: Refuse it, and dead-letter it (reason maxlen).
    REJECT_PUBLISH_DLX = "reject-publish-dlx"
    #: FLOW_CONTROL: keep the message and hold its publisher back until the queue is underfull
    #: again (Qpid manual §1.5.1, with x-qpid-capacity and x-qpid-flow-resume-capacity).
    FLOW_CONTROL = "flow-control"
    #: REMOVE_LOW_PRIORITY: drop (dead-letter) the oldest messages of the lowest priority held.
    #: A queue without x-max-priority has one priority, so there it is drop-head.
    REMOVE_LOW_PRIORITY = "remove-low-priority"


class InvalidArgument(ValueError):
    """A queue argument with a value of the wrong type or out of range."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"invalid arg '{name}': {problem}")
        self.name = name
        self.problem = problem


#: The arguments a redeclaration must repeat unchanged (RabbitMQ's list, and x-delivery-limit).
EQUIVALENT_ARGUMENTS: Final = (
    "x-message-ttl",
    "x-expires",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-overflow",
    "x-max-priority",
    "x-single-active-consumer",
    "x-delivery-limit",
    "x-qpid-capacity",
    "x-qpid-flow-resume-capacity",
    "x-max-message-size",
    "x-max-producers",
    "x-max-active-consumers",
    "x-max-backup-consumers",
    # A stream's (RabbitMQ's declare_args, all compared by assert_args_equivalence).
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-stream-filter-size-bytes",
)
MAX_PRIORITY_LIMIT: Final = 255
#: The queue type argument and its default (see batonmq.queues.types, the registry).
QUEUE_TYPE_ARGUMENT: Final = "x-queue-type"
DEFAULT_QUEUE_TYPE: Final = "classic"


@dataclass(frozen=True, slots=True)
class QueueArguments:
    #: x-message-ttl: milliseconds a message may wait in the queue.
    message_ttl: int | None = None
    #: x-expires: milliseconds the queue may stay unused before it is deleted.
    expires: int | None = None
    dead_letter_exchange: str | None = None
    #: x-dead-letter-routing-key: replaces the message's routing keys when dead-lettered.
    dead_letter_routing_key: str | None = None
    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: Overflow = Overflow.DROP_HEAD
    #: x-max-priority: 0 (the default) is a queue without priorities.
    max_priority: int = 0
    single_active_consumer: bool = False
    #: x-delivery-limit: deliveries ending in a requeue a message may have; past that it is
    #: dead-lettered with reason delivery_limit.
    delivery_limit: int | None = None
    #: Flow control (x-overflow flow-control): the body bytes over which the queue is overfull
    #: (x-qpid-capacity, else x-max-length-bytes), and under which it is underfull again
    #: (x-qpid-flow-resume-capacity, else the capacity).
    capacity: int | None = None
    flow_resume_capacity: int | None = None
    #: x-max-message-size (MQ 3.5 admin guide maxBytesPerMsg): a larger body is refused.
    max_message_size: int | None = None
    #: x-max-producers (maxNumProducers): channels that may publish to the queue at once.
    max_producers: int | None = None
    #: x-max-active-consumers and x-max-backup-consumers (maxNumActiveConsumers,
    #: maxNumBackupConsumers): consumers that get messages, and those that wait to take over.
    max_active_consumers: int | None = None
    max_backup_consumers: int | None = None

    @classmethod
    def parse(cls, arguments: FieldTable) -> QueueArguments:
        """The typed arguments; InvalidArgument for the first one that is not acceptable."""
        dead_letter_routing_key = _name_argument(arguments, "x-dead-letter-routing-key")
        dead_letter_exchange = _name_argument(arguments, "x-dead-letter-exchange")
        if dead_letter_routing_key is not None and dead_letter_exchange is None:
            raise InvalidArgument(
                "x-dead-letter-routing-key", "x-dead-letter-exchange must be set as well"
            )
        overflow = string_argument(arguments, "x-overflow")
        max_priority = integer_argument(arguments, "x-max-priority", minimum=0)
        if max_priority is not None and max_priority > MAX_PRIORITY_LIMIT:
            raise InvalidArgument(
                "x-max-priority", f"{max_priority} is above the maximum of {MAX_PRIORITY_LIMIT}"
            )
        single_active = arguments.get("x-single-active-consumer", False)
        if not isinstance(single_active, bool):
            raise InvalidArgument("x-single-active-consumer", f"{single_active!r} is not a bool")
        max_length_bytes = integer_argument(arguments, "x-max-length-bytes", minimum=0)
        capacity = integer_argument(arguments, "x-qpid-capacity", minimum=1)
        resume = integer_argument(arguments, "x-qpid-flow-resume-capacity", minimum=0)
        # Qpid: a queue with a capacity is flow controlled.
        behaviour = _overflow(overflow, Overflow.FLOW_CONTROL if capacity else Overflow.DROP_HEAD)
        if capacity is not None and behaviour is not Overflow.FLOW_CONTROL:
            raise InvalidArgument("x-qpid-capacity", "needs x-overflow flow-control")
        if behaviour is Overflow.FLOW_CONTROL and capacity is None:
            capacity = max_length_bytes
        if resume is not None:
            if capacity is None:
                raise InvalidArgument("x-qpid-flow-resume-capacity", "needs x-qpid-capacity")
            if resume > capacity:
                raise InvalidArgument(
                    "x-qpid-flow-resume-capacity", f"{resume} is above the capacity {capacity}"
                )
        max_active = integer_argument(arguments, "x-max-active-consumers", minimum=1)
        max_backup = integer_argument(arguments, "x-max-backup-consumers", minimum=0)
        if single_active and max_active is not None:
            raise InvalidArgument(
                "x-max-active-consumers", "x-single-active-consumer is one active consumer"
            )
        return cls(
            message_ttl=integer_argument(arguments, "x-message-ttl", minimum=0),
            expires=integer_argument(arguments, "x-expires", minimum=1),
            dead_letter_exchange=dead_letter_exchange,
            dead_letter_routing_key=dead_letter_routing_key,
            max_length=integer_argument(arguments, "x-max-length", minimum=0),
            max_length_bytes=max_length_bytes,
            overflow=behaviour,
            max_priority=max_priority or 0,
            single_active_consumer=single_active,
            delivery_limit=integer_argument(arguments, "x-delivery-limit", minimum=0),
            capacity=capacity,
            flow_resume_capacity=capacity if resume is None else resume,
            max_message_size=integer_argument(arguments, "x-max-message-size", minimum=0),
            max_producers=integer_argument(arguments, "x-max-producers", minimum=0),
            max_active_consumers=max_active,
            max_backup_consumers=max_backup,
        )

    @property
    def limits_length(self) -> bool:
        return self.max_length is not None or self.max_length_bytes is not None


def inequivalent(received: FieldTable, current: FieldTable) -> tuple[str, str, str] | None:
    """The first argument a redeclaration changes: (name, received, current) for the 406. A
    queue's type is compared with the default filled in (RabbitMQ injects it at declaration):
    no `x-queue-type` is "classic"."""
    mine, theirs = (
        arguments.get(QUEUE_TYPE_ARGUMENT, DEFAULT_QUEUE_TYPE) for arguments in (received, current)
    )
    if _text(mine) != _text(theirs):
        return QUEUE_TYPE_ARGUMENT, _shown(mine), _shown(theirs)
    for name in EQUIVALENT_ARGUMENTS:
        mine, theirs = received.get(name), current.get(name)
        if mine != theirs or isinstance(mine, bool) is not isinstance(theirs, bool):
            return name, _shown(mine), _shown(theirs)
    return None


def _text(value: FieldValue) -> FieldValue:
    """A longstr argument as a string, whether the client's codec gave bytes or str."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _shown(value: FieldValue | None) -> str:
    return "none" if value is None else f"the value {value!r}"


def integer_argument(arguments: FieldTable, name: str, *, minimum: int) -> int | None:
    value = arguments.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(name, f"{value!r} is not an integer")
    if value < minimum:
        raise InvalidArgument(name, f"{value} is below the minimum of {minimum}")
    return value


def string_argument(arguments: FieldTable, name: str) -> str | None:
    value = arguments.get(name)
    if value is None:
        return None
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument(name, "not a UTF-8 string") from None
    if not isinstance(value, str):
        raise InvalidArgument(name, f"{value!r} is not a string")
    return value


def _name_argument(arguments: FieldTable, name: str) -> str | None:
    """A string argument that names an exchange or is a routing key: a dead-lettered message
    carries it as its own, which AMQP 0-9-1 delivers as a short string (at most 255 octets)."""
    value = string_argument(arguments, name)
    if value is not None and not fits_short_string(value):
        raise InvalidArgument(name, not_short_string("it"))
    return value


def _overflow(value: str | None, default: Overflow) -> Overflow:
    if value is None:
        return default
    try:
        return Overflow(value)
    except ValueError:
        choices = ", ".join(overflow.value for overflow in Overflow)
        raise InvalidArgument("x-overflow", f"'{value}' is not one of {choices}") from None
