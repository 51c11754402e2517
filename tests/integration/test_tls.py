"""The amqps listener (the Security requirements, "TLS"; Qpid manual §2.3) with a certificate
authority made by the test (tests/tlsca.py): real clients over TLS, SASL EXTERNAL with a client
certificate, refused certificates and protocol versions, sslOnly, and a TLS configuration the broker
refuses to start with.

The Security requirements, proven by: "TLS tests with a CA generated inside the test: pika and
aio-pika over amqps, EXTERNAL login with a client certificate, a refused certificate, a plain
connection refused when sslOnly." These need a BatonMQ process of their own (they configure its
listeners), never an --amqp-url broker.
"""

from __future__ import annotations

import asyncio
import base64
import json
import signal
import socket
import ssl
import time
import urllib.request
import uuid
import warnings
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aio_pika
import pika
import pika.credentials
import pytest
import uvloop
from pamqp import commands
from pika.exceptions import AMQPConnectionError, ProbableAuthenticationError

from batonmq.config import load_config
from batonmq.server.app import BrokerServer
from tests.brokerproc import RunningBroker, failed_start, free_port, start_broker
from tests.rawclient import PROTOCOL_HEADER, RawClient
from tests.tlsca import KeyPair, TestCA

pytestmark = pytest.mark.integration

ACCESS_REFUSED = 403
CONNECTION_FORCED = 320
#: How long the broker may take to write a log line about something that has happened.
LOG_DELAY = 5.0


@dataclass(frozen=True)
class Pki:
    """The test CA's files: the server's pair, client certificates, and one from another CA."""

    ca: TestCA
    server: KeyPair
    #: CN=guest: EXTERNAL logs in as guest (the broker's only user, loopback-only).
    guest: KeyPair
    #: CN=mallory: signed by the CA, but no user of that name exists.
    mallory: KeyPair
    #: CN=guest, signed by another CA the broker does not trust.
    impostor: KeyPair


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = TestCA(directory / "ca")
    other_ca = TestCA(directory / "other-ca", "Another CA")
    return Pki(
        ca=ca,
        server=ca.server(),
        guest=ca.client("guest"),
        mallory=ca.client("mallory"),
        impostor=other_ca.client("guest", "impostor"),
    )


def tls_environment(pki: Pki, *, verify: str, mechanisms: str | None = None) -> dict[str, str]:
    """`[listeners.amqps]` as environment variables (start_broker adds enabled, bind and port)."""
    environment = {
        "BATONMQ__LISTENERS__AMQPS__CERTFILE": str(pki.server.certfile),
        "BATONMQ__LISTENERS__AMQPS__KEYFILE": str(pki.server.keyfile),
        "BATONMQ__LISTENERS__AMQPS__VERIFY": verify,
    }
    if verify != "none":
        environment["BATONMQ__LISTENERS__AMQPS__CAFILE"] = str(pki.ca.certfile)
    if mechanisms is not None:
        environment["BATONMQ__LISTENERS__AMQPS__MECHANISMS"] = mechanisms
    return environment


StartTlsBroker = Callable[..., RunningBroker]


@pytest.fixture
def tls_broker(tmp_path: Path, pki: Pki) -> Iterator[StartTlsBroker]:
    """Start a broker with an amqps listener: `tls_broker(verify=..., mechanisms=..., plain=...)`;
    stopped at the end of the test."""
    started: list[RunningBroker] = []

    def start(
        *, verify: str = "none", mechanisms: str | None = None, plain: bool = True
    ) -> RunningBroker:
        if mechanisms is None:
            # EXTERNAL needs client certificates to be asked for.
            mechanisms = "PLAIN AMQPLAIN" if verify == "none" else "PLAIN AMQPLAIN EXTERNAL"
        broker = start_broker(
            tmp_path / f"broker{len(started)}",
            environment=tls_environment(pki, verify=verify, mechanisms=mechanisms),
            amqps=True,
            plain=plain,
        )
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


def client_context(pki: Pki, certificate: KeyPair | None = None) -> ssl.SSLContext:
    """A client's context: it trusts the test CA, checks the server's name, and presents
    `certificate` if given."""
    context = ssl.create_default_context(cafile=pki.ca.certfile)
    if certificate is not None:
        context.load_cert_chain(certificate.certfile, certificate.keyfile)
    return context


def pika_parameters(
    broker: RunningBroker,
    context: ssl.SSLContext,
    credentials: pika.credentials.PlainCredentials
    | pika.credentials.ExternalCredentials
    | None = None,
) -> pika.URLParameters:
    parameters = pika.URLParameters(f"amqps://guest:guest@127.0.0.1:{broker.amqps_port}/%2F")
    parameters.ssl_options = pika.SSLOptions(context, server_hostname="localhost")
    if credentials is not None:
        parameters.credentials = credentials
    return parameters


def pika_round_trip(parameters: pika.URLParameters) -> bytes:
    """Connect, publish a message to a fresh queue and consume it back: its body."""
    connection = pika.BlockingConnection(parameters)
    try:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        body = f"over TLS {uuid.uuid4().hex}".encode()
        channel.basic_publish("", queue, body)
        for _method, _properties, received in channel.consume(queue, inactivity_timeout=5):
            assert received is not None, "no delivery within 5 s"
            channel.cancel()
            assert received == body
            return body
        raise AssertionError("the consumer ended without a delivery")
    finally:
        connection.close()


def tls_client(broker: RunningBroker, pki: Pki, certificate: KeyPair | None = None) -> RawClient:
    """A raw AMQP client over TLS to the broker's amqps port, handshake done."""
    raw = socket.create_connection(("127.0.0.1", broker.amqps_port), timeout=5)
    try:
        wrapped = client_context(pki, certificate).wrap_socket(raw, server_hostname="localhost")
    except BaseException:
        raw.close()
        raise
    return RawClient(wrapped)


def wait_for_log(broker: RunningBroker, *fragments: str) -> str:
    """The first line of the broker's log that has every fragment, waiting LOG_DELAY at most."""
    deadline = time.monotonic() + LOG_DELAY
    while True:
        for line in broker.log().splitlines():
            if all(fragment in line for fragment in fragments):
                return line
        if time.monotonic() > deadline:
            raise AssertionError(f"no log line with {fragments}:\n{broker.log()}")
        time.sleep(0.05)


def assert_serves(broker: RunningBroker, pki: Pki) -> None:
    """The broker still serves a good client over amqps."""
    assert broker.process is not None and broker.process.poll() is None, "the broker exited"
    assert pika_round_trip(pika_parameters(broker, client_context(pki))).startswith(b"over TLS")


# --- Clients over amqps -------------------------------------------------------------------------


def test_pika_publishes_and_consumes_over_amqps(tls_broker: StartTlsBroker, pki: Pki) -> None:
    """The Security requirements: "An amqps listener ... TLS tests with a CA generated inside the
    test: pika ... over amqps". The broker logs a "listening" line naming each listener."""
    broker = tls_broker()
    parameters = pika_parameters(broker, client_context(pki))

    assert pika_round_trip(parameters).startswith(b"over TLS")
    wait_for_log(broker, 'msg="listening"', "listener=amqps", f"port={broker.amqps_port}")
    wait_for_log(broker, 'msg="listening"', "listener=amqp ", f"port={broker.port}")


async def test_aio_pika_publishes_and_consumes_over_amqps(
    tls_broker: StartTlsBroker, pki: Pki
) -> None:
    """The Security requirements: "TLS tests with a CA generated inside the test: pika and aio-pika
    over amqps"."""
    broker = tls_broker()
    connection = await aio_pika.connect(
        f"amqps://guest:guest@127.0.0.1:{broker.amqps_port}/", ssl_context=client_context(pki)
    )
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("", exclusive=True)
        await channel.default_exchange.publish(aio_pika.Message(b"aio over TLS"), queue.name)
        async with queue.iterator() as messages:
            async with asyncio.timeout(5):
                message = await anext(messages)
            await message.ack()
    assert message.body == b"aio over TLS"


def test_each_listener_offers_its_own_mechanisms(tls_broker: StartTlsBroker, pki: Pki) -> None:
    """The Security requirements: "PLAIN, AMQPLAIN and EXTERNAL ... configured per listener".
    connection.start's mechanisms are "A list of the security mechanisms that the server supports"
    on the port the client came in on."""
    broker = tls_broker(verify="optional", mechanisms="EXTERNAL PLAIN")

    with tls_client(broker, pki) as secure:
        secure_start = secure.start()
    with RawClient.connect("127.0.0.1", broker.port) as plain:
        plain_start = plain.start()

    assert secure_start.mechanisms == "EXTERNAL PLAIN"
    assert plain_start.mechanisms == "PLAIN AMQPLAIN"


# --- EXTERNAL -----------------------------------------------------------------------------------


def test_pika_logs_in_with_external_and_a_client_certificate(
    tls_broker: StartTlsBroker, pki: Pki
) -> None:
    """The Security requirements: "SASL. PLAIN, AMQPLAIN and EXTERNAL (the TLS client certificate's
    subject CN names the user)"; proven by "EXTERNAL login with a client certificate". No password
    is sent: the certificate with CN=guest logs in as guest."""
    broker = tls_broker(verify="required")
    parameters = pika_parameters(
        broker, client_context(pki, pki.guest), pika.credentials.ExternalCredentials()
    )

    assert pika_round_trip(parameters).startswith(b"over TLS")
    wait_for_log(broker, 'msg="connection opened"', "user=guest")


async def test_aio_pika_logs_in_with_external_and_a_client_certificate(
    tls_broker: StartTlsBroker, pki: Pki
) -> None:
    """The Security requirements: "EXTERNAL login with a client certificate", with aio-pika's
    `?auth=external` (aiormq's ExternalAuth: an empty response, so the CN names the user)."""
    broker = tls_broker(verify="required")
    connection = await aio_pika.connect(
        f"amqps://127.0.0.1:{broker.amqps_port}/?auth=external",
        ssl_context=client_context(pki, pki.guest),
    )
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue("", exclusive=True)
        await channel.default_exchange.publish(aio_pika.Message(b"external"), queue.name)
        message = await queue.get(no_ack=True, timeout=5)
    assert message.body == b"external"


def test_external_refuses_a_certificate_that_names_no_user(
    tls_broker: StartTlsBroker, pki: Pki
) -> None:
    """A certificate the CA signed proves who the client is, not that the broker knows it:
    "the TLS client certificate's subject CN names the user", and there is no user mallory, so
    "A failed login gets connection.close 403"."""
    broker = tls_broker(verify="required")

    with tls_client(broker, pki, pki.mallory) as client:
        client.start()
        client.start_ok("EXTERNAL", "")
        close = client.expect_connection_close(ACCESS_REFUSED)

    assert "ACCESS_REFUSED" in close.reply_text
    wait_for_log(broker, "login refused", "mallory")


# --- Client certificate verification ------------------------------------------------------------


def test_a_certificate_from_another_ca_is_refused_when_required(
    tls_broker: StartTlsBroker, pki: Pki
) -> None:
    """The Security requirements: "client-certificate verification none / optional / required";
    proven by "a refused certificate". With verify = "required" a certificate the CA did not sign
    (though its CN is guest) fails the TLS handshake, as does none at all; the broker logs each with
    the client's address and keeps serving others."""
    broker = tls_broker(verify="required")

    for certificate in (pki.impostor, None):
        parameters = pika_parameters(
            broker, client_context(pki, certificate), pika.credentials.ExternalCredentials()
        )
        with pytest.raises(AMQPConnectionError) as refused:
            pika.BlockingConnection(parameters)
        assert not isinstance(refused.value, ProbableAuthenticationError), (
            "refused at login, not in the TLS handshake"
        )

    wait_for_log(
        broker, "TLS handshake refused", "peer=127.0.0.1:", "reason=CERTIFICATE_VERIFY_FAILED"
    )
    wait_for_log(
        broker, "TLS handshake refused", "peer=127.0.0.1:", "PEER_DID_NOT_RETURN_A_CERTIFICATE"
    )
    assert "Traceback" not in broker.log()
    good = pika_parameters(
        broker, client_context(pki, pki.guest), pika.credentials.ExternalCredentials()
    )
    assert pika_round_trip(good).startswith(b"over TLS")


def test_optional_verification_lets_plain_in_without_a_certificate_but_not_external(
    tls_broker: StartTlsBroker, pki: Pki
) -> None:
    """verify = "optional": a certificate is checked if sent, and none is needed, so PLAIN logs
    in without one; EXTERNAL then has no certificate to name the user and is refused with
    connection.close 403 ACCESS_REFUSED ("A failed login gets connection.close 403"). With a
    certificate, EXTERNAL works."""
    broker = tls_broker(verify="optional")

    with tls_client(broker, pki) as plain_login:
        plain_login.handshake("guest", "guest", mechanism="PLAIN")
        plain_login.open_channel(1)
        assert plain_login.round_trip(1) == b"still serving"

    with tls_client(broker, pki) as external_without_certificate:
        external_without_certificate.start()
        external_without_certificate.start_ok("EXTERNAL", "")
        close = external_without_certificate.expect_connection_close(ACCESS_REFUSED)
    assert "client certificate" in close.reply_text

    parameters = pika_parameters(
        broker, client_context(pki, pki.guest), pika.credentials.ExternalCredentials()
    )
    assert pika_round_trip(parameters).startswith(b"over TLS")


# --- sslOnly, protocol versions, plain bytes ----------------------------------------------------


def test_ssl_only_leaves_the_plain_port_closed(tls_broker: StartTlsBroker, pki: Pki) -> None:
    """Qpid manual §2.3.2.1: "The sslOnly option ... will disable the unencrypted port and leave
    only the SSL port listening for connections" (`[listeners.amqp] enabled = false`); the Security
    requirements: "a plain connection refused when sslOnly"."""
    broker = tls_broker(plain=False)

    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", broker.port), timeout=5).close()
    with pytest.raises(AMQPConnectionError):
        pika.BlockingConnection(pika.URLParameters(broker.url))

    assert pika_round_trip(pika_parameters(broker, client_context(pki))).startswith(b"over TLS")
    assert "listener=amqp " not in broker.log()


def _tls_1_1_client_context(pki: Pki) -> ssl.SSLContext:
    """A client that offers TLS 1.1 and nothing newer. OpenSSL 3 allows TLS 1.1 (and its SHA-1
    signatures) at security level 0 only; Python deprecates naming the version."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(pki.ca.certfile)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = ssl.TLSVersion.TLSv1_1
        context.maximum_version = ssl.TLSVersion.TLSv1_1
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    return context


def _negotiate_tls_1_1_in_memory(pki: Pki, client: ssl.SSLContext) -> str:
    """Shake hands in memory with a server that accepts TLS 1.1, and return the version agreed
    (or why there was none): unless this machine's OpenSSL can speak TLS 1.1, the broker's
    refusal would prove nothing. Debian's OpenSSL 3 can, at security level 0."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(pki.server.certfile, pki.server.keyfile)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        server.minimum_version = ssl.TLSVersion.TLSv1_1
    server.set_ciphers("DEFAULT:@SECLEVEL=0")
    client_in, client_out, server_in, server_out = (ssl.MemoryBIO() for _ in range(4))
    client_side = client.wrap_bio(client_in, client_out, server_hostname="localhost")
    server_side = server.wrap_bio(server_in, server_out, server_side=True)
    done = {"client": False, "server": False}
    try:
        for _ in range(10):
            for name, side in (("client", client_side), ("server", server_side)):
                if not done[name]:
                    try:
                        side.do_handshake()
                        done[name] = True
                    except ssl.SSLWantReadError:
                        pass
            server_in.write(client_out.read())
            client_in.write(server_out.read())
            if all(done.values()):
                break
    except ssl.SSLError as error:
        return f"{ssl.OPENSSL_VERSION} cannot negotiate TLS 1.1: {error}"
    if not all(done.values()):
        return f"{ssl.OPENSSL_VERSION} did not finish a TLS 1.1 handshake"
    return client_side.version() or "no version"


def test_tls_1_1_is_refused(tls_broker: StartTlsBroker, pki: Pki) -> None:
    """The Security requirements: "TLS 1.2 minimum". A client that offers at most TLS 1.1 (which
    this machine can speak: shown first, in memory) fails the handshake, and the broker logs it with
    the client's address and OpenSSL's reason, the unsupported protocol version."""
    client = _tls_1_1_client_context(pki)
    assert _negotiate_tls_1_1_in_memory(pki, client) == "TLSv1.1"
    broker = tls_broker()

    with socket.create_connection(("127.0.0.1", broker.amqps_port), timeout=5) as raw:
        local_port = raw.getsockname()[1]
        with pytest.raises(ssl.SSLError):
            client.wrap_socket(raw, server_hostname="localhost")

    # asyncio's (and uvloop's) SSL protocol closes the socket on a failed handshake without
    # sending the alert OpenSSL wrote, so the client sees an abrupt end rather than the
    # protocol_version alert: the broker's log says why.
    wait_for_log(
        broker,
        "TLS handshake refused",
        f"peer=127.0.0.1:{local_port}",
        "reason=UNSUPPORTED_PROTOCOL",
    )
    assert_serves(broker, pki)


def test_plain_amqp_sent_to_the_tls_port_is_refused(tls_broker: StartTlsBroker, pki: Pki) -> None:
    """A client that speaks plain AMQP to the amqps port gets no AMQP answer (its protocol
    header is no TLS ClientHello): the broker closes the connection, logs the refused handshake
    with the client's address, and goes on serving."""
    broker = tls_broker()

    with socket.create_connection(("127.0.0.1", broker.amqps_port), timeout=5) as raw:
        local_port = raw.getsockname()[1]
        raw.sendall(PROTOCOL_HEADER)
        answer = b""
        while chunk := raw.recv(4096):  # until the broker closes; the socket times out at 5 s
            answer += chunk

    assert not answer.startswith(b"AMQP"), answer
    assert commands.Connection.Start.name.encode() not in answer
    wait_for_log(broker, "TLS handshake refused", f"peer=127.0.0.1:{local_port}")
    assert_serves(broker, pki)


def test_sigterm_closes_amqps_connections_too(tls_broker: StartTlsBroker, pki: Pki) -> None:
    """app.py: "SIGTERM and SIGINT stop accepting connections, close every client connection with
    320 CONNECTION_FORCED ... and exit 0", on the amqps listener as on the plain one; a client
    still in its TLS handshake does not hold the shutdown up."""
    broker = tls_broker()
    with (
        tls_client(broker, pki) as client,
        socket.create_connection(("127.0.0.1", broker.amqps_port), timeout=5),
    ):
        client.handshake("guest", "guest")
        signalled_at = time.monotonic()
        broker.signal(signal.SIGTERM)
        client.expect_connection_close(CONNECTION_FORCED)

    assert broker.wait(timeout=10) == 0
    assert time.monotonic() - signalled_at < 5
    assert "shutdown complete" in broker.log()


# --- Configuration the broker refuses to start with ---------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"BATONMQ__LISTENERS__AMQPS__KEYFILE": "{tmp}/missing.key"},
            "cannot start: listeners.amqps.keyfile: {tmp}/missing.key: no such file",
        ),
        (
            {"BATONMQ__LISTENERS__AMQPS__KEYFILE": "{guest_key}"},
            "cannot start: listeners.amqps.keyfile: {guest_key}: this key does not match the "
            "certificate in listeners.amqps.certfile",
        ),
        (
            {"BATONMQ__LISTENERS__AMQPS__CIPHERS": "NO-SUCH-CIPHER"},
            "cannot start: listeners.amqps.ciphers: 'NO-SUCH-CIPHER': no cipher matches",
        ),
        (
            {"BATONMQ__LISTENERS__AMQPS__VERIFY": "required"},
            "cannot start: listeners.amqps.cafile: must be set when listeners.amqps.verify is",
        ),
        (
            {"BATONMQ__LISTENERS__AMQPS__MECHANISMS": "PLAIN EXTERNAL"},
            "cannot start: listeners.amqps.mechanisms: offers EXTERNAL",
        ),
    ],
    ids=["missing-key", "mismatched-key", "bad-ciphers", "required-without-ca", "external"],
)
def test_a_broken_tls_configuration_stops_the_broker(
    tmp_path: Path, pki: Pki, change: dict[str, str], message: str
) -> None:
    """The Security requirements: "Errors in TLS configuration stop the broker with a clear message
    at start-up": exit status 1, and the message names the setting (and the file) at fault."""
    values = {"tmp": str(tmp_path), "guest_key": str(pki.guest.keyfile)}
    environment = {
        **tls_environment(pki, verify="none", mechanisms="PLAIN AMQPLAIN"),
        "BATONMQ__LISTENERS__AMQPS__ENABLED": "true",
        "BATONMQ__LISTENERS__AMQPS__BIND": "127.0.0.1",
        "BATONMQ__LISTENERS__AMQPS__PORT": str(free_port()),
        **{name: value.format(**values) for name, value in change.items()},
    }

    output = failed_start(tmp_path, environment)

    assert message.format(**values) in output
    assert "Traceback" not in output


def test_a_broker_with_no_listener_does_not_start(tmp_path: Path) -> None:
    """sslOnly turns the plain listener off; with the amqps one off too, nothing could connect:
    the broker says so and exits with status 1 rather than run unreachable."""
    output = failed_start(tmp_path, {"BATONMQ__LISTENERS__AMQP__ENABLED": "false"})

    assert (
        "cannot start: listeners.amqp.enabled: is false and so is listeners.amqps.enabled" in output
    )


def test_external_on_the_plain_listener_stops_the_broker(tmp_path: Path) -> None:
    """EXTERNAL names the user by the TLS client certificate, which a plain connection never
    has: offered on the plain listener it could only fail, so it is a configuration error."""
    output = failed_start(tmp_path, {"BATONMQ__LISTENERS__AMQP__MECHANISMS": "PLAIN EXTERNAL"})

    assert "cannot start: listeners.amqp.mechanisms: offers EXTERNAL" in output


# --- In this process, on both event loops -------------------------------------------------------

Runner = Callable[[Coroutine[Any, Any, None]], None]


async def impostor_reads(host: str, port: int, pki: Pki) -> bytes:
    """What a client with a certificate from another CA reads after sending a protocol header:
    b"" if the connection ends (TLS 1.3 clients learn of a refused certificate only then)."""
    try:
        reader, writer = await asyncio.open_connection(
            host, port, ssl=client_context(pki, pki.impostor), server_hostname="localhost"
        )
    except (ssl.SSLError, ConnectionError):
        return b""
    try:
        writer.write(PROTOCOL_HEADER)
        async with asyncio.timeout(5):
            return await reader.read(4096)
    except (ssl.SSLError, ConnectionError):
        return b""
    finally:
        writer.close()


@pytest.mark.parametrize("runner", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_handshakes_on_both_event_loops(tmp_path: Path, pki: Pki, runner: Runner) -> None:
    """The broker runs on uvloop (`app.run`), its in-process tests on asyncio: on both, the AMQP
    session starts only after the TLS handshake, with the verified client certificate in hand
    (what EXTERNAL reads); a failed handshake leaves no connection behind; and a shutdown does
    not wait for a client that never starts its handshake."""

    async def scenario() -> None:
        config = load_config(
            overrides={
                "listeners.amqp.enabled": False,
                "listeners.amqps.enabled": True,
                "listeners.amqps.bind": "127.0.0.1",
                "listeners.amqps.port": 0,
                "broker.data_dir": str(tmp_path),
                "listeners.http.enabled": False,
            },
            environ=tls_environment(pki, verify="required", mechanisms="PLAIN EXTERNAL"),
        )
        server = BrokerServer(config)
        [(host, port)] = await server.start()
        assert server.addresses == {"amqps": [(host, port)]}
        try:
            # A good client, which sends its protocol header at once.
            reader, writer = await asyncio.open_connection(
                host, port, ssl=client_context(pki, pki.guest), server_hostname="localhost"
            )
            writer.write(PROTOCOL_HEADER)
            async with asyncio.timeout(5):
                start = await reader.read(4096)
            assert start[:1] == b"\x01", start  # a method frame: connection.start
            assert b"EXTERNAL" in start
            [protocol] = server.protocols
            assert protocol.session is not None
            certificate = protocol.session.peer_certificate
            assert certificate is not None
            subject = certificate["subject"]
            assert isinstance(subject, tuple)
            assert (("commonName", "guest"),) in subject

            # A refused certificate: the client gets nothing, and no connection is left behind.
            assert await impostor_reads(host, port, pki) == b""
            async with asyncio.timeout(5):
                while server.listening.handshakes:
                    await asyncio.sleep(0.01)
            assert server.protocols == {protocol}

            # A client that connects and says nothing, still in its handshake at shutdown.
            silent_reader, silent_writer = await asyncio.open_connection(host, port)
            async with asyncio.timeout(5):
                while not server.listening.handshakes:
                    await asyncio.sleep(0.01)
            writer.close()
        finally:
            started = time.monotonic()
            await server.shutdown()
        assert time.monotonic() - started < 5
        assert not server.listening.handshakes
        async with asyncio.timeout(5):
            assert await silent_reader.read() == b""
        silent_writer.close()

    runner(scenario())


def test_the_http_api_over_tls_uses_the_amqps_certificate(tmp_path: Path, pki: Pki) -> None:
    """`[listeners.http] tls = true`: the management API is served over HTTPS with the amqps
    listener's certificate and key (as RabbitMQ's management listener takes an ssl_opts)."""
    environment = {**tls_environment(pki, verify="none"), "BATONMQ__LISTENERS__HTTP__TLS": "true"}
    with start_broker(tmp_path, environment=environment, http=True) as broker:
        request = urllib.request.Request(
            f"https://localhost:{broker.http_port}/api/whoami",
            headers={"Authorization": "Basic " + base64.b64encode(b"guest:guest").decode()},
        )
        with urllib.request.urlopen(request, context=client_context(pki), timeout=30) as answer:
            assert json.loads(answer.read()) == {"name": "guest", "tags": ["administrator"]}
        listening = [line for line in broker.log().splitlines() if "listener=http" in line]
        assert listening and "tls=true" in listening[0]
