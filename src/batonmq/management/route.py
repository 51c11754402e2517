"""A route of the HTTP API: method, path, the tag it needs, and its handler.

The route table (`batonmq.management.routes.ROUTES`) is the one list of what the API serves;
the OpenAPI document will be derived from it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from aiohttp import web

from batonmq.management.access import Tag, is_administrator, may_use_api, sees_everything
from batonmq.management.call import Call

Handler = Callable[[Call], Awaitable[web.Response]]


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    #: aiohttp's path syntax: "/api/queues/{vhost}/{name}".
    path: str
    handler: Handler
    #: The least tag that may call it (RabbitMQ: management < monitoring < administrator).
    needs: Tag = Tag.MANAGEMENT
    #: Served without authentication (as RabbitMQ's Prometheus endpoint is); the handler's
    #: caller is then an anonymous user without tags.
    public: bool = False
    #: The success answer (status, meaning) when it is not the method's usual one (OpenAPI).
    answers: tuple[str, str] | None = None
    #: What its answer holds, for the OpenAPI document, when the summary does not say it.
    description: str | None = None
    #: It changes users, permissions or virtual hosts: with several workers, each reads the
    #: catalogue again before the answer goes out (`batonmq.management.workers`).
    changes_catalogue: bool = False

    def allows(self, tags: Collection[str]) -> bool:
        if self.needs is Tag.ADMINISTRATOR:
            return is_administrator(tags)
        if self.needs is Tag.MONITORING:
            return sees_everything(tags)
        return may_use_api(tags)
