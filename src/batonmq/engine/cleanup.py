"""Cleanup that finishes whatever one step of it raises ("How BatonMQ code reads" 10: "A
consumer that disconnects mid-delivery gets its unacked messages requeued, always, whatever
raised").

Ending a channel or a connection is a list of independent steps: cancel each consumer, release
each queue that held its publishing back, requeue each queue's deliveries, delete each exclusive
queue. A defect in one of them (an exception) must not skip the others and leave their messages
unacknowledged forever: `each` runs every step, logs what raised, and goes on; a cancellation
goes on too once every step has run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


def each(
    items: Iterable[T],
    step: Callable[[T], object],
    what: str,
    fields: Callable[[], Mapping[str, object]],
) -> None:
    """Run `step` on every item in turn; one that raises is logged (with `fields()`, naming the
    connection: made only then, since settling every ack runs through here) as a failed `what`,
    and the rest still run. A cancellation (or an interrupt) raised by a step is no defect: it
    is not logged, the rest still run, and then it is raised again."""
    interrupted: BaseException | None = None
    for item in list(items):
        try:
            step(item)
        except Exception:
            log.exception("cleanup step failed: %s; cleanup goes on", what, extra=dict(fields()))
        except BaseException as exc:
            interrupted = interrupted or exc
    if interrupted is not None:
        raise interrupted
