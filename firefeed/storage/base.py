"""The storage interface: files by key, so no step hands a file to another through a worker's own disk.

A backend implements a handful of primitives; writing a stream or a local file
is built on `writing`, so every backend gets the same guarantee: a reader of a
key sees its previous content or the complete new content, never part of it.
"""

from __future__ import annotations

import contextlib
import shutil
from abc import ABC, abstractmethod
from pathlib import Path
from typing import BinaryIO

#: Copy buffer for streams: large enough to keep syscalls and S3 requests few.
COPY_BUFFER = 1 << 20


class Storage(ABC):
    """Files addressed by key (`firefeed.storage.keys`) in one area: a local folder or a bucket prefix."""

    @abstractmethod
    def url(self, key: str = "") -> str:
        """Where a key is, for reports and messages: a local path or `s3://bucket/prefix/key`."""

    @abstractmethod
    def writing(self, key: str) -> contextlib.AbstractContextManager[Path]:
        """A local file to fill; it becomes `key`, whole, when the block ends without an exception.

        On an exception the key keeps its previous content (or stays absent) and the
        local file is removed.
        """

    @abstractmethod
    def reading(self, key: str) -> contextlib.AbstractContextManager[Path]:
        """A local file with the key's content, for readers that open a file more than once.

        A local folder yields its own file; a remote store spools a copy that is
        removed when the block ends. StorageError when the key does not exist.
        """

    @abstractmethod
    def open(self, key: str) -> BinaryIO:
        """The key's bytes as a stream (the caller closes it)."""

    @abstractmethod
    def move(self, src: str, dst: str) -> None:
        """Publish `src` as `dst`: `dst` switches from its old content to the new in one step."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove a key; a missing key is not an error."""

    @abstractmethod
    def delete_tree(self, prefix: str) -> None:
        """Remove every key under `prefix/`; a missing prefix is not an error."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """True when the key is a file."""

    @abstractmethod
    def list(self, prefix: str) -> list[str]:
        """Every key under `prefix/`, sorted."""

    @abstractmethod
    def is_within(self, key: str, prefix: str) -> bool:
        """True when the key's real location is under `prefix/` (a local folder follows its symlinks)."""

    def size(self, key: str) -> int | None:
        """The key's size in bytes; None when it does not exist or the backend cannot say (the free-space
        check before an export takes it as a guess of what the export writes again)."""
        return None

    def put_file(self, src: Path, key: str) -> None:
        """Move a local file into the storage under `key` (the local file is consumed)."""
        with self.writing(key) as target:
            shutil.move(src, target)

    def put_stream(self, stream: BinaryIO, key: str) -> None:
        """Store everything `stream` yields under `key`."""
        with self.writing(key) as target, target.open("wb") as out:
            shutil.copyfileobj(stream, out, COPY_BUFFER)

    def read_bytes(self, key: str) -> bytes:
        """The whole content of a key (small files: tests, checks)."""
        with self.open(key) as f:
            return f.read()
