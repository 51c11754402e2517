"""A channel's open transaction (tx.select): publishes and settlements held until tx.commit.

Spec (tx class): "the server ... holds the messages and acknowledgements until the client commits
or rolls back"; tx.rollback discards them, and the deliveries it named stay unsettled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import amqp_error
from batonmq.engine.exchange import Exchange
from batonmq.engine.outcome import Outcome
from batonmq.model.message import Message


@dataclass(frozen=True, slots=True)
class HeldPublish:
    exchange: Exchange
    message: Message
    mandatory: bool


@dataclass(frozen=True, slots=True)
class HeldSettlement:
    delivery_tags: tuple[int, ...]
    outcome: Outcome


@dataclass(slots=True)
class Transaction:
    publishes: list[HeldPublish] = field(default_factory=list)
    settlements: list[HeldSettlement] = field(default_factory=list)
    #: Tags already named by a held settlement: naming one twice is 406, as outside a transaction.
    settled_tags: set[int] = field(default_factory=set)

    def hold_settlement(
        self, delivery_tag: int, multiple: bool, delivery_tags: list[int], outcome: Outcome
    ) -> None:
        """Hold an ack, nack or reject that names `delivery_tag` (`multiple`: and those before
        it), which are the unsettled `delivery_tags`; those a held settlement named already
        are left out, and naming one of them alone is 406, as outside a transaction."""
        if not multiple and delivery_tag in self.settled_tags:
            raise amqp_error(ReplyCode.PRECONDITION_FAILED, f"unknown delivery tag {delivery_tag}")
        held = [tag for tag in delivery_tags if tag not in self.settled_tags]
        self.settlements.append(HeldSettlement(tuple(held), outcome))
        self.settled_tags.update(held)

    def clear(self) -> None:
        self.publishes.clear()
        self.settlements.clear()
        self.settled_tags.clear()
