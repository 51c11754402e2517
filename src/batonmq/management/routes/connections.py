"""/api/connections[/{name}], /api/channels, /api/consumers[/{vhost}]. A management user sees
its own connections and channels; monitoring and administrator users see all, and only an
administrator closes another user's connection (RabbitMQ's is_authorized_user)."""

from __future__ import annotations

from aiohttp import web

from batonmq.engine.snapshots import ChannelInfo, ConnectionInfo
from batonmq.management import problems, render
from batonmq.management.access import may_close_connection, may_see_connection
from batonmq.management.call import Call, answer, listing, no_content
from batonmq.management.perworker import close_held_connection, held_channels, held_connections
from batonmq.management.route import Route

#: RabbitMQ's reason when the request has no X-Reason header.
DEFAULT_REASON = "Closed via management plugin"


async def _held(call: Call) -> dict[int, list[ConnectionInfo]]:
    """The connections the caller may see, by the worker that holds them."""
    gathered = await call.workers.gather(held_connections)
    call.down.update(gathered.down)
    caller = call.caller
    return {
        worker: [info for info in found if may_see_connection(caller.tags, caller.name, info.user)]
        for worker, found in gathered.answers.items()
    }


async def list_connections(call: Call) -> web.Response:
    items = [
        render.connection(info, call.node)
        for found in (await _held(call)).values()
        for info in found
    ]
    return listing(call, items, ["name"])


async def _named(call: Call) -> tuple[int, ConnectionInfo]:
    """The path's connection, and the worker that holds it."""
    name = call.path("name")
    gathered = await call.workers.gather(held_connections)
    call.down.update(gathered.down)
    found = next(
        (
            (worker, info)
            for worker, held in gathered.answers.items()
            for info in held
            if info.name == name
        ),
        None,
    )
    if found is None:
        raise problems.not_found()
    caller = call.caller
    if not may_see_connection(caller.tags, caller.name, found[1].user):
        raise problems.not_authorised("User not authorised to access object")
    return found


async def get_connection(call: Call) -> web.Response:
    return answer(render.connection((await _named(call))[1], call.node))


async def close_connection(call: Call) -> web.Response:
    """Closed with 320 CONNECTION_FORCED and the X-Reason header's text (RabbitMQ), by the
    worker that holds it."""
    worker, found = await _named(call)
    caller = call.caller
    if not may_close_connection(caller.tags, caller.name, found.user):
        raise problems.not_authorised("User not authorised to access object")
    reason = call.request.headers.get("X-Reason", DEFAULT_REASON)
    await call.workers.on(worker, close_held_connection, found.id, reason)
    return no_content()


async def _channels(call: Call) -> list[tuple[ConnectionInfo | None, ChannelInfo]]:
    """Every channel with its connection (None for a connection the caller may not see), and
    the consumers of each worker, read together in it."""
    gathered = await call.workers.gather(held_channels)
    call.down.update(gathered.down)
    caller = call.caller
    found: list[tuple[ConnectionInfo | None, ChannelInfo]] = []
    for connections, channels, _consumers in gathered.answers.values():
        by_id = {
            info.id: info
            for info in connections
            if may_see_connection(caller.tags, caller.name, info.user)
        }
        found.extend((by_id.get(info.connection), info) for info in channels)
    return found


async def list_channels(call: Call) -> web.Response:
    items = [
        render.channel(channel, connection, call.node)
        for connection, channel in await _channels(call)
        if connection is not None
    ]
    return listing(call, items, ["name"])


async def list_consumers(call: Call) -> web.Response:
    """Of the path's virtual host (its owner answers), or of every one the caller sees."""
    vhosts = {call.vhost()} if "vhost" in call.request.match_info else call.visible_vhosts()
    gathered = await call.workers.gather(held_channels)
    call.down.update(gathered.down)
    items = []
    for connections, channel_list, consumers in gathered.answers.values():
        channels = {info.name: info for info in channel_list}
        names = {info.id: info.name for info in connections}
        for info in consumers:
            if info.vhost not in vhosts:
                continue
            owner = channels.get(info.channel)
            connection_name = names.get(owner.connection, "") if owner is not None else ""
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
