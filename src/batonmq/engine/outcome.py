"""How a delivery is settled (basic.ack, basic.reject/nack, requeue)."""

from __future__ import annotations

from enum import Enum


class Outcome(Enum):
    """How a delivery is settled."""

    #: basic.ack (or a no-ack delivery): done with.
    ACK = "ack"
    #: Back to its queue, marked redelivered (requeue=true, recover, a closed channel).
    REQUEUE = "requeue"
    #: basic.reject or basic.nack with requeue=false: dead-lettered where the queue says so.
    REJECT = "reject"
