"""What a source on an SFTP or FTP server may say (SPEC 10 C6): checked when the spec is read.

A password never sits in a spec: the URL names the user, `password` or `private_key` name a
company secret (`${secret:NAME}`), which the fetch reads when it connects. `host_key` pins an
SFTP server to one key (a known_hosts line). These keys mean nothing to an http(s) or local
source, and `headers` nothing to a file server: either mistake is refused here, at its key.
Messages never quote the URL or a value: the URL may hold the password being refused.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

REMOTE_SCHEMES = frozenset({"sftp", "ftp", "ftps"})
DEFAULT_PORTS = {"sftp": 22, "ftp": 21, "ftps": 21}

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)([^?#]*)(.*)$", re.DOTALL)
# The whole value is one reference: `${secret:NAME}` (or an allowed `${VAR}` in a CLI-applied spec).
_ONE_REFERENCE = re.compile(r"^\$\{[^}]+\}$")
USE_A_SECRET = 'put it in a company secret and write password: "${secret:NAME}" on the source'


@dataclass(frozen=True)
class RemoteURL:
    """An sftp://, ftp:// or ftps:// URL taken apart (its parts still percent-encoded)."""

    scheme: str
    user: str
    host: str
    port: int
    path: str


def remote_scheme(url: str) -> str | None:
    """`sftp`, `ftp` or `ftps` for a file-server URL, else None."""
    match = _URL.match(url.strip())
    scheme = match.group(1).lower() if match else None
    return scheme if scheme in REMOTE_SCHEMES else None


def split_remote_url(url: str) -> RemoteURL:
    """The parts of a file-server URL; ValueError (never quoting the URL) for one that cannot be fetched."""
    match = _URL.match(url.strip())
    if match is None or match.group(1).lower() not in REMOTE_SCHEMES:
        raise ValueError("not an sftp://, ftp:// or ftps:// URL")
    scheme, netloc, path, rest = match.group(1).lower(), match.group(2), match.group(3), match.group(4)
    userinfo, _, hostport = netloc.rpartition("@")
    if ":" in userinfo:
        raise ValueError(f"the URL holds a password: {USE_A_SECRET}")
    if rest:
        raise ValueError(f"a {scheme}:// URL takes no query or fragment (after ? or #)")
    if hostport.startswith("["):
        host, _, after = hostport[1:].partition("]")
        port_text = after[1:] if after.startswith(":") else after
    else:
        host, _, port_text = hostport.partition(":")
    if not host:
        raise ValueError("the URL has no host")
    if port_text and not (port_text.isdigit() and 0 < int(port_text) < 65536):
        raise ValueError("the URL's port must be a number from 1 to 65535")
    if not path or path.endswith("/"):
        raise ValueError(f"a {scheme}:// URL must name a file, as in {scheme}://user@host/folder/feed.csv")
    port = int(port_text) if port_text else DEFAULT_PORTS[scheme]
    return RemoteURL(scheme=scheme, user=userinfo, host=host.lower(), port=port, path=path)


def remote_problem(
    *,
    url: str,
    headers: Mapping[str, str],
    password: str | None,
    private_key: str | None,
    host_key: str | None,
) -> str | None:
    """What is wrong with a feed's file-server keys (the key named first), or None."""
    scheme = remote_scheme(url)
    given = [k for k, v in (("password", password), ("private_key", private_key), ("host_key", host_key)) if v]
    if scheme is None:
        if given:
            return f"{given[0]}: only an sftp://, ftp:// or ftps:// source takes password, private_key or host_key"
        return None
    if "${" not in url:  # a URL made by a reference is checked at FETCH, once it is known
        try:
            split_remote_url(url)
        except ValueError as err:
            return f"url: {err}"
    if headers:
        return f"headers: a {scheme}:// source sends no HTTP headers; use password or private_key"
    for key, value in (("password", password), ("private_key", private_key)):
        if value is not None and not _ONE_REFERENCE.match(value):
            return f'{key}: must name a company secret, "${{secret:NAME}}", never hold the value itself'
    if scheme != "sftp":
        for key, value in (("private_key", private_key), ("host_key", host_key)):
            if value is not None:
                return f"{key}: only an sftp:// source takes {key} (FTP has no keys)"
    if host_key is not None:
        from firefeed.pipeline.transfer.host_keys import parse_host_key

        try:
            parse_host_key(host_key)
        except ValueError as err:
            return f"host_key: {err}"
    return None
