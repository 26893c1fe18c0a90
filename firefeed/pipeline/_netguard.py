"""Where a source may point: the SSRF guard for URLs, and the folder check for local paths.

A spec is user input (it can arrive over the API), so a source URL must not reach
the worker's own network: loopback, private ranges, link-local (cloud metadata at
169.254.169.254), and the rest of the non-public address space, judged by an
explicit table of the IANA special-purpose ranges (not by the Python version's
`ipaddress` flags, which disagree between versions). Every address a host
resolves to is checked, and the connection goes to an address that was checked,
so a DNS answer that changes between check and connect (rebinding) cannot slip
a private address in.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
import ssl
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx

from firefeed.config import Settings
from firefeed.errors import InvalidSourceRequestError, UnsafePathError, UnsafeURLError
from firefeed.spec.remote import REMOTE_SCHEMES

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
HTTP_SCHEMES = frozenset({"http", "https"})


def url_kind(source: str, url: str) -> str:
    """Return "http", "remote" (sftp, ftp, ftps: firefeed/pipeline/transfer) or "file"; any other scheme is refused.

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
    if scheme in REMOTE_SCHEMES:
        return "remote"
    raise UnsafeURLError(
        source,
        f"URL scheme {scheme!r} is not allowed; use http://, https://, sftp://, ftp://, ftps://, file:// or a path",
    )


# ------------------------------------------------------------------ the special-purpose address table
#
# Sources (transcribed 2026-12-01):
#   IANA IPv4 Special-Purpose Address Registry
#     https://www.iana.org/assignments/iana-ipv4-special-registry/ (RFC 6890, RFC 8190 and the RFCs per row)
#   IANA IPv6 Special-Purpose Address Registry (last updated 2025-10-09)
#     https://www.iana.org/assignments/iana-ipv6-special-registry/
#   IANA IPv4 Multicast Address Space (224.0.0.0/4) and IANA IPv6 Address Space (only 2000::/3 is
#     allocated as global unicast; everything else outside the ranges below is "Reserved by IETF").
# Every row is refused, including the few the registries mark "globally reachable" (PCP/TURN anycast,
# AS112, AMT, ORCHIDv2, drone tags): none of them serves a product feed, and an explicit table
# is only safe if it errs on the side of refusing. Python's `ipaddress` is_global/is_private flags are
# NOT used: they differ between Python versions (3.11 calls most of 192.0.0.0/24 global).
_SPECIAL_V4: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", '"this network" (RFC 791)'),
    ("10.0.0.0/8", "private use (RFC 1918)"),
    ("100.64.0.0/10", "shared address space, carrier-grade NAT (RFC 6598)"),
    ("127.0.0.0/8", "loopback (RFC 1122)"),
    ("169.254.0.0/16", "link-local, cloud metadata (RFC 3927)"),
    ("172.16.0.0/12", "private use (RFC 1918)"),
    ("192.0.0.0/24", "IETF protocol assignments (RFC 6890)"),
    ("192.0.0.0/29", "IPv4 service continuity prefix (RFC 7335)"),
    ("192.0.0.8/32", "IPv4 dummy address (RFC 7600)"),
    ("192.0.0.9/32", "Port Control Protocol anycast (RFC 7723)"),
    ("192.0.0.10/32", "TURN anycast (RFC 8155)"),
    ("192.0.0.170/32", "NAT64/DNS64 discovery (RFC 8880)"),
    ("192.0.0.171/32", "NAT64/DNS64 discovery (RFC 8880)"),
    ("192.0.2.0/24", "documentation, TEST-NET-1 (RFC 5737)"),
    ("192.31.196.0/24", "AS112-v4 (RFC 7535)"),
    ("192.52.193.0/24", "AMT (RFC 7450)"),
    ("192.88.99.0/24", "deprecated 6to4 relay anycast (RFC 7526)"),
    ("192.168.0.0/16", "private use (RFC 1918)"),
    ("192.175.48.0/24", "direct delegation AS112 service (RFC 7534)"),
    ("198.18.0.0/15", "benchmarking (RFC 2544)"),
    ("198.51.100.0/24", "documentation, TEST-NET-2 (RFC 5737)"),
    ("203.0.113.0/24", "documentation, TEST-NET-3 (RFC 5737)"),
    ("224.0.0.0/4", "multicast (RFC 5771)"),
    ("240.0.0.0/4", "reserved (RFC 1112)"),
    ("255.255.255.255/32", "limited broadcast (RFC 919)"),
)
_SPECIAL_V6: tuple[tuple[str, str], ...] = (
    ("::1/128", "loopback (RFC 4291)"),
    ("::/128", "unspecified (RFC 4291)"),
    ("64:ff9b:1::/48", "local-use IPv4/IPv6 translation (RFC 8215)"),
    ("100::/64", "discard-only (RFC 6666)"),
    ("100:0:0:1::/64", "dummy IPv6 prefix (RFC 9780)"),
    ("2001::/23", "IETF protocol assignments, Teredo included (RFC 2928)"),
    ("2001:db8::/32", "documentation (RFC 3849)"),
    ("2620:4f:8000::/48", "direct delegation AS112 service (RFC 7534)"),
    ("3fff::/20", "documentation (RFC 9637)"),
    ("5f00::/16", "segment routing SIDs (RFC 9602)"),
    ("fc00::/7", "unique local (RFC 4193)"),
    ("fe80::/10", "link-local (RFC 4291)"),
    ("ff00::/8", "multicast (RFC 4291)"),
)
# Wrappers whose meaning is the IPv4 address inside: the guard judges that address instead.
_V4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")  # RFC 4291: the socket connects to the IPv4 address
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: a NAT64 gateway connects to the IPv4 address
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")  # RFC 3056: a relay forwards to the IPv4 address
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")  # IANA IPv6 Address Space: the only allocated unicast


def _table(rows: tuple[tuple[str, str], ...]) -> tuple[tuple[IPNetwork, str], ...]:
    # Most specific first, so a refusal names 192.0.0.8/32 rather than the /24 around it.
    nets = [(ipaddress.ip_network(net), name) for net, name in rows]
    return tuple(sorted(nets, key=lambda row: -row[0].prefixlen))


_V4_TABLE = _table(_SPECIAL_V4)
_V6_TABLE = _table(_SPECIAL_V6)
_METADATA_TABLE = _table(
    (
        ("169.254.0.0/16", "link-local, cloud metadata (RFC 3927)"),
        ("fe80::/10", "link-local (RFC 4291)"),
        ("fd00:ec2::254/128", "cloud metadata over IPv6"),
    )
)


def _wrapped_v4(address: IPAddress) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address wraps (v4-mapped, NAT64, 6to4) and the wrapper, or None."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address in _V4_MAPPED or address in _NAT64:
        wrapper = _V4_MAPPED if address in _V4_MAPPED else _NAT64
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), f"wrapped in {wrapper}"
    if address in _SIX_TO_FOUR:
        return ipaddress.IPv4Address((int(address) >> 80) & 0xFFFFFFFF), f"wrapped in {_SIX_TO_FOUR} 6to4"
    return None


def special_range(address: IPAddress) -> str | None:
    """The special-purpose range `address` falls in, as "<network> <name>", or None if it is public.

    An IPv6 address that wraps an IPv4 address (v4-mapped, NAT64, 6to4) is judged
    by the IPv4 address inside; IPv6 outside 2000::/3 is refused as unallocated.
    """
    if isinstance(address, ipaddress.IPv4Address):
        return next((f"{net} {name}" for net, name in _V4_TABLE if address in net), None)
    wrapped = _wrapped_v4(address)
    if wrapped is not None:
        found = special_range(wrapped[0])
        return None if found is None else f"{found}, {wrapped[1]}"
    found = next((f"{net} {name}" for net, name in _V6_TABLE if address in net), None)
    if found is None and address not in _GLOBAL_UNICAST:
        found = f"outside {_GLOBAL_UNICAST} global unicast (reserved by IETF)"
    return found


@functools.cache
def special_networks_sql() -> dict[str, tuple[str, ...]]:
    """The special-purpose table as CIDR texts for a SQL `inet <<= ANY(...)` test (the channel checks' `url_public`).

    The same table `special_range` reads, spelled for Postgres so a check over a million links needs no
    Python per row: `v4` and `v6` the ranges, `wrappers` the IPv6 prefixes that wrap an IPv4 address
    (v4-mapped, NAT64, 6to4) and `wrapped` the images of the IPv4 ranges inside each wrapper, and
    `global` the IPv6 unicast space (an address outside it is refused as unallocated).
    """
    wrapped: list[str] = []
    for net, _name in _V4_TABLE:
        base = int(net.network_address)
        for wrapper in (_V4_MAPPED, _NAT64):
            wrapped.append(str(ipaddress.IPv6Network((int(wrapper.network_address) + base, 96 + net.prefixlen))))
        six_to_four = int(_SIX_TO_FOUR.network_address) + (base << 80)
        wrapped.append(str(ipaddress.IPv6Network((six_to_four, 16 + net.prefixlen))))
    return {
        "v4": tuple(str(net) for net, _name in _V4_TABLE),
        "v6": tuple(str(net) for net, _name in _V6_TABLE),
        "wrappers": (str(_V4_MAPPED), str(_NAT64), str(_SIX_TO_FOUR)),
        "wrapped": tuple(wrapped),
        "global": (str(_GLOBAL_UNICAST),),
    }


def metadata_range(address: IPAddress) -> str | None:
    """The link-local or instance-metadata range `address` falls in (a wrapped IPv4 address judged inside).

    What the guard still refuses when FIREFEED_FETCH_ALLOW_PRIVATE lifts it: an operator allows private
    addresses to reach a feed server on their own network, never a cloud's metadata service (whose
    answers include the machine's credentials). FIREFEED_FETCH_ALLOWED_HOSTS can still name one.
    """
    wrapped = _wrapped_v4(address)
    judged = wrapped[0] if wrapped is not None else address
    return next((f"{net} {name}" for net, name in _METADATA_TABLE if judged in net), None)


def is_public_address(address: IPAddress) -> bool:
    """True only for an address in none of the special-purpose ranges (see `special_range`)."""
    return special_range(address) is None


def parse_address(text: str) -> IPAddress | None:
    """The IP address a host string spells, or None for a name (an IPv6 zone id is ignored)."""
    try:
        return ipaddress.ip_address(text.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


# A host "ends in a number" (WHATWG URL) when its last label is decimal digits or 0x-hex: it is then read
# as an IPv4 address, as libc's inet_aton reads it: each part decimal, 0x-hex or 0-octal, and fewer than
# four parts fill the last one (`127.1` is 127.0.0.1, `2130706433` too).
_NUMBER_LABEL = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]*")
# Full stops IDNA reads as a dot (after NFKC, which turns the full-width one into ".").
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})


def _number(part: str) -> int | None:
    if part[:2] in ("0x", "0X"):
        return int(part[2:] or "0", 16) if re.fullmatch(r"[0-9a-fA-F]*", part[2:]) else None
    if len(part) > 1 and part.startswith("0"):
        return int(part, 8) if re.fullmatch(r"[0-7]+", part) else None
    return int(part) if re.fullmatch(r"[0-9]+", part) else None


def numeric_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address a host spells in any notation libc or a browser accepts, or None for a name.

    The host is read as a browser reads it: percent-decoded, NFKC-normalised
    (full-width digits are digits) and with the ideographic full stops as dots.
    None too for a host that ends in a number but is no address at all (`999.1.1.1`):
    the URL parser refuses that one.
    """
    text = unicodedata.normalize("NFKC", unquote(host)).translate(_DOTS).lower()
    parts = text.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()  # one trailing dot is the root of the DNS, not a part
    if not 1 <= len(parts) <= 4 or not _NUMBER_LABEL.fullmatch(parts[-1]):
        return None
    numbers = [_number(p) for p in parts]
    if any(n is None for n in numbers):
        return None
    *head, last = [n for n in numbers if n is not None]
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(parts)):
        return None
    value = last
    for i, n in enumerate(head):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def check_host_notation(source: str, host: str) -> None:
    """Refuse a host that spells an IPv4 address other than as four plain decimal numbers.

    `0177.0.0.1`, `0x7f.1`, `2130706433`, `１２７.0.0.1` and `127.0.0.1.` all mean
    127.0.0.1 to libc or to a browser, while `ipaddress` (and so a check built on
    it) reads them as names or refuses them; parsers disagree on some of them, so
    the only safe answer is one: refused before any connection, whatever
    address they mean, as `unsafe_url`. The message gives the plain spelling.
    """
    address = numeric_ipv4(host)
    if address is None or host.lower() == str(address):
        return
    special = special_range(address)
    what = f"the non-public address {address} ({special})" if special else f"the address {address}"
    raise UnsafeURLError(
        source,
        f"host {host!r} spells {what} in a non-standard notation (octal, hex, full-width digits, a trailing "
        f"dot or fewer than four parts); write the address as {address}",
    )


def check_url_host(source: str, url: str) -> None:
    """`check_host_notation` for the host of a URL not parsed yet (httpx refuses `0177.0.0.1` as invalid).

    A URL `urlsplit` cannot read is left to httpx, which refuses it as invalid.
    """
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return
    if host and ":" not in host:  # an IPv6 literal has no other notation
        check_host_notation(source, host)


def host_is_exempt(host: str, settings: Settings) -> bool:
    """Whether the operator named this host in FIREFEED_FETCH_ALLOWED_HOSTS: no check at all.
    (FIREFEED_FETCH_ALLOW_PRIVATE lifts the guard for every host but the metadata ranges: `metadata_range`.)"""
    return host.strip("[]").lower() in settings.allowed_hosts


def resolve_public(source: str, host: str, port: int, *, allow_private: bool = False) -> list[str]:
    """Resolve `host` and return its addresses, refusing if ANY of them is not public
    (with `allow_private`, if any is a link-local or metadata address: `metadata_range`).

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
        special = metadata_range(address) if allow_private else special_range(address)
        if special is not None:
            where = f"address {host} is" if literal is not None else f"host {host!r} resolves to {address},"
            lift = (
                "FIREFEED_FETCH_ALLOW_PRIVATE does not allow it; name the host in FIREFEED_FETCH_ALLOWED_HOSTS"
                if allow_private
                else "set FIREFEED_FETCH_ALLOWED_HOSTS or FIREFEED_FETCH_ALLOW_PRIVATE to allow it"
            )
            raise UnsafeURLError(source, f"{where} a non-public address ({special}); {lift}")
    return [str(a) for a in addresses]


def resolve_local_path(source: str, url: str, *, base_dir: Path | None, settings: Settings) -> Path:
    """The real (symlink-free) path a local source names, refused if it leaves the allowed folders.

    Relative paths are relative to the spec's folder, or to
    FIREFEED_LOCAL_SOURCES_ROOT for a spec that came over the API (no folder).
    """
    if "\0" in unquote(url):
        raise UnsafePathError("the path contains a NUL character", source=source)
    if url[:5].lower() == "file:":
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise UnsafePathError(f"file URL {url!r} names a remote host", source=source)
        written = Path(unquote(parts.path))
    else:
        written = Path(url)
    roots = [r.resolve() for r in (base_dir, settings.local_sources_root) if r is not None]
    if not roots:
        raise UnsafePathError(
            "local files are not allowed here; set FIREFEED_LOCAL_SOURCES_ROOT to allow a folder", source=source
        )
    candidate = written if written.is_absolute() else roots[0] / written
    # resolve() follows every symlink, so a link pointing out of the root is caught here.
    real = candidate.resolve()
    if not any(real.is_relative_to(root) for root in roots):
        raise UnsafePathError(f"path {url!r} is outside the allowed folders", source=source)
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
            self._pools[key] = httpx.HTTPTransport(verify=tls_context())
        return self._pools[key]

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in HTTP_SCHEMES:
            raise UnsafeURLError(self._source, f"URL scheme {url.scheme!r} is not allowed")
        host = url.host
        if not host:
            raise InvalidSourceRequestError(self._source, "the URL has no host")
        # Again on the parsed URL (httpx keeps `0x7f.1` as a name): a request built by hand is held to it too.
        check_host_notation(self._source, host)
        if host_is_exempt(host, self._settings):
            return self._pool("").handle_request(request)
        ascii_host = url.raw_host.decode("ascii")
        port = url.port or (443 if url.scheme == "https" else 80)
        addresses = resolve_public(self._source, ascii_host, port, allow_private=self._settings.fetch_allow_private)
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


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The verifying TLS context every fetch shares: loading the CA bundle costs ~30 ms of CPU, which a
    transport made per fetch paid every time (half of a small source job's CPU). Contexts are thread-safe."""
    return httpx.create_ssl_context()


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
