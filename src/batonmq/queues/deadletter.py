"""Dead-lettering decisions, as pure functions: the message a queue republishes to its dead-letter
exchange, and whether doing so would loop.

RabbitMQ's rules (https://www.rabbitmq.com/docs/dlx, "Dead-Lettered Effects on Messages"):
- the `x-death` header is an array of tables, most recent first, one per {queue, reason}, each
  with queue, reason, time, exchange (the one the message was published to), routing-keys
  (including CC keys, excluding BCC ones), count, and original-expiration when the message had
  an `expiration`, which is removed "in order to prevent it from expiring again";
- "In case x-death already contains an entry with the same queue and dead lettering reason, its
  count field will be incremented and it will be moved to the beginning of the array";
- x-first-death-reason, -queue and -exchange are added for the first event and never modified;
- the routing key may be replaced by the queue's x-dead-letter-routing-key, and then the CC
  header is removed too; BCC is always removed;
- "Messages in such cycles (i.e. messages that reach the same queue twice) will be dropped if
  there was no rejections in the entire cycle".
"""

from __future__ import annotations

import copy
import datetime
from dataclasses import dataclass
from enum import Enum

from pamqp import commands
from pamqp.common import FieldArray, FieldTable, FieldValue


class Reason(Enum):
    REJECTED = "rejected"
    EXPIRED = "expired"
    MAXLEN = "maxlen"
    DELIVERY_LIMIT = "delivery_limit"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """The message to republish: its new properties, and the routing keys to route it with."""

    properties: commands.Basic.Properties
    routing_keys: list[str]


def dead_letter(
    properties: commands.Basic.Properties,
    *,
    reason: Reason,
    queue: str,
    exchange: str,
    routing_key: str,
    dead_letter_routing_key: str | None,
    now: datetime.datetime,
) -> DeadLetter:
    """What a message published to `exchange` with `routing_key` becomes when `queue`
    dead-letters it for `reason` at `now`."""
    headers: FieldTable = dict(properties.headers or {})
    carbon_copies = _string_list(headers.get("CC"))
    published_keys = [routing_key, *carbon_copies]
    headers.pop("BCC", None)
    if dead_letter_routing_key is not None:
        headers.pop("CC", None)
        routing_keys = [dead_letter_routing_key]
    else:
        routing_keys = published_keys
    death: FieldTable = {
        "count": 1,
        "reason": reason.value,
        "queue": queue,
        "time": now.replace(microsecond=0),
        "exchange": exchange,
        "routing-keys": list[FieldValue](published_keys),
    }
    if properties.expiration is not None:
        death["original-expiration"] = properties.expiration
    headers["x-death"] = _add_death(headers.get("x-death"), death)
    for field in ("reason", "queue", "exchange"):
        headers.setdefault(f"x-first-death-{field}", death[field])
    changed = copy.copy(properties)
    changed.headers = headers
    changed.expiration = None
    return DeadLetter(changed, routing_keys)


def _add_death(existing: FieldValue, death: FieldTable) -> FieldArray:
    deaths: FieldArray = list(existing) if isinstance(existing, list) else []
    for index, previous in enumerate(deaths):
        if (
            isinstance(previous, dict)
            and previous.get("queue") == death["queue"]
            and previous.get("reason") == death["reason"]
        ):
            count = previous.get("count")
            updated = {**previous, "count": (count if isinstance(count, int) else 0) + 1}
            return [updated, *deaths[:index], *deaths[index + 1 :]]
    return [death, *deaths]


def is_cycle(headers: FieldTable | None, target_queue: str) -> bool:
    """Whether a dead-lettered message (its `x-death` already recording this death) would loop
    into `target_queue`: that queue is in its history and nothing in between was a rejection."""
    deaths = (headers or {}).get("x-death")
    if not isinstance(deaths, list):
        return False
    for death in deaths:
        if not isinstance(death, dict):
            continue
        if death.get("reason") == Reason.REJECTED.value:
            return False
        if death.get("queue") == target_queue:
            return True
    return False


def _string_list(value: FieldValue) -> list[str]:
    if not isinstance(value, list):
        return []
    return [
        item.decode("utf-8", "replace") if isinstance(item, bytes) else item
        for item in value
        if isinstance(item, str | bytes)
    ]
