"""A connection handed over between worker processes at connection.open: the owner replays the
client's bytes into `ServerConnection(handed_over=True)`, which answers as the accepting worker
would have from connection.open on and does not send connection.start and connection.tune a
second time (the client has them: a second connection.start would be 503 for the client)."""

from __future__ import annotations

from pamqp import commands, frame

from batonmq.amqp.connection import (
    ConnectionSettings,
    Event,
    LoginRequested,
    OpenRequested,
    ServerConnection,
    State,
)
from batonmq.amqp.constants import ReplyCode
from batonmq.amqp.errors import HardError
from tests.memclient import ConnectionEnd, MemClient, default_answer

SETTINGS = ConnectionSettings(server_properties={"product": "BatonMQ-test"}, channel_max=16)


class Accepting(ConnectionEnd):
    """The accepting worker: answers the login, keeps every byte the client sent, and leaves
    connection.open unanswered (the connection leaves it there)."""

    def __init__(self) -> None:
        super().__init__(ServerConnection(SETTINGS), self.answer_until_open)
        self.received = bytearray()
        self.open_for: str | None = None

    def send(self, data: bytes) -> None:
        self.received += data
        super().send(data)

    def answer_until_open(self, connection: ServerConnection, event: Event) -> None:
        if isinstance(event, OpenRequested):
            self.open_for = event.virtual_host
        else:
            default_answer(connection, event)


def handed_at_open(vhost: str = "tenant") -> tuple[MemClient, Accepting]:
    accepting = Accepting()
    client = MemClient(accepting)
    client.start()
    tune = client.expect(commands.Connection.Tune, channel=0)
    client.tune_and_open(tune, vhost=vhost, heartbeat=30)
    assert accepting.open_for == vhost
    client.expect_nothing()
    return client, accepting


def test_the_owner_sends_nothing_the_client_has_and_answers_connection_open() -> None:
    client, accepting = handed_at_open()
    owner = ConnectionEnd(ServerConnection(SETTINGS, handed_over=True))

    owner.send(bytes(accepting.received))

    assert [type(event) for event in owner.events] == [LoginRequested, OpenRequested]
    client.server = owner
    client.expect(commands.Connection.OpenOk, channel=0)
    client.expect_nothing()
    # Tuned as the client asked, in the replay.
    assert owner.connection.state is State.OPEN
    assert (owner.connection.heartbeat, owner.connection.channel_max) == (30, 16)
    client.open_channel(1)
    assert owner.connection.open_channels() == [1]


def test_the_replay_may_come_in_pieces_and_with_frames_after_open() -> None:
    """The accepting worker hands over what it read, which may end anywhere and may hold the
    client's next frames (a client that does not wait for open-ok)."""
    client, accepting = handed_at_open()
    replay = bytes(accepting.received) + _channel_open(1)
    owner = ConnectionEnd(ServerConnection(SETTINGS, handed_over=True))

    for start in range(0, len(replay), 7):
        owner.send(replay[start : start + 7])

    client.server = owner
    client.expect(commands.Connection.OpenOk, channel=0)
    client.expect(commands.Channel.OpenOk, channel=1)
    client.expect_nothing()


def test_a_virtual_host_the_owner_refuses_is_refused_as_by_one_process() -> None:
    """Spec (connection.open): a virtual host the client may not use is 530 NOT_ALLOWED in a
    connection.close, which now comes from the owner."""
    client, accepting = handed_at_open("nowhere")

    def refuse(connection: ServerConnection, event: Event) -> None:
        if isinstance(event, OpenRequested):
            connection.close(HardError(ReplyCode.NOT_ALLOWED, "NOT_ALLOWED - vhost nowhere"))
        else:
            default_answer(connection, event)

    owner = ConnectionEnd(ServerConnection(SETTINGS, handed_over=True), refuse)
    owner.send(bytes(accepting.received))

    client.server = owner
    close = client.expect(commands.Connection.Close, channel=0)
    assert close.reply_code == ReplyCode.NOT_ALLOWED
    client.expect_nothing()


def _channel_open(channel: int) -> bytes:
    return frame.marshal(commands.Channel.Open(), channel)
