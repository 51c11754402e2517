"""GET and PUT /api/broker/log-level: the running broker's log level, for administrators.

BatonMQ's own endpoint (RabbitMQ changes a node's level with `rabbitmqctl set_log_level`, not
over HTTP; the Qpid manual's management lists "LoggingManagement: Dynamically control Qpid logging
level"). The body is {"level": LEVEL}, one of the levels the `log.level` setting takes; as in the
MQ 3.5 admin guide (Table 2-7), the broker then logs that level "and all higher categories". The
change lasts until the broker stops: it starts again at its configured level.
"""

from __future__ import annotations

import logging

from aiohttp import web

from batonmq.config.schema import LOG_LEVELS
from batonmq.log import ROOT_LOGGER
from batonmq.management import call as calls
from batonmq.management import problems
from batonmq.management.access import Tag
from batonmq.management.call import Call, answer, no_content
from batonmq.management.route import Route

log = logging.getLogger(__name__)


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
    call.api.set_log_level(level)
    # At warning, so that the change shows at any level but error.
    log.warning("log level changed", extra={"log_level": level, "user": call.caller.name})
    return no_content()


ROUTES = (
    Route("GET", "/api/broker/log-level", get_log_level, Tag.ADMINISTRATOR),
    Route(
        "PUT",
        "/api/broker/log-level",
        put_log_level,
        Tag.ADMINISTRATOR,
        answers=("204", "changed"),
    ),
)
