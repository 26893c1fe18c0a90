"""Where a source may point: the SSRF guard for URLs, and the folder check for local paths.

A spec is user input (it can arrive over the API), so a source URL must not reach
the worker's own network: loopback, private ranges, link-local (cloud metadata at
169.254.169.254), and the rest of the non-public address space. Every address a
host resolves to is checked, and the connection goes to an address that was
checked, so a DNS answer that changes between check and connect (rebinding)
cannot slip a private address in.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

from firefeed.config import Settings
from firefeed.errors import FetchError, UnsafePathError, UnsafeURLError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
HTTP_SCHEMES = frozenset({"http", "https"})


def url_kind(source: str, url: str) -> str:
    """Return "http" or "file" for a source URL; any other scheme is refused.

    A string without a scheme is a plain path. A name with a colon before any
    slash (`weird:name.csv`) reads as a scheme: write `./weird:name.csv`.
    """
    match = _SCHEME.match(url)
    if match is None:
        return "file"
    scheme = match.group(1).lower()
    if scheme in HTTP_SCHEMES:
        return "http"
    if scheme == "file":
        return "file"
    raise UnsafeURLError(source, f"URL scheme {scheme!r} is not allowed; use http://, https://, file:// or a path")


def is_public_address(address: IPAddress) -> bool:
    """True only for globally routable unicast addresses, looking inside IPv6 wrappers of IPv4."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # ::ffff:a.b.c.d is that IPv4 address, nothing more
            return is_public_address(address.ipv4_mapped)
        embedded = address.sixtofour
        if embedded is None and address.teredo is not None:
            embedded = address.teredo[1]
        if embedded is not None and not is_public_address(embedded):
            return False
        if address.is_site_local:
            return False
    return not (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
        or address.is_reserved
        # is_global also excludes shared (100.64/10) and documentation ranges.
        or not address.is_global
    )


def parse_address(text: str) -> IPAddress | None:
    """The IP address a host string spells, or None for a name (an IPv6 zone id is ignored)."""
    try:
        return ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def host_is_exempt(host: str, settings: Settings) -> bool:
    """Whether the operator lifted the guard for this host (or for everything)."""
    return settings.fetch_allow_private or host.strip("[]").lower() in settings.allowed_hosts


def resolve_public(source: str, host: str, port: int) -> list[str]:
    """Resolve `host` and return its addresses, refusing if ANY of them is not public.

    One bad address is enough to refuse: a name that answers both a public and a
    private address would let the connection pick the private one.
    """
    literal = parse_address(host)
    if literal is not None:
        addresses: list[IPAddress] = [literal]
    else:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            # A transport error, so the caller retries it like any connection failure.
            raise httpx.ConnectError(f"cannot resolve host {host!r}") from exc
        found = (parse_address(str(info[4][0])) for info in infos)
        addresses = list(dict.fromkeys(a for a in found if a is not None))
        if not addresses:
            raise httpx.ConnectError(f"host {host!r} has no IP address")
    for address in addresses:
        if not is_public_address(address):
            where = f"address {host} is" if literal is not None else f"host {host!r} resolves to {address},"
            raise UnsafeURLError(
                source,
                f"{where} a non-public address; set FIREFEED_FETCH_ALLOWED_HOSTS "
                "or FIREFEED_FETCH_ALLOW_PRIVATE to allow it",
            )
    return [str(a) for a in addresses]


def resolve_local_path(source: str, url: str, *, base_dir: Path | None, settings: Settings) -> Path:
    """The real (symlink-free) path a local source names, refused if it leaves the allowed folders.

    Relative paths are relative to the spec's folder, or to
    FIREFEED_LOCAL_SOURCES_ROOT for a spec that came over the API (no folder).
    """
    if "\0" in unquote(url):
        raise UnsafePathError(f"source {source!r}: the path contains a NUL character")
    if url[:5].lower() == "file:":
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise UnsafePathError(f"source {source!r}: file URL {url!r} names a remote host")
        written = Path(unquote(parts.path))
    else:
        written = Path(url)
    roots = [r.resolve() for r in (base_dir, settings.local_sources_root) if r is not None]
    if not roots:
        raise UnsafePathError(
            f"source {source!r}: local files are not allowed here; set FIREFEED_LOCAL_SOURCES_ROOT to allow a folder"
        )
    candidate = written if written.is_absolute() else roots[0] / written
    # resolve() follows every symlink, so a link pointing out of the root is caught here.
    real = candidate.resolve()
    if not any(real.is_relative_to(root) for root in roots):
        raise UnsafePathError(f"source {source!r}: path {url!r} is outside the allowed folders")
    return real


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport that checks every request's host and connects to the checked address.

    The request URL is rewritten to the checked IP while the Host header and the
    TLS server name (SNI, also used for certificate verification) keep the real
    host name. Each host name gets its own connection pool so a TLS connection
    made for one name is never reused for another that shares its IP.
    """

    def __init__(self, *, source: str, settings: Settings) -> None:
        self._source = source
        self._settings = settings
        self._pools: dict[str, httpx.HTTPTransport] = {}

    def _pool(self, key: str) -> httpx.HTTPTransport:
        if key not in self._pools:
            self._pools[key] = httpx.HTTPTransport()
        return self._pools[key]

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in HTTP_SCHEMES:
            raise UnsafeURLError(self._source, f"URL scheme {url.scheme!r} is not allowed")
        host = url.host
        if not host:
            raise FetchError(self._source, "the URL has no host")
        if host_is_exempt(host, self._settings):
            return self._pool("").handle_request(request)
        ascii_host = url.raw_host.decode("ascii")
        port = url.port or (443 if url.scheme == "https" else 80)
        addresses = resolve_public(self._source, ascii_host, port)
        last_error: httpx.ConnectError | None = None
        for address in addresses:
            pinned = httpx.Request(
                request.method,
                url.copy_with(host=address),
                headers=request.headers,  # keeps the Host header of the real name
                stream=request.stream,
                extensions={**request.extensions, "sni_hostname": ascii_host},
            )
            try:
                return self._pool(ascii_host).handle_request(pinned)
            except httpx.ConnectError as exc:
                # Try the host's next (also checked) address, like a resolver-driven client would.
                last_error = exc
        assert last_error is not None
        raise last_error

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


@contextmanager
def guarded_client(*, source: str, settings: Settings) -> Iterator[httpx.Client]:
    """A client for one fetch: guarded transport, no redirects of its own, no environment.

    trust_env=False: no proxy variables (a proxy would hide the real destination
    from the guard) and no ~/.netrc credentials added to requests behind our back.
    """
    timeout = httpx.Timeout(settings.fetch_timeout_s)
    transport = GuardedTransport(source=source, settings=settings)
    with httpx.Client(transport=transport, timeout=timeout, follow_redirects=False, trust_env=False) as client:
        yield client
