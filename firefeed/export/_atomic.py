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
import errno
import gzip
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

#: COPY hands over one row per write(); batching them keeps syscalls and zlib calls few.
_BATCH_BYTES = 1 << 20
#: the gzip command's default: most of level 9's ratio at a fraction of its time.
_GZIP_LEVEL = 6


class Sink(Protocol):
    def write(self, data: bytes, /) -> object: ...


class _Digest:
    """Counts and hashes the final bytes on their way to the file."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes, /) -> int:
        self.sha.update(data)
        self.size += len(data)
        self._file.write(data)
        return len(data)

    def flush(self) -> None:
        self._file.flush()

    def fileno(self) -> int:
        return self._file.fileno()

    def resync(self) -> None:
        """After bytes were added behind the buffered file's back: its position is the end again."""
        self._file.seek(0, os.SEEK_END)

    def account(self, data: bytes) -> None:
        """Count and hash bytes that reached the file another way (see AtomicOutput.append_from)."""
        self.sha.update(data)
        self.size += len(data)


class _NoKernelCopy(Exception):
    """copy_file_range cannot copy between these two files (another file system, an old kernel)."""


def _copy_range(src: int, dst: int, offset: int, length: int) -> None:
    """Copy `length` bytes of `src` from `offset` to `dst` at its file position, which moves on."""
    done = 0
    while done < length:
        try:
            n = os.copy_file_range(src, dst, length - done, offset + done)
        except OSError as exc:
            if done == 0 and exc.errno in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise _NoKernelCopy from exc
            raise
        if n == 0:
            raise OSError(f"the source ended {length - done} bytes early")
        done += n


class AtomicOutput:
    """The writable end of an atomic export; `bytes` and `sha256` are final after the block."""

    def __init__(self, digest: _Digest, zipper: gzip.GzipFile | None) -> None:
        self._digest = digest
        self._zipper = zipper
        self._target: Sink = zipper if zipper is not None else digest
        self._pending: list[bytes] = []
        self._pending_size = 0
        self._copy_in_kernel = hasattr(os, "copy_file_range")

    def write(self, data: bytes, /) -> int:
        self._pending.append(data)
        self._pending_size += len(data)
        if self._pending_size >= _BATCH_BYTES:
            self._drain()
        return len(data)

    def append_from(self, fd: int, offset: int, length: int) -> None:
        """Append `length` bytes of the file `fd` from `offset`, as write() would.

        Uncompressed, the bytes are copied file to file by the kernel
        (copy_file_range) and only read back for the hash: half the work of
        reading them into Python and writing them out again.
        """
        chunks = range(offset, offset + length, _BATCH_BYTES)
        if self._zipper is None and self._copy_in_kernel:
            self._drain()
            self._digest.flush()
            out = self._digest.fileno()
            try:
                for at in chunks:
                    n = min(_BATCH_BYTES, offset + length - at)
                    _copy_range(fd, out, at, n)
                    self._digest.account(os.pread(fd, n, at))
                return
            except _NoKernelCopy:
                self._copy_in_kernel = False  # nothing was copied by the failed call: go on by hand
                chunks = range(at, offset + length, _BATCH_BYTES)
            finally:
                self._digest.resync()
        for at in chunks:
            self.write(os.pread(fd, min(_BATCH_BYTES, offset + length - at), at))

    def _drain(self) -> None:
        if self._pending:
            self._target.write(b"".join(self._pending))
            self._pending.clear()
            self._pending_size = 0

    def _finish(self) -> None:
        self._drain()
        if self._zipper is not None:
            self._zipper.close()  # writes the gzip trailer through the digest
        self._digest.flush()

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
def atomic_output(dest: Path, *, compress: bool = False) -> Iterator[AtomicOutput]:
    """Write `dest` atomically; with `compress`, as deterministic gzip (mtime 0, no file name)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as file:
            os.fchmod(file.fileno(), _file_mode(dest))
            digest = _Digest(file)
            zipper = (
                gzip.GzipFile(filename="", mode="wb", fileobj=digest, compresslevel=_GZIP_LEVEL, mtime=0)
                if compress
                else None
            )
            out = AtomicOutput(digest, zipper)
            yield out
            out._finish()
            os.fsync(file.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    fsync_dir(dest.parent)


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
