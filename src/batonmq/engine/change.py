"""Changes to a virtual host that follow the store: commit, then apply ("How BatonMQ code
reads" 13).

A method that changes durable state (declaring, deleting, binding or unbinding a durable
exchange or queue) is checked first and its store writes are recorded in the journal; the change
itself is a `Change` whose `apply` runs only once those writes are committed. Until then nobody
sees it: not the client (its reply comes after `apply`), not the others (the object is not in
memory); a failed write leaves memory exactly as it was, and a retry writes again.

While a change of an object waits for the store, another method naming that object waits too
(`ChangePending`) and runs again once the change is applied or has failed, so that it sees the
outcome (two clients declaring one durable queue at once: one creates it, the other finds it).
A method that reads a queue with messages not yet visible waits the same way (basic.get after a
persistent publish on the same channel finds the message, as the channel's order promises).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
#: Registers a callback to run when what a method waits for is done.
Waiter = Callable[[Callable[[], None]], None]


@dataclass(frozen=True, slots=True)
class Change(Generic[T]):
    """A checked change: `apply` makes it visible and returns what the reply needs."""

    apply: Callable[[], T]
    #: Whether store writes were recorded for it: `apply` waits for their commit.
    written: bool = False
    #: What it changes, ("queue" | "exchange", name): other methods naming these wait for it.
    keys: tuple[tuple[str, str], ...] = ()


def applied(result: T) -> Change[T]:
    """A change with nothing to write (a redeclaration, a non-durable object): apply at once."""
    return Change(lambda: result)


class ChangePending(Exception):
    """The method names something that is waiting for the store: run it again once that is
    done (`wait` registers the callback)."""

    def __init__(self, wait: Waiter) -> None:
        super().__init__("waiting for the store")
        self.wait = wait
