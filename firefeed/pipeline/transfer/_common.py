"""What SFTP and FTP downloads share: one attempt's inputs, the size-and-mtime validator, the capped sink."""

from __future__ import annotations

import email.utils
import hashlib
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import TYPE_CHECKING

from firefeed.config import Settings
from firefeed.errors import FetchError
from firefeed.pipeline._fetch_deadline import PAST_DEADLINE
from firefeed.spec.remote import RemoteURL

if TYPE_CHECKING:
    from firefeed.pipeline.fetch import FetchResult, Validators
    from firefeed.pipeline.transfer.host_keys import HostKeyStore


@dataclass(frozen=True)
class Stat:
    """A remote file's size and modification time (seconds), None where the server does not say."""

    size: int | None
    mtime: int | float | None

    def validator(self, scheme: str) -> str | None:
        """The text kept in the source row's `etag`: equal texts mean the file did not change (SPEC 10 C6)."""
        if self.size is None or self.mtime is None:
            return None
        return f"{scheme}-stat:{self.size}:{int(self.mtime)}"

    def last_modified(self) -> str | None:
        return email.utils.formatdate(self.mtime, usegmt=True) if self.mtime is not None else None


@dataclass
class Attempt:
    """One try at one remote file: where to connect (a checked address) and what the spec says of it."""

    source: str
    remote: RemoteURL  # user and path percent-decoded
    address: str
    shown: str  # the URL for messages: no secret in it
    settings: Settings
    dest_dir: Path
    compression: str
    previous: Validators | None
    deadline: float | None
    started: float
    password: str | None = None
    private_key: str | None = None
    host_key: str | None = None
    host_keys: HostKeyStore | None = None

    def timeout(self) -> float:
        """A connect's or one read's timeout: the fetch timeout, never past the fetch's deadline."""
        seconds = float(self.settings.fetch_timeout_s)
        if self.deadline is not None:
            seconds = min(seconds, self.deadline - time.monotonic())
        if seconds <= 0:
            raise FetchError(self.source, f"{self.shown}: {PAST_DEADLINE}")
        return seconds

    def unchanged(self, stat: Stat) -> FetchResult | None:
        """The not_modified result when size and mtime equal the last successful fetch's; FetchError if too large."""
        from firefeed.pipeline.fetch import FetchResult, Validators, _too_large

        if stat.size is not None and stat.size > self.settings.fetch_max_bytes:
            raise FetchError(self.source, _too_large(self.settings.fetch_max_bytes))
        token = stat.validator(self.remote.scheme)
        previous = self.previous
        if token is None or previous is None or previous.etag != token:
            return None
        validators = Validators(etag=token, last_modified=stat.last_modified(), sha256=previous.sha256)
        return FetchResult(None, 0, True, validators, None, self.shown)

    def sink(self) -> Sink:
        self.dest_dir.mkdir(parents=True, exist_ok=True)
        return Sink(self)


class Sink:
    """The download file: every chunk counted against the size cap, the step's time limit and the deadline."""

    def __init__(self, attempt: Attempt) -> None:
        self.attempt = attempt
        fd, tmp = tempfile.mkstemp(dir=attempt.dest_dir, prefix=".fetch-", suffix=".part")
        self.raw = Path(tmp)
        self._out = os.fdopen(fd, "wb")
        self._digest = hashlib.sha256()
        self.received = 0
        self._limit_at = attempt.started + attempt.settings.step_time_limit_s

    def write(self, chunk: bytes) -> None:
        from firefeed.pipeline.fetch import _too_large, _too_slow

        a = self.attempt
        self.received += len(chunk)
        if self.received > a.settings.fetch_max_bytes:
            raise FetchError(a.source, _too_large(a.settings.fetch_max_bytes))
        if time.monotonic() > self._limit_at:
            raise FetchError(a.source, _too_slow(a.shown, a.settings.step_time_limit_s))
        if a.deadline is not None and time.monotonic() >= a.deadline:
            raise FetchError(a.source, f"{a.shown} sent too slowly: {PAST_DEADLINE}")
        self._digest.update(chunk)
        self._out.write(chunk)

    def finish(self, stat: Stat) -> FetchResult:
        """The fetched file under its final name, or not_modified when its bytes equal the last fetch's."""
        from firefeed.pipeline._decompress import detect
        from firefeed.pipeline.fetch import FetchResult, Validators, _finish

        a = self.attempt
        self._out.close()
        sha256 = self._digest.hexdigest()
        validators = Validators(etag=stat.validator(a.remote.scheme), last_modified=stat.last_modified(), sha256=sha256)
        if a.previous is not None and a.previous.sha256 == sha256:
            self.raw.unlink()
            return FetchResult(None, self.received, True, validators, None, a.shown)
        name = PurePosixPath(a.remote.path).name
        kind = detect(self.raw, a.compression, name, source=a.source)
        path = _finish(self.raw, name, kind, source=a.source, dest_dir=a.dest_dir, settings=a.settings)
        if kind != "none":
            self.raw.unlink()
        return FetchResult(path, self.received, False, validators, None, a.shown)

    def __enter__(self) -> Sink:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._out.close()
        if exc is not None:
            self.raw.unlink(missing_ok=True)
