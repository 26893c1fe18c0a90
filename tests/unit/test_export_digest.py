"""The export file is hashed and written on a thread of its own: same bytes, same hash, errors not lost."""

from __future__ import annotations

import hashlib
import io
import os
import threading
from pathlib import Path

import pytest

from firefeed.export._atomic import _Digest, atomic_output


def test_bytes_and_hash_are_those_written_in_order(tmp_path: Path) -> None:
    chunks = [os.urandom(n) for n in (10, 300_000, 1 << 20, 5, 2 << 20)]
    dest = tmp_path / "out.bin"
    with atomic_output(dest) as out:
        for chunk in chunks:
            out.write(chunk)
    data = b"".join(chunks)
    assert dest.read_bytes() == data
    assert (out.bytes, out.sha256) == (len(data), hashlib.sha256(data).hexdigest())


class _FullDisk(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, b: object) -> int:
        raise OSError(28, "No space left on device")


def test_a_write_error_of_the_thread_reaches_the_caller() -> None:
    digest = _Digest(_FullDisk())  # type: ignore[arg-type]
    digest.write(b"x" * 4096)
    with pytest.raises(OSError, match="No space left"):
        digest.close()
    with pytest.raises(OSError, match="No space left"):
        digest.write(b"more")


def test_a_failed_export_leaves_no_file_and_stops_the_thread(tmp_path: Path) -> None:
    dest = tmp_path / "out.bin"
    dest.write_bytes(b"previous")
    with pytest.raises(RuntimeError), atomic_output(dest) as out:
        out.write(b"x" * (1 << 20))
        raise RuntimeError("the COPY failed")
    assert dest.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]
    assert not [t for t in threading.enumerate() if t.name == "export-writer"]


def test_the_disk_is_handed_the_pages_while_the_file_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every `_WRITEBACK_BYTES` written, the file's dirty pages are started on their way to the disk (the real
    `sync_file_range`, which answers 0), so that the fsync before the rename has little left to wait for."""
    from firefeed.export import _atomic

    real = _atomic._sync_file_range
    assert real is not None  # Linux: the call exists
    calls: list[int] = []

    def recorded(fd: int, *args: object) -> int:
        calls.append(fd)
        answer = real(fd, *args)
        assert answer == 0
        return answer

    monkeypatch.setattr(_atomic, "_WRITEBACK_BYTES", 1 << 20)
    monkeypatch.setattr(_atomic, "_sync_file_range", recorded)
    chunk = os.urandom(256 << 10)
    with atomic_output(tmp_path / "out.bin") as out:
        for _ in range(17):  # 4.25 MiB: four starts, the last quarter left to the fsync
            out.write(chunk)
    assert len(calls) == 4 and len(set(calls)) == 1
    assert (tmp_path / "out.bin").read_bytes() == chunk * 17
