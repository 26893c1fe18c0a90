"""The object store backend (`s3://bucket/prefix`, through fsspec and s3fs).

Atomicity comes from the store: an S3 object appears whole when its PUT (or the
last part of a multipart upload) completes, so a file is first written to a local
spool file and uploaded at the end. Publishing is a server-side copy onto the
final key followed by a delete of the partial one: the copy replaces the object
in one step, so a reader of the final key gets the old feed or the new one. (A
versioned pointer would need every consumer to read the pointer first; plain
URLs and CDNs cannot.)

The fsspec filesystem is looked up on every call: fsspec keeps one instance per
process, so a forked Celery pool child never reuses its parent's connections.
Credentials and region come from the standard AWS chain (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_DEFAULT_REGION, AWS_PROFILE, an
instance role); FIREFEED_STORAGE_ENDPOINT_URL points at an S3-compatible server.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO, TypeVar

from firefeed.errors import StorageError
from firefeed.storage.base import Storage
from firefeed.storage.keys import check_key

T = TypeVar("T")


class ObjectStorage(Storage):
    """Keys as objects under `<protocol>://<root>/`."""

    def __init__(self, protocol: str, root: str, *, spool_dir: Path, options: dict[str, Any] | None = None) -> None:
        self.protocol = protocol
        self.root = root.strip("/")
        self.spool_dir = Path(spool_dir)
        self.options = dict(options or {})

    def __repr__(self) -> str:
        return f"ObjectStorage({self.url()!r})"

    @property
    def fs(self) -> Any:
        import fsspec

        return fsspec.filesystem(self.protocol, **self.options)

    def _full(self, key: str) -> str:
        return f"{self.root}/{check_key(key)}"

    def url(self, key: str = "") -> str:
        return f"{self.protocol}://{self._full(key) if key else self.root}"

    def _call(self, what: str, key: str, fn: Callable[[], T]) -> T:
        """Run one store operation; a store failure becomes a StorageError naming the object."""
        try:
            return fn()
        except StorageError:
            raise
        except FileNotFoundError as exc:
            raise StorageError(f"cannot {what} {self.url(key)}: no such object") from exc
        except Exception as exc:  # botocore, aiohttp and OSError alike: say which object and why
            raise StorageError(f"cannot {what} {self.url(key)}: {type(exc).__name__}: {exc}") from exc

    @contextlib.contextmanager
    def _spool(self, key: str) -> Iterator[Path]:
        """A private local folder for one file on its way in or out; removed afterwards."""
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix="ff-", dir=self.spool_dir))
        try:
            # The key's own name, so a reader that looks at the extension still can.
            yield folder / PurePosixPath(key).name
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    @contextlib.contextmanager
    def writing(self, key: str) -> Iterator[Path]:
        full = self._full(key)
        with self._spool(key) as local:
            local.touch()
            yield local
            self._call("upload to", key, lambda: self.fs.put_file(str(local), full))

    @contextlib.contextmanager
    def reading(self, key: str) -> Iterator[Path]:
        full = self._full(key)
        with self._spool(key) as local:
            self._call("download", key, lambda: self.fs.get_file(full, str(local)))
            yield local

    def open(self, key: str) -> BinaryIO:
        full = self._full(key)
        return self._call("read", key, lambda: self.fs.open(full, "rb"))

    def read_bytes(self, key: str) -> bytes:
        # One GET: the object as it was when the request arrived. (A ranged `open` that sees the
        # object replaced between two requests fails with PreconditionFailed instead of mixing.)
        full = self._full(key)
        return bytes(self._call("read", key, lambda: self.fs.cat_file(full)))

    def move(self, src: str, dst: str) -> None:
        source, dest = self._full(src), self._full(dst)
        self._call(f"publish {self.url(src)} as", dst, lambda: self.fs.copy(source, dest))
        self._call("delete", src, lambda: self.fs.rm_file(source))

    def delete(self, key: str) -> None:
        full = self._full(key)

        def remove() -> None:
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm_file(full)

        self._call("delete", key, remove)

    def delete_tree(self, prefix: str) -> None:
        full = self._full(prefix)

        def remove() -> None:
            found = self.fs.find(full)
            if found:
                self.fs.rm(found)

        self._call("delete", prefix, remove)

    def exists(self, key: str) -> bool:
        full = self._full(key)
        return bool(self._call("look up", key, lambda: self.fs.isfile(full)))

    def list(self, prefix: str) -> list[str]:
        full = self._full(prefix)
        found = self._call("list", prefix, lambda: self.fs.find(full))
        start = len(self.root) + 1
        return sorted(str(p)[start:] for p in found)

    def size(self, key: str) -> int | None:
        full = self._full(key)
        try:
            return int(self.fs.size(full))
        except Exception:  # missing, or the store cannot say now: the free-space check falls back to its minimum
            return None

    def is_within(self, key: str, prefix: str) -> bool:
        # Objects have no symlinks: a checked key is where its name says.
        return check_key(key).startswith(check_key(prefix) + "/")
