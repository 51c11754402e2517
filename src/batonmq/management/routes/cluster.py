"""/api/cluster/brokers[/{id}]: the members of this broker's HA cluster (`imqcmd list bkr`,
`query bkr`; MQ 4.1 HA guide, Example 1 and Table 7), and what an administrator asks of them:
`takeover` (`takeover bkr -n ID [-f]`), `quiesce` and `unquiesce` (PUT), `shutdown`
(`shutdown bkr [-time nSeconds] [-nofailover]`: "The new -time option specifies the interval, in
seconds, to wait before shutting down the broker").

Quiesce, unquiesce and shutdown act on the broker answering, as `imqcmd ... -b host:port` does:
the path names it by its broker id, and another member's id is a 400 that says to ask that
member at its own address. A broker that is not a member of an HA cluster answers 400.
"""

from __future__ import annotations

import asyncio
import datetime
import logging

from aiohttp import web

from batonmq.engine.api import ApiError, EngineApi
from batonmq.engine.membership import MemberInfo
from batonmq.management import problems, render
from batonmq.management.access import Tag
from batonmq.management.call import Call, answer, flag, integer
from batonmq.management.perworker import quiesce_worker, unquiesce_worker
from batonmq.management.route import Route

log = logging.getLogger(__name__)

#: Shutdowns asked for after a time (`shutdown bkr -time`), held until they run: the event loop
#: keeps only a weak reference to a task.
_later: set[asyncio.Task[None]] = set()

NOT_IN_CLUSTER = "this broker is not a member of an HA cluster (cluster.ha)"


def _in_cluster(call: Call) -> None:
    if not call.api.in_cluster():
        raise problems.bad_request(NOT_IN_CLUSTER)


async def _named(call: Call) -> MemberInfo:
    _in_cluster(call)
    return await call.api.cluster_member(call.path("id"))


async def _this_broker(call: Call) -> None:
    """The path must name the broker answering."""
    if not (await _named(call)).local:
        raise problems.bad_request(
            f"broker {call.path('id')!r} is another member: ask it at its own address"
        )


async def list_brokers(call: Call) -> web.Response:
    _in_cluster(call)
    return answer([render.cluster_member(info) for info in await call.api.cluster_members()])


async def query_broker(call: Call) -> web.Response:
    return answer(render.cluster_member(await _named(call)))


async def take_over(call: Call) -> web.Response:
    """Take the member over now: once its store lease has run out, or at once with
    `"force": true` (the HA guide's -f), which fences it if it still runs."""
    force = flag(await call.body(), "force", False)
    await _named(call)
    outcome = await call.api.take_over_broker(call.path("id"), force=force)
    return answer(render.takeover(outcome))


async def quiesce(call: Call) -> web.Response:
    await _this_broker(call)
    call.api.quiesce()
    await call.workers.on_siblings(quiesce_worker)
    return answer(render.cluster_member(await _named(call)))


async def unquiesce(call: Call) -> web.Response:
    await _this_broker(call)
    call.api.unquiesce()
    await call.workers.on_siblings(unquiesce_worker)
    return answer(render.cluster_member(await _named(call)))


async def shut_down(call: Call) -> web.Response:
    """Stop this broker; with `"nofailover": true` no other member takes it over; with
    `"time": N` (seconds) it goes on serving for N seconds first, and the answer says when it
    stops (`shutdown_at`). Its record says no failover only when it stops: should it fail
    meanwhile, it is taken over as any other."""
    body = await call.body()
    nofailover = flag(body, "nofailover", False)
    seconds = integer(body, "time", 0) or 0
    await _this_broker(call)
    broker_id = call.path("id")
    if seconds == 0:
        await call.api.shut_down(nofailover=nofailover)
        return answer({"broker_id": broker_id, "state": "SHUTDOWN_STARTED"})
    at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds)
    task = asyncio.get_running_loop().create_task(
        _shut_down_later(call.api, seconds, nofailover), name="shutdown bkr -time"
    )
    _later.add(task)
    task.add_done_callback(_later.discard)
    log.info(
        "shutdown in %d s",
        seconds,
        extra={"at": at.isoformat(timespec="seconds"), "nofailover": nofailover},
    )
    info = await _named(call)
    return answer(
        {
            "broker_id": broker_id,
            "state": str(info.state),
            "shutdown_at": at.isoformat(timespec="seconds"),
            "time": seconds,
        }
    )


async def _shut_down_later(api: EngineApi, seconds: int, nofailover: bool) -> None:
    await asyncio.sleep(seconds)
    try:
        await api.shut_down(nofailover=nofailover)
    except ApiError as error:
        # Its record in the store could not say no failover: it goes on serving rather than
        # stop to be taken over against the administrator's word.
        log.error("shutdown after %d s not done: %s", seconds, error)


ROUTES = (
    Route("GET", "/api/cluster/brokers", list_brokers, Tag.MONITORING),
    Route("GET", "/api/cluster/brokers/{id}", query_broker, Tag.MONITORING),
    Route("POST", "/api/cluster/brokers/{id}/takeover", take_over, Tag.ADMINISTRATOR),
    Route("PUT", "/api/cluster/brokers/{id}/quiesce", quiesce, Tag.ADMINISTRATOR),
    Route("PUT", "/api/cluster/brokers/{id}/unquiesce", unquiesce, Tag.ADMINISTRATOR),
    Route("POST", "/api/cluster/brokers/{id}/shutdown", shut_down, Tag.ADMINISTRATOR),
)
