"""The local folder backend: today's files and layout, atomic by rename and fsync.

A key is the file `root/key`. Every operation resolves it through existing
symlinks and refuses one whose real location leaves the root, so a symlink in an
export folder cannot make a feed overwrite a file elsewhere. A file is written
to a hidden temporary beside its final name (same file system), fsynced, renamed
into place and the folder fsynced, so a reader never sees half of it, even after
a power cut.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from firefeed.errors import StorageError, UnsafePathError
from firefeed.export._atomic import fsync_dir
from firefeed.storage import retire, spares
from firefeed.storage.base import Storage
from firefeed.storage.keys import check_key
from firefeed.storage.leftovers import published_name

#: A new file is world-readable, like a served feed; a replaced file keeps its mode.
_NEW_FILE_MODE = 0o644


class LocalStorage(Storage):
    """Keys as files under a folder (created on first write). With `spare_min_bytes` (the export folder), a
    published file of that many bytes or more that a publish replaces is kept for the next write of its key
    (storage/spares.py); 0 keeps none."""

    def __init__(self, root: Path, *, spare_min_bytes: int = 0) -> None:
        self.root = Path(root)
        self.spare_min_bytes = spare_min_bytes

    def __repr__(self) -> str:
        return f"LocalStorage({str(self.root)!r})"

    def _resolve(self, key: str) -> Path:
        return (self.root.resolve() / check_key(key)).resolve()

    def path(self, key: str) -> Path:
        """The file backing `key`, resolved; UnsafePathError when it lands outside the root."""
        root, target = self.root.resolve(), self._resolve(key)
        if target == root or not target.is_relative_to(root):
            raise UnsafePathError(f"storage key {key!r} resolves to {target}, outside the storage folder {root}")
        return target

    def url(self, key: str = "") -> str:
        return str(self._resolve(key) if key else self.root.resolve())

    @contextlib.contextmanager
    def writing(self, key: str) -> Iterator[Path]:
        dest = self.path(key)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
            os.close(fd)
        except OSError as exc:
            # The key, not `dest`: the message reaches the tenant, the server's folders are not theirs to see.
            raise StorageError(f"cannot write {key}: {exc.strerror or type(exc).__name__}") from exc
        tmp = Path(name)
        # A run's export written over the file its last publish replaced, when that is kept (storage/spares.py).
        final = published_name(dest.name) if self.spare_min_bytes else None
        held = spares.claim(spares.spare_of(dest.with_name(final)), tmp) if final else None
        try:
            yield tmp
            _fsync_file(tmp)
            os.chmod(tmp, _mode_of(dest))
            os.replace(tmp, dest)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
        finally:
            if held is not None:
                os.close(held)
        fsync_dir(dest.parent)

    def put_file(self, src: Path, key: str) -> None:
        # A download made in place (the default layout) is already where its key is.
        if Path(src).resolve() == self.path(key):
            return
        super().put_file(src, key)

    @contextlib.contextmanager
    def reading(self, key: str) -> Iterator[Path]:
        path = self.path(key)
        if not path.is_file():
            raise StorageError(f"no such file in storage: {key}")
        if not self.spare_min_bytes:
            yield path
            return
        try:
            # Held while read: a publish may make the file a spare, which no write takes while it is read.
            with spares.read_lock(path):
                yield path
        except BlockingIOError as exc:
            raise StorageError(f"cannot read {key}: it is being replaced") from exc

    def open(self, key: str) -> BinaryIO:
        path = self.path(key)
        try:
            return path.open("rb")
        except OSError as exc:
            raise StorageError(f"cannot read {key}: {exc.strerror or type(exc).__name__}") from exc

    def move(self, src: str, dst: str) -> None:
        source, dest = self.path(src), self.path(dst)
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            if self.spare_min_bytes and self._keep_spare(source, dest):
                try:
                    os.replace(source, dest)
                except BaseException:
                    spares.spare_of(dest).unlink(missing_ok=True)  # a second name of the live file is no spare
                    raise
            else:
                # The published file this replaces is freed on the deleter's thread (storage/retire.py), under
                # the name of a storage temporary of `source` (`leftovers`: the janitor's, if a kill leaves it).
                retire.replace(source, dest, _retired_name(source))
        except OSError as exc:
            raise StorageError(f"cannot move {src} to {dst}: {exc.strerror or type(exc).__name__}") from exc
        fsync_dir(dest.parent)

    def prepare_spare(self, key: str) -> bool:
        """Give the published file `key` a spare for its next write when it has none (`spares.prefill`)."""
        return bool(self.spare_min_bytes) and spares.prefill(self.path(key), self.spare_min_bytes)

    def _keep_spare(self, source: Path, dest: Path) -> bool:
        """Whether the file `dest` (about to be replaced by `source`) now also has its spare's name; an older
        spare (one that was being read when `dest` was written) is freed on the deleter's thread."""
        spare = spares.spare_of(dest)
        try:
            if dest.stat().st_size < self.spare_min_bytes:
                return False
            if spare.exists():
                retired = _retired_name(source)
                os.replace(spare, retired)
                retire.later(retired)
            os.link(dest, spare)
        except OSError:
            return False  # no file to replace, or no second name to be had: freed as before
        return True

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def delete_tree(self, prefix: str) -> None:
        shutil.rmtree(self.path(prefix), ignore_errors=True)

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def list(self, prefix: str) -> list[str]:
        base = self.path(prefix)
        if not base.is_dir():
            return []
        root = self.root.resolve()
        return sorted(p.relative_to(root).as_posix() for p in base.rglob("*") if p.is_file())

    def is_within(self, key: str, prefix: str) -> bool:
        outer, target = self._resolve(prefix), self._resolve(key)
        return target != outer and target.is_relative_to(outer)

    def size(self, key: str) -> int | None:
        try:
            return self.path(key).stat().st_size
        except OSError:
            return None


def _retired_name(source: Path) -> Path:
    """A replaced file's name until the deleter removes it: a storage temporary of `source`."""
    return source.with_name(f".{source.name}.{secrets.token_hex(4)}.tmp")


def _mode_of(dest: Path) -> int:
    try:
        return dest.stat().st_mode & 0o777
    except FileNotFoundError:
        return _NEW_FILE_MODE


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
