"""Changes to a virtual host that follow the store: commit, then apply ("How BatonMQ code
reads" 13).

A method that changes durable state (declaring, deleting, binding or unbinding a durable
exchange or queue) is checked first and its store writes are recorded in the journal; the change
itself is a `Change` whose `apply` runs only once those writes are committed (or once what
decides the change, `after`, said yes: another worker of a spread virtual host). Until then nobody
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

from batonmq.amqp.errors import ProtocolError

T = TypeVar("T")
#: Registers a callback to run when what a method waits for is done.
Waiter = Callable[[Callable[[], None]], None]
#: How a change that waited came out: True to apply it, False when the store could not write
#: it, the refusal of whoever decides it (the home or owner of a spread virtual host's object).
Outcome = bool | ProtocolError


@dataclass(frozen=True, slots=True)
class Change(Generic[T]):
    """A checked change: `apply` makes it visible and returns what the reply needs."""

    apply: Callable[[], T]
    #: Whether store writes were recorded for it: `apply` waits for their commit.
    written: bool = False
    #: What it changes, ("queue" | "exchange", name): other methods naming these wait for it.
    keys: tuple[tuple[str, str], ...] = ()
    #: Registers the callback that gets its `Outcome`; None: the journal's commit of the
    #: writes recorded for it.
    after: Callable[[Callable[[Outcome], None]], None] | None = None

    @property
    def waits(self) -> bool:
        """Whether `apply` waits for something (a commit, an answer): else it runs at once."""
        return self.written or self.after is not None


def applied(result: T) -> Change[T]:
    """A change with nothing to write (a redeclaration, a non-durable object): apply at once."""
    return Change(lambda: result)


class ChangePending(Exception):
    """The method names something that is waiting for the store: run it again once that is
    done (`wait` registers the callback)."""

    def __init__(self, wait: Waiter) -> None:
        super().__init__("waiting for the store")
        self.wait = wait
