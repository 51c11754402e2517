"""One request to the HTTP API, as its route handler sees it: who asked (logged in, with tags),
the path's parts, the list query, the JSON body; and the answers (JSON, 201, 204).

Everything a handler takes from the request is checked here, at the edge: a body that is not a
JSON object, too large, or with fields of the wrong type is a 400 before the handler runs on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Concatenate, Final, ParamSpec, TypeVar

from aiohttp import web
from pamqp.common import FieldTable

from batonmq.engine.api import EngineApi
from batonmq.engine.snapshots import UserInfo
from batonmq.management import problems
from batonmq.management.access import visible_vhosts
from batonmq.management.listing import (
    Completion,
    InvalidListQuery,
    Item,
    Json,
    answer_list,
    parse_list_query,
)
from batonmq.management.merge import concatenated
from batonmq.management.perworker import Ownership
from batonmq.management.render import Node, field_table
from batonmq.management.workers import CallRequest, Workers

_T = TypeVar("_T")
_P = ParamSpec("_P")

#: Largest request body read (bytes); a larger one is a 400, as RabbitMQ's body limit.
MAX_BODY: Final = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Call:
    #: This worker's engine: what it holds, and the catalogue every worker shares.
    api: EngineApi
    node: Node
    caller: UserInfo
    request: CallRequest
    #: This worker and its siblings: reads over the whole broker (`everywhere`).
    workers: Workers
    app: web.Application
    #: The workers that gave no answer to a read of this request (named in its answer).
    down: set[int] = field(default_factory=set)

    def path(self, name: str) -> str:
        """A part of the path, %-decoded ("%2F" is the virtual host "/")."""
        return self.request.match_info[name]

    def query(self, name: str) -> str | None:
        return self.request.query.get(name)

    async def everywhere(
        self,
        read: Callable[Concatenate[EngineApi, Ownership, _P], list[_T]],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> list[_T]:
        """What `read` (a read of `batonmq.management.workers`) finds in every worker."""
        gathered = await self.workers.gather(read, *args, **kwargs)
        self.down.update(gathered.down)
        return concatenated(gathered.answers.values())

    # Virtual hosts ---------------------------------------------------------------------------

    def visible_vhosts(self) -> set[str]:
        """The virtual hosts the caller sees: all for monitoring and administrator users, else
        those it has permissions on (RabbitMQ) and the ACL, when there is one, lets it open."""
        return visible_vhosts(
            self.caller.tags, self.api.permitted_vhosts(self.caller.name), self.api.vhosts()
        )

    def vhost(self) -> str:
        """The path's virtual host: 404 when it does not exist, 401 when the caller may not see
        it (RabbitMQ: "User not authorised to access virtual host")."""
        name = self.path("vhost")
        if name not in self.api.vhosts():
            raise problems.not_found()
        if name not in self.visible_vhosts():
            raise problems.not_authorised("User not authorised to access virtual host")
        return name

    # The body ----------------------------------------------------------------------------------

    async def body(self) -> dict[str, Json]:
        """The request's JSON object (an empty body is an empty object)."""
        raw = self.request.body
        if not raw.strip():
            return {}
        try:
            decoded = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise problems.bad_request(f"Malformed JSON: {error}") from None
        except RecursionError:
            # json reads nested arrays and objects by recursion (a thousand levels or so).
            raise problems.bad_request("Malformed JSON: nested too deep") from None
        if not isinstance(decoded, dict):
            raise problems.bad_request("The body must be a JSON object")
        return decoded


def flag(body: Mapping[str, Json], key: str, default: bool) -> bool:
    value = body.get(key, default)
    if isinstance(value, str) and value in ("true", "false"):
        return value == "true"  # RabbitMQ's forms post strings
    if not isinstance(value, bool):
        raise problems.bad_request(f"{key} must be true or false")
    return value


def text(body: Mapping[str, Json], key: str, default: str | None = None) -> str | None:
    value = body.get(key, default)
    if value is not None and not isinstance(value, str):
        raise problems.bad_request(f"{key} must be a string")
    return value


def integer(body: Mapping[str, Json], key: str, default: int | None = None) -> int | None:
    """A whole number of at least 0, in a number or a string (RabbitMQ's parse_int, for its
    forms)."""
    value = body.get(key, default)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise problems.bad_request(f"{key} must be a whole number")
    return value


def required(body: Mapping[str, Json], *keys: str) -> None:
    """RabbitMQ's with_decode: each of `keys` must be in the body."""
    missing = [key for key in keys if key not in body]
    if missing:
        raise problems.bad_request(f"missing fields: {', '.join(missing)}")


def arguments(body: Mapping[str, Json]) -> FieldTable:
    """`arguments` as an AMQP field table (JSON's types are all field values)."""
    value = body.get("arguments", {})
    if not isinstance(value, dict):
        raise problems.bad_request("arguments must be a JSON object")
    try:
        return field_table(value)
    except ValueError as error:
        raise problems.bad_request(f"arguments: {error}") from None


def tags(body: Mapping[str, Json]) -> list[str] | None:
    """RabbitMQ's `tags`: a comma-separated string or a list of strings."""
    value = body.get("tags")
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        raise problems.bad_request("tags must be a string or a list of strings")
    # A tag holds no comma: the users table keeps a user's tags comma-separated.
    return [
        tag.strip()
        for item in value
        if isinstance(item, str)
        for tag in item.split(",")
        if tag.strip()
    ]


# Answers ---------------------------------------------------------------------------------------


def answer(value: Json, status: int = 200) -> web.Response:
    return web.json_response(value, status=status, dumps=_dumps)


def created(existed: bool) -> web.Response:
    """A PUT's answer: 201 Created for a new object, 204 for one that was there."""
    return web.Response(status=204 if existed else 201)


def no_content() -> web.Response:
    return web.Response(status=204)


def listing(
    call: Call,
    items: Sequence[Item],
    default_sort: Collection[str],
    completion: Completion | None = None,
) -> web.Response:
    """A list, sorted, filtered and paged by the query's list parameters (listing.py)."""
    try:
        query = parse_list_query(call.request.query)
        return answer(answer_list(items, query, list(default_sort), completion))
    except InvalidListQuery as error:
        raise problems.HttpProblem(400, error.error, error.reason) from None


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
