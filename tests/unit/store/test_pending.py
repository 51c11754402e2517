"""What an append log holds, netted in memory (`Pending`), and its frames, whatever the
medium."""

from __future__ import annotations

import pytest

from batonmq.store.base import StoreCorrupt, StoreError, WriteBatch
from batonmq.store.pending import Pending, body_size, encode_frame
from tests.batches import VHOST, acked, entry, message, put


def test_a_message_acknowledged_before_a_checkpoint_nets_out_to_nothing() -> None:
    """The point of the log: a put and its deletion meet in memory, and the database gets
    neither."""
    pending = Pending()
    pending.add(put(1, 2))
    pending.add(acked(1))

    assert list(pending.messages) == [2] and pending.entries == {(VHOST, "q"): {2: entry(2, 2)}}
    assert pending.body_bytes == len(message(2).body)
    pending.add(acked(2))
    assert not pending
    assert pending.as_batch() == WriteBatch()


def test_changes_to_entries_the_database_has_are_kept_for_it() -> None:
    """An entry not put since the checkpoint is in the database: its new delivery count, then
    its deletion (which replaces the count), go there; its message may be orphaned."""
    pending = Pending()
    pending.add(WriteBatch(entries_updated=[(VHOST, "q", 7, 1)]))
    assert pending.as_batch().entries_updated == [(VHOST, "q", 7, 1)]

    pending.add(acked(7))
    batch = pending.as_batch()
    assert (batch.entries_updated, batch.entries_deleted) == ([], [(VHOST, "q", 7, 7)])
    assert pending.orphan_candidates() == {7}


def test_a_delivery_count_of_a_pending_entry_is_written_with_it() -> None:
    pending = Pending()
    pending.add(put(3))
    pending.add(WriteBatch(entries_updated=[(VHOST, "q", 3, 2)]))

    batch = pending.as_batch()
    assert [e.delivery_count for e in batch.entries_put] == [2] and not batch.entries_updated


def test_an_entry_of_a_stored_message_put_and_deleted_leaves_the_message_to_collect() -> None:
    """A queue's entry of a message that the database holds (another queue's, checkpointed):
    deleting the entry may orphan that message, so the checkpoint deletes by its key (a no-op)
    to have the message collected."""
    pending = Pending()
    pending.add(WriteBatch(entries_put=[entry(1, 40, queue="other")]))
    pending.add(WriteBatch(entries_deleted=[(VHOST, "other", 1, 40)]))

    assert pending.released == {(VHOST, "other", 1): 40}
    assert pending.as_batch().entries_deleted == [(VHOST, "other", 1, 40)]
    assert pending.orphan_candidates() == {40}


def test_a_message_put_again_is_held_once() -> None:
    """Another queue paging a message out puts it again: its bytes count once, and an entry put
    twice under one key holds it once (one deletion frees it)."""
    pending = Pending()
    pending.add(put(1))
    pending.add(put(1))
    assert pending.body_bytes == len(message(1).body) and pending.holders == {1: 1}

    pending.add(acked(1))
    assert not pending


def test_a_message_put_again_replaces_what_was_put() -> None:
    """Rule (WriteBatch): the last put of a key is what a run per row leaves, as the tables'
    upsert: the log holds the last body put under an id, and counts its bytes once."""
    pending = Pending()
    pending.add(WriteBatch(messages_put=[message(1, size=3), message(1, size=7)]))
    assert len(pending.messages[1].body) == pending.body_bytes == 7


def test_a_message_held_by_two_queues_goes_with_its_last_entry() -> None:
    pending = Pending()
    pending.add(
        WriteBatch(messages_put=[message(1)], entries_put=[entry(1, 1), entry(1, 1, "other")])
    )
    pending.add(acked(1))
    assert list(pending.messages) == [1]
    pending.add(acked(1, queue="other"))
    assert not pending


def test_an_entry_put_under_a_key_the_checkpoint_deletes_conflicts() -> None:
    """The checkpoint deletes after it puts: a batch putting an entry that a pending deletion
    names must wait for a checkpoint."""
    pending = Pending()
    pending.add(acked(5))
    assert pending.conflicts_with(put(5))
    assert not pending.conflicts_with(put(6))


def test_a_page_is_read_from_what_the_log_holds_in_order() -> None:
    """Paging reads: entries paged out and read back before a checkpoint come from memory, in
    sequence order, after the cursor, up to the limit, of the level asked for."""
    pending = Pending()
    pending.add(put(5, 3, 9, 7))
    pending.add(WriteBatch(entries_put=[entry(4, 3)._replace(priority=2)]))

    page = pending.page(VHOST, "q", 3, 2, None)
    assert page is not None
    assert [(paged.sequence, paged.message.id) for paged in page] == [(4, 3), (5, 5)]
    assert [paged.sequence for paged in pending.page(VHOST, "q", 0, 10, 2) or []] == [4]
    assert pending.page(VHOST, "other", 0, 10, None) == []


def test_a_page_goes_to_the_database_when_its_entries_there_changed() -> None:
    """A deleted or recounted entry of the database, or a message only the database has: the
    read must follow a checkpoint (None)."""
    deleted = Pending()
    deleted.add(put(5))
    deleted.add(acked(2))
    assert deleted.page(VHOST, "q", 0, 10, None) is None

    elsewhere = Pending()
    elsewhere.add(WriteBatch(entries_put=[entry(1, 40)]))  # message 40 is in the database
    assert elsewhere.page(VHOST, "q", 0, 10, None) is None


def test_frames_are_taken_in_whole_and_a_torn_tail_is_left() -> None:
    """A frame cut short (a crash in the middle of a write) ends what is taken: the bytes
    returned stop before it, and nothing of it is pending."""
    first, second = encode_frame(put(1)), encode_frame(put(2))
    pending = Pending()
    assert pending.take_frames(first + second[:-1], "the log") == len(first)
    assert list(pending.messages) == [1]


def test_a_frame_that_fails_its_checksum_is_damage_named_by_its_source() -> None:
    frame = bytearray(encode_frame(put(1)))
    frame[-2] ^= 0xFF
    with pytest.raises(StoreCorrupt, match="log row 7 is damaged: the frame at byte 0"):
        Pending().take_frames(bytes(frame), "log row 7")


def test_a_frame_of_another_format_is_refused() -> None:
    """The payload's first value is the format's version: a frame of a later BatonMQ's format
    is not read as this one's."""
    import marshal
    import struct
    import zlib

    payload = marshal.dumps((2, [], [], [], []))
    frame = struct.pack(">II", len(payload), zlib.crc32(payload)) + payload
    with pytest.raises(StoreCorrupt, match="has frames of format 2, not 1"):
        Pending().take_frames(frame, "the log")


def test_a_number_the_database_cannot_hold_makes_no_frame() -> None:
    """A batch the log took must never fail at a checkpoint: out of the 64-bit range it is
    refused before any frame exists."""
    with pytest.raises(StoreError, match="out of range"):
        encode_frame(WriteBatch(entries_deleted=[(VHOST, "q", 2**64, 1)]))


def test_counts_of_the_tables_once_the_log_is_checkpointed() -> None:
    """What a reader that cannot checkpoint (another process, another member) counts: the
    tables plus what the log holds, less what it deletes there; a message the tables have
    already counts once, and one whose last entry the log deletes does not count."""
    pending = Pending()
    pending.add(put(1, 2))  # message 2 is in the tables too (put again by another queue)
    pending.add(WriteBatch(entries_deleted=[(VHOST, "other", 9, 40), (VHOST, "other", 8, 41)]))
    tables = (5, 6, 500)  # messages 40 (one entry) and 41 (two entries) among them
    size = len(message(1).body)  # and message 2's
    counted = pending.counted(tables, body_size, {2: size}, {40: (1, 100), 41: (2, 100)})
    assert counted == (5 + 2 - 1 - 1, 6 + 2 - 2, 500 + 2 * size - size - 100)
