"""The ring buffer behind GET /api/broker/log: the newest records, each as the broker's json
log format writes it, formatted when logged."""

from __future__ import annotations

import json
import logging

from batonmq.management.routes.log import RecentLog


def record(message: str, *args: object, **fields: object) -> logging.LogRecord:
    made = logging.LogRecord("batonmq.test", logging.INFO, __file__, 1, message, args, None)
    for name, value in fields.items():
        setattr(made, name, value)
    return made


def test_it_keeps_the_newest_records_oldest_first():
    recent = RecentLog(capacity=3)
    for number in range(5):
        recent.handle(record("record %d", number))

    assert [json.loads(line)["msg"] for line in recent.newest(10)] == [
        "record 2",
        "record 3",
        "record 4",
    ]
    assert [json.loads(line)["msg"] for line in recent.newest(2)] == ["record 3", "record 4"]


def test_a_record_has_the_json_formats_fields_as_they_were_when_logged():
    recent = RecentLog()
    queues = ["a"]
    recent.handle(record("queues %s", queues, user="guest"))
    queues.append("b")

    (line,) = recent.newest(1)
    logged = json.loads(line)
    assert logged["msg"] == "queues ['a']"
    assert (logged["level"], logged["logger"], logged["user"]) == ("info", "batonmq.test", "guest")
    assert logged["ts"].endswith("Z")
