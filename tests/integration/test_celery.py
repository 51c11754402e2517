"""Celery over the broker: a worker runs a task and returns its result through `rpc://`.

Written against RabbitMQ 3.10.8 first (`--amqp-url`). The worker runs in a thread of the test
process (celery.contrib.testing.worker.start_worker, solo pool); broker and result backend both go
through the broker under test: tasks on a queue of the test's own, results on the client's
auto-delete reply queue (the rpc:// backend). Remote control and events are off so that nothing
named outside this test (celery.pidbox, celeryev) is left on a shared broker.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker

from tests.brokerproc import RunningBroker


def pyamqp_url(broker: RunningBroker) -> str:
    vhost = quote(broker.vhost, safe="")
    return f"pyamqp://{broker.username}:{broker.password}@{broker.host}:{broker.port}/{vhost}"


@pytest.fixture
def celery_app(broker: RunningBroker) -> Iterator[Celery]:
    task_queue = f"test.celery.tasks.{uuid.uuid4().hex[:12]}"
    app = Celery("batonmq-tests", broker=pyamqp_url(broker), backend="rpc://", set_as_current=False)
    app.conf.update(
        task_default_queue=task_queue,
        task_default_exchange=task_queue,
        task_default_routing_key=task_queue,
        worker_enable_remote_control=False,
        worker_send_task_events=False,
        task_send_sent_event=False,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=False,
        # No AMQP heartbeat timer: with it the worker's event loop polls with a timeout of up to a
        # minute and the in-thread worker cannot see its stop flag within shutdown_timeout.
        broker_heartbeat=0,
    )

    @app.task(name="tests.add")
    def add(x: int, y: int) -> int:
        return x + y

    try:
        yield app
    finally:
        with app.connection_for_write() as connection:
            channel = connection.default_channel
            channel.queue_delete(task_queue)
            channel.exchange_delete(task_queue)
        app.close()


@pytest.fixture
def root_logging_restored() -> Iterator[None]:
    """start_worker sets the root logger to its own level and leaves it so; put it back, so
    later tests see the logging they configure."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers


@pytest.mark.usefixtures("root_logging_restored")
def test_worker_runs_a_task_and_returns_the_result_over_rpc(celery_app: Celery) -> None:
    """task.delay(2, 3).get() == 5: the request reaches the worker, the reply reaches the caller.

    celery.backends.rpc: "RPC-style result backend, using reply-to and one queue per client": the
    task request is a message on the task queue carrying reply_to and correlation_id, and the
    worker publishes the result to the caller's reply queue through the default exchange.
    """
    add = celery_app.tasks["tests.add"]
    with start_worker(celery_app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        result = add.delay(2, 3)
        assert result.get(timeout=20) == 5
    assert result.successful()
