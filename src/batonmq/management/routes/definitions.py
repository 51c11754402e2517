"""GET and POST /api/definitions: RabbitMQ's export and import of users, virtual hosts,
queues, exchanges and bindings (batonmq.management.definitions), for administrators."""

from __future__ import annotations

from aiohttp import web

from batonmq.management import definitions, problems
from batonmq.management.access import Tag
from batonmq.management.call import Call, answer, no_content
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
            api.queues(),
            api.exchanges(),
            api.bindings(),
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
    for exchange in wanted.exchanges:
        if exchange.name not in {info.name for info in api.exchanges(exchange.vhost)}:
            await api.declare_exchange(
                user,
                exchange.vhost,
                exchange.name,
                exchange.type,
                durable=exchange.durable,
                auto_delete=exchange.auto_delete,
                internal=exchange.internal,
                arguments=exchange.arguments,
            )
    for queue in wanted.queues:
        if queue.name not in {info.name for info in api.queues(queue.vhost)}:
            await api.declare_queue(
                user,
                queue.vhost,
                queue.name,
                durable=queue.durable,
                auto_delete=queue.auto_delete,
                arguments=queue.arguments,
            )
    for binding in wanted.bindings:
        await api.bind(user, binding)
    return no_content()


ROUTES = (
    Route("GET", "/api/definitions", export_definitions, Tag.ADMINISTRATOR),
    Route(
        "POST",
        "/api/definitions",
        import_definitions,
        Tag.ADMINISTRATOR,
        answers=("204", "imported"),
    ),
)
