"""The ring buffer of the broker's newest log records, for GET /api/broker/log
(`batonmq.management.routes.log`): one per process, attached to the broker's logger while the
HTTP listener runs."""

from __future__ import annotations

import logging
from collections import deque
from typing import Final

from batonmq.log import JsonFormatter

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


#: This process's ring buffer.
RECENT: Final = RecentLog()
