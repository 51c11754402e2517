"""The Spark data source's options, checked once where Spark hands them over (BatonMQ style,
"Validate at the edge"): Spark passes option names case-insensitively."""

from __future__ import annotations

import datetime

import pytest

from batonmq.spark.options import OptionError, ReadOptions, WriteOptions

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def test_reading_needs_only_a_url_and_a_queue():
    options = ReadOptions.parse({"url": URL, "queue": "events"})

    assert options == ReadOptions(
        url=URL,
        queue="events",
        queue_type="stream",
        starting="first",
        ending="next",
        max_records_per_batch=None,
        records_per_partition=10_000,
        read_timeout=30.0,
        fail_on_data_loss=True,
    )


def test_option_names_are_case_insensitive_and_offsets_are_numbers_or_names():
    options = ReadOptions.parse(
        {
            "URL": URL,
            "queue": "events",
            "startingoffset": "last",
            "EndingOffset": "120",
            "maxRecordsPerBatch": "50",
            "recordsPerPartition": "7",
            "readTimeout": "2.5",
            "failOnDataLoss": "False",
            "QueueType": "classic",
        }
    )

    assert options.queue_type == "classic"
    assert (options.starting, options.ending) == ("last", 120)
    assert options.max_records_per_batch == 50
    assert options.records_per_partition == 7
    assert options.read_timeout == 2.5
    assert options.fail_on_data_loss is False


@pytest.mark.parametrize(
    ("given", "starting", "ending"),
    [
        ({"startingOffsets": "earliest"}, "first", "next"),
        ({"startingOffsets": "latest"}, "next", "next"),
        ({"StartingOffsets": "12", "endingOffsets": "latest"}, 12, "next"),
        ({"startingOffset": "earliest", "endingOffset": "latest"}, "first", "next"),
    ],
)
def test_the_kafka_sources_names_are_understood(given, starting, ending):
    """The issue: `startingOffsets` = `earliest` | `latest` | an offset | a timestamp, the names
    of Spark's Kafka source: earliest is the first message the stream keeps, latest only what
    comes after (x-stream-offset `first` and `next`)."""
    options = ReadOptions.parse({"url": URL, "queue": "events", **given})

    assert (options.starting, options.ending) == (starting, ending)


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"url": ""}, "'url' is required"),
        ({"queue": ""}, "'queue' is required"),
        ({"startingOffset": "oldest"}, "'startingOffset': 'oldest' is not first, last, next"),
        (
            {"startingOffset": "first", "startingOffsets": "earliest"},
            "options 'startingOffset' and 'startingOffsets' are the same option",
        ),
        ({"startingOffset": "-1"}, "'startingOffset'"),
        ({"startingOffset": "2026-13-01"}, "'startingOffset': '2026-13-01' is not first"),
        (
            {"endingOffset": "first"},
            "'endingOffset': 'first' is not next, an offset or an ISO-8601",
        ),
        ({"queueType": "quorum"}, "'queueType': 'quorum' is not stream or classic"),
        ({"maxRecordsPerBatch": "0"}, "'maxRecordsPerBatch': '0' is not a positive number"),
        ({"recordsPerPartition": "many"}, "'recordsPerPartition'"),
        ({"readTimeout": "0"}, "'readTimeout'"),
        ({"failOnDataLoss": "maybe"}, "'failOnDataLoss': 'maybe' is not true or false"),
    ],
)
def test_an_option_the_source_cannot_use_is_named(given, named):
    options = {"url": URL, "queue": "events", **given}

    with pytest.raises(OptionError) as raised:
        ReadOptions.parse(options)

    assert named in str(raised.value)


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("2026-11-26T01:02:03Z", datetime.datetime(2026, 11, 26, 1, 2, 3, tzinfo=datetime.UTC)),
        (
            "2026-11-26T02:02:03+01:00",
            datetime.datetime(2026, 11, 26, 1, 2, 3, tzinfo=datetime.UTC),
        ),
        ("2026-11-26 01:02:03", datetime.datetime(2026, 11, 26, 1, 2, 3, tzinfo=datetime.UTC)),
        ("2026-11-26", datetime.datetime(2026, 11, 26, tzinfo=datetime.UTC)),
    ],
)
def test_a_position_may_be_an_iso_8601_timestamp_in_utc(text, moment):
    """The issue's startingOffsets: "earliest | latest | an offset | a timestamp". ISO-8601 text
    (no zone: UTC), never epoch milliseconds: a bare number is an offset."""
    options = ReadOptions.parse(
        {"url": URL, "queue": "events", "startingOffset": text, "endingOffset": text}
    )

    assert options.starting == options.ending == moment
    assert ReadOptions.parse(
        {"url": URL, "queue": "e", "startingOffset": "1764118923000"}
    ).starting == (1_764_118_923_000)


def test_uri_is_another_spelling_of_url():
    """The issue writes `.option("uri", "amqp://...")`: `uri` is the option `url`, for reading
    and for writing; giving both is refused, as for the other options with two spellings."""
    assert ReadOptions.parse({"uri": URL, "queue": "events"}) == ReadOptions.parse(
        {"url": URL, "queue": "events"}
    )
    assert ReadOptions.parse({"URI": URL, "queue": "events"}).url == URL
    assert WriteOptions.parse({"uri": URL}) == WriteOptions(URL, "", None)
    with pytest.raises(OptionError, match="options 'url' and 'uri' are the same option"):
        ReadOptions.parse({"url": URL, "uri": URL, "queue": "events"})
    with pytest.raises(OptionError, match="'uri' is required"):
        WriteOptions.parse({"uri": ""})


def test_writing_needs_a_url_and_defaults_to_the_default_exchange():
    assert WriteOptions.parse({"url": URL}) == WriteOptions(URL, "", None)
    assert WriteOptions.parse({"url": URL, "exchange": "x", "ROUTINGKEY": "k"}) == (
        WriteOptions(URL, "x", "k")
    )
    with pytest.raises(OptionError, match="'url' is required"):
        WriteOptions.parse({})
