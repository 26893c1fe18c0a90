"""The SSRF guard: address classes, resolution, and the transport that pins the checked address."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import httpx
import pytest

from firefeed.config import Settings
from firefeed.errors import FetchError, InvalidSourceRequestError, UnsafePathError, UnsafeURLError
from firefeed.pipeline import _netguard
from firefeed.pipeline._netguard import (
    GuardedTransport,
    check_host_notation,
    check_url_host,
    host_is_exempt,
    is_public_address,
    numeric_ipv4,
    resolve_local_path,
    resolve_public,
    special_range,
    url_kind,
)


def make_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "fetch_allow_private": False,
        "fetch_allowed_hosts": "",
        "local_sources_root": None,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


# One address per special-purpose range (IANA IPv4 and IPv6 registries, RFC 6890 and successors), with
# the range the refusal must name. Rows marked "new" were let through by the `ipaddress`-flag guard.
SPECIAL = [
    ("0.0.0.0", "0.0.0.0/8"),
    ("0.1.2.3", "0.0.0.0/8"),
    ("10.0.0.1", "10.0.0.0/8"),
    ("100.64.0.1", "100.64.0.0/10"),
    ("100.127.255.254", "100.64.0.0/10"),
    ("127.0.0.1", "127.0.0.0/8"),
    ("127.8.9.10", "127.0.0.0/8"),
    ("169.254.169.254", "169.254.0.0/16"),
    ("172.16.0.1", "172.16.0.0/12"),
    ("172.31.255.255", "172.16.0.0/12"),
    ("192.0.0.1", "192.0.0.0/29"),
    ("192.0.0.8", "192.0.0.8/32"),  # new
    ("192.0.0.9", "192.0.0.9/32"),  # new
    ("192.0.0.10", "192.0.0.10/32"),  # new
    ("192.0.0.170", "192.0.0.170/32"),
    ("192.0.0.171", "192.0.0.171/32"),
    ("192.0.0.200", "192.0.0.0/24"),  # new
    ("192.0.2.1", "192.0.2.0/24"),
    ("192.31.196.1", "192.31.196.0/24"),  # new
    ("192.52.193.1", "192.52.193.0/24"),  # new
    ("192.88.99.1", "192.88.99.0/24"),  # new
    ("192.168.0.1", "192.168.0.0/16"),
    ("192.175.48.1", "192.175.48.0/24"),  # new
    ("198.18.0.1", "198.18.0.0/15"),
    ("198.19.255.254", "198.18.0.0/15"),
    ("198.51.100.7", "198.51.100.0/24"),
    ("203.0.113.7", "203.0.113.0/24"),
    ("224.0.0.1", "224.0.0.0/4"),
    ("239.255.255.250", "224.0.0.0/4"),
    ("240.0.0.1", "240.0.0.0/4"),
    ("255.255.255.254", "240.0.0.0/4"),
    ("255.255.255.255", "255.255.255.255/32"),
    ("::1", "::1/128"),
    ("::", "::/128"),
    ("::ffff:127.0.0.1", "127.0.0.0/8 loopback (RFC 1122), wrapped in ::ffff:0:0/96"),
    ("::ffff:10.0.0.1", "10.0.0.0/8"),
    ("::ffff:192.168.1.1", "192.168.0.0/16 private use (RFC 1918), wrapped in ::ffff:0:0/96"),
    ("::ffff:169.254.169.254", "169.254.0.0/16"),
    ("::ffff:192.0.0.8", "192.0.0.8/32"),  # new
    ("64:ff9b::7f00:1", "127.0.0.0/8 loopback (RFC 1122), wrapped in 64:ff9b::/96"),  # NAT64 of 127.0.0.1
    ("64:ff9b::a9fe:a9fe", "169.254.0.0/16"),  # NAT64 of the metadata address
    ("64:ff9b:1::1", "64:ff9b:1::/48"),
    ("100::1", "100::/64"),
    ("100:0:0:1::1", "100:0:0:1::/64"),
    ("2001::1", "2001::/23"),
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "2001::/23"),  # Teredo
    ("2001:1::1", "2001::/23"),  # new: PCP anycast, globally reachable but refused (see _netguard)
    ("2001:2::1", "2001::/23"),
    ("2001:3::1", "2001::/23"),
    ("2001:4:112::1", "2001::/23"),
    ("2001:20::1", "2001::/23"),
    ("2001:30::1", "2001::/23"),
    ("2001:1ff:ffff::1", "2001::/23"),
    ("2001:db8::1", "2001:db8::/32"),
    ("2002:a00:1::", "10.0.0.0/8 private use (RFC 1918), wrapped in 2002::/16 6to4"),  # 6to4 of 10.0.0.1
    ("2002:7f00:1::", "127.0.0.0/8"),  # 6to4 of 127.0.0.1
    ("2002:c000:8::1", "192.0.0.8/32"),  # 6to4 of 192.0.0.8: new
    ("2620:4f:8000::1", "2620:4f:8000::/48"),  # new
    ("3fff::1", "3fff::/20"),  # new
    ("3fff:fff::1", "3fff::/20"),  # new
    ("5f00::1", "5f00::/16"),
    ("fc00::1", "fc00::/7"),
    ("fd12:3456::1", "fc00::/7"),
    ("fd00:ec2::254", "fc00::/7"),  # the IPv6 metadata address of one cloud
    ("fe80::1", "fe80::/10"),
    ("febf::1", "fe80::/10"),
    ("ff02::1", "ff00::/8"),
    ("fec0::1", "outside 2000::/3"),  # deprecated site-local
    ("::127.0.0.1", "outside 2000::/3"),  # deprecated IPv4-compatible
    ("4000::1", "outside 2000::/3"),
]
PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "192.0.1.1",  # just below 192.0.0.0/24's neighbour 192.0.2.0/24
    "192.0.3.1",
    "172.32.0.1",  # just past 172.16.0.0/12
    "100.128.0.1",  # just past 100.64.0.0/10
    "198.20.0.1",  # just past 198.18.0.0/15
    "223.255.255.254",
    "2606:4700:4700::1111",
    "2a00:1450:4001::1",
    "2001:200::1",  # just past 2001::/23
    "2001:dc8::1",
    "3fff:1000::1",  # just past 3fff::/20
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",  # NAT64 of 8.8.8.8
    "2002:808:808::1",  # 6to4 of 8.8.8.8
]


@pytest.mark.parametrize(("address", "range_named"), SPECIAL)
def test_every_special_purpose_range_is_refused_and_named(address: str, range_named: str) -> None:
    found = special_range(ipaddress.ip_address(address))
    assert found is not None and range_named in found
    assert not is_public_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_public(address: str) -> None:
    assert special_range(ipaddress.ip_address(address)) is None
    assert is_public_address(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    "address", ["192.0.0.8", "192.0.0.170", "::ffff:10.1.2.3", "2002:a00:1::", "64:ff9b::7f00:1", "3fff::1"]
)
def test_a_literal_special_address_is_refused_naming_its_range(address: str) -> None:
    with pytest.raises(UnsafeURLError, match=r"is a non-public address \(.*/\d+ .*\); set FIREFEED_FETCH_ALLOWED"):
        resolve_public("main", f"[{address}]" if ":" in address else address, 443)


def test_the_guard_does_not_consult_the_ipaddress_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever this Python's flags say, the table decides: make every flag claim "global".
    for cls in (ipaddress.IPv4Address, ipaddress.IPv6Address):
        for flag in ("is_private", "is_loopback", "is_link_local", "is_reserved", "is_multicast", "is_unspecified"):
            monkeypatch.setattr(cls, flag, property(lambda self: False))
        monkeypatch.setattr(cls, "is_global", property(lambda self: True))
    assert not is_public_address(ipaddress.ip_address("10.0.0.1"))
    assert not is_public_address(ipaddress.ip_address("::ffff:127.0.0.1"))
    assert is_public_address(ipaddress.ip_address("8.8.8.8"))


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://x/f", "http"),
        ("HTTPS://x/f", "http"),
        ("file:///f", "file"),
        ("stock.csv", "file"),
        ("/abs/stock.csv", "file"),
        ("./weird:name.csv", "file"),
        ("sftp://u@x/f.csv", "remote"),
        ("FTP://x/f.csv", "remote"),
        ("ftps://u@x:990/f.csv", "remote"),
    ],
)
def test_url_kinds(url: str, kind: str) -> None:
    assert url_kind("s", url) == kind


@pytest.mark.parametrize("url", ["ssh://x/f", "gopher://x/", "data:,x", "jar:http://x!/", "weird:name.csv"])
def test_other_schemes_are_unsafe(url: str) -> None:
    with pytest.raises(UnsafeURLError, match="scheme"):
        url_kind("s", url)


def fake_getaddrinfo(*answers: str) -> Any:
    def getaddrinfo(host: str, port: int, *args: Any, **kwargs: Any) -> list[Any]:
        out = []
        for a in answers:
            family = socket.AF_INET6 if ":" in a else socket.AF_INET
            sockaddr = (a, port, 0, 0) if family == socket.AF_INET6 else (a, port)
            out.append((family, socket.SOCK_STREAM, 6, "", sockaddr))
        return out

    return getaddrinfo


def test_a_name_with_one_private_address_among_public_ones_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_netguard.socket, "getaddrinfo", fake_getaddrinfo("93.184.216.34", "10.0.0.5"))
    with pytest.raises(UnsafeURLError, match=r"host 'feeds\.example\.com' resolves to 10\.0\.0\.5"):
        resolve_public("main", "feeds.example.com", 443)


def test_a_name_with_only_public_addresses_resolves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_netguard.socket, "getaddrinfo", fake_getaddrinfo("93.184.216.34", "2606:4700::1"))
    assert resolve_public("main", "feeds.example.com", 443) == ["93.184.216.34", "2606:4700::1"]


def test_an_unresolvable_name_is_a_connection_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(_netguard.socket, "getaddrinfo", fail)
    with pytest.raises(httpx.ConnectError, match="cannot resolve"):
        resolve_public("main", "nope.invalid", 80)


def test_exempt_hosts() -> None:
    assert not host_is_exempt("anything", make_settings(fetch_allow_private=True))  # checked, see below
    assert host_is_exempt("Intranet.Local", make_settings(fetch_allowed_hosts=" intranet.local ,x"))
    assert host_is_exempt("[::1]", make_settings(fetch_allowed_hosts="::1"))
    assert not host_is_exempt("other.local", make_settings(fetch_allowed_hosts="intranet.local"))


def test_a_name_resolving_into_192_0_0_0_24_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_netguard.socket, "getaddrinfo", fake_getaddrinfo("93.184.216.34", "192.0.0.8"))
    with pytest.raises(UnsafeURLError, match=r"resolves to 192\.0\.0\.8, a non-public address \(192\.0\.0\.8/32"):
        resolve_public("main", "feeds.example.com", 443)


class RecordingTransport(GuardedTransport):
    """The guard with its connection pools replaced by a recorder."""

    def __init__(self, *, fail_first: int = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sent: list[tuple[str, httpx.Request]] = []
        self.fail_first = fail_first

    def _pool(self, key: str) -> Any:
        outer = self

        class Pool:
            def handle_request(self, request: httpx.Request) -> httpx.Response:
                outer.sent.append((key, request))
                if len(outer.sent) <= outer.fail_first:
                    raise httpx.ConnectError("refused")
                return httpx.Response(200, request=request)

        return Pool()


def test_the_transport_connects_to_the_checked_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_netguard.socket, "getaddrinfo", fake_getaddrinfo("93.184.216.34"))
    transport = RecordingTransport(source="main", settings=make_settings())
    transport.handle_request(httpx.Request("GET", "https://feeds.example.com/shoes.csv"))
    key, sent = transport.sent[0]
    assert key == "feeds.example.com"
    assert sent.url == "https://93.184.216.34/shoes.csv"
    assert sent.headers["host"] == "feeds.example.com"
    assert sent.extensions["sni_hostname"] == "feeds.example.com"


def test_the_transport_tries_the_next_checked_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_netguard.socket, "getaddrinfo", fake_getaddrinfo("2606:4700::1", "93.184.216.34"))
    transport = RecordingTransport(source="main", settings=make_settings(), fail_first=1)
    transport.handle_request(httpx.Request("GET", "http://feeds.example.com:8080/f"))
    assert [str(r.url) for _, r in transport.sent] == [
        "http://[2606:4700::1]:8080/f",
        "http://93.184.216.34:8080/f",
    ]


def test_the_transport_refuses_before_sending(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_netguard.socket, "getaddrinfo", fake_getaddrinfo("169.254.169.254"))
    transport = RecordingTransport(source="main", settings=make_settings())
    with pytest.raises(UnsafeURLError):
        transport.handle_request(httpx.Request("GET", "http://metadata.example.com/"))
    assert transport.sent == []


@pytest.mark.parametrize(
    "settings",
    [make_settings(fetch_allow_private=True), make_settings(fetch_allowed_hosts="192.0.0.8,2002:a00:1::")],
)
def test_the_settings_still_lift_the_guard_for_special_addresses(settings: Settings) -> None:
    # Nothing is sent anywhere: the recorder stands in for the connection pools.
    transport = RecordingTransport(source="main", settings=settings)
    transport.handle_request(httpx.Request("GET", "http://192.0.0.8/f"))
    transport.handle_request(httpx.Request("GET", "http://[2002:a00:1::]/f"))
    assert [str(r.url) for _, r in transport.sent] == ["http://192.0.0.8/f", "http://[2002:a00:1::]/f"]


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/f",
        "http://[::ffff:169.254.169.254]/f",
        "http://[2002:a9fe:a9fe::]/f",
        "http://[fd00:ec2::254]/f",
    ],
)
def test_allow_private_still_refuses_link_local_and_cloud_metadata(url: str) -> None:
    transport = RecordingTransport(source="main", settings=make_settings(fetch_allow_private=True))
    with pytest.raises(UnsafeURLError, match="FETCH_ALLOW_PRIVATE does not allow it; name the host in"):
        transport.handle_request(httpx.Request("GET", url))
    assert transport.sent == []


def test_allow_private_refuses_a_name_resolving_to_metadata_and_pins_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    transport = RecordingTransport(source="main", settings=make_settings(fetch_allow_private=True))
    monkeypatch.setattr(_netguard.socket, "getaddrinfo", fake_getaddrinfo("10.1.2.3", "169.254.169.254"))
    with pytest.raises(UnsafeURLError, match=r"resolves to 169\.254\.169\.254, a non-public address \(169\.254"):
        transport.handle_request(httpx.Request("GET", "http://feeds.intranet/f"))
    assert transport.sent == []
    # A private answer is allowed, and the connection goes to the address that was checked (no rebinding).
    monkeypatch.setattr(_netguard.socket, "getaddrinfo", fake_getaddrinfo("10.1.2.3"))
    transport.handle_request(httpx.Request("GET", "http://feeds.intranet/f"))
    assert [(key, str(r.url), r.headers["host"]) for key, r in transport.sent] == [
        ("feeds.intranet", "http://10.1.2.3/f", "feeds.intranet")
    ]


def test_a_metadata_address_named_in_allowed_hosts_is_let_through() -> None:
    settings = make_settings(fetch_allow_private=True, fetch_allowed_hosts="169.254.169.254")
    transport = RecordingTransport(source="main", settings=settings)
    transport.handle_request(httpx.Request("GET", "http://169.254.169.254/f"))
    assert [str(r.url) for _, r in transport.sent] == ["http://169.254.169.254/f"]


def test_an_exempt_host_is_passed_through_unchanged() -> None:
    transport = RecordingTransport(source="main", settings=make_settings(fetch_allowed_hosts="intranet.local"))
    transport.handle_request(httpx.Request("GET", "http://intranet.local/f"))
    assert str(transport.sent[0][1].url) == "http://intranet.local/f"


def test_a_nul_in_a_path_is_refused(tmp_path: Any) -> None:
    with pytest.raises(UnsafePathError, match="NUL"):
        resolve_local_path("main", "file:///x%00.csv", base_dir=tmp_path, settings=make_settings())


def test_a_transport_error_is_not_unsafe() -> None:
    # The guard's refusals are FetchErrors too, so callers can catch one family.
    assert issubclass(UnsafeURLError, FetchError)


# ------------------------------------------------------------------ IPv4 in other notations


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("0177.0.0.1", "127.0.0.1"),  # octal
        ("0x7f.0.0.1", "127.0.0.1"),  # hex
        ("0x7f.1", "127.0.0.1"),  # two parts: the last fills three bytes
        ("127.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),  # one number
        ("0xa9fea9fe", "169.254.169.254"),
        ("\uff11\uff12\uff17.0.0.1", "127.0.0.1"),  # full-width digits
        ("\u2460\u2461\u2466.0.0.1", "127.0.0.1"),  # circled digits (NFKC makes them digits)
        ("127\u30020\u30020\u30021", "127.0.0.1"),  # ideographic full stops
        ("127%2e0.0.1", "127.0.0.1"),  # percent-encoded dot
        ("127.0.0.1.", "127.0.0.1"),  # a trailing dot
        ("0x08080808", "8.8.8.8"),
        ("127.0.0.1", "127.0.0.1"),
    ],
)
def test_every_ipv4_notation_libc_reads_is_read(host: str, address: str) -> None:
    assert numeric_ipv4(host) == ipaddress.IPv4Address(address)


@pytest.mark.parametrize(
    "host", ["example.com", "feeds.example.com", "a.0x10", "1.2.3.4.5", "999.1.1.1", "08.0.0.1", "4294967296", "x1"]
)
def test_a_name_or_no_address_is_not_read_as_one(host: str) -> None:
    assert numeric_ipv4(host) is None


@pytest.mark.parametrize(
    "host", ["0177.0.0.1", "0x7f.1", "2130706433", "\uff11\uff12\uff17.0.0.1", "127.0.0.1.", "0xa9fea9fe"]
)
def test_a_private_address_in_another_notation_is_unsafe_naming_the_plain_one(host: str) -> None:
    with pytest.raises(UnsafeURLError, match=r"non-public address .*non-standard notation.*write the address as"):
        check_host_notation("main", host)


def test_a_public_address_in_another_notation_is_refused_too() -> None:
    # Parsers disagree on these (is 010 eight or ten?): one spelling only, whatever it means.
    with pytest.raises(UnsafeURLError, match=r"spells the address 8\.8\.8\.8 in a non-standard notation"):
        check_host_notation("main", "0x08080808")
    check_host_notation("main", "8.8.8.8")
    check_host_notation("main", "feeds.example.com")


@pytest.mark.parametrize(
    "url",
    [
        "http://0177.0.0.1/f",
        "http://\uff11\uff12\uff17.0.0.1/f",
        "https://user:pw@0x7f.1:8443/f",
        "http://127%2e0.0.1/",
    ],
)
def test_a_url_host_is_checked_before_httpx_parses_it(url: str) -> None:
    with pytest.raises(UnsafeURLError, match="non-standard notation"):
        check_url_host("main", url)


@pytest.mark.parametrize("url", ["http://[::1]/f", "http://[::ffff:127.0.0.1]/f", "http://[::1/f", "file:///x"])
def test_ipv6_literals_and_unreadable_urls_are_left_to_the_other_checks(url: str) -> None:
    check_url_host("main", url)


@pytest.mark.parametrize("settings", [make_settings(), make_settings(fetch_allow_private=True)])
def test_the_transport_refuses_another_notation_without_resolving_or_connecting(
    monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    def no_lookup(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("resolved a host the guard must refuse first")

    monkeypatch.setattr(_netguard.socket, "getaddrinfo", no_lookup)
    transport = RecordingTransport(source="main", settings=settings)
    for url in ("http://0x7f.1/f", "http://2130706433/f", "http://127.1/f"):
        with pytest.raises(UnsafeURLError, match="non-standard notation"):
            transport.handle_request(httpx.Request("GET", url))
    assert transport.sent == []


def test_a_url_without_a_host_is_an_invalid_request_not_a_server_failure() -> None:
    transport = RecordingTransport(source="main", settings=make_settings())
    with pytest.raises(InvalidSourceRequestError, match="the URL has no host") as err:
        transport.handle_request(httpx.Request("GET", "http:///f"))
    assert err.value.code == "invalid_source_request" and err.value.source == "main"
    assert transport.sent == []
