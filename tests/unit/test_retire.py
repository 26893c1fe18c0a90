"""A large file replaced by rename has its old blocks freed on the deleter's thread (storage/retire.py): the
rename itself frees nothing, the old bytes stay readable to an open reader, and `drain` leaves no second name."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from firefeed.dataplane import parsed_copy
from firefeed.storage import LocalStorage, retire
from firefeed.storage.keys import partial_key
from firefeed.storage.leftovers import leftover_run


def _file(path: Path, byte: bytes, size: int) -> Path:
    path.write_bytes(byte * size)
    return path


def test_a_large_replaced_file_is_linked_aside_and_removed_by_the_deleter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest, new = _file(tmp_path / "feed.csv", b"o", 4096), _file(tmp_path / "new.csv", b"n", 10)
    retired = tmp_path / ".retired"
    monkeypatch.setattr(retire, "MIN_BYTES", 1024)
    gate = threading.Event()
    unlink = Path.unlink

    def held(self: Path, missing_ok: bool = False) -> None:
        gate.wait(10)  # the deleter waits until the test has seen the second name
        unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", held)
    with dest.open("rb") as reader:
        retire.replace(new, dest, retired)
        assert dest.read_bytes() == b"n" * 10
        assert retired.stat().st_nlink == 1 and retired.stat().st_size == 4096  # the old file, one name left
        assert os.fstat(reader.fileno()).st_ino == retired.stat().st_ino
        gate.set()
        retire.drain()
        assert not retired.exists()
        assert reader.read() == b"o" * 4096  # an open reader keeps the old bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["feed.csv"]


def test_a_small_or_new_file_is_replaced_as_it_is(tmp_path: Path) -> None:
    retired = tmp_path / ".retired"
    retire.replace(_file(tmp_path / "a", b"a", 10), tmp_path / "b", retired)  # nothing replaced
    retire.replace(_file(tmp_path / "c", b"c", 10), tmp_path / "b", retired)  # under MIN_BYTES
    retire.drain()
    assert (tmp_path / "b").read_bytes() == b"c" * 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def test_a_taken_second_name_falls_back_to_a_plain_replace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retire, "MIN_BYTES", 1)
    dest, taken = _file(tmp_path / "dest", b"o", 100), _file(tmp_path / ".taken", b"t", 3)
    retire.replace(_file(tmp_path / "new", b"n", 5), dest, taken)
    retire.drain()
    assert dest.read_bytes() == b"nnnnn" and taken.read_bytes() == b"ttt"  # someone else's file left alone


def test_a_failed_replace_removes_the_second_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retire, "MIN_BYTES", 1)
    dest, retired = _file(tmp_path / "dest", b"o", 100), tmp_path / ".retired"
    with pytest.raises(FileNotFoundError):
        retire.replace(tmp_path / "missing", dest, retired)
    assert dest.read_bytes() == b"o" * 100 and not retired.exists()


def test_the_publish_and_the_kept_copy_free_their_old_files_under_names_their_sweeps_remove(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill before the deleter ran leaves the second name where the janitor (export temporaries) or the next
    copy's `start` (a kept copy's temporaries) removes it."""
    monkeypatch.setattr(retire, "MIN_BYTES", 1)
    seen: list[Path] = []
    monkeypatch.setattr(retire, "_start", lambda: None)
    monkeypatch.setattr(retire._queue, "put", seen.append)  # no deleter: as if killed
    storage = LocalStorage(tmp_path / "exports")
    key, run_id = "shop/feed.csv", "0123abcd-0000-0000-0000-000000000000"
    storage.path(key).parent.mkdir(parents=True)
    _file(storage.path(key), b"o", 100)
    _file(storage.path(partial_key(key, run_id)), b"n", 5)
    storage.move(partial_key(key, run_id), key)
    assert storage.path(key).read_bytes() == b"nnnnn"
    (export_left,) = seen
    assert export_left.parent == storage.path(key).parent and leftover_run(export_left.name) == "0123abcd"

    from firefeed.config import Settings

    settings = Settings(data_dir=tmp_path / "var")
    feed = _file(tmp_path / "feed.csv", b"f", 50)
    parsed_copy.commit(
        settings, "acme", "shop", "feed", parsed_copy.start(settings, "acme", "shop", "feed", feed, run_id), "0" * 64,
        quotes_checked=True,
    )  # fmt: skip
    parsed_copy.commit(
        settings, "acme", "shop", "feed", parsed_copy.start(settings, "acme", "shop", "feed", feed, run_id), "0" * 64,
        quotes_checked=True,
    )  # fmt: skip
    copy_left = seen[1]
    assert copy_left.exists()
    parsed_copy.start(settings, "acme", "shop", "feed", feed, run_id)  # the next run's copy sweeps it
    assert not copy_left.exists()
