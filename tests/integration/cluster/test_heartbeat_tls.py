"""Heartbeats over mutual TLS (`[cluster.heartbeat] tls`), over real loopback sockets with
certificates from a test CA.

MQ 4.1 HA guide: the brokers of a cluster exchange heartbeat packets over their cluster
connection service, which may be secured with SSL; here each member presents its certificate and
requires one from the cluster's CA bundle (`[listeners.amqps] cafile`), so that only a holder of
such a certificate can pose as a member."""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from pathlib import Path

import pytest

from batonmq.cluster.heartbeat import HeartbeatService
from batonmq.config import TlsListenerConfig
from batonmq.security.tls import TlsConfigError, mutual_contexts
from tests.brokerproc import RunningBroker, wait_until
from tests.integration.cluster.test_heartbeat import until
from tests.members import start_member
from tests.tlsca import KeyPair, TestCA

pytestmark = pytest.mark.integration

#: Heartbeats five times a second (a TLS handshake has TLS_HANDSHAKE_TIMEOUT of its own).
INTERVAL = 0.2


def contexts(ca: TestCA, broker: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    pair = ca.member(broker)
    return mutual_contexts(
        TlsListenerConfig(certfile=pair.certfile, keyfile=pair.keyfile, cafile=ca.certfile)
    )


def service(
    broker: str, heard: list[str], tls: tuple[ssl.SSLContext, ssl.SSLContext] | None
) -> HeartbeatService:
    return HeartbeatService(
        cluster="prod", broker=broker, interval=INTERVAL, on_heartbeat=heard.append, tls=tls
    )


async def test_members_with_certificates_from_the_cluster_ca_hear_each_other(
    tmp_path: Path,
) -> None:
    ca = TestCA(tmp_path)
    heard_by_a: list[str] = []
    heard_by_b: list[str] = []
    a = service("A", heard_by_a, contexts(ca, "A"))
    b = service("B", heard_by_b, contexts(ca, "B"))
    try:
        address_a = await a.listen("127.0.0.1", 0)
        address_b = await b.listen("127.0.0.1", 0)
        a.watch({"A": address_a, "B": address_b})
        b.watch({"A": address_a, "B": address_b})
        await until(lambda: len(heard_by_a) >= 2 and len(heard_by_b) >= 2, timeout=15)
    finally:
        await a.close()
        await b.close()

    assert set(heard_by_a) == {"B"}
    assert set(heard_by_b) == {"A"}


async def test_a_sender_without_a_certificate_of_the_cluster_ca_is_not_heard(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another CA's certificate, and no TLS at all: neither gets a heartbeat in. The impostor,
    whose handshake fails on the member's certificate (it trusts its own CA only), says so."""
    ca, other = TestCA(tmp_path / "cluster"), TestCA(tmp_path / "other", name="Other CA")
    heard: list[str] = []
    member = service("B", heard, contexts(ca, "B"))
    impostor = service("A", [], contexts(other, "A"))
    plain = service("C", [], None)
    try:
        address = await member.listen("127.0.0.1", 0)
        with caplog.at_level(logging.WARNING):
            impostor.watch({"B": address})
            plain.watch({"B": address})
            await until(lambda: "heartbeats refused: the TLS handshake" in caplog.text, 15)
            await asyncio.sleep(INTERVAL * 4)
    finally:
        await impostor.close()
        await plain.close()
        await member.close()

    assert heard == []
    # Once, not at every interval.
    assert caplog.text.count("heartbeats refused: the TLS handshake") == 1
    reasons = [getattr(record, "reason", "") for record in caplog.records]
    assert any("CERTIFICATE_VERIFY_FAILED" in reason for reason in reasons), reasons


async def test_a_member_with_a_certificate_its_peer_does_not_trust_is_not_heard(
    tmp_path: Path,
) -> None:
    """The member's side of mutual TLS: a sender that trusts the member's CA, but whose own
    certificate comes from another CA, gets nothing in."""
    ca, other = TestCA(tmp_path / "cluster"), TestCA(tmp_path / "other", name="Other CA")
    pair = other.member("A")
    trusting_impostor = mutual_contexts(
        TlsListenerConfig(certfile=pair.certfile, keyfile=pair.keyfile, cafile=ca.certfile)
    )
    heard: list[str] = []
    member = service("B", heard, contexts(ca, "B"))
    sender = service("A", [], trusting_impostor)
    try:
        address = await member.listen("127.0.0.1", 0)
        sender.watch({"B": address})
        await asyncio.sleep(INTERVAL * 6)
    finally:
        await sender.close()
        await member.close()
    assert heard == []


def test_tls_heartbeats_need_the_ca_bundle_that_vouches_for_members(tmp_path: Path) -> None:
    pair = TestCA(tmp_path).member("A")
    with pytest.raises(TlsConfigError) as refused:
        mutual_contexts(TlsListenerConfig(certfile=pair.certfile, keyfile=pair.keyfile))
    assert refused.value.key == "listeners.amqps.cafile"
    assert "cluster.heartbeat.tls" in str(refused.value)


def test_members_of_one_ca_hear_each_other_and_a_member_of_another_is_suspect(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """Real members on one shared store, [cluster.heartbeat] tls = true: A and B (certificates of
    the cluster's CA) keep hearing each other; C (another CA's certificate) is heard by no one,
    so both suspect it, and C says its handshakes fail."""
    ca, other = TestCA(tmp_path / "cluster"), TestCA(tmp_path / "other", name="Other CA")

    def settings(pair: KeyPair, bundle: TestCA) -> dict[str, str]:
        return {
            "BATONMQ__CLUSTER__HEARTBEAT__TLS": "true",
            "BATONMQ__LISTENERS__AMQPS__CERTFILE": str(pair.certfile),
            "BATONMQ__LISTENERS__AMQPS__KEYFILE": str(pair.keyfile),
            "BATONMQ__LISTENERS__AMQPS__CAFILE": str(bundle.certfile),
        }

    members: list[RunningBroker] = []
    try:
        for broker_id, issuer in (("A", ca), ("B", ca), ("C", other)):
            pair = issuer.member(broker_id)
            members.append(
                start_member(tmp_path, postgres_dsn, broker_id, environment=settings(pair, issuer))
            )
        a, b, c = members
        wait_until(
            lambda: "heartbeats refused: the TLS handshake" in c.log(), "C's refused heartbeats"
        )
        for member in (a, b):
            wait_until(
                lambda member=member: (
                    "cluster member suspect" in member.log() and "peer=C" in member.log()
                ),
                "C suspected",
            )
        for member, other in ((a, "B"), (b, "A")):
            about_other = [
                line for line in member.log().splitlines() if re.search(rf"\bpeer={other}\b", line)
            ]
            assert any("cluster member heard:" in line for line in about_other)
            assert not any("cluster member suspect" in line for line in about_other)
    finally:
        for member in members:
            member.stop()
