"""Messages over HTTP: RabbitMQ's POST /api/queues/{vhost}/{name}/get and POST
/api/exchanges/{vhost}/{name}/publish; and, beyond RabbitMQ, what the management console of the
Qpid broker manual offers: browse a queue's messages, move, copy and delete chosen ones, under
/api/queues/{vhost}/{name}/messages."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping

from aiohttp import web

from batonmq.amqp.shortstr import fits_short_string, not_short_string
from batonmq.engine.messages import AckMode
from batonmq.engine.snapshots import MessagesChanged
from batonmq.management import call as calls
from batonmq.management import messages, problems
from batonmq.management.call import Call, answer
from batonmq.management.listing import Json
from batonmq.management.route import Route
from batonmq.management.routes.exchanges import exchange_name

_ACK_MODES = {mode.value: mode for mode in AckMode}


async def get_messages(call: Call) -> web.Response:
    """RabbitMQ's body: count, ackmode, encoding (required), truncate."""
    vhost, name = call.vhost(), call.path("name")
    body = await call.body()
    calls.required(body, "count", "ackmode", "encoding")
    count = calls.integer(body, "count") or 0
    mode = _ACK_MODES.get(str(body["ackmode"]))
    if mode is None:
        raise problems.bad_request(
            f"Invalid ackmode value: {body['ackmode']}. Valid values are: " + ", ".join(_ACK_MODES)
        )
    encoding = _encoding(body)
    truncate = calls.integer(body, "truncate")
    taken = await call.api.get_messages(call.caller.name, vhost, name, count, mode)
    return answer([messages.got(message, encoding, truncate) for message in taken])


async def publish(call: Call) -> web.Response:
    """RabbitMQ's body: routing_key, properties, payload, payload_encoding (all required)."""
    vhost = call.vhost()
    body = await call.body()
    calls.required(body, "routing_key", "properties", "payload", "payload_encoding")
    routing_key = calls.text(body, "routing_key") or ""
    if not fits_short_string(routing_key):
        raise problems.bad_request(not_short_string("routing_key"))
    properties = body["properties"]
    payload = body["payload"]
    if not isinstance(properties, dict):
        raise problems.bad_request("properties must be a JSON object")
    if not isinstance(payload, str):
        raise problems.bad_request("payload_not_string")
    try:
        amqp_properties = messages.to_properties(properties)
        content = messages.body_of(payload, calls.text(body, "payload_encoding") or "")
    except messages.InvalidMessage as error:
        raise problems.bad_request(str(error)) from None
    routed = await call.api.publish(
        call.caller.name,
        vhost,
        exchange_name(call),
        routing_key,
        amqp_properties,
        content,
    )
    return answer({"routed": routed})


async def browse(call: Call) -> web.Response:
    """Query: start (position, 0 the next out), count (all by default), encoding, truncate."""
    vhost, name = call.vhost(), call.path("name")
    query: Mapping[str, Json] = dict(call.request.query)
    start = calls.integer(query, "start", 0) or 0
    count = calls.integer(query, "count")
    encoding = _encoding(query, "auto")
    truncate = calls.integer(query, "truncate")
    seen = call.api.browse(call.caller.name, vhost, name, start, count)
    return answer([messages.browsed(message, encoding, truncate) for message in seen])


async def move(call: Call) -> web.Response:
    """Body: to (a queue of the same virtual host), message_ids."""
    return await _transfer(call, "moved", call.api.move_messages)


async def copy(call: Call) -> web.Response:
    """Body: to (a queue of the same virtual host), message_ids."""
    return await _transfer(call, "copied", call.api.copy_messages)


async def _transfer(
    call: Call,
    done: str,
    carry: Callable[[str, str, str, str, Iterable[int]], Awaitable[MessagesChanged]],
) -> web.Response:
    body = await call.body()
    target, ids = _target(body), _message_ids(body)
    carried = await carry(call.caller.name, call.vhost(), call.path("name"), target, ids)
    return answer(_changed(done, carried))


async def delete(call: Call) -> web.Response:
    """Body: message_ids."""
    vhost, name = call.vhost(), call.path("name")
    body = await call.body()
    removed = await call.api.remove_messages(call.caller.name, vhost, name, _message_ids(body))
    return answer(_changed("deleted", removed))


def _encoding(body: Mapping[str, Json], default: str | None = None) -> str:
    encoding = calls.text(body, "encoding", default)
    if encoding not in messages.ENCODINGS:
        raise problems.bad_request("Unsupported encoding. Please use auto or base64.")
    return encoding


def _target(body: Mapping[str, Json]) -> str:
    target = calls.text(body, "to")
    if not target:
        raise problems.bad_request("to (the target queue) is required")
    return target


def _message_ids(body: Mapping[str, Json]) -> list[int]:
    ids = body.get("message_ids")
    if not isinstance(ids, list) or not all(
        isinstance(item, int) and not isinstance(item, bool) for item in ids
    ):
        raise problems.bad_request("message_ids must be a list of message ids")
    return [item for item in ids if isinstance(item, int)]


def _changed(done: str, changed: MessagesChanged) -> dict[str, Json]:
    """Which messages were acted on, and which were not (or no longer) in the queue."""
    return {done: list(changed.done), "missing": list(changed.missing)}


_JSON = ("200", "the answer, as JSON")
ROUTES = (
    Route("POST", "/api/queues/{vhost}/{name}/get", get_messages, answers=_JSON),
    Route("POST", "/api/exchanges/{vhost}/{name}/publish", publish, answers=_JSON),
    Route("GET", "/api/queues/{vhost}/{name}/messages", browse),
    Route("POST", "/api/queues/{vhost}/{name}/messages/move", move, answers=_JSON),
    Route("POST", "/api/queues/{vhost}/{name}/messages/copy", copy, answers=_JSON),
    Route("DELETE", "/api/queues/{vhost}/{name}/messages", delete, answers=_JSON),
)
