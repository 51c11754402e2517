"""The HTTP API's route table: RabbitMQ's management endpoints, by resource, and the OpenAPI
document derived from the table."""

from __future__ import annotations

from aiohttp import web

from batonmq.management.call import Call, answer
from batonmq.management.openapi import openapi_document
from batonmq.management.route import Route
from batonmq.management.routes import (
    bindings,
    cluster,
    connections,
    definitions,
    exchanges,
    log,
    messages,
    node,
    permissions,
    queues,
    users,
)


async def openapi(call: Call) -> web.Response:
    """This API's OpenAPI document."""
    return answer(openapi_document(ROUTES, call.node.product_version))


ROUTES: tuple[Route, ...] = (
    *node.ROUTES,
    *users.ROUTES,
    *permissions.ROUTES,
    *connections.ROUTES,
    *exchanges.ROUTES,
    *queues.ROUTES,
    *bindings.ROUTES,
    *messages.ROUTES,
    *definitions.ROUTES,
    *log.ROUTES,
    *cluster.ROUTES,
    Route("GET", "/api/openapi.json", openapi),
)

__all__ = ["ROUTES", "Route"]
