"""One small adapter per AMQP 0-9-1 client (pika, aio-pika, kombu over py-amqp) for the stream
queue tests, so that each stream rule is written once and run with every client.

Each call opens its own connection and channel, does one thing and closes them; a channel or
connection the broker closes comes out as `Refused(reply_code, reply_text)` whichever client
saw it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import quote

import aio_pika
import aiormq.channel
import aiormq.connection
import aiormq.exceptions
import amqp.exceptions
import pika
from kombu.connection import Connection
from kombu.entity import Queue
from kombu.message import Message
from kombu.messaging import Consumer, Producer
from pika.adapters.blocking_connection import BlockingChannel
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

from tests.brokerproc import RunningBroker

CLIENTS = ["pika", "aio_pika", "kombu"]
STREAM = {"x-queue-type": "stream"}

Headers = Mapping[str, object] | None
Received = list[tuple[int, bytes]]


class Refused(Exception):
    """The broker closed the channel or the connection with this reply."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(code, text)
        self.code = code
        self.text = text


class StreamClient(Protocol):
    def declare(
        self,
        queue: str,
        arguments: Mapping[str, object] | None = None,
        *,
        durable: bool = True,
        exclusive: bool = False,
    ) -> None:
        """queue.declare with x-queue-type stream and `arguments`."""

    def publish(self, queue: str, messages: Sequence[tuple[bytes, Headers]]) -> None:
        """With confirms: returns once every message is confirmed."""

    def consume(
        self,
        queue: str,
        count: int,
        arguments: Mapping[str, object] | None = None,
        *,
        prefetch: int | None = 10,
        global_qos: bool = False,
        no_ack: bool = False,
        then: Callable[[], None] | None = None,
        timeout: float = 10.0,
    ) -> Received:
        """(x-stream-offset, body) of the first `count` deliveries, each acknowledged; `then`
        runs once the broker has confirmed the consumer (consume-ok)."""

    def get(self, queue: str) -> None:
        """basic.get."""

    def message_count(self, queue: str) -> int:
        """queue.declare passive."""


def stream_client(name: str, broker: RunningBroker) -> StreamClient:
    clients: dict[str, Callable[[RunningBroker], StreamClient]] = {
        "pika": PikaClient,
        "aio_pika": AioPikaClient,
        "kombu": KombuClient,
    }
    return clients[name](broker)


def plain(bodies: Sequence[bytes]) -> list[tuple[bytes, Headers]]:
    return [(body, None) for body in bodies]


class PikaClient:
    def __init__(self, broker: RunningBroker) -> None:
        self.url = broker.url

    @contextlib.contextmanager
    def _channel(self) -> Iterator[BlockingChannel]:
        try:
            with pika.BlockingConnection(pika.URLParameters(self.url)) as connection:
                yield connection.channel()
        except (ChannelClosedByBroker, ConnectionClosedByBroker) as closed:
            raise Refused(closed.reply_code, closed.reply_text) from closed

    def declare(
        self,
        queue: str,
        arguments: Mapping[str, object] | None = None,
        *,
        durable: bool = True,
        exclusive: bool = False,
    ) -> None:
        with self._channel() as channel:
            channel.queue_declare(
                queue,
                durable=durable,
                exclusive=exclusive,
                arguments={**STREAM, **(arguments or {})},
            )

    def publish(self, queue: str, messages: Sequence[tuple[bytes, Headers]]) -> None:
        with self._channel() as channel:
            channel.confirm_delivery()
            for body, headers in messages:
                properties = pika.BasicProperties(headers=dict(headers) if headers else None)
                channel.basic_publish("", queue, body, properties)

    def consume(
        self,
        queue: str,
        count: int,
        arguments: Mapping[str, object] | None = None,
        *,
        prefetch: int | None = 10,
        global_qos: bool = False,
        no_ack: bool = False,
        then: Callable[[], None] | None = None,
        timeout: float = 10.0,
    ) -> Received:
        received: Received = []
        with self._channel() as channel:
            if prefetch is not None:
                channel.basic_qos(prefetch_count=prefetch)
            if global_qos:
                channel.basic_qos(prefetch_count=prefetch or 10, global_qos=True)

            def take(ch: BlockingChannel, method: Any, properties: Any, body: bytes) -> None:
                received.append((properties.headers["x-stream-offset"], body))
                if not no_ack:
                    ch.basic_ack(method.delivery_tag)

            channel.basic_consume(queue, take, auto_ack=no_ack, arguments=dict(arguments or {}))
            if then is not None:
                then()
            deadline = time.monotonic() + timeout
            while len(received) < count and time.monotonic() < deadline:
                channel.connection.process_data_events(time_limit=0.1)
        return received[:count]

    def get(self, queue: str) -> None:
        with self._channel() as channel:
            channel.basic_get(queue)

    def message_count(self, queue: str) -> int:
        with self._channel() as channel:
            count: int = channel.queue_declare(queue, passive=True).method.message_count
        return count


# aiormq raises one class per reply code, carrying only the reply text: the code from its class.
_AIORMQ_CODES = {
    kind: code
    for mapping in (aiormq.channel.EXCEPTION_MAPPING, aiormq.connection.EXCEPTION_MAPPING)
    for code, kind in mapping.items()
}


class AioPikaClient:
    def __init__(self, broker: RunningBroker) -> None:
        self.url = broker.url

    @staticmethod
    def _run(work: Coroutine[Any, Any, Any]) -> Any:
        try:
            return asyncio.run(asyncio.wait_for(work, 30))
        except (aiormq.exceptions.ChannelClosed, aiormq.exceptions.ConnectionClosed) as closed:
            code = _AIORMQ_CODES.get(type(closed))
            if code is None:  # ChannelClosed(code, text) for a code aiormq has no class for
                code, text = closed.args[0], closed.args[1]
            else:
                text = closed.args[0]
            raise Refused(code, text) from closed

    @contextlib.asynccontextmanager
    async def _channel(self, confirms: bool = False) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
        connection = await aio_pika.connect(self.url)
        async with connection:
            yield await connection.channel(publisher_confirms=confirms)

    def declare(
        self,
        queue: str,
        arguments: Mapping[str, object] | None = None,
        *,
        durable: bool = True,
        exclusive: bool = False,
    ) -> None:
        async def declare() -> None:
            async with self._channel() as channel:
                await channel.declare_queue(
                    queue,
                    durable=durable,
                    exclusive=exclusive,
                    arguments={**STREAM, **(arguments or {})},
                )

        self._run(declare())

    def publish(self, queue: str, messages: Sequence[tuple[bytes, Headers]]) -> None:
        async def publish() -> None:
            async with self._channel(confirms=True) as channel:
                for body, headers in messages:
                    message = aio_pika.Message(body, headers=dict(headers) if headers else None)
                    await channel.default_exchange.publish(message, routing_key=queue)

        self._run(publish())

    def consume(
        self,
        queue: str,
        count: int,
        arguments: Mapping[str, object] | None = None,
        *,
        prefetch: int | None = 10,
        global_qos: bool = False,
        no_ack: bool = False,
        then: Callable[[], None] | None = None,
        timeout: float = 10.0,
    ) -> Received:
        async def consume() -> Received:
            received: Received = []
            enough = asyncio.Event()
            async with self._channel() as channel:
                if prefetch is not None:
                    await channel.set_qos(prefetch_count=prefetch)
                if global_qos:
                    await channel.set_qos(prefetch_count=prefetch or 10, global_=True)

                async def take(message: aio_pika.abc.AbstractIncomingMessage) -> None:
                    offset = message.headers["x-stream-offset"]
                    assert isinstance(offset, int)
                    received.append((offset, message.body))
                    if not no_ack:
                        await message.ack()
                    if len(received) >= count:
                        enough.set()

                stream = await channel.get_queue(queue, ensure=False)
                await stream.consume(take, no_ack=no_ack, arguments=dict(arguments or {}))
                if then is not None:
                    await asyncio.to_thread(then)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(enough.wait(), timeout)
            return received[:count]

        result: Received = self._run(consume())
        return result

    def get(self, queue: str) -> None:
        async def get() -> None:
            async with self._channel() as channel:
                stream = await channel.get_queue(queue, ensure=False)
                await stream.get(fail=False)

        self._run(get())

    def message_count(self, queue: str) -> int:
        async def count() -> int:
            async with self._channel() as channel:
                declared = await channel.declare_queue(queue, passive=True)
                assert declared.declaration_result.message_count is not None
                return declared.declaration_result.message_count

        result: int = self._run(count())
        return result


class KombuClient:
    def __init__(self, broker: RunningBroker) -> None:
        vhost = quote(broker.vhost, safe="")
        self.url = (
            f"pyamqp://{broker.username}:{broker.password}@{broker.host}:{broker.port}/{vhost}"
        )

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Connection]:
        try:
            with Connection(self.url, transport_options={"confirm_publish": True}) as connection:
                yield connection
        except (amqp.exceptions.ChannelError, amqp.exceptions.ConnectionError) as closed:
            raise Refused(closed.reply_code, closed.reply_text) from closed

    @staticmethod
    def _queue(
        name: str,
        arguments: Mapping[str, object] | None = None,
        *,
        durable: bool = True,
        exclusive: bool = False,
        consumer_arguments: Mapping[str, object] | None = None,
    ) -> Queue:
        return Queue(
            name,
            routing_key=name,
            durable=durable,
            exclusive=exclusive,
            queue_arguments={**STREAM, **(arguments or {})},
            consumer_arguments=dict(consumer_arguments or {}),
        )

    def declare(
        self,
        queue: str,
        arguments: Mapping[str, object] | None = None,
        *,
        durable: bool = True,
        exclusive: bool = False,
    ) -> None:
        with self._connection() as connection:
            stream = self._queue(queue, arguments, durable=durable, exclusive=exclusive)
            bound = stream(connection.channel())
            # kombu makes an exclusive queue auto-delete too; declare only what was asked for.
            bound.auto_delete = False
            bound.declare()

    def publish(self, queue: str, messages: Sequence[tuple[bytes, Headers]]) -> None:
        with self._connection() as connection:
            producer = Producer(connection.channel(), routing_key=queue)
            for body, headers in messages:
                producer.publish(
                    body, content_type="application/octet-stream", headers=dict(headers or {})
                )

    def consume(
        self,
        queue: str,
        count: int,
        arguments: Mapping[str, object] | None = None,
        *,
        prefetch: int | None = 10,
        global_qos: bool = False,
        no_ack: bool = False,
        then: Callable[[], None] | None = None,
        timeout: float = 10.0,
    ) -> Received:
        received: Received = []

        def take(body: object, message: Message) -> None:
            offset = message.headers["x-stream-offset"]
            assert isinstance(offset, int)
            received.append((offset, message.body))
            if not no_ack:
                message.ack()

        stream = self._queue(queue, consumer_arguments=arguments)
        with self._connection() as connection:
            channel = connection.channel()
            # kombu's basic.consume does not wait for consume-ok: a refusal comes while draining.
            consumer = Consumer(
                channel,
                [stream],
                callbacks=[take],
                no_ack=no_ack,
                prefetch_count=prefetch,
                auto_declare=False,
            )
            if global_qos:
                consumer.qos(prefetch_count=prefetch or 10, apply_global=True)
            with consumer:
                stream(channel).queue_declare(passive=True)  # a round trip: consume-ok is in
                if then is not None:
                    then()
                deadline = time.monotonic() + timeout
                while len(received) < count and time.monotonic() < deadline:
                    with contextlib.suppress(TimeoutError):
                        connection.drain_events(timeout=0.1)
        return received[:count]

    def get(self, queue: str) -> None:
        with self._connection() as connection:
            self._queue(queue)(connection.channel()).get()

    def message_count(self, queue: str) -> int:
        with self._connection() as connection:
            _name, count, _consumers = self._queue(queue)(connection.channel()).queue_declare(
                passive=True
            )
        return int(count)
