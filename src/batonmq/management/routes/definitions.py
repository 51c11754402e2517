"""GET and POST /api/definitions: RabbitMQ's export and import of users, virtual hosts,
queues, exchanges and bindings (batonmq.management.definitions), for administrators."""

from __future__ import annotations

from aiohttp import web

from batonmq.management import definitions, problems
from batonmq.management.access import Tag
from batonmq.management.call import Call, answer, no_content
from batonmq.management.perworker import (
    declare_topology,
    owned_bindings,
    owned_exchanges,
    owned_queues,
)
from batonmq.management.route import Route


async def export_definitions(call: Call) -> web.Response:
    """Everything the broker defines, as RabbitMQ's definitions document."""
    api = call.api
    return answer(
        definitions.export(
            call.node.product_version,
            api.vhosts(),
            api.user_credentials(),
            api.permissions(),
            await call.everywhere(owned_queues),
            await call.everywhere(owned_exchanges),
            await call.everywhere(owned_bindings),
        )
    )


async def import_definitions(call: Call) -> web.Response:
    """Merge a definitions document: what is missing is declared, what exists is left as it
    is (a user keeps its password, a queue its arguments); permissions are set as the document
    gives them (RabbitMQ's import). A virtual host it creates gives the importing user full
    permissions (as PUT /api/vhosts does) before the document's are set."""
    try:
        wanted = definitions.parse(await call.body())
    except definitions.InvalidDefinitions as error:
        raise problems.bad_request(str(error)) from None
    api, user = call.api, call.caller.name
    for vhost in wanted.vhosts:
        await api.add_vhost(vhost, creator=user)
    known_users = set(api.users())
    for account in wanted.users:
        if account.name not in known_users:
            await api.put_user(
                account.name, account.password, account.tags, credential_hash=account.credential
            )
    for permission in wanted.permissions:
        await api.set_permissions(permission)
    # Every worker knows the new virtual hosts and permissions before it declares in them.
    workers = call.workers
    await workers.catch_up_siblings()
    for worker in range(workers.count):
        await workers.on_async(worker, declare_topology, user, wanted)
    return no_content()


ROUTES = (
    Route("GET", "/api/definitions", export_definitions, Tag.ADMINISTRATOR),
    Route(
        "POST",
        "/api/definitions",
        import_definitions,
        Tag.ADMINISTRATOR,
        answers=("204", "imported"),
        changes_catalogue=True,
    ),
)
