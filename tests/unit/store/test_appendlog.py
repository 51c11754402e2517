"""The SQLite store's append log on its own: what its pending state nets out to, and its file's
frames (a real file in a temporary directory)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from batonmq.store.appendlog import (
    AppendLog,
    Pending,
    appends_path,
    appends_paths,
    held_still,
)
from batonmq.store.base import StoreCorrupt, StoredEntry, StoredMessage, StoreError, WriteBatch

VHOST = "/"


def message(number: int, size: int = 10) -> StoredMessage:
    return StoredMessage(number, "", "q", b"header", bytes(size))


def entry(sequence: int, message_id: int, queue: str = "q") -> StoredEntry:
    return StoredEntry(VHOST, queue, sequence, message_id)


def put(*numbers: int) -> WriteBatch:
    return WriteBatch(
        messages_put=[message(n) for n in numbers], entries_put=[entry(n, n) for n in numbers]
    )


def acked(*numbers: int, queue: str = "q") -> WriteBatch:
    return WriteBatch(entries_deleted=[(VHOST, queue, n, n) for n in numbers])


def test_a_message_acknowledged_before_a_checkpoint_nets_out_to_nothing() -> None:
    """The point of the log: a put and its deletion meet in memory, and the database gets
    neither."""
    pending = Pending()
    pending.add(put(1, 2))
    pending.add(acked(1))

    assert list(pending.messages) == [2] and pending.entries == {(VHOST, "q"): {2: entry(2, 2)}}
    assert pending.body_bytes == 10
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
    assert pending.body_bytes == 10 and pending.holders == {1: 1}

    pending.add(acked(1))
    assert not pending


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


def test_a_full_pending_state_asks_for_a_checkpoint(tmp_path: Path) -> None:
    log = AppendLog(tmp_path / "log", sync=False)
    try:
        log.append(WriteBatch(messages_put=[message(1, size=9 * 1024 * 1024)]))
        assert log.wants_checkpoint()
    finally:
        log.close()


def test_what_is_appended_is_replayed_by_the_next_open(tmp_path: Path) -> None:
    path = tmp_path / "log"
    log = AppendLog(path, sync=True)
    log.append(put(1, 2, 3))
    log.append(acked(2))
    log.append(WriteBatch(entries_updated=[(VHOST, "q", 3, 4)]))
    log.close()

    again = AppendLog(path, sync=True)
    try:
        again.replay()
        assert again.pending == log.pending
        assert sorted(again.pending.messages) == [1, 3]
    finally:
        again.close()


def test_a_frame_cut_short_by_a_crash_is_ignored(tmp_path: Path) -> None:
    """A crash in the middle of an append leaves part of a frame: that batch was never
    confirmed, and replay stops before it."""
    path = tmp_path / "log"
    log = AppendLog(path, sync=True)
    log.append(put(1))
    whole = path.stat().st_size
    log.append(put(2))
    log.close()
    with path.open("r+b") as file:
        file.truncate(whole + 11)

    again = AppendLog(path, sync=True)
    try:
        again.replay()
        assert list(again.pending.messages) == [1]
    finally:
        again.close()


def test_a_damaged_frame_refuses_the_log_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "log"
    log = AppendLog(path, sync=True)
    log.append(put(1))
    log.close()
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))

    again = AppendLog(path, sync=True)
    try:
        with pytest.raises(StoreCorrupt, match=f"{path} is damaged: the frame at byte 0"):
            again.replay()
    finally:
        again.close()


def test_a_number_the_database_cannot_hold_is_refused_before_it_is_written(
    tmp_path: Path,
) -> None:
    """A batch the log took must never fail at a checkpoint: out of 64-bit range, it fails
    now, and nothing of it is written or pending."""
    path = tmp_path / "log"
    log = AppendLog(path, sync=True)
    try:
        with pytest.raises(StoreError, match="out of range"):
            log.append(WriteBatch(entries_deleted=[(VHOST, "q", 2**64, 1)]))
        assert path.stat().st_size == 0 and not log.pending
    finally:
        log.close()


def test_a_checkpoint_empties_the_log_only_when_its_block_succeeds(tmp_path: Path) -> None:
    path = tmp_path / "log"
    log = AppendLog(path, sync=True)
    try:
        log.append(put(1))
        with pytest.raises(RuntimeError), log.checkpointing():
            raise RuntimeError("the database write failed")
        assert log.size == path.stat().st_size > 0 and log.pending

        with log.checkpointing() as pending:
            assert list(pending.messages) == [1]
        assert log.size == path.stat().st_size == 0 and not log.pending
    finally:
        log.close()


def test_a_reader_in_another_process_holds_checkpoints_back(tmp_path: Path) -> None:
    """`held_still`: an online backup reads the database and the log as of one moment, so no
    checkpoint may move the log into the database in between."""
    database = tmp_path / "store.sqlite3"
    log = AppendLog(appends_path(database), sync=False)
    log.append(put(1))
    checkpointed = threading.Event()

    def checkpoint() -> None:
        with log.checkpointing():
            pass
        checkpointed.set()

    try:
        with held_still(database) as logs:
            assert list(logs[None].messages) == [1]
            writer = threading.Thread(target=checkpoint)
            writer.start()
            time.sleep(0.2)
            assert not checkpointed.is_set()
        writer.join(5)
        assert checkpointed.is_set() and log.size == 0
    finally:
        log.close()


def test_without_a_log_a_reader_finds_nothing_pending(tmp_path: Path) -> None:
    with held_still(tmp_path / "store.sqlite3") as pending:
        assert not pending


def test_each_worker_appends_to_a_log_of_its_own_beside_the_one_process_log(
    tmp_path: Path,
) -> None:
    """A broker of one process keeps the name it always had (no migration of existing
    stores); worker k of a broker with several appends to "-appends-w<k>"."""
    database = tmp_path / "store.sqlite3"
    assert appends_path(database) == tmp_path / "store.sqlite3-appends"
    assert appends_path(database, 3) == tmp_path / "store.sqlite3-appends-w3"
    for path in (appends_path(database), appends_path(database, 0), appends_path(database, 12)):
        path.touch()
    (tmp_path / "store.sqlite3-appends-wx").touch()  # no worker's

    assert appends_paths(database) == {
        None: appends_path(database),
        0: appends_path(database, 0),
        12: appends_path(database, 12),
    }


def test_a_reader_in_another_process_reads_every_workers_log_and_holds_each(
    tmp_path: Path,
) -> None:
    """`held_still` with several workers: every log is read, by worker, and none of the
    workers checkpoints until the reader is done."""
    database = tmp_path / "store.sqlite3"
    logs = [AppendLog(appends_path(database, worker), sync=False) for worker in (0, 1)]
    logs[0].append(put(1))
    logs[1].append(put(2, 3))
    checkpointed = threading.Event()

    def checkpoint() -> None:
        with logs[1].checkpointing():
            pass
        checkpointed.set()

    try:
        with held_still(database) as held:
            assert {worker: sorted(pending.messages) for worker, pending in held.items()} == {
                0: [1],
                1: [2, 3],
            }
            writer = threading.Thread(target=checkpoint)
            writer.start()
            time.sleep(0.2)
            assert not checkpointed.is_set()
        writer.join(5)
        assert checkpointed.is_set()
    finally:
        for log in logs:
            log.close()
