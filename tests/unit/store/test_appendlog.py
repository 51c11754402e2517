"""The SQLite store's append log on its own: its file's frames (a real file in a temporary
directory); what its pending state nets out to is tested in test_pending."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from batonmq.store.appendlog import AppendLog, appends_path, appends_paths, held_still
from batonmq.store.base import StoreCorrupt, StoreError, WriteBatch
from tests.batches import VHOST, acked, message, put


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
