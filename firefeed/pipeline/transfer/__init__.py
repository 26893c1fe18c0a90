"""FETCH from file servers: sftp://, ftp:// and ftps:// sources and lookups (SPEC 10 C6).

The same contract as an http(s) fetch (firefeed/pipeline/fetch.py): the host rules judge every
address the host resolves to before any connection, the download streams to the same kind of
file under the same size cap, step time limit and deadline, a connection failure is retried
with the same backoff, and a file whose size and modification time equal the last successful
fetch's is not downloaded again (`not_modified`; the pair is kept in the source row's `etag`).
Credentials come from the company's secrets; no message shows them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote

import httpx

from firefeed.config import Settings
from firefeed.errors import InvalidSourceRequestError
from firefeed.pipeline._netguard import check_host_notation, host_is_exempt, resolve_public
from firefeed.pipeline._retries import Retryable, with_retries
from firefeed.pipeline.transfer._common import Attempt
from firefeed.spec.remote import RemoteURL, split_remote_url

if TYPE_CHECKING:
    from firefeed.pipeline.fetch import FetchResult, Validators
    from firefeed.pipeline.transfer.host_keys import HostKeyStore
    from firefeed.secrets.references import Resolver

log = logging.getLogger(__name__)


class _Feed(Protocol):
    @property
    def password(self) -> str | None: ...
    @property
    def private_key(self) -> str | None: ...
    @property
    def host_key(self) -> str | None: ...


@dataclass(frozen=True)
class RemoteAccess:
    """A file-server feed's credentials as the spec writes them (references, expanded only to connect)."""

    password: str | None = None
    private_key: str | None = None
    host_key: str | None = None

    @classmethod
    def of(cls, feed: _Feed) -> RemoteAccess:
        return cls(password=feed.password, private_key=feed.private_key, host_key=feed.host_key)


def fetch_remote(
    *,
    source: str,
    url: str,
    access: RemoteAccess | None,
    references: Resolver,
    dest_dir: Path,
    compression: str,
    previous: Validators | None,
    settings: Settings,
    deadline: float | None,
    host_keys: HostKeyStore | None,
) -> FetchResult:
    """Fetch an sftp://, ftp:// or ftps:// `url` (references already expanded) for the source `source`."""
    access = access or RemoteAccess()
    try:
        parts = split_remote_url(url)
    except ValueError as err:
        raise InvalidSourceRequestError(source, str(err)) from None
    remote = _decoded(source, parts)
    shown = references.mask(f"{remote.scheme}://{parts.user + '@' if parts.user else ''}{_hostport(parts)}{parts.path}")
    refs = references
    password = refs.expand(access.password, source=source, where="password") if access.password else None
    private_key = refs.expand(access.private_key, source=source, where="private_key") if access.private_key else None
    if remote.scheme != "sftp" and (private_key or access.host_key):
        raise InvalidSourceRequestError(source, "private_key and host_key are for sftp:// sources only")
    check_host_notation(source, remote.host)
    started = time.monotonic()

    def one_try() -> FetchResult:
        def attempt(address: str) -> Attempt:
            return Attempt(
                source=source,
                remote=remote,
                address=address,
                shown=shown,
                settings=settings,
                dest_dir=dest_dir,
                compression=compression,
                previous=previous,
                deadline=deadline,
                started=started,
                password=password,
                private_key=private_key,
                host_key=access.host_key,
                host_keys=host_keys,
            )

        return _try_addresses(_addresses(source, remote, settings), attempt)

    with refs.hiding():  # the SSH library's log lines hide the expanded values too
        return with_retries(source, settings, deadline, one_try)


def _decoded(source: str, parts: RemoteURL) -> RemoteURL:
    """User and path percent-decoded; an sftp path is absolute (`/~/` starts at the login folder, as curl
    reads it), an ftp path is relative to the login folder (RFC 1738; `%2F` makes it absolute)."""
    user = unquote(parts.user)
    path = unquote(parts.path) if parts.scheme == "sftp" else unquote(parts.path[1:])
    if parts.scheme == "sftp" and path.startswith("/~/"):
        path = path[3:]
    if any(c in user + path for c in "\r\n\0"):
        raise InvalidSourceRequestError(source, "the URL's user or path holds a line break or NUL")
    return RemoteURL(scheme=parts.scheme, user=user, host=parts.host, port=parts.port, path=path)


def _hostport(parts: RemoteURL) -> str:
    host = f"[{parts.host}]" if ":" in parts.host else parts.host
    return f"{host}:{parts.port}"


def _addresses(source: str, remote: RemoteURL, settings: Settings) -> list[str]:
    """The addresses to try, each checked by the host rules before any connection (SPEC 10 C6)."""
    if host_is_exempt(remote.host, settings):
        return [remote.host]
    try:
        return resolve_public(source, remote.host, remote.port, allow_private=settings.fetch_allow_private)
    except httpx.ConnectError as exc:
        raise Retryable(str(exc)) from exc


def _try_addresses(addresses: list[str], make: Callable[[str], Attempt]) -> FetchResult:
    """Each checked address in turn until one connects, as a resolver-driven client would."""
    from firefeed.pipeline.transfer.ftp import fetch_ftp
    from firefeed.pipeline.transfer.sftp import fetch_sftp

    last: Retryable | None = None
    for address in addresses:
        attempt = make(address)
        fetch = fetch_sftp if attempt.remote.scheme == "sftp" else fetch_ftp
        try:
            return fetch(attempt)
        except Retryable as failure:
            last = failure
    assert last is not None
    raise last
