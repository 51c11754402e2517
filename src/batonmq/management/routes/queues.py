"""/api/queues[/{vhost}[/{name}]], DELETE /api/queues/{vhost}/{name}/contents (purge), and PUT
/api/queues/{vhost}/{name}/pause and /resume (imqcmd pause dst, resume dst)."""

from __future__ import annotations

from typing import Final

from aiohttp import web

from batonmq.management import call as calls
from batonmq.management import render
from batonmq.management.call import Call, answer, created, listing, no_content
from batonmq.management.listing import Completion
from batonmq.management.perworker import owned_queues
from batonmq.management.route import Route

_QUEUE_FIGURES: Final = """Each queue as RabbitMQ's management writes it, with `message_stats`
(publish, deliver, deliver_no_ack, get, get_no_ack, ack, redeliver and deliver_get, their sum,
each with `_details.rate`: per second over the last 5 s) and `memory`: an estimate in bytes, the
bodies of its messages in memory (ready, or delivered and unacknowledged) plus a fixed cost per
message for the broker's objects; messages paged out to the store count nothing."""


async def list_queues(call: Call) -> web.Response:
    if "vhost" in call.request.match_info and not call.workers.spreads(call.vhost()):
        queues = call.api.queues(call.vhost())
    elif "vhost" in call.request.match_info:
        # Each worker runs some of a spread virtual host's queues.
        queues = await call.everywhere(owned_queues, call.vhost())
    else:
        visible = call.visible_vhosts()
        queues = [info for info in await call.everywhere(owned_queues) if info.vhost in visible]
    # A page of 10,000 queues writes message_stats for its own queues only.
    items = [render.queue(info, call.node, with_message_stats=False) for info in queues]
    info_of = {id(item): info for item, info in zip(items, queues, strict=True)}
    stats = Completion(
        frozenset({"message_stats"}),
        lambda item: item.update(render.queue_message_stats(info_of[id(item)])),
    )
    return listing(call, items, ["vhost", "name"], stats)


async def get_queue(call: Call) -> web.Response:
    return answer(render.queue(call.api.queue(call.vhost(), call.path("name")), call.node))


async def put_queue(call: Call) -> web.Response:
    """RabbitMQ's body: durable, auto_delete, arguments (`x-queue-type` among them)."""
    vhost, name = call.vhost(), call.path("name")
    body = await call.body()
    existed = name in {info.name for info in call.api.queues(vhost)}
    await call.api.declare_queue(
        call.caller.name,
        vhost,
        name,
        durable=calls.flag(body, "durable", True),
        auto_delete=calls.flag(body, "auto_delete", False),
        arguments=calls.arguments(body),
    )
    return created(existed)


async def delete_queue(call: Call) -> web.Response:
    """RabbitMQ's query parameters: if-unused, if-empty."""
    await call.api.delete_queue(
        call.caller.name,
        call.vhost(),
        call.path("name"),
        if_unused=call.query("if-unused") == "true",
        if_empty=call.query("if-empty") == "true",
    )
    return no_content()


async def purge_queue(call: Call) -> web.Response:
    await call.api.purge_queue(call.caller.name, call.vhost(), call.path("name"))
    return no_content()


async def pause_queue(call: Call) -> web.Response:
    """MQ admin guide, imqcmd pause dst: delivery to the queue's consumers stops (the queue
    still takes messages) until it is resumed."""
    call.api.pause_queue(call.caller.name, call.vhost(), call.path("name"), paused=True)
    return no_content()


async def resume_queue(call: Call) -> web.Response:
    """imqcmd resume dst: what waited is delivered."""
    call.api.pause_queue(call.caller.name, call.vhost(), call.path("name"), paused=False)
    return no_content()


_DONE = ("204", "done")
ROUTES = (
    Route("GET", "/api/queues", list_queues, description=_QUEUE_FIGURES),
    Route("GET", "/api/queues/{vhost}", list_queues, description=_QUEUE_FIGURES),
    Route("GET", "/api/queues/{vhost}/{name}", get_queue, description=_QUEUE_FIGURES),
    Route("PUT", "/api/queues/{vhost}/{name}", put_queue),
    Route("DELETE", "/api/queues/{vhost}/{name}", delete_queue),
    Route("DELETE", "/api/queues/{vhost}/{name}/contents", purge_queue),
    Route("PUT", "/api/queues/{vhost}/{name}/pause", pause_queue, answers=_DONE),
    Route("PUT", "/api/queues/{vhost}/{name}/resume", resume_queue, answers=_DONE),
)
