"""The management HTTP API's listener: the aiohttp application built from the route table
(`batonmq.management.routes.ROUTES`), HTTP basic authentication, and starting and stopping it
beside the AMQP listeners in the broker's event loop.

The only module that imports aiohttp besides the routes it serves: a broker with
`[listeners.http] enabled = false` never loads it.

Each request is authenticated as an AMQP login is (`EngineApi.login`: the same users, password
check, throttle and guest rule), then needs a management tag, and the tag its route asks for
(RabbitMQ: "Not management user", "Not administrator user", "Not monitor user"). Anything a
handler refuses becomes RabbitMQ's JSON error body (`batonmq.management.problems`); a request
that matches no route is a 404, a method the path does not take a 405, both with such a body.

With several workers every one serves the API; a request about one virtual host is carried out
by the worker that owns it (about a queue of a spread one, by the queue's owner), and the answer
of one the API forwarded here is made here too (`batonmq.management.workers`).

The web console (`console/`: HTML, CSS and JavaScript modules, no build step) is served at `/`
and `/console/` without authentication; it logs in to the API as any client does.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Final

from aiohttp import web

from batonmq.engine.api import ApiError, EngineApi
from batonmq.engine.snapshots import UserInfo
from batonmq.management import problems
from batonmq.management.access import Tag, basic_credentials, may_use_api
from batonmq.management.call import MAX_BODY, Call, answer
from batonmq.management.render import Node
from batonmq.management.routes import ROUTES, Route
from batonmq.management.routes.log import keep_recent_log
from batonmq.management.workers import Answer, CallRequest, Forwarded, Workers

log = logging.getLogger(__name__)

#: The realm RabbitMQ's management API names in its WWW-Authenticate challenge.
REALM = "RabbitMQ Management"
_REFUSED_TAG = {
    Tag.ADMINISTRATOR: "Not administrator user",
    Tag.MONITORING: "Not monitor user",
    Tag.MANAGEMENT: "Not management user",
}


#: The console's files, shipped in the package.
CONSOLE: Final = Path(__file__).with_name("console")
#: The console page may load nothing but its own files and call nothing but this API: no
#: inline script, no other site (the console needs no network beyond the broker).
_CONSOLE_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


class _Served:
    """This broker as its handlers describe it (`Node`); its listeners gain the API's own once
    they are bound, as RabbitMQ's overview lists its management listener ("http")."""

    def __init__(self, node: Node) -> None:
        self.node = node


def make_app(api: EngineApi, workers: Workers, served: _Served) -> web.Application:
    """The API's application: every route of the table, behind authentication, and the
    console's files."""
    app = web.Application(client_max_size=MAX_BODY, middlewares=[_problems])
    for route in ROUTES:
        app.router.add_route(
            route.method, route.path, functools.partial(_serve, api, workers, served, route)
        )
    _carrier(api, workers, served, app)
    keep_recent_log(app)
    app.router.add_get("/", _console_page)
    app.router.add_static("/console/", CONSOLE)
    return app


async def _console_page(_request: web.Request) -> web.FileResponse:
    return web.FileResponse(
        CONSOLE / "index.html",
        headers={
            "Content-Security-Policy": _CONSOLE_POLICY,
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-cache",
        },
    )


@web.middleware
async def _problems(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except problems.HttpProblem as problem:
        return _problem_answer(problem)
    except web.HTTPNotFound:
        return _problem_answer(problems.not_found())
    except web.HTTPMethodNotAllowed as refused:
        response = _problem_answer(
            problems.HttpProblem(405, "method_not_allowed", f"{request.method} is not allowed")
        )
        response.headers["Allow"] = ",".join(sorted(refused.allowed_methods))
        return response


def _problem_answer(problem: problems.HttpProblem) -> web.Response:
    response = answer(problem.body(), problem.status)
    if problem.error == problems.NOT_AUTHORIZED:
        response.headers["WWW-Authenticate"] = f'Basic realm="{REALM}"'
    return response


#: Who calls a public route (`Route.public`): nobody logged in.
ANONYMOUS = UserInfo("", ())
#: The header of an answer that some workers did not help make (their indexes, comma-separated):
#: it holds what the others hold.
DOWN_HEADER: Final = "X-Workers-Down"
#: The routes about the broker's HA cluster, which worker 0 answers.
CLUSTER_PATHS: Final = "/api/cluster/"
#: The routes about one queue ("{name}" is the queue's), which its owner answers in a spread
#: virtual host.
QUEUE_PATHS: Final = "/api/queues/{vhost}/{name}"


async def _serve(
    api: EngineApi, workers: Workers, served: _Served, route: Route, request: web.Request
) -> web.Response:
    caller = ANONYMOUS
    if not route.public:
        caller = await _caller(api, request)
        if not may_use_api(caller.tags):
            raise problems.not_authorised(_REFUSED_TAG[Tag.MANAGEMENT])
        if not route.allows(caller.tags):
            raise problems.not_authorised(_REFUSED_TAG[route.needs])
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise problems.bad_request("Exceeded HTTP request body size limit") from None
    asked = CallRequest(
        request.method,
        request.raw_path,
        dict(request.match_info),
        dict(request.query),
        {name: value for name, value in request.headers.items() if name != "Authorization"},
        body,
    )
    if route.path.startswith(CLUSTER_PATHS) and workers.index != 0:
        # Worker 0 is the broker's voice in its HA cluster (`batonmq.cluster.member`).
        done = await workers.forward(0, Forwarded(ROUTES.index(route), asked, caller))
        return web.Response(status=done.status, body=done.body or None, headers=done.headers)
    vhost = asked.match_info.get("vhost")
    queue = asked.match_info.get("name") if route.path.startswith(QUEUE_PATHS) else None
    if vhost is not None and (carrier := workers.carrier(vhost, queue)) != workers.index:
        # The virtual host's owner holds everything in it, a spread one's queue owner the
        # queue (and the whole topology): it carries the request out.
        done = await workers.forward(carrier, Forwarded(ROUTES.index(route), asked, caller))
        return web.Response(status=done.status, body=done.body or None, headers=done.headers)
    return await _carry_out(Call(api, served.node, caller, asked, workers, request.app), route)


async def _carry_out(call: Call, route: Route) -> web.Response:
    try:
        response = await route.handler(call)
    except ApiError as error:
        problem = problems.of_api_error(error)
        if problem.status == 401:
            log.warning("HTTP access refused: %s", error.text, extra={"user": call.caller.name})
        raise problem from None
    if route.changes_catalogue:
        await call.workers.catch_up_siblings()
    if call.down:
        response.headers[DOWN_HEADER] = ",".join(str(worker) for worker in sorted(call.down))
    return response


def _carrier(api: EngineApi, workers: Workers, served: _Served, app: web.Application) -> None:
    """Let `workers` carry out here the requests its siblings forward."""

    async def carry_out(forwarded: Forwarded) -> Answer:
        call = Call(api, served.node, forwarded.caller, forwarded.request, workers, app)
        try:
            response = await _carry_out(call, ROUTES[forwarded.route])
        except problems.HttpProblem as problem:
            response = _problem_answer(problem)
        body = response.body
        return Answer(
            response.status,
            {name: value for name, value in response.headers.items() if name != "Content-Length"},
            body if isinstance(body, bytes) else b"",
        )

    workers.carry_out = carry_out


async def _caller(api: EngineApi, request: web.Request) -> UserInfo:
    """The logged-in user, or 401 "Not_Authorized" (RabbitMQ's answer to a missing or wrong
    password, with a basic-authentication challenge)."""
    credentials = basic_credentials(request.headers.get("Authorization"))
    if credentials is None:
        raise problems.HttpProblem(401, problems.NOT_AUTHORIZED, problems.LOGIN_FAILED)
    name, password = credentials
    try:
        return await api.login(name, password, request.remote or "")
    except ApiError as error:
        log.warning("HTTP access denied: %s", error.text, extra={"user": name})
        raise problems.HttpProblem(401, problems.NOT_AUTHORIZED, problems.LOGIN_FAILED) from None


class HttpListener:
    """The API's listening socket(s)."""

    def __init__(
        self,
        workers: Workers,
        node: Node,
        bind: str,
        port: int,
        tls: ssl.SSLContext | None,
        sockets: Sequence[socket.socket] = (),
    ) -> None:
        """`sockets`: listening already (a worker's, which the supervisor bound); else the
        listener binds `bind` and `port`."""
        self.bind = bind
        self.port = port
        self.tls = tls
        self._sockets = sockets
        self._served = _Served(node)
        self._runner = web.AppRunner(
            make_app(workers.api, workers, self._served),
            access_log=None,
            handle_signals=False,
            shutdown_timeout=5.0,
        )

    async def start(self) -> list[tuple[str, int]]:
        """Listen; the bound addresses. OSError when the address cannot be used."""
        await self._runner.setup()
        sites: list[web.BaseSite] = [
            web.SockSite(self._runner, sock, ssl_context=self.tls) for sock in self._sockets
        ] or [
            web.TCPSite(
                self._runner, self.bind, self.port, ssl_context=self.tls, reuse_address=True
            )
        ]
        try:
            for site in sites:
                await site.start()
        except OSError:
            await self._runner.cleanup()
            raise
        bound = [(str(address[0]), int(address[1])) for address in self._runner.addresses]
        node = self._served.node
        protocol = "https" if self.tls is not None else "http"
        self._served.node = dataclasses.replace(
            node, listeners=[*node.listeners, *((protocol, host, port) for host, port in bound)]
        )
        return bound

    async def stop(self) -> None:
        """Accept no more requests and end those under way (at most 5 s)."""
        await self._runner.cleanup()
