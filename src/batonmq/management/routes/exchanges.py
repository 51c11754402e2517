"""/api/exchanges[/{vhost}[/{name}]]."""

from __future__ import annotations

from aiohttp import web

from batonmq.engine.access import DEFAULT_EXCHANGE
from batonmq.management import call as calls
from batonmq.management import problems, render
from batonmq.management.call import Call, answer, created, listing, no_content
from batonmq.management.perworker import owned_exchanges
from batonmq.management.route import Route


def exchange_name(call: Call, key: str = "name") -> str:
    """The path's exchange: RabbitMQ names the default exchange "amq.default" in paths (its
    rabbit_mgmt_util:id), since an empty path segment would not do."""
    name = call.path(key)
    return "" if name == DEFAULT_EXCHANGE else name


async def list_exchanges(call: Call) -> web.Response:
    """Of the path's virtual host (its owner answers), or of every one the caller sees."""
    if "vhost" in call.request.match_info:
        found = call.api.exchanges(call.vhost())
    else:
        visible = call.visible_vhosts()
        found = [info for info in await call.everywhere(owned_exchanges) if info.vhost in visible]
    items = [render.exchange(info) for info in found]
    return listing(call, items, ["vhost", "name"])


async def get_exchange(call: Call) -> web.Response:
    return answer(render.exchange(call.api.exchange(call.vhost(), exchange_name(call))))


async def put_exchange(call: Call) -> web.Response:
    """RabbitMQ's body: type (required), durable, auto_delete, internal, arguments."""
    vhost, name = call.vhost(), exchange_name(call)
    body = await call.body()
    type_name = calls.text(body, "type")
    if not type_name:
        raise problems.bad_request("type is required")
    existed = name in {info.name for info in call.api.exchanges(vhost)}
    await call.api.declare_exchange(
        call.caller.name,
        vhost,
        name,
        type_name,
        durable=calls.flag(body, "durable", True),
        auto_delete=calls.flag(body, "auto_delete", False),
        internal=calls.flag(body, "internal", False),
        arguments=calls.arguments(body),
    )
    return created(existed)


async def delete_exchange(call: Call) -> web.Response:
    await call.api.delete_exchange(
        call.caller.name,
        call.vhost(),
        exchange_name(call),
        if_unused=call.query("if-unused") == "true",
    )
    return no_content()


ROUTES = (
    Route("GET", "/api/exchanges", list_exchanges),
    Route("GET", "/api/exchanges/{vhost}", list_exchanges),
    Route("GET", "/api/exchanges/{vhost}/{name}", get_exchange),
    Route("PUT", "/api/exchanges/{vhost}/{name}", put_exchange),
    Route("DELETE", "/api/exchanges/{vhost}/{name}", delete_exchange),
)
