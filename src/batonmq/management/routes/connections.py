"""/api/connections[/{name}], /api/channels, /api/consumers[/{vhost}]. A management user sees
its own connections and channels; monitoring and administrator users see all, and only an
administrator closes another user's connection (RabbitMQ's is_authorized_user)."""

from __future__ import annotations

from aiohttp import web

from batonmq.engine.snapshots import ConnectionInfo
from batonmq.management import problems, render
from batonmq.management.access import may_close_connection, may_see_connection
from batonmq.management.call import Call, answer, listing, no_content
from batonmq.management.route import Route

#: RabbitMQ's reason when the request has no X-Reason header.
DEFAULT_REASON = "Closed via management plugin"


def _visible(call: Call) -> list[ConnectionInfo]:
    caller = call.caller
    return [
        info
        for info in call.api.connections()
        if may_see_connection(caller.tags, caller.name, info.user)
    ]


async def list_connections(call: Call) -> web.Response:
    items = [render.connection(info, call.node) for info in _visible(call)]
    return listing(call, items, ["name"])


def _named(call: Call) -> ConnectionInfo:
    name = call.path("name")
    found = next((info for info in call.api.connections() if info.name == name), None)
    if found is None:
        raise problems.not_found()
    caller = call.caller
    if not may_see_connection(caller.tags, caller.name, found.user):
        raise problems.not_authorised("User not authorised to access object")
    return found


async def get_connection(call: Call) -> web.Response:
    return answer(render.connection(_named(call), call.node))


async def close_connection(call: Call) -> web.Response:
    """Closed with 320 CONNECTION_FORCED and the X-Reason header's text (RabbitMQ)."""
    found = _named(call)
    caller = call.caller
    if not may_close_connection(caller.tags, caller.name, found.user):
        raise problems.not_authorised("User not authorised to access object")
    call.api.close_connection(found.id, call.request.headers.get("X-Reason", DEFAULT_REASON))
    return no_content()


async def list_channels(call: Call) -> web.Response:
    connections = {info.id: info for info in _visible(call)}
    items = [
        render.channel(info, connections[info.connection], call.node)
        for info in call.api.channels()
        if info.connection in connections
    ]
    return listing(call, items, ["name"])


async def list_consumers(call: Call) -> web.Response:
    vhosts = {call.vhost()} if "vhost" in call.request.match_info else call.visible_vhosts()
    channels = {info.name: info for info in call.api.channels()}
    connections = {info.id: info.name for info in call.api.connections()}
    items = []
    for info in call.api.consumers():
        if info.vhost not in vhosts:
            continue
        owner = channels.get(info.channel)
        connection_name = connections.get(owner.connection, "") if owner is not None else ""
        items.append(render.consumer(info, owner, connection_name))
    return listing(call, items, [])


ROUTES = (
    Route("GET", "/api/connections", list_connections),
    Route("GET", "/api/connections/{name}", get_connection),
    Route("DELETE", "/api/connections/{name}", close_connection),
    Route("GET", "/api/channels", list_channels),
    Route("GET", "/api/consumers", list_consumers),
    Route("GET", "/api/consumers/{vhost}", list_consumers),
)
