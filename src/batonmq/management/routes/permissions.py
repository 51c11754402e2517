"""RabbitMQ's permissions over HTTP: /api/permissions, /api/permissions/{vhost}/{user},
/api/users/{user}/permissions and /api/vhosts/{vhost}/permissions, for administrators
(RabbitMQ's rabbit_mgmt_wm_permission and friends: "Not administrator user" otherwise).

A PUT takes RabbitMQ's body, `configure`, `write` and `read` (all three: a missing one is a 400,
as RabbitMQ's with_decode), and answers 201 for a new record, 204 for a changed one; a pattern
that is not a regular expression is a 400; a user or virtual host that does not exist a 404.
"""

from __future__ import annotations

from aiohttp import web

from batonmq.management import call as calls
from batonmq.management import render
from batonmq.management.access import Tag
from batonmq.management.call import Call, answer, created, listing, no_content
from batonmq.management.route import Route
from batonmq.security.permissions import UserPermission

_ORDER = ["vhost", "user"]


async def list_permissions(call: Call) -> web.Response:
    """Every user's permissions in every virtual host."""
    return listing(call, [render.permission(p) for p in call.api.permissions()], _ORDER)


async def user_permissions(call: Call) -> web.Response:
    """A user's permissions, in each virtual host."""
    name = call.path("user")
    call.api.user(name)  # 404 for a user that does not exist
    items = [render.permission(p) for p in call.api.permissions(user=name)]
    return listing(call, items, _ORDER)


async def vhost_permissions(call: Call) -> web.Response:
    """The permissions of each user in a virtual host."""
    vhost = call.vhost()
    items = [render.permission(p) for p in call.api.permissions(vhost=vhost)]
    return listing(call, items, _ORDER)


async def get_permission(call: Call) -> web.Response:
    """A user's configure, write and read patterns in a virtual host."""
    return answer(render.permission(call.api.permission(call.path("user"), call.path("vhost"))))


async def put_permission(call: Call) -> web.Response:
    """Set a user's configure, write and read patterns in a virtual host."""
    user, vhost = call.path("user"), call.path("vhost")
    body = await call.body()
    calls.required(body, "configure", "write", "read")
    patterns = [calls.text(body, key) for key in ("configure", "write", "read")]
    configure, write, read = (pattern or "" for pattern in patterns)
    existed = bool(call.api.permissions(user=user, vhost=vhost))
    await call.api.set_permissions(UserPermission(user, vhost, configure, write, read))
    return created(existed)


async def delete_permission(call: Call) -> web.Response:
    """Take all of a user's permissions in a virtual host away."""
    await call.api.clear_permissions(call.path("user"), call.path("vhost"))
    return no_content()


ROUTES = (
    Route("GET", "/api/permissions", list_permissions, Tag.ADMINISTRATOR),
    Route("GET", "/api/permissions/{vhost}/{user}", get_permission, Tag.ADMINISTRATOR),
    Route(
        "PUT",
        "/api/permissions/{vhost}/{user}",
        put_permission,
        Tag.ADMINISTRATOR,
        changes_catalogue=True,
    ),
    Route(
        "DELETE",
        "/api/permissions/{vhost}/{user}",
        delete_permission,
        Tag.ADMINISTRATOR,
        changes_catalogue=True,
    ),
    Route("GET", "/api/users/{user}/permissions", user_permissions, Tag.ADMINISTRATOR),
    Route("GET", "/api/vhosts/{vhost}/permissions", vhost_permissions, Tag.ADMINISTRATOR),
)
