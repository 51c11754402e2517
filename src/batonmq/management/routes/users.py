"""Users and virtual hosts: /api/users[/{name}] and /api/vhosts[/{vhost}]. Changing them is for
administrators (RabbitMQ: "Not administrator user")."""

from __future__ import annotations

from aiohttp import web

from batonmq.management import call as calls
from batonmq.management import definitions, problems, render
from batonmq.management.access import Tag
from batonmq.management.call import Call, answer, created, listing, no_content
from batonmq.management.perworker import owned_queues
from batonmq.management.route import Route


async def list_users(call: Call) -> web.Response:
    api = call.api
    return listing(call, [render.user(api.user(name)) for name in api.users()], ["name"])


async def get_user(call: Call) -> web.Response:
    return answer(render.user(call.api.user(call.path("name"))))


async def put_user(call: Call) -> web.Response:
    """RabbitMQ: `password` and `tags`; without a password an existing user keeps its own.
    BatonMQ keeps salted scrypt hashes only: a `password_hash` is taken when its
    `hashing_algorithm` is BatonMQ's own (as GET /api/definitions exports it), else refused."""
    name = call.path("name")
    body = await call.body()
    credential_hash = calls.text(body, "password_hash")
    algorithm = calls.text(body, "hashing_algorithm")
    if credential_hash is not None and algorithm not in (
        definitions.SCRYPT,
        definitions.LEGACY_MD5,
    ):
        raise problems.bad_request(
            f"password_hash is taken with hashing_algorithm {definitions.SCRYPT} only: "
            "give the password"
        )
    existed = name in call.api.users()
    await call.api.put_user(
        name, calls.text(body, "password"), calls.tags(body), credential_hash=credential_hash
    )
    return created(existed)


async def delete_user(call: Call) -> web.Response:
    await call.api.delete_user(call.path("name"))
    return no_content()


async def list_vhosts(call: Call) -> web.Response:
    visible = call.visible_vhosts()
    queues = await call.everywhere(owned_queues)
    items = [render.vhost(name, queues) for name in call.api.vhosts() if name in visible]
    return listing(call, items, ["name"])


async def get_vhost(call: Call) -> web.Response:
    vhost = call.vhost()
    if call.workers.spreads(vhost):  # each worker runs some of its queues
        return answer(render.vhost(vhost, await call.everywhere(owned_queues, vhost)))
    return answer(render.vhost(vhost, call.api.queues()))


async def put_vhost(call: Call) -> web.Response:
    """Carried out by the virtual host's owner (it has it at once), then every worker."""
    name = call.path("vhost")
    await call.body()  # RabbitMQ takes a description and tags, which BatonMQ does not keep
    existed = name in call.api.vhosts()
    # As RabbitMQ's management: the user who creates a virtual host may do everything in it.
    await call.api.add_vhost(name, creator=call.caller.name)
    return created(existed)


async def delete_vhost(call: Call) -> web.Response:
    """RabbitMQ: the virtual host's connections are closed and everything in it deleted."""
    await call.api.delete_vhost(call.path("vhost"))
    return no_content()


ROUTES = (
    Route("GET", "/api/users", list_users, Tag.ADMINISTRATOR),
    Route("GET", "/api/users/{name}", get_user, Tag.ADMINISTRATOR),
    Route("PUT", "/api/users/{name}", put_user, Tag.ADMINISTRATOR, changes_catalogue=True),
    Route("DELETE", "/api/users/{name}", delete_user, Tag.ADMINISTRATOR, changes_catalogue=True),
    Route("GET", "/api/vhosts", list_vhosts),
    Route("GET", "/api/vhosts/{vhost}", get_vhost),
    Route("PUT", "/api/vhosts/{vhost}", put_vhost, Tag.ADMINISTRATOR, changes_catalogue=True),
    Route("DELETE", "/api/vhosts/{vhost}", delete_vhost, Tag.ADMINISTRATOR, changes_catalogue=True),
)
