"""The options of the `batonmq` Spark data source, checked once where Spark hands them over.

Reading (`spark.read` and `spark.readStream`):

- `url` (required; `uri` is the same option, give one spelling): the broker as an AMQP URI,
  `amqp://user:password@host:port/vhost`; pika's query parameters such as
  `connection_attempts` and `retry_delay` apply.
- `queue` (required): the queue to read.
- `queueType`: `stream` (the default: read by offset, exactly once, see `readers.py`) or
  `classic` (`spark.readStream` only: messages taken and acknowledged once their micro-batch is
  committed, at least once, see `classic.py`; `startingOffset` and `failOnDataLoss` do not
  apply).
- `startingOffset`: `first` (the default), `last` or `next`, as the x-stream-offset consume
  argument means them (the first message the stream keeps, the start of its last chunk, only
  what comes after), an offset, or an ISO-8601 timestamp such as `2026-11-26T01:00:00Z` (no
  zone: UTC): the first message the stream wrote at or after it, as an x-stream-offset
  timestamp means it (see `client.resolve`). A timestamp is ISO-8601 text, not epoch
  milliseconds, because a bare number already is an offset.
- `startingOffsets` / `endingOffsets`, with `earliest` (= `first`) and `latest` (= `next`): the
  names Spark's Kafka source uses, which Spark users know, for the same options (give one
  spelling, not both).
- `endingOffset`, batch reads only: `next` (the default: the end of the stream when the query
  is planned), an offset, or a timestamp (the messages written before it).
- `maxRecordsPerBatch`, streaming only: at most this many messages per micro-batch (from a
  classic queue, 10000 unless given: a micro-batch is held in the driver's memory).
- `recordsPerPartition` (10000): a range is split into partitions of at most this many
  messages, read in parallel.
- `readTimeout` (30): seconds a partition waits for its next message before it fails (from a
  classic queue: the longest the driver waits for messages the queue has ready).
- `failOnDataLoss` (`true`): a range that retention removed, in part, before it was read fails
  the query; with `false`, what is left of it is read.

Writing (`df.write` and `df.writeStream`):

- `url` (required), as above.
- `exchange` (`""`, the default exchange): where rows without an `exchange` (or with a null
  one) are published.
- `routingKey`: the routing key of rows without a `routing_key`; required unless every row has
  one.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

#: Where a read starts or ends: a name of the x-stream-offset argument, an offset, or a moment
#: (timezone-aware, UTC).
Position = Literal["first", "last", "next"] | int | datetime.datetime
#: The queue types the source reads.
QueueType = Literal["stream", "classic"]

DEFAULT_RECORDS_PER_PARTITION: Final = 10_000
DEFAULT_READ_TIMEOUT: Final = 30.0


class OptionError(ValueError):
    """An option the data source cannot use; the message names it."""


@dataclass(frozen=True, slots=True)
class ReadOptions:
    url: str
    queue: str
    queue_type: QueueType
    starting: Position
    ending: Position
    max_records_per_batch: int | None
    records_per_partition: int
    read_timeout: float
    fail_on_data_loss: bool

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """Spark's option map (case-insensitive keys, as Spark gives them); OptionError."""
        given = _lowercased(options)
        max_records = given.get("maxrecordsperbatch")
        return cls(
            url=_url(given),
            queue=_required(given, "queue"),
            queue_type=_queue_type(given.get("queuetype", "stream")),
            starting=_position(given, "startingOffset", ("first", "last", "next"), "first"),
            ending=_position(given, "endingOffset", ("next",), "next"),
            max_records_per_batch=(
                None if max_records is None else _positive("maxRecordsPerBatch", max_records)
            ),
            records_per_partition=_positive(
                "recordsPerPartition",
                given.get("recordsperpartition", str(DEFAULT_RECORDS_PER_PARTITION)),
            ),
            read_timeout=_seconds(given.get("readtimeout", str(DEFAULT_READ_TIMEOUT))),
            fail_on_data_loss=_boolean(given, "failOnDataLoss", default=True),
        )


@dataclass(frozen=True, slots=True)
class WriteOptions:
    url: str
    exchange: str
    routing_key: str | None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        given = _lowercased(options)
        return cls(
            url=_url(given),
            exchange=given.get("exchange", ""),
            routing_key=given.get("routingkey"),
        )


def _lowercased(options: Mapping[str, str]) -> dict[str, str]:
    return {key.lower(): value for key, value in options.items()}


def _url(given: dict[str, str]) -> str:
    """Option `url`, or `uri`, its other spelling (an AMQP URI is what it holds)."""
    if "url" in given and "uri" in given:
        raise OptionError("options 'url' and 'uri' are the same option: give one")
    return _required(given, "uri" if "uri" in given else "url")


def _required(given: dict[str, str], name: str) -> str:
    value = given.get(name.lower(), "")
    if not value:
        raise OptionError(f"option {name!r} is required")
    return value


#: The Kafka source's position names, as Spark users give them.
_KAFKA_NAMES: Final = {"earliest": "first", "latest": "next"}


def _position(given: dict[str, str], name: str, names: tuple[str, ...], default: str) -> Position:
    """Option `name` (or the Kafka source's `name` + "s")."""
    ours, theirs = given.get(name.lower()), given.get(name.lower() + "s")
    if ours is not None and theirs is not None:
        raise OptionError(f"options {name!r} and {name + 's'!r} are the same option: give one")
    text = (ours if ours is not None else theirs if theirs is not None else default).strip()
    text = _KAFKA_NAMES.get(text, text)
    for known in ("first", "last", "next"):
        if text == known and known in names:
            return known
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise OptionError(
            f"option {name!r}: {text!r} is not {', '.join(names)}, an offset or an ISO-8601 "
            "timestamp"
        ) from None
    if moment.tzinfo is None:
        return moment.replace(tzinfo=datetime.UTC)
    return moment.astimezone(datetime.UTC)


def _queue_type(text: str) -> QueueType:
    if text.strip() == "stream":
        return "stream"
    if text.strip() == "classic":
        return "classic"
    raise OptionError(f"option 'queueType': {text!r} is not stream or classic")


def _positive(name: str, text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise OptionError(f"option {name!r}: {text!r} is not a positive number")
    return int(text)


def _seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise OptionError(f"option 'readTimeout': {text!r} is not a positive number of seconds")
    return seconds


def _boolean(given: dict[str, str], name: str, *, default: bool) -> bool:
    text = given.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    raise OptionError(f"option {name!r}: {text!r} is not true or false")
