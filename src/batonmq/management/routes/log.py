"""GET /api/broker/log?lines=N: the broker's most recent log records, for the web console's log
page (the Qpid broker manual's management console shows the broker's logging; RabbitMQ's
console leaves the log to the node's files).

The records come from a ring buffer on the broker's logger, kept while the HTTP listener runs
(from just before it listens until it stops): the newest `CAPACITY` records that the logger's
level lets through, each as the JSON object the broker's `json` log format writes (ts, level,
logger, msg and the record's fields). Administrators only: the log names users, client
addresses and the objects of every virtual host.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import AsyncIterator
from typing import Final

from aiohttp import web

from batonmq.log import ROOT_LOGGER, JsonFormatter
from batonmq.management import problems
from batonmq.management.access import Tag
from batonmq.management.call import Call, answer
from batonmq.management.route import Route

#: How many records the ring buffer keeps; also the most `lines` may ask for.
CAPACITY: Final = 1000
#: The records answered when `lines` is not given.
DEFAULT_LINES: Final = 100


class RecentLog(logging.Handler):
    """The newest `capacity` records of the broker's loggers, each formatted when it is logged
    (a record's arguments may change after it), as one line of the json log format."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self._lines: deque[str] = deque(maxlen=capacity)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._lines.append(self.format(record))
        except Exception:
            self.handleError(record)

    def newest(self, count: int) -> list[str]:
        """The last `count` lines, oldest first."""
        lines = list(self._lines)
        return lines[len(lines) - count :] if count < len(lines) else lines


#: The application's ring buffer (http.make_app puts it there with `keep_recent_log`).
RECENT_LOG: Final = web.AppKey("recent_log", RecentLog)


def keep_recent_log(app: web.Application) -> None:
    """Give `app` a ring buffer that holds the broker's log records while the app runs."""
    recent = RecentLog()
    app[RECENT_LOG] = recent

    async def attached(_app: web.Application) -> AsyncIterator[None]:
        logger = logging.getLogger(ROOT_LOGGER)
        logger.addHandler(recent)
        try:
            yield
        finally:
            logger.removeHandler(recent)

    app.cleanup_ctx.append(attached)


async def recent_log(call: Call) -> web.Response:
    """Query: lines (1 to CAPACITY, default DEFAULT_LINES)."""
    text = call.query("lines") or str(DEFAULT_LINES)
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= CAPACITY):
        raise problems.bad_request(f"lines must be a whole number from 1 to {CAPACITY}")
    recent = call.request.app[RECENT_LOG]
    return answer([json.loads(line) for line in recent.newest(int(text))])


ROUTES = (Route("GET", "/api/broker/log", recent_log, Tag.ADMINISTRATOR),)
