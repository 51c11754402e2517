"""The OpenAPI 3.1 document of the HTTP API, derived from the route table: each route's path
(its parameters from the path template), method, summary (the handler's name, or the first
line of its docstring) and the tag it needs, with RabbitMQ's error body. Nothing is declared
twice: a route added to the table is in the document."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from batonmq.management.listing import Item, Json
from batonmq.management.route import Route

#: aiohttp's path parameters: {name} or {name:regex}.
_PARAMETER: Final = re.compile(r"\{(?P<name>\w+)(?::(?P<pattern>[^{}]+))?\}")
_ERROR: Final[Item] = {"$ref": "#/components/responses/Error"}
_SUCCESS: Final = {
    "GET": ("200", "the object or list, as JSON"),
    "PUT": ("201", "created (204: it was there)"),
    "POST": ("201", "created"),
    "DELETE": ("204", "done"),
}


def openapi_document(routes: Sequence[Route], version: str) -> Item:
    paths: dict[str, Json] = {}
    for route in routes:
        template = _PARAMETER.sub(lambda match: "{" + match["name"] + "}", route.path)
        operations = paths.setdefault(template, {})
        assert isinstance(operations, dict)
        operations[route.method.lower()] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "BatonMQ management HTTP API",
            "version": version,
            "description": "RabbitMQ's management HTTP API: its paths, JSON field names, "
            "status codes and error bodies. The virtual host / is %2F in a path.",
        },
        "security": [{"basic": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"basic": {"type": "http", "scheme": "basic"}},
            "responses": {
                "Error": {
                    "description": "400 bad request, 401 not authorised, 404 not found, "
                    "405 method not allowed",
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["error", "reason"],
                                "properties": {
                                    "error": {"type": "string"},
                                    "reason": {"type": "string"},
                                },
                            }
                        }
                    },
                }
            },
        },
    }


def _operation(route: Route) -> Item:
    status, meaning = route.answers or _SUCCESS[route.method]
    parameters: list[Json] = []
    for match in _PARAMETER.finditer(route.path):
        schema: Item = {"type": "string"}
        if match["pattern"]:
            schema["pattern"] = f"^({match['pattern']})$"
        parameters.append({"name": match["name"], "in": "path", "required": True, "schema": schema})
    operation: Item = {
        "operationId": f"{route.method.lower()}_{route.handler.__name__}_{len(parameters)}",
        "summary": _summary(route),
        "x-batonmq-needs-tag": route.needs.value,
        "parameters": parameters,
        "responses": {status: {"description": meaning}, "default": _ERROR},
    }
    if route.description is not None:
        operation["description"] = " ".join(route.description.split())
    if route.public:
        del operation["x-batonmq-needs-tag"]
        operation["security"] = []  # OpenAPI: an empty list removes the top-level security
    return operation


def _summary(route: Route) -> str:
    doc = (route.handler.__doc__ or "").strip()
    if doc:
        return doc.splitlines()[0].rstrip(".")
    return route.handler.__name__.replace("_", " ").capitalize()
