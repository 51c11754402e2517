"""The engine speaks only the queue-type protocol (ARCHITECTURE: "`queues/`: queue types behind
a `QueueType` protocol"; STYLE 4: "Extension points are small protocols plus a registry"): the
registry is the one place a concrete queue class is named, and every registered type builds
queues that have every member of `Queue`."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from batonmq.queues.arguments import InvalidArgument
from batonmq.queues.paging import Paging
from batonmq.queues.protocol import Queue
from batonmq.queues.types import QUEUE_TYPES

PACKAGE = Path(__file__).resolve().parents[3] / "src" / "batonmq"
#: Where a concrete queue class may be named: its own module, and the registry.
ALLOWED = {
    PACKAGE / "queues" / "classic.py",
    PACKAGE / "queues" / "streams" / "queue.py",
    PACKAGE / "queues" / "types.py",
}
CONCRETE = {"batonmq.queues.classic": "ClassicQueue", "batonmq.queues.streams.queue": "StreamQueue"}


def _names_a_concrete_queue(tree: ast.AST) -> list[str]:
    """Every import of a concrete queue module or class in `tree`, type-checking ones too."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in CONCRETE:
            found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.ImportFrom) and node.module == "batonmq.queues":
            found.extend(
                f"from batonmq.queues import {alias.name}"
                for alias in node.names
                if f"batonmq.queues.{alias.name}" in CONCRETE
            )
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names if alias.name in CONCRETE)
        elif isinstance(node, ast.Name) and node.id in CONCRETE.values():
            found.append(node.id)
    return found


def test_no_module_but_the_registry_names_a_concrete_queue_class():
    offenders = {
        str(path.relative_to(PACKAGE)): names
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in ALLOWED and (names := _names_a_concrete_queue(ast.parse(path.read_text())))
    }
    assert offenders == {}


def test_the_check_finds_a_concrete_queue_where_it_is_named():
    source = "from batonmq.queues.classic import ClassicQueue\nx: ClassicQueue\n"
    assert _names_a_concrete_queue(ast.parse(source)) == [
        "from batonmq.queues.classic import ...",
        "ClassicQueue",
    ]


def _protocol_members() -> set[str]:
    members = set(Queue.__annotations__)
    members.update(
        name
        for name, value in vars(Queue).items()
        if not name.startswith("_") and (callable(value) or isinstance(value, property))
    )
    return members


@pytest.mark.parametrize("name", sorted(QUEUE_TYPES))
def test_every_queue_type_builds_queues_with_the_whole_protocol(name):
    """Built on an event loop, as the engine builds them (a stream opens its log off it)."""
    queue_type = QUEUE_TYPES[name]

    async def build() -> list[str]:
        paging = Paging()
        queue = queue_type("q", durable=True, arguments={"x-queue-type": name}, paging=paging)
        missing = sorted(member for member in _protocol_members() if not hasattr(queue, member))
        queue.delete()
        await asyncio.to_thread(paging.streams.close)
        return missing

    assert asyncio.run(build()) == []


@pytest.mark.parametrize("name", sorted(QUEUE_TYPES))
def test_every_queue_type_checks_its_declare_arguments(name):
    """RabbitMQ: an argument of the wrong type is refused (406 PRECONDITION_FAILED)."""
    queue_type = QUEUE_TYPES[name]
    with pytest.raises(InvalidArgument):
        queue_type.parse_arguments({"x-max-length": "many"})
