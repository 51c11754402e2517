"""Peer-link records as a stream socket carries them, for the record modules' tests: encoded
one after another behind their headers, and read back from pieces cut anywhere."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import ClassVar, Protocol, TypeVar

from batonmq.cluster.peerlink import RecordReader, header


class Encodable(Protocol):
    KIND: ClassVar[int]

    def encode(self) -> bytes: ...


R = TypeVar("R")


def stream_of(records: Iterable[Encodable]) -> bytes:
    """The octets of `records`, each behind its header, as a link sends them."""
    return b"".join(
        header(record.KIND, len(payload)) + payload
        for record in records
        for payload in [record.encode()]
    )


def read_back(pieces: Iterable[bytes], decoders: Mapping[int, Callable[[bytes], R]]) -> list[R]:
    """What one reader makes of `pieces`, read in turn, each record decoded by its kind."""
    reader = RecordReader()
    return [decoders[kind](payload) for piece in pieces for kind, payload in reader.feed(piece)]
