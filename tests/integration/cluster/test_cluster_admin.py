"""Administering an HA cluster over the management HTTP API: real broker processes sharing one
PostgreSQL store, real pika clients, requests over real HTTP (urllib).

MQ 4.1 HA guide, Table 7: `list bkr` "List brokers in cluster", `query bkr` "List broker property
values", `takeover bkr -n brokerID [-f]`, `quiesce bkr` ("The broker will stop accepting new
connections; existing connections will continue to operate"), `unquiesce bkr`, and `shutdown
bkr -nofailover` ("no other broker is to take over the persistent data of the one being shut
down"); Example 1 for the columns and states.
"""

from __future__ import annotations

import time
from pathlib import Path

import pika
import pika.exceptions
import pytest

from tests.brokerproc import RunningBroker, confirming_channel, start_broker, wait_until
from tests.httpapi import call
from tests.integration.cluster.conftest import StartMember

pytestmark = pytest.mark.integration

PERSISTENT = pika.BasicProperties(delivery_mode=2)


def _listed(broker: RunningBroker) -> dict[str, dict[str, object]]:
    status, body = call(broker, "GET", "/api/cluster/brokers")
    assert status == 200, body
    assert isinstance(body, list)
    return {row["broker_id"]: row for row in body}


def _own_state(broker: RunningBroker, broker_id: str) -> object:
    return _listed(broker)[broker_id]["state"]


def _node_state(broker: RunningBroker, broker_id: str) -> object:
    status, nodes = call(broker, "GET", "/api/nodes")
    assert status == 200 and isinstance(nodes, list)
    return next(node["state"] for node in nodes if node["broker_id"] == broker_id)


def test_the_members_are_listed_queried_and_a_running_one_is_not_taken_over_unforced(
    member: StartMember,
) -> None:
    """`list bkr` on either member shows both, with Example 1's columns; `/api/nodes` shows
    both as RabbitMQ node objects; `query bkr` one; an unknown broker is 404; a takeover without
    -f of a member whose lease runs claims nothing (the guide's confirmation covers that case:
    "If the specified broker appears to be running ...")."""
    brokers = {name: member(name) for name in ("A", "B")}
    listed = _listed(brokers["A"])
    assert set(listed) == {"A", "B"}
    assert listed["A"]["state"] == listed["B"]["state"] == "OPERATING"
    assert (listed["A"]["local"], listed["B"]["local"]) == (True, False)
    assert listed["B"]["address"] == f"127.0.0.1:{brokers['B'].port}"
    assert listed["B"]["taken_over_by"] is None and listed["B"]["last_heartbeat"]
    assert listed["A"]["messages"] == 0

    status, nodes = call(brokers["B"], "GET", "/api/nodes")
    assert status == 200 and isinstance(nodes, list)
    assert {(node["broker_id"], node["running"]) for node in nodes} == {("A", True), ("B", True)}
    remote = next(node for node in nodes if node["broker_id"] == "A")
    status, one = call(brokers["B"], "GET", "/api/nodes/" + str(remote["name"]))
    assert status == 200 and isinstance(one, dict)
    assert (one["name"], one["broker_id"], one["local"]) == (remote["name"], "A", False)

    status, queried = call(brokers["A"], "GET", "/api/cluster/brokers/B")
    assert status == 200 and isinstance(queried, dict)
    assert (queried["broker_id"], queried["lease_live"]) == ("B", True)
    assert call(brokers["A"], "GET", "/api/cluster/brokers/Z")[0] == 404
    assert call(brokers["A"], "POST", "/api/cluster/brokers/Z/takeover", {})[0] == 404

    status, outcome = call(brokers["A"], "POST", "/api/cluster/brokers/B/takeover", {})
    assert status == 200 and isinstance(outcome, dict)
    assert (outcome["broker_id"], outcome["taken_over"]) == ("B", False)
    assert _listed(brokers["A"])["B"]["state"] == "OPERATING"


def test_a_quiesced_member_refuses_new_clients_and_serves_its_open_connections(
    member: StartMember,
) -> None:
    """quiesce bkr: new connections are refused (the socket is closed at accept, before any
    AMQP byte), the open connection goes on publishing with confirms; QUIESCING while it is
    open, QUIESCE_COMPLETE once it has gone; unquiesce bkr accepts clients again. The other
    member lists each state too (`list bkr` and /api/nodes), as Example 1 shows a QUIESCING
    broker in any member's list. Another member's id in the path is refused: quiesce acts on
    the broker asked."""
    brokers = {name: member(name) for name in ("A", "B")}
    a = brokers["A"]
    assert call(a, "PUT", "/api/cluster/brokers/B/quiesce")[0] == 400
    with confirming_channel(a) as channel:
        channel.queue_declare("work", durable=True)
        status, row = call(a, "PUT", "/api/cluster/brokers/A/quiesce")
        assert (status, row["state"] if isinstance(row, dict) else row) == (200, "QUIESCING")

        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(pika.URLParameters(a.url + "?connection_attempts=1"))
        channel.basic_publish("", "work", b"still served", PERSISTENT, mandatory=True)
        assert channel.queue_declare("work", passive=True).method.message_count == 1
        assert _own_state(a, "A") == "QUIESCING"
        # Recorded in the store: the other member lists it too (within a round).
        wait_until(lambda: _own_state(brokers["B"], "A") == "QUIESCING", "B lists A quiescing")
        assert _node_state(brokers["B"], "A") == "QUIESCING"
    wait_until(lambda: _own_state(a, "A") == "QUIESCE_COMPLETE", "quiesce complete")
    wait_until(lambda: _own_state(brokers["B"], "A") == "QUIESCE_COMPLETE", "B lists A quiesced")
    # The member stays a member: not suspected, not taken over.
    assert _listed(brokers["B"])["A"]["taken_over_by"] is None

    status, row = call(a, "PUT", "/api/cluster/brokers/A/unquiesce")
    assert status == 200 and isinstance(row, dict) and row["state"] == "OPERATING"
    wait_until(lambda: _own_state(brokers["B"], "A") == "OPERATING", "B lists A operating")
    with confirming_channel(a) as channel:
        assert channel.queue_declare("work", passive=True).method.message_count == 1


def test_a_member_shut_down_with_nofailover_is_not_taken_over_unless_forced(
    member: StartMember,
) -> None:
    """shutdown bkr -nofailover: B stops (exit status 0) and its record says no failover; A,
    which would take over a stopped member once its lease has lapsed, does not, well past the
    thresholds; `takeover bkr -f` then takes it over, and its messages are served by A."""
    brokers = {name: member(name) for name in ("A", "B")}
    a, b = brokers["A"], brokers["B"]
    with confirming_channel(b) as channel:
        channel.queue_declare("kept", durable=True)
        channel.basic_publish("", "kept", b"from B", PERSISTENT, mandatory=True)
    assert call(b, "POST", "/api/cluster/brokers/A/shutdown", {"nofailover": True})[0] == 400

    status, answered = call(b, "POST", "/api/cluster/brokers/B/shutdown", {"nofailover": True})

    assert (status, answered) == (200, {"broker_id": "B", "state": "SHUTDOWN_STARTED"})
    assert b.wait(15) == 0
    assert "no failover: " in b.last_log()
    # Heartbeat and monitor thresholds 2 at 1 s: a stopped member would be taken over by now.
    time.sleep(6)
    row = _listed(a)["B"]
    assert (row["state"], row["no_failover"], row["taken_over_by"]) == ("BROKER_DOWN", True, None)
    assert "takeover started" not in a.log()

    status, outcome = call(a, "POST", "/api/cluster/brokers/B/takeover", {"force": True})
    assert status == 200 and isinstance(outcome, dict)
    assert (outcome["taken_over"], outcome["messages"]) == (True, 1)
    assert _listed(a)["B"]["taken_over_by"] == "A"
    with confirming_channel(a) as channel:
        method, _properties, body = channel.basic_get("kept", auto_ack=True)
        assert method is not None and body == b"from B"


def test_a_standalone_broker_lists_itself_as_its_one_node_and_has_no_cluster(
    tmp_path: Path,
) -> None:
    """A broker that is not an HA member: `/api/nodes` is itself alone, as RabbitMQ's single
    node; the cluster endpoints answer 400."""
    broker = start_broker(tmp_path, http=True)
    status, nodes = call(broker, "GET", "/api/nodes")
    assert status == 200 and isinstance(nodes, list) and len(nodes) == 1
    assert "broker_id" not in nodes[0]
    status, body = call(broker, "GET", "/api/cluster/brokers")
    assert status == 400 and isinstance(body, dict)
    assert "not a member of an HA cluster" in str(body["reason"])
    assert call(broker, "PUT", "/api/cluster/brokers/x/quiesce")[0] == 400
