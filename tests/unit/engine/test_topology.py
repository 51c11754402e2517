"""One path for declare, delete, purge, bind and unbind: the AMQP method handlers and management
carry out the same checks of the engine's service API (the foundation requirements: "business
rules must not live in AMQP method handlers ... the AMQP handlers themselves use [the API]"),
so a request is refused alike whichever way it comes, with the reply code and text of AMQP."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pamqp import base, commands

from batonmq.amqp.constants import ReplyCode
from batonmq.engine.api import ApiError, EngineApi
from batonmq.engine.broker import Broker
from batonmq.engine.snapshots import BindingInfo
from tests.memclient import MemClient, connect
from tests.unit.engine.test_access import ADMIN_RULE, acl, broker_with_acl

Exchange = commands.Exchange
Queue = commands.Queue

#: Another connection's exclusive queue, declared by `_scene`.
LOCKED = "locked"


@dataclass(frozen=True)
class Request:
    """One request, as an AMQP method and as the management call that asks the same."""

    amqp: base.Frame
    api: Callable[[EngineApi], Awaitable[object]]


REQUESTS = {
    "a reserved queue name (403)": Request(
        Queue.Declare(queue="amq.mine"),
        lambda api: api.declare_queue("guest", "/", "amq.mine", durable=False),
    ),
    "an unknown queue type (406)": Request(
        Queue.Declare(queue="odd", arguments={"x-queue-type": "nope"}),
        lambda api: api.declare_queue(
            "guest", "/", "odd", durable=False, arguments={"x-queue-type": "nope"}
        ),
    ),
    "a redeclaration that is not equivalent (406)": Request(
        Queue.Declare(queue="plain", durable=True),
        lambda api: api.declare_queue("guest", "/", "plain", durable=True),
    ),
    "deleting another connection's exclusive queue (405)": Request(
        Queue.Delete(queue=LOCKED),
        lambda api: api.delete_queue("guest", "/", LOCKED),
    ),
    "purging another connection's exclusive queue (405)": Request(
        Queue.Purge(queue=LOCKED),
        lambda api: api.purge_queue("guest", "/", LOCKED),
    ),
    "binding another connection's exclusive queue (405)": Request(
        Queue.Bind(queue=LOCKED, exchange="amq.direct", routing_key="k"),
        lambda api: api.bind("guest", BindingInfo("/", "amq.direct", LOCKED, "queue", "k", {})),
    ),
    "binding to an exchange that is not there (404)": Request(
        Queue.Bind(queue="plain", exchange="nowhere", routing_key="k"),
        lambda api: api.bind("guest", BindingInfo("/", "nowhere", "plain", "queue", "k", {})),
    ),
    "deleting a standard exchange (403)": Request(
        Exchange.Delete(exchange="amq.fanout"),
        lambda api: api.delete_exchange("guest", "/", "amq.fanout"),
    ),
    "binding an exchange to the default exchange (403)": Request(
        Exchange.Bind(destination="", source="amq.fanout", routing_key="k"),
        lambda api: api.bind("guest", BindingInfo("/", "amq.fanout", "", "exchange", "k", {})),
    ),
}


def _scene() -> tuple[Broker, MemClient]:
    """A broker with a non-durable queue "plain" and another connection's exclusive queue, and
    a client connected to it."""
    broker = Broker()
    owner, _session = connect(broker)
    owner.declare_queue(1, "plain")
    owner.declare_queue(1, LOCKED, exclusive=True)
    client, _session = connect(broker)
    return broker, client


@pytest.mark.parametrize("request_", REQUESTS.values(), ids=REQUESTS.keys())
async def test_a_request_is_refused_alike_over_amqp_and_by_the_api(request_: Request) -> None:
    """The reply code and text of the channel.close an AMQP client gets are the ApiError's."""
    broker, client = _scene()
    client.send(1, request_.amqp)
    close = client.expect(commands.Channel.Close, channel=1)

    broker, _client = _scene()
    with pytest.raises(ApiError) as refused:
        await request_.api(EngineApi(broker))

    assert (close.reply_code, close.reply_text) == (refused.value.reply_code, refused.value.text)


async def test_the_api_asks_the_acl_what_queue_declare_asks(tmp_path: Path) -> None:
    """The ACL request of a declare names whether the queue is `temporary` (one that goes with
    its connection or last consumer), over AMQP and through management alike: the Security
    requirements' "Enforcement at every operation"."""
    broker = broker_with_acl(
        tmp_path, acl(ADMIN_RULE, "ACL DENY bob CREATE QUEUE temporary=true", "ACL ALLOW bob ALL")
    )
    api = EngineApi(broker)
    with pytest.raises(ApiError) as refused:
        await api.declare_queue("bob", "/", "scratch", durable=False, auto_delete=True)
    assert refused.value.reply_code == ReplyCode.ACCESS_REFUSED
    assert (await api.declare_queue("bob", "/", "kept", durable=False)).name == "kept"
