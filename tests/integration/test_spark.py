"""The `batonmq` PySpark data source with a real broker and a real local Spark (`local[2]`):
stream queues read by offset as a batch and as a stream, exactly once across query restarts and
broker restarts, and rows published with confirms.

Spark's contract for a streaming source ("DataSourceStreamReader"): a micro-batch is the range
between two offsets that Spark checkpoints before it runs; after a failure "Spark will restart
from the check-pointed offset", so a source that reads the same rows for the same range gives
exactly-once output into an idempotent sink (the file sink, whose own log drops a batch
written twice). All the tests share one SparkSession: its JVM takes seconds to start.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pika
import pytest

from tests.brokerproc import BrokerLife, RunningBroker
from tests.faultproxy import FaultProxy
from tests.integration.test_readme import readme_blocks

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("java") is None and not os.environ.get("CI"),
        reason="PySpark needs a Java runtime (CI installs one; there this test must run)",
    ),
]

if not os.environ.get("CI"):
    pytest.importorskip(
        "pyspark", reason="the spark extra is not installed: pip install -e '.[spark]'"
    )
from pyspark.sql import DataFrame, Row, SparkSession  # noqa: E402
from pyspark.sql.streaming import StreamingQuery  # noqa: E402

import batonmq.spark  # noqa: E402
from batonmq.spark import publisher  # noqa: E402
from batonmq.spark.rows import Publication  # noqa: E402

STREAM = {"x-queue-type": "stream"}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark for every test: two cores, no web UI, two shuffle partitions, and this
    Python (with BatonMQ installed) for its workers: PySpark starts them with the `python3` on
    PATH unless PYSPARK_PYTHON says otherwise, and its Python data sources' planners ignore
    spark.pyspark.python."""
    before = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("batonmq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    batonmq.spark.register(session)
    yield session
    session.stop()
    if before is None:
        del os.environ["PYSPARK_PYTHON"]
    else:
        os.environ["PYSPARK_PYTHON"] = before


def declare_and_publish(url: str, queue: str, bodies: list[bytes], **arguments: object) -> None:
    """Declare the stream `queue` (if need be) and publish `bodies` to it with confirms."""
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True, arguments={**STREAM, **arguments})
        channel.confirm_delivery()
        for body in bodies:
            channel.basic_publish(
                "",
                queue,
                body,
                pika.BasicProperties(
                    headers={"n": body.decode()}, message_id=body.decode(), timestamp=1_700_000_000
                ),
            )


def read_stream(url: str, queue: str, count: int) -> list[tuple[int, bytes]]:
    """(offset, body) of the first `count` messages of the stream `queue`."""
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=1000)
        read = []
        for method, properties, body in channel.consume(
            queue, arguments={"x-stream-offset": "first"}, inactivity_timeout=30
        ):
            assert method is not None, f"only {len(read)} of {count} messages came"
            channel.basic_ack(method.delivery_tag)
            read.append((properties.headers["x-stream-offset"], body))
            if len(read) == count:
                break
        channel.cancel()
    return read


def bodies(numbers: range) -> list[bytes]:
    return [f"m{number}".encode() for number in numbers]


def stream_query(
    spark: SparkSession, url: str, queue: str, out: Path, checkpoint: Path, **options: str
) -> tuple[DataFrame, dict[str, str]]:
    source = spark.readStream.format("batonmq").option("url", url).option("queue", queue)
    for name, value in options.items():
        source = source.option(name, value)
    return source.load().select("offset", "body"), {
        "path": str(out),
        "checkpointLocation": str(checkpoint),
    }


def written(spark: SparkSession, out: Path) -> list[tuple[int, bytes]]:
    """(offset, body) of every row the file sink committed, in offset order."""
    rows = spark.read.parquet(str(out)).collect()
    return sorted((row.offset, bytes(row.body)) for row in rows)


def ends_on_its_own(query: StreamingQuery) -> StreamingQuery:
    """Trigger.AvailableNow "processes all available data ... and then terminates" (Spark's
    Structured Streaming guide): awaitTermination(timeout) returns True once it has, False if
    it is still running, and a query that never ends fails the test."""
    assert query.awaitTermination(120) is True, "the AvailableNow query did not end on its own"
    return query


def run_available_now(frame: DataFrame, sink: dict[str, str]) -> StreamingQuery:
    return ends_on_its_own(
        frame.writeStream.format("parquet").options(**sink).trigger(availableNow=True).start()
    )


def test_a_batch_read_returns_exactly_the_range_asked_for(spark, broker: RunningBroker):
    """startingOffset and endingOffset are stream offsets, the end excluded; the rows carry each
    message's offset, headers, properties and body, split over several partitions."""
    declare_and_publish(broker.url, "events", bodies(range(30)))

    frame = (
        spark.read.format("batonmq")
        .option("url", broker.url)
        .option("queue", "events")
        .option("startingOffset", "5")
        .option("endingOffset", "17")
        .option("recordsPerPartition", "5")
        .load()
    )
    rows = sorted(frame.collect(), key=lambda row: row.offset)

    assert frame.rdd.getNumPartitions() == 3
    assert [(row.offset, bytes(row.body)) for row in rows] == list(
        zip(range(5, 17), bodies(range(5, 17)), strict=True)
    )
    assert rows[0].headers == {"n": "m5"}
    assert rows[0].properties.message_id == "m5"
    assert (rows[0].routing_key, rows[0].exchange, rows[0].queue) == ("events", "", "events")
    assert rows[0].properties.timestamp.timestamp() == 1_700_000_000


def test_a_batch_read_from_first_to_next_reads_the_whole_stream(spark, broker: RunningBroker):
    """The defaults: from the first message the stream keeps to its end when the query is
    planned."""
    declare_and_publish(broker.url, "events", bodies(range(12)))

    rows = spark.read.format("batonmq").option("url", broker.url).option("queue", "events").load()

    assert sorted(row.offset for row in rows.collect()) == list(range(12))


def test_a_rows_timestamp_is_when_the_stream_appended_it_and_what_a_timestamp_seeks_by(
    spark, batonmq: RunningBroker
):
    """The issue's schema has `timestamp` timestamp beside `properties.timestamp`. RabbitMQ's
    streams give every chunk the timestamp of when it was written, and an x-stream-offset
    timestamp attaches "at the chunk written then": the column is that moment (BatonMQ delivers
    it in x-batonmq-stream-timestamp, which RabbitMQ does not send), so a `startingOffset`
    timestamp reads exactly the rows whose `timestamp` is at or after it; `properties.timestamp`
    stays the publisher's, here one of 2023."""
    before = time.time_ns() // 1_000_000
    declare_and_publish(batonmq.url, "events", bodies(range(3)))
    after = time.time_ns() // 1_000_000
    time.sleep(1.1)
    moment = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    time.sleep(0.1)
    declare_and_publish(batonmq.url, "events", bodies(range(3, 5)))

    def read(**options: str) -> list[Row]:
        frame = spark.read.format("batonmq").option("url", batonmq.url).option("queue", "events")
        for name, value in options.items():
            frame = frame.option(name, value)
        return sorted(frame.load().collect(), key=lambda row: row.offset)

    rows = read()
    appended = {row.offset: round(row.timestamp.timestamp() * 1000) for row in rows}
    assert all(before <= appended[offset] <= after for offset in range(3))
    assert all(row.properties.timestamp.timestamp() == 1_700_000_000 for row in rows)
    assert all("x-batonmq-stream-timestamp" not in row.headers for row in rows)
    since = [offset for offset, at in appended.items() if at >= moment.timestamp() * 1000]
    assert since == [3, 4]
    assert [row.offset for row in read(startingOffset=moment.isoformat())] == since


def test_a_read_between_two_timestamps_reads_what_was_written_between_them(
    spark, broker: RunningBroker
):
    """The issue's `startingOffsets`: "earliest | latest | an offset | a timestamp". A timestamp
    is RabbitMQ's x-stream-offset timestamp ("the consumer starts at the chunk written then");
    AMQP timestamps are whole seconds, so the moments here fall on whole seconds between the
    publishes. A moment after the newest message stands for the end of the stream."""

    def second_boundary() -> datetime.datetime:
        time.sleep(1.1)
        moment = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
        time.sleep(0.1)
        return moment

    def read(**options: str) -> list[int]:
        frame = spark.read.format("batonmq").option("url", broker.url).option("queue", "events")
        for name, value in options.items():
            frame = frame.option(name, value)
        return sorted(row.offset for row in frame.load().collect())

    declare_and_publish(broker.url, "events", bodies(range(5)))
    after_five = second_boundary()
    declare_and_publish(broker.url, "events", bodies(range(5, 12)))
    after_twelve = second_boundary()
    declare_and_publish(broker.url, "events", bodies(range(12, 15)))
    later = second_boundary()

    assert read(startingOffset=after_five.isoformat()) == list(range(5, 15))
    assert read(
        startingOffset=after_five.isoformat(),
        endingOffset=after_twelve.strftime("%Y-%m-%d %H:%M:%S"),
    ) == list(range(5, 12))
    assert read(startingOffset=later.isoformat()) == []
    assert read(endingOffset=after_five.isoformat()) == list(range(5))


@pytest.mark.timeout(300)
def test_a_streaming_query_starts_at_latest_an_offset_or_a_timestamp(
    spark, batonmq: RunningBroker, tmp_path: Path
):
    """The issue's readStream `startingOffsets`: "earliest | latest | an offset | a timestamp".
    latest (x-stream-offset "next") reads only what comes after the query started, an offset
    reads from that offset, a timestamp from the first chunk written at or after it (RabbitMQ's
    x-stream-offset timestamp, whole seconds)."""
    declare_and_publish(batonmq.url, "events", bodies(range(5)))
    time.sleep(1.1)
    moment = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    time.sleep(0.1)
    declare_and_publish(batonmq.url, "events", bodies(range(5, 10)))

    def run(name: str, starting: str) -> Path:
        out = tmp_path / name
        frame, sink = stream_query(
            spark, batonmq.url, "events", out, tmp_path / f"{name}-checkpoint",
            startingOffsets=starting,
        )  # fmt: skip
        run_available_now(frame, sink)
        return out

    def messages(offsets: range) -> list[tuple[int, bytes]]:
        return list(zip(offsets, bodies(offsets), strict=True))

    assert written(spark, run("offset", "7")) == messages(range(7, 10))
    assert written(spark, run("moment", moment.isoformat())) == messages(range(5, 10))
    frame, sink = stream_query(
        spark, batonmq.url, "events", tmp_path / "latest", tmp_path / "latest-checkpoint",
        startingOffsets="latest",
    )  # fmt: skip
    query = frame.writeStream.format("parquet").options(**sink).start()
    try:
        query.processAllAvailable()  # started: its start is the end of the stream then
        declare_and_publish(batonmq.url, "events", bodies(range(10, 13)))
        query.processAllAvailable()
    finally:
        query.stop()
    assert written(spark, tmp_path / "latest") == messages(range(10, 13))


@pytest.mark.timeout(300)
def test_a_streaming_query_over_a_range_retention_removed_fails_unless_loss_is_accepted(
    spark, batonmq: RunningBroker, tmp_path: Path
):
    """failOnDataLoss through readStream, as through spark.read: a micro-batch whose offsets
    retention removed fails the query with the data-loss error, or, with failOnDataLoss false,
    the query reads what the stream still keeps."""
    declare_and_publish(
        batonmq.url,
        "small",
        [f"{number:0200}".encode() for number in range(40)],
        **{"x-max-length-bytes": 3000, "x-stream-max-segment-size-bytes": 1000},
    )

    def run(name: str, fail_on_data_loss: str) -> Path:
        out = tmp_path / name
        frame, sink = stream_query(
            spark, batonmq.url, "small", out, tmp_path / f"{name}-checkpoint",
            startingOffsets="0", failOnDataLoss=fail_on_data_loss,
        )  # fmt: skip
        run_available_now(frame, sink)
        return out

    with pytest.raises(Exception, match=r"no longer holds offsets 0 to \d+") as raised:
        run("strict", "true")
    assert "failOnDataLoss" in str(raised.value)
    kept = [offset for offset, _body in written(spark, run("lenient", "false"))]
    assert kept[0] > 0 and kept == list(range(kept[0], 40))


@pytest.mark.timeout(300)
def test_a_streaming_query_restarted_from_its_checkpoint_reads_each_message_once(
    spark, batonmq: RunningBroker, tmp_path: Path
):
    """Exactly once across restarts: a query run with Trigger.AvailableNow and
    maxRecordsPerBatch (Spark: "The source must always respect the given readLimit"), then one
    stopped in the middle of its micro-batches, then one that finishes, all on the same
    checkpoint: every offset is in the sink once."""
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    declare_and_publish(batonmq.url, "events", bodies(range(40)))
    frame, sink = stream_query(
        spark, batonmq.url, "events", out, checkpoint, maxRecordsPerBatch="15"
    )

    first = run_available_now(frame, sink)
    sizes = [progress["numInputRows"] for progress in first.recentProgress]
    assert written(spark, out) == list(zip(range(40), bodies(range(40)), strict=True))
    assert sorted(sizes, reverse=True)[:3] == [15, 15, 10]

    declare_and_publish(batonmq.url, "events", bodies(range(40, 100)))
    frame, sink = stream_query(
        spark, batonmq.url, "events", out, checkpoint, maxRecordsPerBatch="5"
    )
    stopped = (
        frame.writeStream.format("parquet").options(**sink).trigger(processingTime="0 seconds")
    ).start()
    while not any(progress["numInputRows"] for progress in stopped.recentProgress):
        time.sleep(0.05)
    stopped.stop()
    assert len(written(spark, out)) < 100

    run_available_now(frame, sink)
    assert written(spark, out) == list(zip(range(100), bodies(range(100)), strict=True))


#: A Spark driver of its own, to be killed: a streaming query of ten messages a micro-batch,
#: with the trigger its last argument gives (keyword arguments of DataStreamWriter.trigger, as
#: JSON).
KILLED_DRIVER = """
import json, sys
from pyspark.sql import SparkSession
import batonmq.spark

url, out, checkpoint, trigger = sys.argv[1:]
spark = (
    SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "2").getOrCreate()
)
batonmq.spark.register(spark)
(
    spark.readStream.format("batonmq").option("url", url).option("queue", "events")
    .option("maxRecordsPerBatch", "10").load().select("offset", "body")
    .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
    .trigger(**json.loads(trigger)).start().awaitTermination()
)
"""


def kill_after_first_commit(
    driver: str, url: str, out: Path, checkpoint: Path, *, available_now: bool = False
) -> None:
    """Run the Spark driver `driver` (Python source taking url, out, checkpoint and its
    trigger) in a session of its own, its query triggered every moment or, if
    `available_now`, with Trigger.AvailableNow, and SIGKILL it with its JVM and workers once
    it has committed a micro-batch."""
    trigger = {"availableNow": True} if available_now else {"processingTime": "0 seconds"}
    process = subprocess.Popen(
        [sys.executable, "-c", driver, url, str(out), str(checkpoint), json.dumps(trigger)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list((checkpoint / "commits").glob("[0-9]*")):
            assert process.poll() is None, "the Spark driver ended before it was killed"
            assert time.monotonic() < deadline, "the Spark driver committed no micro-batch"
            time.sleep(0.1)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)


@pytest.mark.timeout(300)
def test_a_query_whose_spark_was_killed_mid_way_resumes_from_its_checkpoint_exactly_once(
    spark, batonmq: RunningBroker, tmp_path: Path
):
    """The Spark driver (its JVM and Python workers) killed with SIGKILL once it has committed
    a micro-batch, not stopped: the query restarted on the same checkpoint reads on from the
    last committed batch and redoes the one in flight, and the sink holds every message once."""
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    declare_and_publish(batonmq.url, "events", bodies(range(300)))
    kill_after_first_commit(KILLED_DRIVER, batonmq.url, out, checkpoint)
    assert 0 < len(written(spark, out)) < 300

    frame, sink = stream_query(spark, batonmq.url, "events", out, checkpoint)
    run_available_now(frame, sink)

    assert written(spark, out) == list(zip(range(300), bodies(range(300)), strict=True))


@pytest.mark.timeout(300)
def test_an_available_now_query_with_a_batch_limit_killed_mid_way_resumes_exactly_once(
    spark, batonmq: RunningBroker, tmp_path: Path
):
    """The issue: "kill the query mid-way (the Spark process, not a graceful stop), restart it
    from the checkpoint: exactly N distinct rows, each once. The same with Trigger.AvailableNow
    and with maxRecordsPerBatch": both at once here. A query of Trigger.AvailableNow reading
    ten messages a micro-batch is killed with SIGKILL once it has committed one; restarted the
    same way on its checkpoint, it reads on in micro-batches of at most ten until the end it
    saw at its start, and the sink holds every message once."""
    count = 60
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    declare_and_publish(batonmq.url, "events", bodies(range(count)))
    kill_after_first_commit(KILLED_DRIVER, batonmq.url, out, checkpoint, available_now=True)
    assert 0 < len(written(spark, out)) < count

    frame, sink = stream_query(
        spark, batonmq.url, "events", out, checkpoint, maxRecordsPerBatch="10"
    )
    restarted = run_available_now(frame, sink)

    assert written(spark, out) == list(zip(range(count), bodies(range(count)), strict=True))
    assert 0 < max(progress["numInputRows"] for progress in restarted.recentProgress) <= 10


#: A Spark driver of its own, to be killed: a classic queue read ten messages a micro-batch.
KILLED_CLASSIC_DRIVER = KILLED_DRIVER.replace(
    '.option("queue", "events")', '.option("queue", "jobs").option("queueType", "classic")'
).replace('.select("offset", "body")', '.select("body")')


def publish_to_classic(url: str, queue: str, bodies: list[bytes]) -> None:
    with pika.BlockingConnection(pika.URLParameters(url)) as connection:
        channel = connection.channel()
        channel.queue_declare(queue, durable=True)
        channel.confirm_delivery()
        for body in bodies:
            channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))


@pytest.mark.timeout(300)
def test_a_classic_queue_read_by_a_killed_query_loses_no_message(
    spark, batonmq: RunningBroker, tmp_path: Path
):
    """The issue: "On a classic queue: at-least-once, documented as such (messages are
    acknowledged only after the batch that holds them has been committed)". The Spark driver is
    killed with SIGKILL once it has committed a micro-batch: the messages it had taken and not
    acknowledged go back to the queue (AMQP 0-9-1: a closed channel's unacknowledged messages
    are requeued), so the query restarted on its checkpoint writes every message at least once,
    and acknowledges them all."""
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    publish_to_classic(batonmq.url, "jobs", bodies(range(300)))
    kill_after_first_commit(KILLED_CLASSIC_DRIVER, batonmq.url, out, checkpoint)
    before = spark.read.parquet(str(out)).count()
    assert 0 < before < 300

    frame = (
        spark.readStream.format("batonmq")
        .option("url", batonmq.url)
        .option("queue", "jobs")
        .option("queueType", "classic")
        .load()
        .select("body")
    )
    run_available_now(frame, {"path": str(out), "checkpointLocation": str(checkpoint)})

    rows = [bytes(row.body) for row in spark.read.parquet(str(out)).collect()]
    assert set(rows) == set(bodies(range(300)))
    with pika.BlockingConnection(pika.URLParameters(batonmq.url)) as connection:
        declared = connection.channel().queue_declare("jobs", passive=True)
    assert declared.method.message_count == 0


@pytest.mark.timeout(300)
def test_a_classic_queue_query_goes_on_across_a_broker_restart(spark, tmp_path: Path):
    """A broker restarted between two micro-batches breaks the driver's consumer: it connects
    again (pika's connection_attempts and retry_delay, from the URL) and takes what the queue
    holds, so every message published before and after reaches the sink."""
    life = BrokerLife(tmp_path / "broker", {})
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    try:
        with FaultProxy(life.current.host, life.current.port) as proxy:
            url = proxy.url(life.current, "connection_attempts=60&retry_delay=0.5")
            publish_to_classic(url, "jobs", bodies(range(10)))
            frame = (
                spark.readStream.format("batonmq")
                .option("url", url)
                .option("queue", "jobs")
                .option("queueType", "classic")
                .load()
                .select("body")
            )
            query = (
                frame.writeStream.format("parquet")
                .option("path", str(out))
                .option("checkpointLocation", str(checkpoint))
                .trigger(processingTime="200 milliseconds")
                .start()
            )
            try:
                query.processAllAvailable()
                assert spark.read.parquet(str(out)).count() >= 10

                restarted = life.restart(kill=False)
                proxy.target = (restarted.host, restarted.port)
                publish_to_classic(url, "jobs", bodies(range(10, 25)))
                query.processAllAvailable()
            finally:
                query.stop()
            assert query.exception() is None
    finally:
        life.stop()

    rows = {bytes(row.body) for row in spark.read.parquet(str(out)).collect()}
    assert rows == set(bodies(range(25)))


def test_a_classic_queue_is_not_read_as_a_batch(spark, broker: RunningBroker):
    """A batch read would take the messages away for good: only readStream reads one."""
    publish_to_classic(broker.url, "jobs", [b"kept"])
    frame = (
        spark.read.format("batonmq")
        .option("url", broker.url)
        .option("queue", "jobs")
        .option("queueType", "classic")
    )

    with pytest.raises(Exception, match=r"read with spark\.readStream only"):
        frame.load().collect()
    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        assert connection.channel().queue_declare("jobs", passive=True).method.message_count == 1


@pytest.mark.timeout(300)
def test_a_streaming_query_goes_on_across_a_broker_restart_between_micro_batches(
    spark, tmp_path: Path
):
    """A broker restarted between two micro-batches (clean stop, then started on the same
    data) is connected to again (pika's connection_attempts and retry_delay, from the URL), and
    the query reads what was published before and after, each message once."""
    life = BrokerLife(tmp_path / "broker", {})
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    try:
        with FaultProxy(life.current.host, life.current.port) as proxy:
            url = proxy.url(life.current, "connection_attempts=60&retry_delay=0.5")
            declare_and_publish(url, "events", bodies(range(10)))
            frame, sink = stream_query(spark, url, "events", out, checkpoint)
            query = (
                frame.writeStream.format("parquet")
                .options(**sink)
                .trigger(processingTime="200 milliseconds")
                .start()
            )
            try:
                query.processAllAvailable()
                assert len(written(spark, out)) == 10

                restarted = life.restart(kill=False)
                proxy.target = (restarted.host, restarted.port)
                declare_and_publish(url, "events", bodies(range(10, 25)))
                query.processAllAvailable()
            finally:
                query.stop()
            assert query.exception() is None
    finally:
        life.stop()

    assert written(spark, out) == list(zip(range(25), bodies(range(25)), strict=True))


def test_a_range_that_retention_removed_fails_the_read_unless_loss_is_accepted(
    spark, batonmq: RunningBroker
):
    """A stream keeps what retention leaves (x-max-length-bytes, whole segments): reading
    offsets it removed fails with a data-loss error that names them, or, with failOnDataLoss
    false, reads what is left."""
    declare_and_publish(
        batonmq.url,
        "small",
        [bytes(200) for _ in range(40)],
        **{"x-max-length-bytes": 3000, "x-stream-max-segment-size-bytes": 1000},
    )

    def read(fail_on_data_loss: str) -> list[int]:
        frame = (
            spark.read.format("batonmq")
            .option("url", batonmq.url)
            .option("queue", "small")
            .option("startingOffset", "0")
            .option("failOnDataLoss", fail_on_data_loss)
            .load()
        )
        return sorted(row.offset for row in frame.collect())

    with pytest.raises(Exception, match=r"no longer holds offsets 0 to \d+") as raised:
        read("true")
    assert "failOnDataLoss" in str(raised.value)
    kept = read("false")
    assert kept[0] > 0 and kept == list(range(kept[0], 40))


def test_a_dataframe_written_to_the_broker_is_published_with_confirms(spark, broker: RunningBroker):
    """df.write publishes each row (body, routing_key, headers, properties) with a publisher
    confirm: once the write returns, every row is in the stream."""
    declare_and_publish(broker.url, "sunk", [])
    frame = spark.createDataFrame(
        [(f"r{number}".encode(), {"n": str(number)}, (f"id-{number}",)) for number in range(20)],
        "body binary, headers map<string,string>, properties struct<message_id: string>",
    ).repartition(2)

    frame.write.format("batonmq").option("url", broker.url).option("routingKey", "sunk").mode(
        "append"
    ).save()

    rows = (
        spark.read.format("batonmq").option("url", broker.url).option("queue", "sunk").load()
    ).collect()
    assert sorted(bytes(row.body) for row in rows) == sorted(
        f"r{number}".encode() for number in range(20)
    )
    assert {row.properties.message_id: row.headers["n"] for row in rows} == {
        f"id-{number}": str(number) for number in range(20)
    }


def test_a_row_that_no_queue_takes_fails_the_write(spark, broker: RunningBroker):
    """Rows are published as mandatory messages: one that is routed nowhere comes back
    (basic.return) and fails its task, rather than vanishing."""
    frame = spark.createDataFrame([(b"lost", "nowhere")], "body binary, routing_key string")

    with pytest.raises(Exception, match="UnroutableError"):
        frame.write.format("batonmq").option("url", broker.url).mode("append").save()


def test_rows_are_published_many_unconfirmed_at_a_time_and_all_confirmed(broker: RunningBroker):
    """RabbitMQ's "Publisher Confirms" guidance: keep many messages in flight and handle the
    confirms as they come; a task's count is returned once every message is confirmed. More
    rows than the window, into a stream: each stored once, in the order published."""
    declare_and_publish(broker.url, "window", [])
    count = 2 * publisher.WINDOW + 7
    rows = (Publication("", "window", f"m{number}".encode(), {}, {}) for number in range(count))

    assert publisher.publish_confirmed(broker.url, rows) == count

    with pika.BlockingConnection(pika.URLParameters(broker.url)) as connection:
        declared = connection.channel().queue_declare("window", passive=True)
    assert declared.method.message_count == count
    assert read_stream(broker.url, "window", count) == list(
        zip(range(count), bodies(range(count)), strict=True)
    )


def test_a_returned_message_fails_the_publishing_with_unroutable_error(broker: RunningBroker):
    """Mandatory messages: "the server will return an unroutable message with a Return
    method" (AMQP 0-9-1, basic.publish), before its confirm; the task fails as pika's blocking
    channel fails it, and publishes nothing after."""
    rows = [Publication("", "nowhere", b"lost", {}, {})] * 3

    with pytest.raises(pika.exceptions.UnroutableError):
        publisher.publish_confirmed(broker.url, rows, window=1)


@pytest.mark.timeout(300)
def test_a_stream_copied_to_another_stream_by_a_streaming_query(
    spark, broker: RunningBroker, tmp_path: Path
):
    """df.writeStream.format("batonmq"): each micro-batch published with confirms."""
    declare_and_publish(broker.url, "events", bodies(range(15)))
    declare_and_publish(broker.url, "copy", [])
    frame = (
        spark.readStream.format("batonmq")
        .option("url", broker.url)
        .option("queue", "events")
        .load()
        .select("body", "headers")
    )

    query = (
        frame.writeStream.format("batonmq")
        .option("url", broker.url)
        .option("routingKey", "copy")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    ends_on_its_own(query)

    rows = (
        spark.read.format("batonmq").option("url", broker.url).option("queue", "copy").load()
    ).collect()
    assert sorted((bytes(row.body), row.headers["n"]) for row in rows) == sorted(
        (body, body.decode()) for body in bodies(range(15))
    )


@pytest.mark.timeout(300)
def test_a_micro_batch_replayed_into_a_stream_is_stored_once(
    spark, broker: RunningBroker, tmp_path: Path
):
    """The issue: "into a stream, idempotent per batch (message ids derived from batch id and
    row position and deduplicated by the stream)". A micro-batch whose rows were all published
    but whose commit Spark did not record (its driver died in between: here the commit file is
    removed) is run again with the same batch id on restart; the stream drops every row it
    already holds (RabbitMQ's deduplication), so the copy holds each message once."""
    declare_and_publish(broker.url, "events", bodies(range(30)))
    declare_and_publish(broker.url, "copy", [])
    checkpoint = tmp_path / "checkpoint"

    def copy() -> StreamingQuery:
        frame = (
            spark.readStream.format("batonmq")
            .option("url", broker.url)
            .option("queue", "events")
            .option("maxRecordsPerBatch", "10")
            .option("recordsPerPartition", "4")
            .load()
            .select("body", "headers")
        )
        query = (
            frame.writeStream.format("batonmq")
            .option("url", broker.url)
            .option("routingKey", "copy")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        return ends_on_its_own(query)

    copy()
    last = max(int(path.name) for path in (checkpoint / "commits").glob("[0-9]*"))
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink()  # Hadoop's checksum of it
    replayed = copy()

    assert [(p["batchId"], p["numInputRows"]) for p in replayed.recentProgress][:1] == [(last, 10)]
    rows = (
        spark.read.format("batonmq").option("url", broker.url).option("queue", "copy").load()
    ).collect()
    assert sorted(bytes(row.body) for row in rows) == sorted(bodies(range(30)))
    assert sorted(row.offset for row in rows) == list(range(30))


#: A Spark driver of its own that never imports BatonMQ: it reads the stream url/queue as a
#: batch and prints its bodies, then the BatonMQ modules it imported (none, if Spark found the
#: data source itself: its planning runs in Spark's Python workers).
DISCOVERING_DRIVER = """
import json, sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[*]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
url, queue = sys.argv[1:3]
rows = spark.read.format("batonmq").option("url", url).option("queue", queue).load().collect()
imported = sorted(name for name in sys.modules if name.split(".")[0] == "batonmq")
print(json.dumps([sorted(bytes(row.body).decode() for row in rows), imported]))
spark.stop()
"""


@pytest.mark.timeout(300)
def test_spark_finds_the_installed_data_source_without_register(broker: RunningBroker):
    """PySpark 4 registers by itself "the available Python Data Sources in Python path": each
    importable module whose name begins with pyspark_ and whose DefaultSource is a DataSource
    (pyspark.sql.worker.lookup_data_sources). BatonMQ's is pyspark_batonmq, so format("batonmq")
    works on local[*] in a session that never called batonmq.spark.register."""
    declare_and_publish(broker.url, "found", bodies(range(20)))

    finished = subprocess.run(
        [sys.executable, "-c", DISCOVERING_DRIVER, broker.url, "found"],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
        check=False,
    )

    assert finished.returncode == 0, finished.stderr[-3000:]
    read, imported = json.loads(finished.stdout.splitlines()[-1])
    assert read == sorted(body.decode() for body in bodies(range(20)))
    assert imported == []


@pytest.mark.timeout(300)
def test_the_readme_spark_job_runs_as_written(spark, broker: RunningBroker, tmp_path: Path):
    """The README's ```python block, run as it is written, with this test's broker for
    localhost:5672 and its own directory for /tmp (test_readme.py leaves it to this test)."""
    (block,) = [block for block in readme_blocks() if "import batonmq.spark" in block.text]
    declare_and_publish(broker.url, "events", bodies(range(150)))
    declare_and_publish(broker.url, "copy", [])
    code = block.text.replace("amqp://guest:guest@localhost:5672/%2F", broker.url)
    code = code.replace("/tmp/", f"{tmp_path}/")

    exec(compile(code, f"README.md:{block.line}", "exec"), {})

    assert written(spark, tmp_path / "events") == list(
        zip(range(150), bodies(range(150)), strict=True)
    )
    copied = (
        spark.read.format("batonmq").option("url", broker.url).option("queue", "copy").load()
    ).collect()
    assert sorted(bytes(row.body) for row in copied) == sorted(bodies(range(100)))
