"""Rows published with publisher confirms, many unconfirmed at a time.

pika's blocking channel waits for each message's confirm before it sends the next: one round
trip, and on a stream one append and its flush to the disk, per row. RabbitMQ's guidance for
confirms ("Publisher Confirms": "publishing messages in batches" or "handling publisher confirms
asynchronously") is to keep many in flight and settle them as the broker acknowledges, often
many at once with `multiple`. This publisher does that on pika's SelectConnection (pika's own
event loop, so a Spark task, which is synchronous, simply runs it to the end): at most WINDOW
messages unconfirmed, the next ones sent as acknowledgements come in. A task succeeds only once
every message is confirmed; a nack, a returned (unroutable mandatory) message, a channel or
connection closed, or a row that cannot be published, fails it, and Spark's retry publishes the
task's rows again (at least once).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

import pika  # type: ignore[import-untyped]
import pika.adapters.blocking_connection  # type: ignore[import-untyped]
import pika.exceptions  # type: ignore[import-untyped]

from batonmq.spark.rows import Publication

#: Messages published and not yet confirmed, at most (the load generator's default too).
WINDOW: Final = 1000
#: Persistent, unless a row's properties say otherwise.
PERSISTENT: Final = 2


class PublishFailed(RuntimeError):
    """The broker nacked a message, or the channel or connection went, before every message
    was confirmed. The message says which."""


class _WindowedPublisher:
    def __init__(self, url: str, publications: Iterator[Publication], window: int) -> None:
        self._publications = publications
        self._window = window
        self._exhausted = False
        self.published = 0
        #: Delivery tags (1, 2, ... in publishing order) not yet confirmed.
        self._unconfirmed: set[int] = set()
        self.failure: BaseException | None = None
        self._channel: Any = None
        self._connection = pika.SelectConnection(
            pika.URLParameters(url),
            on_open_callback=self._opened,
            on_open_error_callback=self._not_opened,
            on_close_callback=self._closed,
        )

    def run(self) -> int:
        ioloop = self._connection.ioloop
        try:
            ioloop.start()
        finally:
            ioloop.close()  # its wake-up socket pair
        if self.failure is not None:
            raise self.failure
        return self.published

    @property
    def done(self) -> bool:
        return self._exhausted and not self._unconfirmed

    def _opened(self, connection: Any) -> None:
        connection.channel(on_open_callback=self._channel_opened)

    def _not_opened(self, _connection: Any, error: BaseException) -> None:
        self.failure = error if isinstance(error, Exception) else PublishFailed(str(error))
        self._connection.ioloop.stop()

    def _channel_opened(self, channel: Any) -> None:
        self._channel = channel
        channel.add_on_close_callback(self._channel_closed)
        channel.add_on_return_callback(self._returned)
        channel.confirm_delivery(ack_nack_callback=self._settled, callback=self._selected)

    def _selected(self, _frame: Any) -> None:
        self._publish_more()

    def _publish_more(self) -> None:
        if self.failure is not None:
            return
        try:
            while not self._exhausted and len(self._unconfirmed) < self._window:
                publication = next(self._publications, None)
                if publication is None:
                    self._exhausted = True
                    break
                properties = {"delivery_mode": PERSISTENT, **publication.properties}
                self._channel.basic_publish(
                    publication.exchange,
                    publication.routing_key,
                    publication.body,
                    pika.BasicProperties(headers=publication.headers, **properties),
                    mandatory=True,
                )
                self.published += 1
                self._unconfirmed.add(self.published)
        except Exception as error:  # a row that cannot be published fails the task
            self._fail(error)
            return
        if self.done:
            self._connection.close()

    def _settled(self, frame: Any) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            self._fail(PublishFailed(f"the broker nacked message {method.delivery_tag}"))
            return
        if method.multiple:
            self._unconfirmed = {tag for tag in self._unconfirmed if tag > method.delivery_tag}
        else:
            self._unconfirmed.discard(method.delivery_tag)
        self._publish_more()

    def _returned(self, _channel: Any, method: Any, properties: Any, body: bytes) -> None:
        # Before the message's ack (AMQP 0-9-1 confirms: basic.return comes first): what
        # pika's blocking channel raises for it.
        returned = pika.adapters.blocking_connection.ReturnedMessage(method, properties, body)
        self._fail(pika.exceptions.UnroutableError([returned]))

    def _fail(self, error: BaseException) -> None:
        if self.failure is None:
            self.failure = error
        if self._connection.is_open:
            self._connection.close()

    def _channel_closed(self, _channel: Any, reason: BaseException) -> None:
        if not self.done:
            self._fail(PublishFailed(f"the channel closed before every confirm: {reason}"))

    def _closed(self, _connection: Any, reason: BaseException) -> None:
        if self.failure is None and not self.done:
            self.failure = PublishFailed(f"the connection closed before every confirm: {reason}")
        self._connection.ioloop.stop()


def publish_confirmed(url: str, publications: Iterable[Publication], window: int = WINDOW) -> int:
    """Publish each of `publications` as a mandatory message with a publisher confirm, at most
    `window` unconfirmed; the count, once every one is confirmed. PublishFailed (or pika's
    connection error, or what a publication raised) otherwise."""
    return _WindowedPublisher(url, iter(publications), window).run()
