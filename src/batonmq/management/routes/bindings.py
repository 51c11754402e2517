"""Bindings: /api/bindings[/{vhost}], those between an exchange and a queue or exchange
(/api/bindings/{vhost}/e/{source}/q|e/{destination}[/{props}]: GET, POST to bind, DELETE to
unbind), a queue's (/api/queues/{vhost}/{name}/bindings) and an exchange's
(/api/exchanges/{vhost}/{name}/bindings/source|destination)."""

from __future__ import annotations

import urllib.parse

from aiohttp import web

from batonmq.engine.snapshots import BindingInfo
from batonmq.management import call as calls
from batonmq.management import problems, render
from batonmq.management.call import Call, answer, listing, no_content
from batonmq.management.perworker import owned_bindings
from batonmq.management.route import Route
from batonmq.management.routes.exchanges import exchange_name

#: RabbitMQ's path letters for a binding's destination.
_KINDS = {"q": "queue", "e": "exchange"}


async def list_bindings(call: Call) -> web.Response:
    """Of the path's virtual host (its owner answers), or of every one the caller sees, by
    virtual host, each's as `EngineApi.bindings` orders them."""
    if "vhost" in call.request.match_info:
        found = call.api.bindings(call.vhost())
    else:
        visible = call.visible_vhosts()
        everywhere = await call.everywhere(owned_bindings)
        found = sorted(
            (info for info in everywhere if info.vhost in visible), key=lambda info: info.vhost
        )
    items = [render.binding(info) for info in found]
    return listing(call, items, [])


def _between(call: Call) -> tuple[str, str, str, str, list[BindingInfo]]:
    """(vhost, source, destination type, destination, the bindings between them)."""
    vhost = call.vhost()
    source = exchange_name(call, "source")
    kind = _KINDS[call.path("kind")]
    destination = call.path("destination")
    between = [
        info
        for info in call.api.bindings(vhost)
        if (info.source, info.destination_type, info.destination) == (source, kind, destination)
    ]
    return vhost, source, kind, destination, between


async def list_between(call: Call) -> web.Response:
    return listing(call, [render.binding(info) for info in _between(call)[4]], [])


async def bind(call: Call) -> web.Response:
    """RabbitMQ: POST a `routing_key` and `arguments`; 201 with the new binding's location."""
    vhost, source, kind, destination, _ = _between(call)
    body = await call.body()
    routing_key = calls.text(body, "routing_key", "") or ""
    arguments = calls.arguments(body)
    await call.api.bind(
        call.caller.name, BindingInfo(vhost, source, destination, kind, routing_key, arguments)
    )
    response = web.Response(status=201)
    key = render.properties_key(routing_key, arguments)
    quoted = urllib.parse.quote(key, safe="")
    response.headers["Location"] = f"{call.request.raw_path.rstrip('/')}/{quoted}"
    return response


def _one(call: Call) -> BindingInfo:
    props = call.path("props")
    for info in _between(call)[4]:
        if render.properties_key(info.routing_key, info.arguments) == props:
            return info
    raise problems.not_found()


async def get_binding(call: Call) -> web.Response:
    return answer(render.binding(_one(call)))


async def unbind(call: Call) -> web.Response:
    await call.api.unbind(call.caller.name, _one(call))
    return no_content()


async def queue_bindings(call: Call) -> web.Response:
    vhost, name = call.vhost(), call.path("name")
    call.api.queue(vhost, name)  # 404 for a queue that is not there
    items = [
        render.binding(info)
        for info in call.api.bindings(vhost)
        if (info.destination_type, info.destination) == ("queue", name)
    ]
    return listing(call, items, [])


async def exchange_bindings(call: Call) -> web.Response:
    vhost, name = call.vhost(), exchange_name(call)
    call.api.exchange(vhost, name)  # 404 for an exchange that is not there
    side = call.path("side")
    items = [
        render.binding(info)
        for info in call.api.bindings(vhost)
        if (side == "source" and info.source == name)
        or (
            side == "destination"
            and (info.destination_type, info.destination) == ("exchange", name)
        )
    ]
    return listing(call, items, [])


_BETWEEN = "/api/bindings/{vhost}/e/{source}/{kind:[qe]}/{destination}"

ROUTES = (
    Route("GET", "/api/bindings", list_bindings),
    Route("GET", "/api/bindings/{vhost}", list_bindings),
    Route("GET", _BETWEEN, list_between),
    Route("POST", _BETWEEN, bind),
    Route("GET", _BETWEEN + "/{props}", get_binding),
    Route("DELETE", _BETWEEN + "/{props}", unbind),
    Route("GET", "/api/queues/{vhost}/{name}/bindings", queue_bindings),
    Route(
        "GET", "/api/exchanges/{vhost}/{name}/bindings/{side:source|destination}", exchange_bindings
    ),
)
