"""How a streaming query's rows are numbered for a stream's deduplication (RabbitMQ's: "a
named producer" and a publishing id that only grows): the producer is the query and the task's
partition, the id the batch id and the row's position, so that a replayed batch repeats its
ids and the next batch's ids are above all of them."""

from __future__ import annotations

import pytest

from batonmq.spark.idempotence import (
    POSITIONS,
    PRODUCER_HEADER,
    SEQUENCE_HEADER,
    BatchTask,
    batch_task,
)
from batonmq.spark.rows import Publication

QUERY = "6f1c9a52-39a3-4d56-9f0b-3c1b8a0e2d7e"


def publication(headers: dict[str, str | int] | None) -> Publication:
    return Publication("", "events", b"body", headers, {})


def test_a_task_is_read_from_spark_s_local_properties_only_inside_a_streaming_query():
    assert batch_task(QUERY, "7", 1) == BatchTask(QUERY, 7, 1)
    assert batch_task(None, "7", 1) is None
    assert batch_task(QUERY, None, 1) is None


def test_ids_grow_across_batches_and_a_replay_repeats_them():
    first, replayed, following = (
        BatchTask(QUERY, 4, 1),
        BatchTask(QUERY, 4, 1),
        BatchTask(QUERY, 5, 1),
    )

    ids = [first.sequence(position) for position in (0, 1, POSITIONS - 1)]

    assert ids == sorted(ids) and len(set(ids)) == 3
    assert [replayed.sequence(position) for position in (0, 1, POSITIONS - 1)] == ids
    assert following.sequence(0) > ids[-1]
    assert first.producer == replayed.producer != BatchTask(QUERY, 4, 2).producer


def test_numbering_replaces_the_row_s_own_ids_and_keeps_its_other_headers():
    task = BatchTask(QUERY, 2, 0)

    numbered = task.numbered(publication({"n": "1", SEQUENCE_HEADER: "99"}), 3)

    assert numbered.headers == {
        "n": "1",
        PRODUCER_HEADER: f"spark/{QUERY}/0",
        SEQUENCE_HEADER: 2 * POSITIONS + 3,
    }
    assert task.numbered(publication(None), 0).headers == {
        PRODUCER_HEADER: f"spark/{QUERY}/0",
        SEQUENCE_HEADER: 2 * POSITIONS,
    }


def test_ids_stay_within_amqp_s_signed_64_bit_integers():
    with pytest.raises(ValueError, match="2\\*\\*32 rows"):
        BatchTask(QUERY, 0, 0).sequence(POSITIONS)
    with pytest.raises(ValueError, match="batch id"):
        BatchTask(QUERY, 2**31, 0)
    assert BatchTask(QUERY, 2**31 - 1, 0).sequence(POSITIONS - 1) < 2**63
