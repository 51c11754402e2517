"""The broker refuses a message above its configured maximum size, and only that publish's channel
suffers: a clear error, nothing buffered, every other channel and connection goes on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker

from tests.brokerproc import RunningBroker, start_broker

MAX_SIZE = 4096


@pytest.fixture
def small_broker(tmp_path: Path) -> Iterator[RunningBroker]:
    config = tmp_path / "batonmq.toml"
    config.write_text(f"[amqp]\nmax_message_size = {MAX_SIZE}\n")
    with start_broker(tmp_path, "--config", str(config)) as running:
        yield running


def test_oversized_message_closes_only_its_channel(small_broker: RunningBroker) -> None:
    """A body above amqp.max_message_size is 406 PRECONDITION_FAILED on the publishing channel.

    MQ 3.5 admin guide, imq.message.max_size: "Any message larger than this will be rejected";
    RabbitMQ answers the same case with channel error 406 "message size ... is larger than
    configured max size". The refusal comes from the content header's body-size, so the body is
    never buffered.
    """
    parameters = pika.URLParameters(small_broker.url)
    with pika.BlockingConnection(parameters) as connection:
        bystander = connection.channel()
        queue = bystander.queue_declare("", exclusive=True).method.queue
        publisher = connection.channel()
        publisher.basic_publish("", queue, b"x" * MAX_SIZE)
        publisher.basic_publish("", queue, b"x" * (MAX_SIZE + 1))
        with pytest.raises(ChannelClosedByBroker) as closed:
            publisher.queue_declare(queue, passive=True)
        assert closed.value.reply_code == 406
        assert f"larger than configured max size {MAX_SIZE}" in closed.value.reply_text

        ok = bystander.queue_declare(queue, passive=True)
        assert ok.method.message_count == 1
        method, _properties, body = bystander.basic_get(queue, auto_ack=True)
        assert method is not None
        assert body == b"x" * MAX_SIZE
