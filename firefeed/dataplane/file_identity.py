"""A local file's stat identity, kept with its SHA-256 so a later run knows it unchanged without reading it (#52).

git's index and rsync do the same: a file whose device, inode, size, mtime and ctime are the ones seen
when its digest was taken holds the same bytes. FETCH keeps one per local source (pipeline/fetch.py,
in the source's `sources` row) and the unchanged-run check one per published export
(dataplane/state.py `moved_files`, in `published_files`): the publish keeps the one of each file it moved
into place (`FileIdentity.written_by_us`, pipeline/publishing.py), else the first check that reads it does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import BinaryIO

#: How much older than the moment its digest was taken a file's mtime and ctime must be for its stat
#: identity to stand for the digest. The kernel stamps files from a coarse clock (a tick behind the
#: one `time.time_ns` reads) and some file systems keep 1-2 s stamps: a write in the same stamp as
#: the read would leave the stat as it was (git's "racily clean" entries).
RACY_MARGIN_NS = 2_000_000_000


@dataclass(frozen=True)
class FileIdentity:
    """A local file's stat identity when its SHA-256 (`sha256`) was taken, as git's index and rsync keep it.

    A later stat with the same device, inode, size, mtime and ctime is the same bytes, without reading
    them: ctime cannot be set by a user, so an edit that puts the mtime back still shows.
    `taken_ns`: the wall clock when the read that took the digest began (or, `written`, when the writer took it).
    """

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int
    sha256: str
    taken_ns: int
    #: taken by the writer of the bytes once they were in place (`written`), not by a read
    written: bool = False

    @classmethod
    def of(cls, st: os.stat_result, sha256: str, taken_ns: int) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, sha256, taken_ns)

    @classmethod
    def written_by_us(cls, before: Mapping[str, int], after: os.stat_result, sha256: str) -> FileIdentity | None:
        """The identity of a file FireFeed wrote (`sha256`: the digest of the bytes it wrote) and then moved into
        place: `before` its device, inode, size and mtime once its writer was done (pipeline/publishing.py
        `written_stamp`), `after` its stat once moved. None unless it is the same file with the same last
        write's stamp, and that write is stamped before its move (`vouches_for`).

        Such a file needs no read to be vouched for: any later write stamps its mtime with the time of that
        write, never before the move's ctime, so an mtime still older than the ctime says no write came since
        the move (setting the mtime back moves the ctime); a write after the writer's, before the move, would
        have moved the mtime `before` holds. Only a deliberate write and mtime reset within the move's own stamp
        would go unseen.
        """
        if (before.get("dev"), before.get("ino"), before.get("size"), before.get("mtime_ns")) != (
            after.st_dev,
            after.st_ino,
            after.st_size,
            after.st_mtime_ns,
        ):
            return None
        if not after.st_mtime_ns < after.st_ctime_ns:
            return None
        return dataclasses.replace(cls.of(after, sha256, time.time_ns()), written=True)

    @property
    def stat_key(self) -> tuple[int, int, int, int, int]:
        """The stat this identity was taken at, as `stat_key` gives a file's."""
        return (self.dev, self.ino, self.size, self.mtime_ns, self.ctime_ns)

    def vouches_for(self, st: os.stat_result, sha256: str | None) -> bool:
        """Whether `st` is this file, unchanged since its digest `sha256` was taken.

        Not when the file was stamped within RACY_MARGIN_NS of the digest: a write in the same stamp
        could have followed the read. Nor when both stamps are whole seconds: a file system with 1 s
        stamps, often a network one whose server stamps by its own clock, which may lag this one by
        more than the margin (then a same-size edit in the stamp's second would look unchanged).
        """
        if sha256 is None or sha256 != self.sha256 or stat_key(st) != self.stat_key:
            return False
        if self.written:  # the writer's own identity (`written_by_us`): its mtime before its ctime
            return self.mtime_ns < self.ctime_ns
        return max(self.mtime_ns, self.ctime_ns) < self.taken_ns - RACY_MARGIN_NS and not (
            self.mtime_ns % 1_000_000_000 == 0 and self.ctime_ns % 1_000_000_000 == 0
        )

    def to_json(self) -> dict[str, int | str]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: object) -> FileIdentity | None:
        """The identity kept as `to_json` wrote it; None for anything else (an older row has none)."""
        if not isinstance(doc, Mapping):
            return None
        try:
            ints = {k: doc[k] for k in ("dev", "ino", "size", "mtime_ns", "ctime_ns", "taken_ns")}
            sha256 = doc["sha256"]
        except KeyError:
            return None
        written = doc.get("written", False)
        if not isinstance(sha256, str) or not all(type(v) is int for v in ints.values()) or type(written) is not bool:
            return None
        return cls(sha256=sha256, written=written, **ints)


def stat_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def read_digest(f: BinaryIO, *, chunk: int = 1 << 20) -> tuple[str, int, FileIdentity | None]:
    """The SHA-256 and size of the open file `f` read to its end, and its identity at that read (None
    when it changed during it)."""
    digest, size = hashlib.sha256(), 0
    taken_ns = time.time_ns()  # before the first byte: a write after it is stamped no earlier (a tick)
    before = os.fstat(f.fileno())
    while block := f.read(chunk):
        size += len(block)
        digest.update(block)
    after = os.fstat(f.fileno())
    sha256 = digest.hexdigest()
    return sha256, size, FileIdentity.of(before, sha256, taken_ns) if stat_key(before) == stat_key(after) else None
