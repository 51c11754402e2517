"""A stream that both a failed member and its claimant have, merged in the claim's transaction
(`batonmq.store.takeover`): the failed member's records follow the claimant's, so that none of
its confirmed messages is left unserved (the HA issue: the winner "takes over its destinations,
persistent messages ... and serves them").

The failed member's chunks keep their order, their timestamps and their Bloom filters (a
chunk's header and payload are kept as they are, but for the first offset its header carries),
and are renumbered to begin at the claimant's next offset: offset n of the failed member's
log, whose first held offset was f, becomes `next + n - f`. Its segments move with them, by the
same shift, each with the snapshot of producers' ids it began with merged into the claimant's:
the claimant's producers first, then the failed member's, the more recent (`dedup.py`), so
that the log opened on the merged segments deduplicates what either stored. An empty newest
segment of the claimant's, where its next record would have gone, makes room for the first
moved one.

The claimant's log must not change meanwhile: its stream writer is held while it claims, and it
names where each of its streams ends (`StreamTail`); a log that did grow meanwhile makes the
move collide with the claimant's own rows, and the claim fail. A failed member's stream that
holds no chunk has nothing to merge: its rows go.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from batonmq.queues.streams.chunk import HEADER_SIZE, decode_header
from batonmq.queues.streams.dedup import Producers
from batonmq.store.base import ObjectKey, StoreCorrupt
from batonmq.store.members import MergedStream, StreamTail
from batonmq.store.pgsession import Connection


def _little_endian(value: str) -> str:
    """SQL: the eight octets of the bigint `value`, least significant first, as a chunk's
    header holds its first offset (`batonmq.queues.streams.chunk.HEADER`)."""
    octets = "'\\x0000000000000000'::bytea"
    for index in range(8):
        octets = f"set_byte({octets}, {index}, (({value} >> {8 * index}) & 255)::integer)"
    return octets


#: Where a chunk's first offset is in its header: after the four octets of its magic (1-based).
_OFFSET_AT: Final = 5
_STREAM: Final = "broker_id = $1 AND vhost = $2 AND queue = $3"
_HEADER: Final = f"substring(chunk FROM 1 FOR {HEADER_SIZE})"

#: Statements, "{s}" standing for the quoted schema.
SQL: Final = {
    "merge_streams": "SELECT DISTINCT vhost, queue FROM {s}.stream_segments WHERE broker_id = $1",
    "merge_span": f"SELECT (SELECT {_HEADER} FROM {{s}}.stream_chunks WHERE {_STREAM}"
    f" ORDER BY first_offset LIMIT 1), (SELECT {_HEADER} FROM {{s}}.stream_chunks"
    f" WHERE {_STREAM} ORDER BY first_offset DESC LIMIT 1)",
    "merge_segments": f"SELECT first_offset, producers FROM {{s}}.stream_segments WHERE {_STREAM}"
    " ORDER BY first_offset",
    # The claimant's newest segment, where its next record would go, if it holds nothing yet.
    "merge_make_room": f"DELETE FROM {{s}}.stream_segments AS g WHERE {_STREAM}"
    " AND first_offset >= $4 AND NOT EXISTS (SELECT 1 FROM {s}.stream_chunks AS c"
    " WHERE c.broker_id = g.broker_id AND c.vhost = g.vhost AND c.queue = g.queue"
    " AND c.segment = g.first_offset)",
    # $1 the failed member, $4 the claimant, $5 the shift.
    "merge_chunks": "UPDATE {s}.stream_chunks SET broker_id = $4, segment = segment + $5::bigint,"
    " first_offset = first_offset + $5::bigint, chunk = overlay(chunk PLACING"
    f" {_little_endian('(first_offset + $5::bigint)')} FROM {_OFFSET_AT} FOR 8)"
    f" WHERE {_STREAM}",
    "merge_segments_move": "UPDATE {s}.stream_segments AS g SET broker_id = $4,"
    " first_offset = g.first_offset + $5::bigint, producers = u.producers"
    " FROM unnest($6::bigint[], $7::bytea[]) AS u(old, producers)"
    " WHERE g.broker_id = $1 AND g.vhost = $2 AND g.queue = $3 AND g.first_offset = u.old",
    **{
        f"merge_drop_{table}": f"DELETE FROM {{s}}.stream_{table} WHERE {_STREAM}"
        for table in ("chunks", "segments")
    },
}


async def merge_streams(
    connection: Connection,
    sql: Mapping[str, str],
    *,
    claimant: str,
    failed: str,
    tails: Mapping[ObjectKey, StreamTail],
) -> list[MergedStream]:
    """Append `failed`'s records of each stream named in `tails` to `claimant`'s (see the
    module docstring), inside the claim's transaction; what moved where."""
    merged: list[MergedStream] = []
    for vhost, queue in await connection.fetch(sql["merge_streams"], failed):
        tail = tails.get((vhost, queue))
        if tail is None:
            continue  # not a stream of the claimant's: it moves as it is
        stream = (failed, vhost, queue)
        span = await connection.fetchrow(sql["merge_span"], *stream)
        first, last = (None, None) if span is None else span
        if first is None or last is None:
            for table in ("chunks", "segments"):
                await connection.execute(sql[f"merge_drop_{table}"], *stream)
            continue
        old_first = decode_header(first).first_offset
        old_next = decode_header(last).next_offset
        shift = tail.next_offset - old_first
        segments = await connection.fetch(sql["merge_segments"], *stream)
        where = f"stream '{queue}' in vhost '{vhost}' of broker {failed!r}"
        try:
            claimants = Producers.from_snapshot(tail.producers, where).last
            snapshots = [
                _merged(claimants, Producers.from_snapshot(snapshot, where).last)
                for _first, snapshot in segments
            ]
        except ValueError as error:
            raise StoreCorrupt(str(error)) from None
        await connection.execute(sql["merge_make_room"], claimant, vhost, queue, tail.next_offset)
        await connection.execute(sql["merge_chunks"], *stream, claimant, shift)
        await connection.execute(
            sql["merge_segments_move"],
            *stream,
            claimant,
            shift,
            [first_offset for first_offset, _snapshot in segments],
            snapshots,
        )
        merged.append(
            MergedStream(vhost, queue, old_first, old_next, old_first + shift, old_next + shift)
        )
    return merged


def _merged(claimants: Mapping[str, int], faileds: Mapping[str, int]) -> bytes:
    """A snapshot of producers' ids: the claimant's, then the failed member's, more recent."""
    producers = Producers(claimants)
    producers.advance(faileds)
    return producers.snapshot()
