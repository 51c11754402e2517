"""GET /api/overview, /api/whoami, /api/nodes (every member of an HA cluster),
/api/health/checks/alarms, /api/aliveness-test/{vhost}, and /metrics and /metrics/per-object
(Prometheus)."""

from __future__ import annotations

import contextlib
import os
import time

from aiohttp import web

from batonmq.engine.snapshots import Overview, StatisticsReading
from batonmq.management import metrics, problems, render
from batonmq.management.access import Tag
from batonmq.management.call import Call, answer
from batonmq.management.listing import Item, Json
from batonmq.management.merge import broker_process_figures, summed_overview, summed_readings
from batonmq.management.perworker import (
    cluster_members,
    own_process_figures,
    owned_overview,
    worker_statistics,
)
from batonmq.management.processes import process_figures
from batonmq.management.route import Route

#: The queue RabbitMQ's aliveness test declares in the virtual host it tests.
ALIVENESS_QUEUE = "aliveness-test"


async def _overview(call: Call) -> Overview:
    """The broker's overview: its workers' summed."""
    gathered = await call.workers.gather(owned_overview)
    call.down.update(gathered.down)
    return summed_overview(gathered.answers.values())


async def overview(call: Call) -> web.Response:
    return answer(render.overview(await _overview(call), call.node, call.caller))


async def whoami(call: Call) -> web.Response:
    return answer({"name": call.caller.name, "tags": list(call.caller.tags)})


async def _nodes(call: Call) -> list[Item]:
    """This broker, or every member of its HA cluster (the store's `list bkr`). A broker with
    workers is one node, which names its workers, says which are running and lists each one's
    links with its siblings that are up (`cluster_links`, as RabbitMQ lists a node's links with
    the others); a broker of one process has none."""
    alarms, now = (await _overview(call)).alarms, time.time()
    members = None
    if call.api.in_cluster() or call.workers.index != 0:
        # Worker 0 is an HA member's voice in its cluster (`batonmq.cluster.member`); while it
        # is down, this broker is shown as one node, with its workers.
        with contextlib.suppress(problems.HttpProblem):
            members = await call.workers.on_async(0, cluster_members)
    if members is None:
        item = render.node(call.node, alarms, now)
        if call.workers.count == 1:
            item["cluster_links"] = []
            return [item]
        links = await call.workers.gather_links()
        call.down.update(links.down)
        item["workers"] = [
            {
                "index": worker,
                "running": worker not in call.down,
                "cluster_links": [
                    render.cluster_link(state, now) for state in links.answers.get(worker, [])
                ],
            }
            for worker in range(call.workers.count)
        ]
        return [item]
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
    status, body = render.alarms_check((await _overview(call)).alarms, call.node)
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
    return await _scrape(call, metrics.aggregated(await call.everywhere(worker_statistics)))


async def prometheus_metrics_per_object(call: Call) -> web.Response:
    """Every statistic in Prometheus's text format, a sample per queue, connection, channel."""
    return await _scrape(call, summed_readings(await call.everywhere(worker_statistics)))


async def _scrape(call: Call, readings: list[StatisticsReading]) -> web.Response:
    """`readings`, and the `process_*` figures of the broker's processes: with workers, the
    supervisor's (this worker's parent) and every worker's that answers."""
    gathered = await call.workers.gather(own_process_figures)
    call.down.update(gathered.down)
    processes = list(gathered.answers.values())
    if call.workers.count > 1:
        processes.append(process_figures(os.getppid()))
    return web.Response(
        body=metrics.exposition(readings, broker_process_figures(processes)),
        headers={"Content-Type": metrics.CONTENT_TYPE},
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
