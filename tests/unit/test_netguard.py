"""The SSRF guard: address classes, resolution, and the transport that pins the checked address."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import httpx
import pytest

from firefeed.config import Settings
from firefeed.errors import FetchError, UnsafePathError, UnsafeURLError
from firefeed.pipeline import _netguard
from firefeed.pipeline._netguard import (
    GuardedTransport,
    host_is_exempt,
    is_public_address,
    resolve_local_path,
    resolve_public,
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


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.8.9.10",
        "10.0.0.1",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.0.1",
        "169.254.169.254",
        "0.0.0.0",
        "100.64.0.1",
        "224.0.0.1",
        "239.255.255.250",
        "240.0.0.1",
        "255.255.255.255",
        "192.0.2.1",
        "::1",
        "::",
        "fc00::1",
        "fd12:3456::1",
        "fe80::1",
        "fec0::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "::ffff:169.254.169.254",
        "::127.0.0.1",
        "2002:7f00:1::",  # 6to4 wrapping 127.0.0.1
        "2001:0:4136:e378:8000:63bf:f5ff:fffe",  # Teredo wrapping 10.0.0.1
    ],
)
def test_non_public_addresses_are_not_public(address: str) -> None:
    assert not is_public_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["8.8.8.8", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_are_public(address: str) -> None:
    assert is_public_address(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("http://x/f", "http"),
        ("HTTPS://x/f", "http"),
        ("file:///f", "file"),
        ("stock.csv", "file"),
        ("/abs/stock.csv", "file"),
        ("./weird:name.csv", "file"),
    ],
)
def test_url_kinds(url: str, kind: str) -> None:
    assert url_kind("s", url) == kind


@pytest.mark.parametrize("url", ["ftp://x/f", "gopher://x/", "data:,x", "jar:http://x!/", "weird:name.csv"])
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
    assert host_is_exempt("anything", make_settings(fetch_allow_private=True))
    assert host_is_exempt("Intranet.Local", make_settings(fetch_allowed_hosts=" intranet.local ,x"))
    assert host_is_exempt("[::1]", make_settings(fetch_allowed_hosts="::1"))
    assert not host_is_exempt("other.local", make_settings(fetch_allowed_hosts="intranet.local"))


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
