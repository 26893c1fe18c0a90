"""Opening an export's published file whole, and telling which publish it is.

Local folder: the file is opened once and that inode is streamed; a publish renames a new file onto the
name, so the open file stays the old one to its end. Which publish the open file is (its sha256 for the
ETag) comes from the index's last two publishes: a rename sets the inode's change time, and a run switches
its files before it ends and after the previous run ended. So a file changed after the previous publish's
run ended, of the newest one's size, is the newest; otherwise one of the previous one's size is the
previous (a run still switching its files in, or recovering). A bucket: one object read from its open
(s3fs pins the object's version for the reads of an open file, so a replace cannot mix two files; it fails
the stream instead, and the client sees a short body against Content-Length).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from firefeed.feeds.index import Feed, Published
from firefeed.storage import spares
from firefeed.storage.base import Storage
from firefeed.storage.local import LocalStorage

#: Bytes read and sent at a time: large enough to keep syscalls few, small enough for 4 streams in little memory.
CHUNK = 2 << 20
#: How far after its recorded change time a local file may really have changed: the kernel stamps inodes
#: from a coarse clock (a tick behind), and a worker's clock may be a little off the API's.
LOCAL_CHANGE_SLACK_S = 0.05
#: The same for an object in a bucket, whose LastModified has whole seconds.
BUCKET_CHANGE_SLACK_S = 1.0


@dataclass
class OpenFile:
    size: int
    published: Published | None
    #: when the file (or object) was changed, as the storage recorded it
    changed: datetime | None = None
    #: the latest wall-clock time (seconds) the change may have happened, or None when unknown
    changed_by: float | None = None
    _fd: int | None = None
    _obj: Any = None

    async def chunks(self, start: int, length: int) -> AsyncIterator[bytes]:
        """`length` bytes from `start`, CHUNK at a time, read on a thread (a cold disk must not stall the loop)."""
        offset, end = start, start + length
        while offset < end:
            n = min(CHUNK, end - offset)
            data = await asyncio.to_thread(self._read, offset, n)
            if not data:
                raise OSError("the published file ended early")
            offset += len(data)
            yield data

    def identify(self, feed: Feed) -> None:
        """Tell again which publish the open file is, by a fresher index's publishes."""
        self.published = _which(feed, self.size, self.changed)

    @property
    def fd(self) -> int | None:
        """The open local file's descriptor (None for an object in a bucket)."""
        return self._fd

    def _read(self, offset: int, n: int) -> bytes:
        if self._fd is not None:
            return os.pread(self._fd, n, offset)
        if self._obj.tell() != offset:
            self._obj.seek(offset)
        return bytes(self._obj.read(n))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._obj is not None:
            self._obj.close()
            self._obj = None


def _which(feed: Feed, size: int, changed: datetime | None) -> Published | None:
    """The publish the open file is, by its size and change time (see the module's docstring)."""
    if not feed.published:
        return None
    newest = feed.published[0]
    previous_end = feed.published[1].finished_at if len(feed.published) > 1 else None
    if size == newest.size and (previous_end is None or changed is None or changed > previous_end):
        return newest
    for older in feed.published[1:]:
        if size == older.size:
            return older
    # A file of neither size (touched by hand, or the switch of a third run): served, but without validators.
    return None


def open_published(storage: Storage, feed: Feed) -> OpenFile | None:
    """The export's published file, opened; None when there is none."""
    if not feed.published:
        return None
    key = feed.published[0].key
    if isinstance(storage, LocalStorage):
        try:
            # Held with a shared lock until closed: a publish may make it the export's spare, which the next
            # export writes over only when no reader holds it (storage/spares.py).
            fd = spares.open_shared(storage.path(key))
        except OSError:
            return None
        st = os.fstat(fd)
        ctime = datetime.fromtimestamp(st.st_ctime_ns / 1e9, UTC)
        return OpenFile(
            st.st_size,
            _which(feed, st.st_size, ctime),
            ctime,
            st.st_ctime_ns / 1e9 + LOCAL_CHANGE_SLACK_S,
            _fd=fd,
        )
    try:
        obj = storage.open(key)
    except Exception:
        return None
    details = getattr(obj, "details", {}) or {}
    size = int(details.get("size", getattr(obj, "size", 0)))
    modified = details.get("LastModified")
    mtime = modified if isinstance(modified, datetime) else None
    by = mtime.timestamp() + BUCKET_CHANGE_SLACK_S if mtime is not None else None
    return OpenFile(size, _which(feed, size, mtime), mtime, by, _obj=obj)
