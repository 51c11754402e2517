"""A full disk under a running broker: publishers get basic.nack, a tx.commit fails with a
channel error, the broker keeps serving, nothing confirmed is lost, and the log says what
happened (the Durable messaging requirements, "Store faults"). The disk is real: a small tmpfs
mounted as the data directory (the tests run as root, here and in CI)."""

from __future__ import annotations

import os
from pathlib import Path

import pika
import pytest

from tests.brokerproc import BrokerLife
from tests.tmpfs import grow, small_disk

pytestmark = pytest.mark.integration

PERSISTENT = pika.BasicProperties(delivery_mode=2)
BODY = os.urandom(32 * 1024)


def publish_until_nacked(channel) -> list[int]:
    """Publish numbered persistent messages until one is nacked (more than the disk holds);
    the numbers confirmed before that."""
    confirmed: list[int] = []
    for number in range(1000):
        try:
            channel.basic_publish("", "big", number.to_bytes(4, "big") + BODY, PERSISTENT)
        except pika.exceptions.NackError:
            return confirmed
        confirmed.append(number)
    pytest.fail("1000 messages of 32 KiB fitted on a 2 MiB disk: no nack came")


@pytest.mark.expected_log_errors(r"store write failed: ", reason="it fills the disk")
def test_a_full_disk_nacks_publishes_and_loses_nothing_confirmed(tmp_path: Path):
    with small_disk(tmp_path / "disk", "2m") as disk:
        # The free-disk alarm would hold the publisher from the start: this test is about
        # writes that fail.
        life = BrokerLife(disk, {"BATONMQ__DISK__FREE_LIMIT": "0"})
        try:
            connection = pika.BlockingConnection(pika.URLParameters(life.current.url))
            channel = connection.channel()
            channel.confirm_delivery()
            channel.queue_declare("big", durable=True)
            confirmed = publish_until_nacked(channel)
            assert confirmed, "the disk filled before anything was stored"
            # Hardening, defect 2: "nack means the broker did not take the message: it is on no
            # queue" (before, the nacked message was enqueued and delivered all the same).
            channel = connection.channel()
            declared = channel.queue_declare("big", durable=True, passive=True)
            assert declared.method.message_count == len(confirmed)

            # Still serving: transient work needs no disk.
            channel = connection.channel()
            channel.queue_declare("scratch", durable=False)
            channel.basic_publish("", "scratch", b"still here")
            method, _properties, body = channel.basic_get("scratch", auto_ack=True)
            assert body == b"still here"

            # A transaction whose commit cannot be written fails with a channel error.
            tx_channel = connection.channel()
            tx_channel.tx_select()
            tx_channel.basic_publish("", "big", b"tx" + BODY, PERSISTENT)
            with pytest.raises(pika.exceptions.ChannelClosedByBroker) as closed:
                tx_channel.tx_commit()
            assert closed.value.reply_code == 406
            assert "tx.commit failed" in closed.value.reply_text
            connection.close()
            assert "store write failed" in life.current.log()

            # Room again (an operator freed space): everything confirmed is there, once.
            grow(disk, "64m")
            broker = life.restart(kill=True)
            with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
                channel = connection.channel()
                received = []
                while True:
                    method, _properties, body = channel.basic_get("big", auto_ack=True)
                    if method is None:
                        break
                    received.append(int.from_bytes(body[:4], "big"))
            assert received == confirmed
        finally:
            life.stop()
