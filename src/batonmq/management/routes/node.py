"""GET /api/overview, /api/whoami, /api/nodes (every member of an HA cluster),
/api/health/checks/alarms, /api/aliveness-test/{vhost}, and /metrics and /metrics/per-object
(Prometheus)."""

from __future__ import annotations

import time

from aiohttp import web

from batonmq.engine.snapshots import StatisticsReading
from batonmq.management import metrics, render
from batonmq.management.access import Tag
from batonmq.management.call import Call, answer
from batonmq.management.listing import Item, Json
from batonmq.management.route import Route

#: The queue RabbitMQ's aliveness test declares in the virtual host it tests.
ALIVENESS_QUEUE = "aliveness-test"


async def overview(call: Call) -> web.Response:
    api = call.api
    return answer(render.overview(api.overview(), call.node, call.caller))


async def whoami(call: Call) -> web.Response:
    return answer({"name": call.caller.name, "tags": list(call.caller.tags)})


async def _nodes(call: Call) -> list[Item]:
    """This broker, or every member of its HA cluster (the store's `list bkr`)."""
    alarms, now = call.api.overview().alarms, time.time()
    if not call.api.in_cluster():
        return [render.node(call.node, alarms, now)]
    members = await call.api.cluster_members()
    return [render.member_node(info, call.node, alarms, now) for info in members]


async def nodes(call: Call) -> web.Response:
    listed: list[Json] = list(await _nodes(call))
    return answer(listed)


async def one_node(call: Call) -> web.Response:
    name = call.path("node")
    found = next((item for item in await _nodes(call) if item["name"] == name), None)
    if found is None:
        return answer({"error": "Object Not Found", "reason": "Not Found"}, 404)
    return answer(found)


async def alarms(call: Call) -> web.Response:
    status, body = render.alarms_check(call.api.overview().alarms, call.node)
    return answer(body, status)


async def aliveness(call: Call) -> web.Response:
    """RabbitMQ declares the queue `aliveness-test` in the virtual host (and leaves it there);
    the answer says the declaration went through the virtual host and its store."""
    vhost = call.vhost()
    await call.api.declare_queue(call.caller.name, vhost, ALIVENESS_QUEUE, durable=False)
    return answer({"status": "ok"})


async def prometheus_metrics(call: Call) -> web.Response:
    """Every statistic in Prometheus's text format, summed over its subjects (no
    authentication, as RabbitMQ's plugin)."""
    return _scrape(metrics.aggregated(call.api.statistics()))


async def prometheus_metrics_per_object(call: Call) -> web.Response:
    """Every statistic in Prometheus's text format, a sample per queue, connection, channel."""
    return _scrape(call.api.statistics())


def _scrape(readings: list[StatisticsReading]) -> web.Response:
    return web.Response(
        body=metrics.exposition(readings), headers={"Content-Type": metrics.CONTENT_TYPE}
    )


ROUTES = (
    Route("GET", "/api/overview", overview),
    Route("GET", "/api/whoami", whoami),
    Route("GET", "/api/nodes", nodes, Tag.MONITORING),
    Route("GET", "/api/nodes/{node}", one_node, Tag.MONITORING),
    Route("GET", "/api/health/checks/alarms", alarms),
    Route("GET", "/api/aliveness-test/{vhost}", aliveness),
    Route("GET", "/metrics", prometheus_metrics, public=True),
    Route("GET", "/metrics/per-object", prometheus_metrics_per_object, public=True),
)
