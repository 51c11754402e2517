"""The broker's log over HTTP, for administrators: its level, and its most recent records.

GET and PUT /api/broker/log-level: BatonMQ's own endpoint (RabbitMQ changes a node's level with
`rabbitmqctl set_log_level`, not over HTTP; the Qpid manual's management lists
"LoggingManagement: Dynamically control Qpid logging level"). The body is {"level": LEVEL}, one
of the levels the `log.level` setting takes; as in the MQ 3.5 admin guide (Table 2-7), the
broker then logs that level "and all higher categories". The change lasts until the broker
stops: it starts again at its configured level.

GET /api/broker/log?lines=N: the newest records, for the web console's log page (the Qpid broker
manual's management console shows the broker's logging; RabbitMQ's console leaves the log to the
node's files). They come from a ring buffer on the broker's logger, kept while the HTTP listener
runs (from just before it listens until it stops): the newest `CAPACITY` records that the
logger's level lets through, each as the JSON object the broker's `json` log format writes (ts,
level, logger, msg and the record's fields). With several workers, each keeps its own: the
answer is the newest of all of them, in the order of their `ts`, each naming its worker
(`worker`), and a worker that is down is named in the `X-Workers-Down` header. A level change
is made in every worker; a worker the supervisor starts again takes its siblings' level.
Administrators only: the log names users, client addresses and the objects of every virtual
host.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from aiohttp import web

from batonmq.config.schema import LOG_LEVELS
from batonmq.log import ROOT_LOGGER
from batonmq.management import call as calls
from batonmq.management import problems
from batonmq.management.access import Tag
from batonmq.management.call import Call, answer, no_content
from batonmq.management.listing import Json
from batonmq.management.merge import merged_log
from batonmq.management.perworker import newest_log_lines, set_worker_log_level
from batonmq.management.recentlog import CAPACITY, DEFAULT_LINES, RECENT, RecentLog
from batonmq.management.route import Route

log = logging.getLogger(__name__)

__all__ = ["ROUTES", "RecentLog", "keep_recent_log"]


def keep_recent_log(app: web.Application) -> None:
    """Have the process's ring buffer hold the broker's log records while `app` runs."""
    recent = RECENT

    async def attached(_app: web.Application) -> AsyncIterator[None]:
        logger = logging.getLogger(ROOT_LOGGER)
        logger.addHandler(recent)
        try:
            yield
        finally:
            logger.removeHandler(recent)

    app.cleanup_ctx.append(attached)


async def get_log_level(call: Call) -> web.Response:
    """The broker's log level now.

    Read from the broker's logger, which the engine's log-level change sets: the answer is the
    level in force, whether it came from the configuration or from a change."""
    threshold = logging.getLogger(ROOT_LOGGER).getEffectiveLevel()
    return answer({"level": logging.getLevelName(threshold).lower()})


async def put_log_level(call: Call) -> web.Response:
    """Change the broker's log level until it stops."""
    body = await call.body()
    calls.required(body, "level")
    level = calls.text(body, "level")
    if level is None or level not in LOG_LEVELS:
        raise problems.bad_request(f"level must be one of {', '.join(LOG_LEVELS)}")
    call.api.set_log_level(level)  # 400 for a level the engine does not know
    # And every other worker; one that is down starts again at its siblings' level.
    call.down.update((await call.workers.gather(set_worker_log_level, level)).down)
    # At warning, so that the change shows at any level but error.
    log.warning("log level changed", extra={"log_level": level, "user": call.caller.name})
    return no_content()


async def recent_log(call: Call) -> web.Response:
    """Query: lines (1 to CAPACITY, default DEFAULT_LINES)."""
    text = call.query("lines") or str(DEFAULT_LINES)
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= CAPACITY):
        raise problems.bad_request(f"lines must be a whole number from 1 to {CAPACITY}")
    count = int(text)
    gathered = await call.workers.gather(newest_log_lines, count)
    call.down.update(gathered.down)
    records: list[Json] = list(merged_log(gathered.answers, name_workers=call.workers.count > 1))
    return answer(records[len(records) - count :] if count < len(records) else records)


ROUTES = (
    Route("GET", "/api/broker/log-level", get_log_level, Tag.ADMINISTRATOR),
    Route(
        "PUT",
        "/api/broker/log-level",
        put_log_level,
        Tag.ADMINISTRATOR,
        answers=("204", "changed"),
    ),
    Route("GET", "/api/broker/log", recent_log, Tag.ADMINISTRATOR),
)
