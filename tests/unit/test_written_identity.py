"""A published file's identity kept by its publish (`FileIdentity.written_by_us`, #52): FireFeed wrote the bytes
(their digest is the writer's), then moved the file into place. Its stat vouches for it only while its last
write is stamped before its move: any later write stamps the mtime anew, and setting the mtime back moves the
ctime."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import cast

from firefeed.dataplane.file_identity import FileIdentity, stat_key


def written(tmp_path: Path, data: bytes = b"id,title\n1,a\n") -> tuple[Path, dict[str, int]]:
    """A file written as an export's writer writes it, with its stamp once written (`written_stamp`'s fields)."""
    partial = tmp_path / ".feed.csv.partial"
    partial.write_bytes(data)
    st = partial.stat()
    return partial, {"dev": st.st_dev, "ino": st.st_ino, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def moved(partial: Path) -> Path:
    """The file moved into place once its last write's stamp is past (a publish comes later than the write)."""
    time.sleep(0.03)
    final = partial.with_name("feed.csv")
    os.replace(partial, final)
    return final


def test_a_file_moved_after_its_last_write_is_vouched_for_by_its_stat(tmp_path: Path) -> None:
    partial, stamp = written(tmp_path)
    final = moved(partial)
    identity = FileIdentity.written_by_us(stamp, final.stat(), "abc")
    assert identity is not None and identity.written and identity.sha256 == "abc"
    assert identity.vouches_for(final.stat(), "abc")
    assert not identity.vouches_for(final.stat(), "other")  # bound to its digest
    assert FileIdentity.from_json(identity.to_json()) == identity


def test_no_identity_when_the_move_is_stamped_with_the_last_write() -> None:
    """Written and moved within one stamp of the clock (mtime == ctime): a write after the move could keep both."""
    stamp = {"dev": 1, "ino": 2, "size": 10, "mtime_ns": 5_000_000_123}
    same = cast(
        os.stat_result,
        SimpleNamespace(st_dev=1, st_ino=2, st_size=10, st_mtime_ns=5_000_000_123, st_ctime_ns=5_000_000_123),
    )
    assert FileIdentity.written_by_us(stamp, same, "abc") is None
    later = cast(
        os.stat_result,
        SimpleNamespace(st_dev=1, st_ino=2, st_size=10, st_mtime_ns=5_000_000_123, st_ctime_ns=5_004_000_000),
    )
    identity = FileIdentity.written_by_us(stamp, later, "abc")
    assert identity is not None and identity.vouches_for(later, "abc")


def test_no_identity_when_the_file_changed_between_its_writer_and_its_move(tmp_path: Path) -> None:
    partial, stamp = written(tmp_path)
    time.sleep(0.03)
    partial.write_bytes(b"id,title\n1,b\n")  # another writer, the same size: its mtime moved
    final = moved(partial)
    assert FileIdentity.written_by_us(stamp, final.stat(), "abc") is None
    other, _ = written(tmp_path / "..", b"x")
    assert FileIdentity.written_by_us({**stamp, "ino": other.stat().st_ino}, final.stat(), "abc") is None


def test_an_edit_after_the_move_is_seen_even_with_its_mtime_put_back(tmp_path: Path) -> None:
    partial, stamp = written(tmp_path)
    final = moved(partial)
    identity = FileIdentity.written_by_us(stamp, final.stat(), "abc")
    assert identity is not None
    time.sleep(0.03)
    before = final.stat()
    final.write_bytes(b"id,title\n1,c\n")  # the same size
    assert not identity.vouches_for(final.stat(), "abc")  # its mtime moved
    os.utime(final, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert final.stat().st_mtime_ns == identity.mtime_ns
    assert not identity.vouches_for(final.stat(), "abc")  # its ctime moved


def test_an_identity_a_read_took_is_not_trusted_as_a_written_one(tmp_path: Path) -> None:
    """A read's identity keeps the racy margin: its stamps must be older than its read by the margin."""
    partial, stamp = written(tmp_path)
    final = moved(partial)
    read = FileIdentity.of(final.stat(), "abc", time.time_ns())
    assert not read.written and not read.vouches_for(final.stat(), "abc")
    assert stat_key(final.stat()) == read.stat_key
    doc = FileIdentity.written_by_us(stamp, final.stat(), "abc")
    assert doc is not None
    json_doc = doc.to_json()
    json_doc["written"] = "yes"  # a kept row that is not what `to_json` wrote vouches for nothing
    assert FileIdentity.from_json(json_doc) is None
