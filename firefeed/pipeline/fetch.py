"""FETCH: bring one source feed to a local, decompressed file the parser can read.

http(s) sources are downloaded through the SSRF guard (`_netguard`) with
conditional GET, retries and a size cap; local sources (file:// or a path) must
stay inside the spec's folder or FIREFEED_LOCAL_SOURCES_ROOT. Either way the
result says whether the content changed since the previous successful fetch, so
a run can skip parsing an unchanged feed.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING
from urllib.parse import unquote, urljoin, urlsplit

import httpx

from firefeed.config import Settings
from firefeed.dataplane import file_identity
from firefeed.dataplane.file_identity import FileIdentity, stat_key
from firefeed.errors import FetchError, FireFeedError, InvalidSourceRequestError, UnsafeURLError
from firefeed.pipeline._decompress import (
    CHUNK,
    COMPRESSIONS,
    Compression,
    DecompressLimits,
    decompress,
    detect,
    strip_suffix,
)
from firefeed.pipeline._fetch_deadline import PAST_DEADLINE as _PAST_DEADLINE
from firefeed.pipeline._fetch_deadline import FetchWatchdog
from firefeed.pipeline._netguard import check_url_host, guarded_client, resolve_local_path, url_kind
from firefeed.pipeline._retries import Retryable as _Retryable
from firefeed.pipeline._retries import with_retries
from firefeed.secrets.references import Resolver
from firefeed.spec.headers import HEADER_VALUE, header_problem

if TYPE_CHECKING:
    from firefeed.pipeline.transfer import RemoteAccess
    from firefeed.pipeline.transfer.host_keys import HostKeyStore

log = logging.getLogger(__name__)

MAX_REDIRECTS = 10
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504}) | frozenset(range(505, 600))
_REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/?#@:]*:)[^/?#@]*@")


@dataclass(frozen=True)
class Validators:
    """What the previous successful fetch of this source saw.

    A local, uncompressed file fetched with no previous digest to compare has `sha256` None: its
    digest is taken while PARSE reads it (`file_digest` in a thread), not before, on the run's path.
    `identity` (local files only): the file's stat when its digest was taken; it is not one of the
    validators a run's state compares (`dataplane/state.SourceState`), only a way to know the
    digest without reading the file.
    """

    etag: str | None = None
    last_modified: str | None = None
    sha256: str | None = None
    identity: FileIdentity | None = None


@dataclass(frozen=True)
class FetchResult:
    """One fetched source; `path` is None when the content did not change (`not_modified`)."""

    path: Path | None
    bytes: int
    not_modified: bool
    validators: Validators
    content_type: str | None
    final_url: str


def fetch_source(
    *,
    source: str,
    url: str,
    dest_dir: Path,
    base_dir: Path | None,
    headers: Mapping[str, str] | None,
    compression: str = "auto",
    previous: Validators | None,
    settings: Settings,
    deadline: float | None = None,
    references: Resolver | None = None,
    access: RemoteAccess | None = None,
    host_keys: HostKeyStore | None = None,
) -> FetchResult:
    """Fetch `url` for the source named `source` into `dest_dir`.

    `deadline` (a `time.monotonic()` value; a preview's) ends the whole fetch,
    retries included, even while a server trickles bytes. Raises FetchError:
    UnsafeURLError for a destination or redirect refused for safety,
    InvalidSourceRequestError for a request the spec describes that cannot be
    sent (both the spec's mistake, found before or without a server failing),
    a plain FetchError for a server or a file that failed; UnsafePathError for
    a local path outside the allowed folders.

    `references` expands `${secret:NAME}` and `${VAR}` in the URL and headers
    for the spec's company and origin (firefeed/secrets); without one every
    reference is refused. No message, log line or result shows an expanded value.

    An sftp://, ftp:// or ftps:// URL is fetched by firefeed/pipeline/transfer with `access` (the
    feed's password, private_key, host_key) and `host_keys` (the company's pinned SFTP keys).
    """
    refs = references or Resolver.closed()
    try:
        url = refs.expand(url.strip(), source=source, where="the URL", in_url=True)
        if not url:
            raise InvalidSourceRequestError(source, "the URL is empty")
        if compression not in COMPRESSIONS:
            raise InvalidSourceRequestError(source, f"compression must be one of {', '.join(COMPRESSIONS)}")
        kind = url_kind(source, url)
        if kind == "remote":
            from firefeed.pipeline.transfer import fetch_remote

            return fetch_remote(
                source=source,
                url=url,
                access=access,
                references=refs,
                dest_dir=dest_dir,
                compression=compression,
                previous=previous,
                settings=settings,
                deadline=deadline,
                host_keys=host_keys,
            )
        if kind == "http":
            if not _has_host(url):
                raise InvalidSourceRequestError(source, "the URL has no host")
            check_url_host(source, url)
            expanded = expand_headers(source, headers or {}, refs)
            with refs.hiding():
                return _fetch_http(
                    source=source,
                    url=url,
                    dest_dir=dest_dir,
                    headers=expanded,
                    compression=compression,
                    previous=previous,
                    settings=settings,
                    deadline=deadline,
                    mask=refs.mask,
                )
        return _fetch_local(
            source=source,
            url=url,
            dest_dir=dest_dir,
            base_dir=base_dir,
            compression=compression,
            previous=previous,
            settings=settings,
        )
    except FireFeedError as exc:
        refs.scrub(exc)  # a message (or a library error it chains) may quote the expanded URL
        raise


def expand_headers(source: str, headers: Mapping[str, str], references: Resolver | None = None) -> dict[str, str]:
    """Replace `${secret:NAME}` and `${VAR}` in header values, read now (not at spec load).

    Messages name the header and the reference, never a value: values are secrets.
    """
    refs = references or Resolver.closed()
    expanded: dict[str, str] = {}
    for name, value in headers.items():
        if (problem := header_problem(name, "")) is not None:
            raise InvalidSourceRequestError(source, problem)
        text = refs.expand(str(value), source=source, where=f"header {name!r}")
        # Checked again once expanded (a secret may hold a line break), and because httpx/h11 would
        # quote the offending value in their error.
        if (problem := header_problem(name, text)) is not None:
            raise InvalidSourceRequestError(source, problem)
        expanded[name] = text
    return expanded


def redact_url(url: str) -> str:
    """The URL without a password in its user-info, fit for messages and logs."""
    return _PASSWORD.sub(r"\1***@", url)


# ---------------------------------------------------------------- http(s)


def _fetch_http(
    *,
    source: str,
    url: str,
    dest_dir: Path,
    headers: dict[str, str],
    compression: str,
    previous: Validators | None,
    settings: Settings,
    deadline: float | None = None,
    mask: Callable[[str], str] = str,
) -> FetchResult:
    request_headers = {"User-Agent": "FireFeed/1.0"}
    # A validator is echoed only if it is a clean header value (it came from a server).
    if previous is not None and previous.etag and HEADER_VALUE.fullmatch(previous.etag):
        request_headers["If-None-Match"] = previous.etag
    last_modified = previous.last_modified if previous is not None else None
    if last_modified and HEADER_VALUE.fullmatch(last_modified):
        request_headers["If-Modified-Since"] = last_modified
    request_headers.update(headers)
    dest_dir.mkdir(parents=True, exist_ok=True)

    def one_try() -> FetchResult:
        return _try_http(
            source=source,
            url=url,
            dest_dir=dest_dir,
            headers=request_headers,
            compression=compression,
            previous=previous,
            settings=settings,
            deadline=deadline,
            mask=mask,
        )

    return with_retries(source, settings, deadline, one_try)


def _try_http(
    *,
    source: str,
    url: str,
    dest_dir: Path,
    headers: dict[str, str],
    compression: str,
    previous: Validators | None,
    settings: Settings,
    deadline: float | None = None,
    mask: Callable[[str], str] = str,
) -> FetchResult:
    def check_redirect(response: httpx.Response) -> None:
        # httpx parses a Location before handing the response back, and calls `0177.0.0.1` an invalid URL
        # there (a retried transport error): the target is judged first, as the redirect code below does.
        if response.status_code in _REDIRECT_STATUS and "location" in response.headers:
            shown = mask(redact_url(str(response.request.url)))
            _redirect_target(source, shown, str(response.request.url), response.headers["location"])

    with guarded_client(source=source, settings=settings) as client, FetchWatchdog(deadline) as watchdog:
        client.event_hooks = {"response": [check_redirect]}
        current, current_headers = url, dict(headers)
        for _hop in range(MAX_REDIRECTS + 1):
            try:
                request = client.build_request(
                    "GET",
                    current,
                    headers=current_headers,
                    timeout=watchdog.timeout(settings.fetch_timeout_s),
                    extensions=watchdog.extensions,
                )
            except httpx.InvalidURL as exc:
                # Only the spec's URL gets here: a redirect's target was parsed before it was followed.
                raise InvalidSourceRequestError(source, f"invalid URL {redact_url(current)!r} ({exc})") from exc
            shown = mask(redact_url(str(request.url)))  # a URL may hold an expanded secret
            try:
                response = client.send(request, stream=True)
            except httpx.TimeoutException as exc:
                raise _Retryable(f"timed out fetching {shown}") from exc
            except (httpx.LocalProtocolError, httpx.UnsupportedProtocol) as exc:
                # Our own request is malformed: retrying cannot help (text may quote a header).
                raise InvalidSourceRequestError(source, f"cannot send a request to {shown}") from exc
            except httpx.TransportError as exc:
                # The exception text names the failure (refused, reset, DNS), never headers.
                raise _Retryable(f"could not fetch {shown}: {exc or type(exc).__name__}") from exc
            try:
                if response.status_code in _REDIRECT_STATUS and "location" in response.headers:
                    following, target = _redirect_target(source, shown, str(request.url), response.headers["location"])
                    current_headers = _headers_for_redirect(request.url, target, current_headers)
                    current = following
                    continue
                return _receive(
                    response,
                    source=source,
                    shown=shown,
                    dest_dir=dest_dir,
                    compression=compression,
                    previous=previous,
                    settings=settings,
                    deadline=deadline,
                )
            finally:
                response.close()
        raise FetchError(source, f"more than {MAX_REDIRECTS} redirects from {redact_url(url)}")


def _has_host(url: str) -> bool:
    """False for an http(s) URL with nothing between `//` and the path; one urlsplit cannot read is left to httpx."""
    try:
        return bool(urlsplit(url).hostname)
    except ValueError:
        return True


def _redirect_target(source: str, shown: str, base: str, location: str) -> tuple[str, httpx.URL]:
    """Where a redirect from `base` goes, refused as the same URL in the spec would be (`unsafe_url`).

    A Location nothing can read (or without a host) is the server's fault: a plain FetchError.
    """
    following = urljoin(base, location)
    if url_kind(source, following) != "http":
        raise UnsafeURLError(source, f"{shown} redirects to a non-http URL")
    check_url_host(source, following)
    try:
        target = httpx.URL(following)
    except httpx.InvalidURL as exc:
        raise FetchError(source, f"{shown} redirects to an invalid URL") from exc
    if not target.host:
        raise FetchError(source, f"{shown} redirects to a URL without a host")
    return following, target


def _headers_for_redirect(origin: httpx.URL, target: httpx.URL, headers: dict[str, str]) -> dict[str, str]:
    """The source's own headers (credentials, API keys) go only to the origin the spec named.

    httpx drops just Authorization on a cross-origin redirect; a custom key
    header would follow a redirect to anyone. An http -> https upgrade on the same
    host keeps them.
    """
    same_host = target.host == origin.host
    upgrade = origin.scheme == "http" and target.scheme == "https"
    if same_host and (target.scheme == origin.scheme or upgrade) and (target.port == origin.port or upgrade):
        return headers
    kept = {"user-agent", "if-none-match", "if-modified-since"}
    return {k: v for k, v in headers.items() if k.lower() in kept}


def _receive(
    response: httpx.Response,
    *,
    source: str,
    shown: str,
    dest_dir: Path,
    compression: str,
    previous: Validators | None,
    settings: Settings,
    deadline: float | None = None,
) -> FetchResult:
    status = response.status_code
    etag = response.headers.get("etag")
    last_modified = response.headers.get("last-modified")
    content_type = response.headers.get("content-type")
    if status == 304:
        if previous is None:
            raise FetchError(source, f"{shown} answered 304 Not Modified to a plain GET")
        return FetchResult(
            path=None,
            bytes=response.num_bytes_downloaded,
            not_modified=True,
            validators=Validators(
                etag=etag or previous.etag,
                last_modified=last_modified or previous.last_modified,
                sha256=previous.sha256,
            ),
            content_type=content_type,
            final_url=shown,
        )
    if status in _RETRY_STATUS:
        raise _Retryable(f"HTTP {status} from {shown}", _retry_after(response))
    if not 200 <= status < 300:
        raise FetchError(source, f"HTTP {status} from {shown}")
    _check_declared_length(response, source=source, max_bytes=settings.fetch_max_bytes)

    fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=".fetch-", suffix=".part")
    raw = Path(tmp)
    digest = hashlib.sha256()
    # A body decoded in transit (Content-Encoding) is held to the expansion ratio too, against the raw bytes.
    encoded = response.headers.get("content-encoding", "").strip().lower() not in ("", "identity")
    limits = DecompressLimits.from_settings(settings)
    try:
        with os.fdopen(fd, "wb") as out:
            received = 0
            # The read timeout restarts with every byte: a trickling server is stopped by the step's time limit.
            limit_at = time.monotonic() + settings.step_time_limit_s
            try:
                # iter_bytes undoes Content-Encoding, so the cap also bounds a gzip-encoded body; pieces come
                # as they arrive (not gathered to CHUNK bytes), so the deadline is checked on a trickle too.
                for chunk in response.iter_bytes():
                    received += len(chunk)
                    if received > settings.fetch_max_bytes:
                        raise FetchError(source, _too_large(settings.fetch_max_bytes))
                    if encoded:
                        limits.check(received, response.num_bytes_downloaded, source=source)
                    if time.monotonic() > limit_at:
                        raise FetchError(source, _too_slow(shown, settings.step_time_limit_s))
                    if deadline is not None and time.monotonic() >= deadline:
                        raise FetchError(source, f"{shown} sent too slowly: {_PAST_DEADLINE}")
                    digest.update(chunk)
                    out.write(chunk)
                if deadline is not None and time.monotonic() >= deadline:
                    # The watchdog shut the connection: a body that ends at connection close looks complete.
                    raise FetchError(source, f"{shown} sent too slowly: {_PAST_DEADLINE}")
            except httpx.TimeoutException as exc:
                raise _Retryable(f"timed out reading {shown}") from exc
            except httpx.TransportError as exc:
                raise _Retryable(f"connection lost reading {shown}: {exc}") from exc
        sha256 = digest.hexdigest()
        validators = Validators(etag=etag, last_modified=last_modified, sha256=sha256)
        downloaded = response.num_bytes_downloaded
        if previous is not None and previous.sha256 == sha256:
            raw.unlink()
            return FetchResult(None, downloaded, True, validators, content_type, shown)
        name = PurePosixPath(unquote(response.url.path)).name
        kind = detect(raw, compression, name, source=source)
        path = _finish(raw, name, kind, source=source, dest_dir=dest_dir, settings=settings)
        if kind != "none":
            raw.unlink()
    except BaseException:
        raw.unlink(missing_ok=True)
        raise
    return FetchResult(path, downloaded, False, validators, content_type, shown)


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    if value.strip().isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _check_declared_length(response: httpx.Response, *, source: str, max_bytes: int) -> None:
    declared = response.headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > max_bytes:
        raise FetchError(source, _too_large(max_bytes))


def _too_large(max_bytes: int) -> str:
    return f"the file is larger than the size cap of {max_bytes} bytes"


def _too_slow(shown: str, limit_s: int) -> str:
    return f"{shown} sent too slowly: the download took longer than FIREFEED_STEP_TIME_LIMIT_S ({limit_s} s)"


# ---------------------------------------------------------------- local files


def _fetch_local(
    *,
    source: str,
    url: str,
    dest_dir: Path,
    base_dir: Path | None,
    compression: str,
    previous: Validators | None,
    settings: Settings,
) -> FetchResult:
    """A local source is read in place: an uncompressed file's own path is returned, not a copy.

    With no previous digest to compare, or another size than the kept identity's (changed for sure), an
    uncompressed file is not read here: its size is its stat's, and its digest (`sha256` None) is taken
    while PARSE reads it. Hashing first cost the
    1M-item benchmark's first run 0.6-2.4 s of its critical path. With one, a file whose stat is
    the identity kept with that digest (`FileIdentity.vouches_for`) is not modified without being
    read (the 695 MB primary's hash cost 1-2 s of every refresh); any other is hashed, and the
    result's `identity` is its stat at that read, for the next run to keep.
    """
    path = resolve_local_path(source, url, base_dir=base_dir, settings=settings)
    try:
        if not path.exists():
            raise FetchError(source, f"no such file: {url}")
        if not path.is_file():
            raise FetchError(source, f"not a file: {url}")
        final_url = path.as_uri()
        known = previous.identity if previous is not None else None
        if previous is not None and known is not None and known.vouches_for(path.stat(), previous.sha256):
            if known.size > settings.fetch_max_bytes:
                raise FetchError(source, _too_large(settings.fetch_max_bytes))
            kept = Validators(sha256=previous.sha256, identity=known)
            return FetchResult(None, known.size, True, kept, None, final_url)
        kind = detect(path, compression, path.name, source=source)
        # Another size than the digest kept says the file changed without reading it: its digest is then
        # taken beside the parse, as a first read's (the 695 MB primary's 1% refresh: 0.5 s of FETCH).
        resized = (
            known is not None
            and previous is not None
            and known.sha256 == previous.sha256
            and path.stat().st_size != known.size
        )
        if kind == "none" and (previous is None or previous.sha256 is None or resized):
            size = path.stat().st_size
            if size > settings.fetch_max_bytes:
                raise FetchError(source, _too_large(settings.fetch_max_bytes))
            return FetchResult(path, size, False, Validators(), None, final_url)
        sha256, size, identity = _local_digest(path, source=source, max_bytes=settings.fetch_max_bytes)
        validators = Validators(sha256=sha256, identity=identity)
        if previous is not None and previous.sha256 == validators.sha256:
            return FetchResult(None, size, True, validators, None, final_url)
        if kind == "none":
            return FetchResult(path, size, False, validators, None, final_url)
        dest_dir.mkdir(parents=True, exist_ok=True)
        out = _finish(path, path.name, kind, source=source, dest_dir=dest_dir, settings=settings)
    except OSError as exc:
        # strerror only: the message names the path as written, not where it resolved to.
        raise FetchError(source, f"cannot read {url}: {exc.strerror or type(exc).__name__}") from exc
    return FetchResult(out, size, False, validators, None, final_url)


def _local_digest(path: Path, *, source: str, max_bytes: int) -> tuple[str, int, FileIdentity | None]:
    """The file's SHA-256 and size, and its stat identity at the read (None when the file moved during it)."""
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as f:
        taken_ns = time.time_ns()  # before the first byte: a write after it is stamped no earlier (a tick)
        before = os.fstat(f.fileno())
        while chunk := f.read(CHUNK):
            size += len(chunk)
            if size > max_bytes:
                raise FetchError(source, _too_large(max_bytes))
            digest.update(chunk)
        after = os.fstat(f.fileno())
    sha256 = digest.hexdigest()
    identity = FileIdentity.of(before, sha256, taken_ns) if stat_key(before) == stat_key(after) else None
    return sha256, size, identity


@dataclass(frozen=True)
class Digest:
    """A file's SHA-256 taken beside its parse, and its stat identity at that read (None: it moved during it)."""

    sha256: str
    identity: FileIdentity | None


@contextlib.contextmanager
def file_digest(path: Path) -> Iterator[Callable[[], Digest]]:
    """Hash `path` in a thread while the block runs; the block gets a function that waits for the digest.

    For a local file fetched without hashing (`_fetch_local`): its digest, the next run's validator,
    is taken beside the parse (hashlib and file reads release the GIL) instead of before it. Leaving the
    block stops the thread; a digest asked for after an error in the thread raises that error.

    The read waits, while the block runs, until the file's stamps are RACY_MARGIN_NS old (file_identity.py): a file
    written just before the run (a feed dropped in place, then a run) then gets an identity the next
    run can trust (`FileIdentity.vouches_for`) and is not read again by it. The block's end (the
    digest asked for) ends the wait: a short parse is never held up by it.
    """
    stop, hurry = threading.Event(), threading.Event()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fetch-digest") as pool:

        def run() -> Digest | None:
            with path.open("rb") as f:
                st = os.fstat(f.fileno())
                wait_ns = max(st.st_mtime_ns, st.st_ctime_ns) + file_identity.RACY_MARGIN_NS - time.time_ns()
                if wait_ns > 0:
                    hurry.wait(wait_ns / 1e9 + 0.05)
                digest = hashlib.sha256()
                taken_ns = time.time_ns()  # before the first byte, as in `_local_digest`
                before = os.fstat(f.fileno())
                while chunk := f.read(CHUNK):
                    if stop.is_set():
                        return None  # the block is over: nobody waits for this digest
                    digest.update(chunk)
                after = os.fstat(f.fileno())
            sha256 = digest.hexdigest()
            # Changed while it waited, or during the read: a digest of moving bytes vouches for nothing.
            same = stat_key(st) == stat_key(before) == stat_key(after)
            return Digest(sha256, FileIdentity.of(before, sha256, taken_ns) if same else None)

        future = pool.submit(run)

        def result() -> Digest:
            hurry.set()
            value = future.result() if not stop.is_set() else None
            if value is None:
                raise RuntimeError("the file's digest was asked for after its block")
            return value

        try:
            yield result
        finally:
            stop.set()
            hurry.set()


# ---------------------------------------------------------------- shared


def _finish(raw: Path, name: str, kind: Compression, *, source: str, dest_dir: Path, settings: Settings) -> Path:
    """Decompress `raw` (left in place) if needed; give the result its final name in one rename."""
    if kind == "none":
        ready, inner = raw, ""
    else:
        limits = DecompressLimits.from_settings(settings)  # its own limits: not the download's fetch_max_bytes
        ready, inner = decompress(raw, kind, dest_dir=dest_dir, limits=limits, source=source)
    try:
        final = dest_dir / _file_name(source, inner or strip_suffix(name))
        os.replace(ready, final)
    except BaseException:
        if ready != raw:
            ready.unlink(missing_ok=True)
        raise
    return final


def _file_name(source: str, hint: str) -> str:
    """`<source>.<ext>`: unique per source, keeping the extension the parser may look at."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", source)[:64] or "source"
    if safe != source:
        safe += "-" + hashlib.sha256(source.encode()).hexdigest()[:8]
    suffix = PurePosixPath(hint).suffix
    if not re.fullmatch(r"\.[A-Za-z0-9]{1,10}", suffix):
        suffix = ""
    return f"{safe}{suffix.lower()}"
