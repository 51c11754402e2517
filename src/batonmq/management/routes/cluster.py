"""/api/cluster/brokers[/{id}]: the members of this broker's HA cluster (`imqcmd list bkr`,
`query bkr`; MQ 4.1 HA guide, Example 1 and Table 7), and what an administrator asks of them:
`takeover` (`takeover bkr -n ID [-f]`), `quiesce` and `unquiesce` (PUT), `shutdown`
(`shutdown bkr [-nofailover]`).

Quiesce, unquiesce and shutdown act on the broker answering, as `imqcmd ... -b host:port` does:
the path names it by its broker id, and another member's id is a 400 that says to ask that
member at its own address. A broker that is not a member of an HA cluster answers 400.
"""

from __future__ import annotations

from aiohttp import web

from batonmq.engine.membership import MemberInfo
from batonmq.management import problems, render
from batonmq.management.access import Tag
from batonmq.management.call import Call, answer, flag
from batonmq.management.route import Route

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
    return answer(render.cluster_member(await _named(call)))


async def unquiesce(call: Call) -> web.Response:
    await _this_broker(call)
    call.api.unquiesce()
    return answer(render.cluster_member(await _named(call)))


async def shut_down(call: Call) -> web.Response:
    """Stop this broker; with `"nofailover": true` no other member takes it over."""
    nofailover = flag(await call.body(), "nofailover", False)
    await _this_broker(call)
    await call.api.shut_down(nofailover=nofailover)
    return answer({"broker_id": call.path("id"), "state": "SHUTDOWN_STARTED"})


ROUTES = (
    Route("GET", "/api/cluster/brokers", list_brokers, Tag.MONITORING),
    Route("GET", "/api/cluster/brokers/{id}", query_broker, Tag.MONITORING),
    Route("POST", "/api/cluster/brokers/{id}/takeover", take_over, Tag.ADMINISTRATOR),
    Route("PUT", "/api/cluster/brokers/{id}/quiesce", quiesce, Tag.ADMINISTRATOR),
    Route("PUT", "/api/cluster/brokers/{id}/unquiesce", unquiesce, Tag.ADMINISTRATOR),
    Route("POST", "/api/cluster/brokers/{id}/shutdown", shut_down, Tag.ADMINISTRATOR),
)
