"""batonmq.log: text and JSON lines, parsed back."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest

from batonmq.log import configure_logging

TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
# One logfmt pair: a key, then a bare value or a JSON-escaped quoted one.
LOGFMT_PAIR = re.compile(r'([^\s=]+)=("(?:[^"\\]|\\.)*"|[^\s"]+)')


pytestmark = pytest.mark.usefixtures("restore_logging")


def parse_text(line: str) -> dict[str, str]:
    """A text line back into fields: ts, level, logger, then every key=value pair."""
    ts, level, logger, rest = line.split(" ", 3)
    fields = {"ts": ts, "level": level, "logger": logger}
    pairs = LOGFMT_PAIR.findall(rest)
    assert " ".join(f"{key}={value}" for key, value in pairs) == rest, "not logfmt"
    for key, value in pairs:
        fields[key] = json.loads(value) if value.startswith('"') else value
    return fields


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_text_line() -> None:
    stream = io.StringIO()
    configure_logging("info", "text", stream)

    logging.getLogger("batonmq.server").info("listening", extra={"addr": "0.0.0.0", "port": 5672})

    [line] = lines(stream)
    assert re.fullmatch(
        rf'{TIMESTAMP.pattern} info batonmq\.server msg="listening" logcode=BMQ-1002 '
        r"addr=0\.0\.0\.0 port=5672",
        line,
    )


def test_text_values_are_quoted_and_escaped_when_needed() -> None:
    stream = io.StringIO()
    configure_logging("info", "text", stream)

    logging.getLogger("batonmq.x").warning(
        "said %s", "hi", extra={"text": 'a "b"\nc', "none": None, "yes": True, "empty": ""}
    )

    [line] = lines(stream)
    fields = parse_text(line)
    assert fields["level"] == "warning"
    assert fields["msg"] == "said hi"
    assert fields["text"] == 'a "b"\nc'
    assert (fields["none"], fields["yes"], fields["empty"]) == ("null", "true", "")


def test_text_exception_keeps_one_line_with_the_traceback() -> None:
    stream = io.StringIO()
    configure_logging("info", "text", stream)

    try:
        raise ZeroDivisionError("boom")
    except ZeroDivisionError:
        logging.getLogger("batonmq.x").exception("failed", extra={"conn": 7})

    [line] = lines(stream)
    fields = parse_text(line)
    assert (fields["level"], fields["msg"], fields["conn"]) == ("error", "failed", "7")
    assert fields["exc"].startswith("Traceback (most recent call last):")
    assert fields["exc"].endswith("ZeroDivisionError: boom")


def test_json_line_has_fixed_fields_then_extras() -> None:
    stream = io.StringIO()
    configure_logging("debug", "json", stream)

    logging.getLogger("batonmq.server").debug(
        "listening", extra={"addr": "0.0.0.0", "port": 5672, "tls": False, "peers": ["a"]}
    )

    [line] = lines(stream)
    record = json.loads(line)
    assert list(record)[:5] == ["ts", "level", "logger", "msg", "logcode"]
    assert TIMESTAMP.fullmatch(record["ts"])
    assert record == {
        "ts": record["ts"],
        "level": "debug",
        "logger": "batonmq.server",
        "msg": "listening",
        "logcode": "BMQ-1002",
        "addr": "0.0.0.0",
        "port": 5672,
        "tls": False,
        "peers": ["a"],
    }


class Opaque:
    def __str__(self) -> str:
        return "opaque-thing"


def test_json_values_that_are_not_serialisable_use_str() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream)

    logging.getLogger("batonmq.x").info(
        "odd",
        extra={"obj": Opaque(), "nan": float("nan"), "keys": {(1, 2): "x"}, "fine": [1, 2]},
    )

    record = json.loads(lines(stream)[0])
    assert record["obj"] == "opaque-thing"
    assert record["nan"] == "nan"
    assert record["keys"] == "{(1, 2): 'x'}"
    assert record["fine"] == [1, 2]


def test_json_exception_field() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream)

    try:
        raise KeyError("missing")
    except KeyError:
        logging.getLogger("batonmq.x").error("lookup failed", exc_info=True)

    record = json.loads(lines(stream)[0])
    assert record["msg"] == "lookup failed"
    assert "Traceback (most recent call last):" in record["exc"]
    assert record["exc"].endswith("KeyError: 'missing'")


def test_extra_named_like_a_fixed_field_does_not_replace_it() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream)

    logging.getLogger("batonmq.x").info("m", extra={"level": "mine", "ts": 1})

    record = json.loads(lines(stream)[0])
    assert record["level"] == "info"
    assert (record["extra.level"], record["extra.ts"]) == ("mine", 1)


def test_level_filters_batonmq_records() -> None:
    stream = io.StringIO()
    configure_logging("warning", "json", stream)
    log = logging.getLogger("batonmq.engine")

    log.info("hidden")
    log.warning("shown")

    assert [json.loads(line)["msg"] for line in lines(stream)] == ["shown"]


def test_other_libraries_keep_their_levels() -> None:
    stream = io.StringIO()
    configure_logging("debug", "json", stream)
    other = logging.getLogger("some_other_library")

    other.info("hidden: the root logger's WARNING still applies to it")
    other.warning("shown, in our format")

    [line] = lines(stream)
    assert json.loads(line)["logger"] == "some_other_library"
    assert other.level == logging.NOTSET


def test_configuring_again_replaces_the_handler() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging("info", "json", first)
    configure_logging("info", "text", second)

    logging.getLogger("batonmq.x").info("once")

    assert first.getvalue() == ""
    assert len(lines(second)) == 1


@pytest.mark.parametrize(("level", "fmt"), [("loud", "text"), ("info", "xml")])
def test_unknown_level_or_format(level: str, fmt: str) -> None:
    with pytest.raises(ValueError, match="unknown log"):
        configure_logging(level, fmt, io.StringIO())
