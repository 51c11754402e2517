"""Structured logging: one record per line, as logfmt-like text or as JSON.

Code logs with the standard library and passes structured fields with ``extra=``::

    log = logging.getLogger(__name__)
    log.info("listening", extra={"addr": addr, "port": port})

which `configure_logging` renders as::

    2026-11-21T05:20:01.123Z info batonmq.server msg="listening" addr=0.0.0.0 port=5672
    {"ts": "2026-11-21T05:20:01.123Z", "level": "info", "logger": "batonmq.server",
     "msg": "listening", "addr": "0.0.0.0", "port": 5672}

Every attribute of a LogRecord that the logging module does not define itself is a field. A
traceback goes in an ``exc`` field (escaped onto the one line in text), so that every record
stays one line that a log shipper can parse.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import TextIO

from batonmq.logcodes import code_of

__all__ = ["FORMATS", "LEVELS", "JsonFormatter", "TextFormatter", "configure_logging"]

#: The broker's loggers all live under this name.
ROOT_LOGGER = "batonmq"

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
FORMATS = ("text", "json")

# The attributes every LogRecord has (plus those Formatter.format and 3.12's taskName add);
# anything else on a record came from extra=.
_STANDARD_ATTRIBUTES = frozenset(
    vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None))
) | {"message", "asctime", "taskName"}

# The fields every line starts with; an extra field of the same name is renamed "extra.<name>".
_FIXED_FIELDS = ("ts", "level", "logger", "msg", "logcode", "exc", "stack")


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, tz=UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{int(record.msecs):03d}Z"


def _fields(formatter: logging.Formatter, record: logging.LogRecord) -> dict[str, object]:
    """The record as ordered fields: ts, level, logger, msg, its code (`batonmq.logcodes`) for
    a line of the broker's own, the extras, then exc and stack."""
    fields: dict[str, object] = {
        "ts": _timestamp(record),
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
    }
    if record.name.startswith(ROOT_LOGGER) and (code := code_of(str(fields["msg"]))):
        fields["logcode"] = code
    for name, value in vars(record).items():
        if name not in _STANDARD_ATTRIBUTES:
            fields[f"extra.{name}" if name in _FIXED_FIELDS else name] = value
    if record.exc_info and not record.exc_text:
        # Formatter.format caches the rendered traceback on the record the same way.
        record.exc_text = formatter.formatException(record.exc_info)
    if record.exc_text:
        fields["exc"] = record.exc_text
    if record.stack_info:
        fields["stack"] = formatter.formatStack(record.stack_info)
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object per line; values JSON cannot represent are written as their str()."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields(self, record)
        try:
            return _dumps(fields)
        except (TypeError, ValueError):
            # NaN or infinity (not JSON), a circular structure, a dict with non-string keys:
            # str() the fields that cannot be written as they are.
            return _dumps({name: _json_or_str(value) for name, value in fields.items()})


def _dumps(value: object) -> str:
    return json.dumps(value, default=str, ensure_ascii=False, allow_nan=False)


def _json_or_str(value: object) -> object:
    try:
        _dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


# A logfmt value may go unquoted when it has no space, quote, equals sign or backslash.
_BARE_VALUE = re.compile(r'[^\s"=\\]+')
_KEY_UNSAFE = re.compile(r'[\s"=]')


def _logfmt_value(value: object) -> str:
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = str(value)
    if _BARE_VALUE.fullmatch(text):
        return text
    # JSON string escaping keeps quotes, backslashes and newlines on the one line.
    return json.dumps(text, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``<ts> <level> <logger> msg="..." key=value ...``, logfmt-like, one record per line."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields(self, record)
        head = f"{fields.pop('ts')} {fields.pop('level')} {fields.pop('logger')}"
        message = json.dumps(str(fields.pop("msg")), ensure_ascii=False)
        rest = "".join(
            f" {_KEY_UNSAFE.sub('_', name)}={_logfmt_value(value)}"
            for name, value in fields.items()
        )
        return f"{head} msg={message}{rest}"


class _BatonHandler(logging.StreamHandler[TextIO]):
    """The handler configure_logging installs; marked by its class so a second call replaces
    it rather than adding another."""


def configure_logging(level: str, fmt: str, stream: TextIO | None = None) -> None:
    """Log records of the ``batonmq`` loggers at `level` and above to `stream` (stderr when
    None), formatted as `fmt` ("text" or "json").

    The handler goes on the root logger, so that warnings from other libraries (asyncio, for
    one) come out in the same format; their loggers' own levels are left alone. Calling this
    again replaces the handler it installed before. Raises ValueError for an unknown level or
    format.
    """
    try:
        threshold = LEVELS[level.lower()]
    except KeyError:
        raise ValueError(
            f"unknown log level {level!r}: expected one of {', '.join(LEVELS)}"
        ) from None
    formatter: logging.Formatter
    if fmt == "text":
        formatter = TextFormatter()
    elif fmt == "json":
        formatter = JsonFormatter()
    else:
        raise ValueError(f"unknown log format {fmt!r}: expected one of {', '.join(FORMATS)}")

    handler = _BatonHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for previous in [h for h in root.handlers if isinstance(h, _BatonHandler)]:
        root.removeHandler(previous)
        previous.close()
    root.addHandler(handler)
    logging.getLogger(ROOT_LOGGER).setLevel(threshold)
