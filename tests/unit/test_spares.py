"""A large export a publish replaces is kept as its spare, and the export's next write takes it (storage/spares.py):
written from its first byte and cut where it ends, never while a reader holds it, never when it is a second name
of the live file; the spec refuses an export path of its shape and the janitor removes one whose export is gone."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from firefeed.export._atomic import atomic_output
from firefeed.storage import LocalStorage, retire, spares
from firefeed.storage.keys import partial_key

KEY = "acme/shop/out.csv"
RUN_A, RUN_B, RUN_C = "a" * 32, "b" * 32, "c" * 32


def _publish(storage: LocalStorage, run_id: str, data: bytes) -> int:
    """The export written as a run writes it (the storage's temporary, filled in place) and published; the
    inode the written file had."""
    partial = partial_key(KEY, run_id)
    with storage.writing(partial) as local:
        with atomic_output(local, scratch=True) as out:
            out.write(data)
        inode = local.stat().st_ino
    storage.move(partial, KEY)
    retire.drain()
    return inode


def _folder(storage: LocalStorage) -> Path:
    return storage.path(KEY).parent


def test_a_replaced_export_is_kept_as_the_spare_the_next_write_takes_and_cuts(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path, spare_min_bytes=10)
    first = _publish(storage, RUN_A, b"first file, the longest of the three\n")
    spare = spares.spare_of(storage.path(KEY))
    assert not spare.exists()  # nothing was replaced
    _publish(storage, RUN_B, b"second file\n")
    assert storage.path(KEY).read_bytes() == b"second file\n"
    assert spare.stat().st_ino == first and spare.stat().st_nlink == 1  # the first file, under one name
    assert spare.read_bytes() == b"first file, the longest of the three\n"
    third = _publish(storage, RUN_C, b"third\n")
    assert third == first  # written over the spare: the longer old bytes cut away
    assert storage.path(KEY).read_bytes() == b"third\n"
    assert spare.read_bytes() == b"second file\n"
    assert sorted(p.name for p in _folder(storage).iterdir()) == [".out.csv.spare", "out.csv"]


def test_a_spare_a_reader_holds_is_not_written_over_and_is_freed_by_the_next_publish(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path, spare_min_bytes=10)
    _publish(storage, RUN_A, b"first file of the export\n")
    _publish(storage, RUN_B, b"second file of the export\n")
    spare = spares.spare_of(storage.path(KEY))
    # A download of the first file still going (it opened the live name before the second publish).
    reader = spares.open_shared(spare)
    try:
        before = os.fstat(reader).st_ino
        third = _publish(storage, RUN_C, b"third file of the export\n")
        assert third != before  # a new file: the one being read was left alone
        assert os.pread(reader, 100, 0) == b"first file of the export\n"
        assert storage.path(KEY).read_bytes() == b"third file of the export\n"
        assert spare.read_bytes() == b"second file of the export\n"  # the last replaced file is the spare now
    finally:
        os.close(reader)
    assert sorted(p.name for p in _folder(storage).iterdir()) == [".out.csv.spare", "out.csv"]


def test_a_reader_finds_a_file_being_written_over_locked_and_opens_the_name_again(tmp_path: Path) -> None:
    live = tmp_path / "out.csv"
    live.write_bytes(b"live")
    held = os.open(live, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as `claim` holds a spare it writes over
    try:
        with pytest.raises(BlockingIOError):
            spares.open_shared(live, tries=2)
    finally:
        os.close(held)
    fd = spares.open_shared(live)
    try:
        assert os.pread(fd, 10, 0) == b"live"
        # While it is held, a write cannot take it.
        assert spares.claim(live, tmp_path / "into") is None
    finally:
        os.close(fd)


def test_a_second_name_of_the_live_file_is_never_taken_as_a_spare(tmp_path: Path) -> None:
    # A kill between a publish's link and its rename leaves the live file under the spare's name too.
    storage = LocalStorage(tmp_path, spare_min_bytes=10)
    first = _publish(storage, RUN_A, b"the live file, published\n")
    live = storage.path(KEY)
    os.link(live, spares.spare_of(live))
    assert _publish(storage, RUN_B, b"the next file, published\n") != first  # a new file, not the live one
    assert live.read_bytes() == b"the next file, published\n"
    spare = spares.spare_of(live)
    assert spare.stat().st_ino == first and spare.stat().st_nlink == 1
    assert spare.read_bytes() == b"the live file, published\n"  # the replaced file, intact


def test_small_exports_and_a_storage_keeping_none_leave_no_spare(tmp_path: Path) -> None:
    for storage in (LocalStorage(tmp_path / "small", spare_min_bytes=1 << 20), LocalStorage(tmp_path / "none")):
        _publish(storage, RUN_A, b"one\n")
        _publish(storage, RUN_B, b"two\n")
        assert sorted(p.name for p in _folder(storage).iterdir()) == ["out.csv"]
        assert storage.path(KEY).read_bytes() == b"two\n"


def test_a_spare_whose_export_is_gone_is_an_orphan_and_its_shape_is_no_export_path(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path, spare_min_bytes=10)
    _publish(storage, RUN_A, b"first file of the export\n")
    _publish(storage, RUN_B, b"second file of the export\n")
    assert spares.orphans(tmp_path) == []
    storage.path(KEY).unlink()  # the export's path changed
    assert spares.orphans(tmp_path) == [spares.spare_of(storage.path(KEY))]
    assert spares.is_spare(".feed.csv.spare") and not spares.is_spare("feed.csv.spare")
    assert not spares.is_spare("..spare") and not spares.is_spare(".spare")


def test_a_file_read_through_the_storage_is_not_taken_while_read(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path, spare_min_bytes=10)
    _publish(storage, RUN_A, b"first file of the export\n")
    live = storage.path(KEY)
    into = tmp_path / "into"
    with storage.reading(KEY) as path:
        assert path == live
        assert spares.claim(live, into) is None  # (a spare's claim, tried on the file being read)
    assert not into.exists() and live.read_bytes() == b"first file of the export\n"


def test_a_published_export_without_a_spare_gets_one_made_beside_which_its_next_write_takes(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path, spare_min_bytes=10)
    first = _publish(storage, RUN_A, b"the first file of the export\n")
    live = storage.path(KEY)
    spare = spares.spare_of(live)
    assert storage.prepare_spare(KEY) and spare.read_bytes() == live.read_bytes()
    made = spare.stat().st_ino
    assert made != first and not storage.prepare_spare(KEY)  # one is there: nothing more
    assert _publish(storage, RUN_B, b"short\n") == made  # written over, cut
    assert live.read_bytes() == b"short\n"
    assert spare.stat().st_ino == first  # the replaced file is the spare now
    assert sorted(p.name for p in _folder(storage).iterdir()) == [".out.csv.spare", "out.csv"]


def test_no_spare_is_made_for_a_small_or_missing_file_or_by_a_storage_keeping_none(tmp_path: Path) -> None:
    small = LocalStorage(tmp_path / "small", spare_min_bytes=1 << 20)
    _publish(small, RUN_A, b"one\n")
    assert not small.prepare_spare(KEY) and not small.prepare_spare("acme/shop/none.csv")
    none = LocalStorage(tmp_path / "none")
    _publish(none, RUN_A, b"one\n")
    assert not none.prepare_spare(KEY)
    for storage in (small, none):
        assert sorted(p.name for p in _folder(storage).iterdir()) == ["out.csv"]


def test_a_spare_being_made_is_never_taken_and_a_killed_ones_leftover_is_replaced(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path, spare_min_bytes=10)
    _publish(storage, RUN_A, b"the first file of the export\n")
    live = storage.path(KEY)
    filling = spares.spare_of(live).with_name(".out.csv.spare.tmp")
    filling.write_bytes(b"half")  # a run killed while it made one
    assert spares.claim(spares.spare_of(live), tmp_path / "into") is None  # no spare yet: nothing taken
    assert storage.prepare_spare(KEY)
    assert not filling.exists() and spares.spare_of(live).read_bytes() == live.read_bytes()
    assert spares.is_spare(".out.csv.spare.tmp") and spares.live_of(filling) == live
