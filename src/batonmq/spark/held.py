"""The messages a streaming query has taken from a classic queue and not yet acknowledged, each
numbered in the order it was taken: the numbers are the query's offsets (a micro-batch is the
range [start, end) of them), and a message is acknowledged only once the batch that holds it is
committed (`settle`).

Pure bookkeeping: no IO. Delivery tags only grow on a channel, and messages are numbered in the
order they arrived, so the tag of the newest message settled acknowledges all the settled ones
at once (basic.ack with multiple).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from batonmq.spark.rows import Delivery


@dataclass(frozen=True, slots=True)
class Taken:
    """A message taken from the queue, not acknowledged yet."""

    delivery_tag: int
    delivery: Delivery


class Held:
    def __init__(self, next_number: int = 0) -> None:
        #: The number the next message taken gets.
        self.next_number = next_number
        self._numbered: deque[Taken] = deque()

    def __len__(self) -> int:
        return len(self._numbered)

    def number(self, delivery_tag: int, delivery: Delivery) -> None:
        """Hold a message as the next number (its Delivery's offset must be that number)."""
        if delivery.offset != self.next_number:
            raise ValueError(f"message numbered {delivery.offset}, expected {self.next_number}")
        self._numbered.append(Taken(delivery_tag, delivery))
        self.next_number += 1

    def between(self, start: int, end: int) -> list[Delivery]:
        """The messages held with numbers in [start, end), in order."""
        return [taken.delivery for taken in self._numbered if start <= taken.delivery.offset < end]

    def settle(self, end: int) -> int | None:
        """Forget the messages numbered below `end`; the delivery tag that acknowledges them
        all (None: none was held)."""
        tag = None
        while self._numbered and self._numbered[0].delivery.offset < end:
            tag = self._numbered.popleft().delivery_tag
        return tag

    def forget(self, start_from: int) -> None:
        """The channel is gone (its messages go back to the queue): nothing is held, and the
        next message taken is numbered from `start_from`."""
        self._numbered.clear()
        self.next_number = start_from
