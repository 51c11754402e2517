"""The HTTP API's route table: RabbitMQ's management endpoints, by resource."""

from __future__ import annotations

from batonmq.management.route import Route
from batonmq.management.routes import bindings, connections, exchanges, node, queues, users

ROUTES: tuple[Route, ...] = (
    *node.ROUTES,
    *users.ROUTES,
    *connections.ROUTES,
    *exchanges.ROUTES,
    *queues.ROUTES,
    *bindings.ROUTES,
)

__all__ = ["ROUTES", "Route"]
