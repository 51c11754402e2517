"""Where a binding leads: a queue, or another exchange (exchange-to-exchange bindings)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class DestinationKind(enum.Enum):
    QUEUE = "queue"
    EXCHANGE = "exchange"


@dataclass(frozen=True, slots=True)
class Destination:
    """The target of a binding, named within one virtual host."""

    kind: DestinationKind
    name: str

    @classmethod
    def queue(cls, name: str) -> Destination:
        return cls(DestinationKind.QUEUE, name)

    @classmethod
    def exchange(cls, name: str) -> Destination:
        return cls(DestinationKind.EXCHANGE, name)
