"""The heartbeat wire: a hello naming the cluster and the broker, then numbered beats, one JSON
line each; anything else is refused."""

from __future__ import annotations

import pytest

from batonmq.cluster.heartbeat import Beat, HeartbeatError, Hello, beat_line, hello_line, parse_line


def test_lines_round_trip() -> None:
    assert parse_line(hello_line("prod", "brokerA")) == Hello("prod", "brokerA")
    assert parse_line(beat_line(7)) == Beat(7)


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"\xff\n",
        b"[]\n",
        b'{"beat": -1}\n',
        b'{"beat": true}\n',
        b'{"beat": 1, "extra": 2}\n',
        b'{"hello": {"cluster": "c"}}\n',
        b'{"hello": {"cluster": "c", "broker": ""}}\n',
        b'{"hello": {"cluster": 1, "broker": "b"}}\n',
    ],
)
def test_anything_else_is_refused(line: bytes) -> None:
    with pytest.raises(HeartbeatError):
        parse_line(line)
