"""Atomic file output: a reader sees the old file or the new one, never half of one.

Bytes go to a hidden temporary file beside the destination (same file system,
so the final rename is atomic), are flushed and fsynced, then `os.replace`d onto
the destination and the folder is fsynced so the rename survives a power cut.
Any exception before that removes the temporary file and leaves the previous
export untouched. Size and SHA-256 are taken of the bytes as written (after
gzip), on the fly, so the file is never read back.
"""

from __future__ import annotations

import contextlib
import ctypes
import gzip
import hashlib
import os
import queue
import tempfile
import threading
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

#: COPY hands over one row per write(); batching them keeps syscalls and zlib calls few.
_BATCH_BYTES = 1 << 20
#: the gzip command's default: most of level 9's ratio at a fraction of its time.
_GZIP_LEVEL = 6
#: chunks waiting for the writing thread (~1 MB each)
_QUEUED = 4
#: a file's dirty pages are handed to the disk each time this many more bytes are written (`Writeback`)
_WRITEBACK_BYTES = 32 << 20
#: sync_file_range(2)'s SYNC_FILE_RANGE_WRITE: start writing the dirty pages back, wait for none
_SYNC_FILE_RANGE_WRITE = 2


class Sink(Protocol):
    def write(self, data: bytes, /) -> object: ...


class OutputLimitError(Exception):
    """The bytes handed to an atomic output passed its limit: the block stops, nothing is published."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"more than {limit} bytes")


class Writeback:
    """Starts the disk writing a file's pages while it is still being written, so that the fsync before its
    rename waits for the last few megabytes rather than the whole file: a 690 MB export's fsync took
    0.9-1.1 s here when every page was still dirty, ~0.03 s so. `sync_file_range` with
    SYNC_FILE_RANGE_WRITE waits for no page (it is no durability promise: the fsync still makes one);
    where it is missing (not Linux) nothing is started."""

    def __init__(self, file: BinaryIO) -> None:
        try:
            self._fd: int | None = file.fileno()
        except OSError:  # io.UnsupportedOperation: no file descriptor, nothing to start
            self._fd = None
        self._pending = 0

    def wrote(self, n: int) -> None:
        self._pending += n
        if self._pending >= _WRITEBACK_BYTES and self._fd is not None:
            self._pending = 0
            start_writeback(self._fd)


def start_writeback(fd: int) -> None:
    """Start the disk on every dirty page of the open file `fd`, waiting for none (nothing where the call is
    missing)."""
    if _sync_file_range is not None:
        _sync_file_range(fd, ctypes.c_longlong(0), ctypes.c_longlong(0), _SYNC_FILE_RANGE_WRITE)


def _libc_sync_file_range() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None


_sync_file_range = _libc_sync_file_range()


class _Digest:
    """Counts, hashes and writes the final bytes, on a thread of its own.

    hashlib (on more than 2 KB) and file writes release the GIL, so in a
    thread they overlap the caller's work on the next chunk: the COPY and the
    formatting (google-xml, 1M items: ~2 s of hashing and writing 1.2 GB taken
    off the exporting thread). At most `_QUEUED` chunks wait, so memory stays
    flat; an error of the thread is raised at the next write or at `close`.
    """

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self._writeback = Writeback(file)
        self.sha = hashlib.sha256()
        self.size = 0
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=_QUEUED)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="export-writer", daemon=True)
        self._thread.start()

    def write(self, data: bytes, /) -> int:
        if self._error is not None:
            raise self._error
        self.size += len(data)
        self._queue.put(data)
        return len(data)

    def _run(self) -> None:
        while (data := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self.sha.update(data)
                    self._file.write(data)
                    self._writeback.wrote(len(data))
                except BaseException as exc:  # raised in the caller's thread
                    self._error = exc

    def flush(self) -> None:
        """Nothing to do here (gzip asks): `close` is what waits for the thread."""

    def close(self) -> None:
        """Wait until every byte is hashed and handed to the file; raise the thread's error."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        if self._error is not None:
            raise self._error


class AtomicOutput:
    """The writable end of an atomic export; `bytes` and `sha256` are final after the block.

    With a `limit`, the bytes handed over (before gzip) are counted per batch, not per write (a COPY
    row): past it, OutputLimitError (export/bounds.py)."""

    def __init__(self, digest: _Digest, zipper: gzip.GzipFile | None, limit: int | None = None) -> None:
        self._digest = digest
        self._zipper = zipper
        self._target: Sink = zipper if zipper is not None else digest
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._limit = limit
        self._handed = 0
        self._stop: Callable[[], object] | None = None
        self._lengths: array[int] | None = None

    def record(self, lengths: array[int] | None) -> None:
        """From now on append each write's length to `lengths` (None: stop). COPY writes one item per write,
        so these are the items' lengths a delta run's patch reads (export/line_index.py)."""
        self._lengths = lengths

    def _hand(self, data: bytes) -> None:
        self._handed += len(data)
        if self._limit is not None and self._handed > self._limit:
            if self._stop is not None:
                self._stop()
            raise OutputLimitError(self._limit)
        self._target.write(data)

    @contextlib.contextmanager
    def stopping(self, stop: Callable[[], object]) -> Iterator[None]:
        """While the block runs, the limit calls `stop` before it raises: a COPY's `connection.cancel`, else
        psycopg2 reads (and drops) the rest of the COPY before the error surfaces, the backend computing
        the whole export anyway (2 GB of rows stopped at 1 MB: 4.8 s without, 0.2 s with)."""
        self._stop = stop
        try:
            yield
        finally:
            self._stop = None

    def write(self, data: bytes, /) -> int:
        if self._lengths is not None:
            self._lengths.append(len(data))
        if not self._pending and len(data) >= _BATCH_BYTES // 4:
            self._hand(data)  # big enough on its own: no copy into a batch
            return len(data)
        self._pending.append(data)
        self._pending_size += len(data)
        if self._pending_size >= _BATCH_BYTES:
            self._drain()
        return len(data)

    def _drain(self) -> None:
        if self._pending:
            self._hand(b"".join(self._pending))
            self._pending.clear()
            self._pending_size = 0

    def _finish(self) -> None:
        self._drain()
        if self._zipper is not None:
            self._zipper.close()  # writes the gzip trailer through the digest
        self._digest.close()

    @property
    def bytes(self) -> int:
        return self._digest.size

    @property
    def sha256(self) -> str:
        return self._digest.sha.hexdigest()


def _file_mode(dest: Path) -> int:
    """Keep the mode of the file being replaced; a new file is world-readable like a served feed."""
    try:
        return dest.stat().st_mode & 0o777
    except FileNotFoundError:
        return 0o644


@contextlib.contextmanager
def _filling(file: BinaryIO, compress: bool, limit: int | None = None) -> Iterator[AtomicOutput]:
    """The block's bytes into `file` (gzip-compressed with `compress`), all of them handed over at its end."""
    digest = _Digest(file)
    zipper = (
        gzip.GzipFile(filename="", mode="wb", fileobj=digest, compresslevel=_GZIP_LEVEL, mtime=0) if compress else None
    )
    out = AtomicOutput(digest, zipper, limit)
    try:
        yield out
        out._finish()
    finally:
        with contextlib.suppress(Exception):
            digest.close()  # on failure: stop the thread before the file closes


@contextlib.contextmanager
def atomic_output(
    dest: Path, *, compress: bool = False, scratch: bool = False, limit: int | None = None
) -> Iterator[AtomicOutput]:
    """Write `dest` atomically; with `compress`, as deterministic gzip (mtime 0, no file name); with
    `limit`, OutputLimitError once the block hands over more bytes than that (before gzip).

    With `scratch`, `dest` is already a private temporary that its owner syncs, renames into place and
    removes on failure (`Storage.writing`): it is filled directly. A second temporary beside it would
    add nothing but a second file for a killed worker to leave behind.
    """
    if scratch:
        # Written from its start and cut where the writing ended: the temporary may be a kept spare whose
        # cached pages the new bytes take (storage/spares.py).
        with open_over(dest) as file:
            with _filling(file, compress, limit) as out:
                yield out
            file.truncate()
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), _file_mode(dest))
            with _filling(file, compress, limit) as out:
                yield out
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    fsync_dir(dest.parent)


def open_over(path: Path) -> BinaryIO:
    """`path` opened to be written from its first byte without emptying it first (the caller truncates at the
    end): overwritten pages of a file still cached need no new memory, as a new file's do."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    return os.fdopen(fd, "wb")


def fsync_dir(folder: Path) -> None:
    """Make a rename in `folder` durable (best effort: not every file system opens folders)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some file systems do not open folders; the rename already happened
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
