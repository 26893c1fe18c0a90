"""One SFTP download (asyncssh), to an address the host rules checked, from a server whose key is pinned.

The key the server must present is the spec's `host_key`, else the one recorded for the company,
host and port at the first fetch (host_keys.py); with neither, the key presented now is recorded.
Nothing from the user's ~/.ssh is read: no config, no agent, no default keys, no known_hosts.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import TYPE_CHECKING, cast

import asyncssh

from firefeed.errors import FetchError
from firefeed.pipeline._retries import Retryable
from firefeed.pipeline.transfer._common import Attempt, Stat
from firefeed.pipeline.transfer.host_keys import PinnedKey, fingerprint, forget_hint, parse_host_key, pinned

if TYPE_CHECKING:
    from firefeed.pipeline.fetch import FetchResult

_CHUNK = 256 * 1024


class _Client(asyncssh.SSHClient):
    """Remembers the key a server presented that is not the pinned one, for the error's second fingerprint."""

    def __init__(self, first_use: bool) -> None:
        self.first_use = first_use
        self.refused: asyncssh.SSHKey | None = None

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        # Called only for a key not in the trusted list: with nothing pinned yet, any key is taken (and recorded).
        if self.first_use:
            return True
        self.refused = key
        return False


def fetch_sftp(attempt: Attempt) -> FetchResult:
    """Download `attempt.remote.path` over SFTP; FetchError for a refusal, Retryable for a connection failure."""
    return asyncio.run(_fetch(attempt))


async def connect(attempt: Attempt) -> asyncssh.SSHClientConnection:
    """A logged-in connection to a server that presented its pinned key (recorded now on first use);
    FetchError for a refusal, Retryable for a connection failure. The caller closes it."""
    remote, source = attempt.remote, attempt.source
    expected, origin = _expected_key(attempt)
    client = _Client(first_use=expected is None)
    trusted = [asyncssh.import_public_key(expected.public_key)] if expected is not None else []
    client_keys: list[asyncssh.SSHKey] | None = None
    if attempt.private_key is not None:
        client_keys = [_private_key(source, attempt.private_key)]
    methods = ["publickey"] if client_keys else []
    methods += ["keyboard-interactive", "password"] if attempt.password is not None else []
    timeout = attempt.timeout()
    try:
        conn = await asyncio.wait_for(
            asyncssh.connect(
                attempt.address,
                port=remote.port,
                username=remote.user,
                password=attempt.password,
                client_keys=client_keys,
                known_hosts=(trusted, [], []),
                client_factory=lambda: client,
                preferred_auth=methods or ["none"],
                agent_path=None,
                config=None,
                gss_host=None,
                ignore_encrypted=True,
                connect_timeout=timeout,
                login_timeout=timeout,
            ),
            timeout=timeout,
        )
    except asyncssh.HostKeyNotVerifiable as exc:
        raise FetchError(source, _changed_key(attempt, expected, origin, client.refused)) from exc
    except asyncssh.PermissionDenied as exc:
        raise FetchError(source, f"{attempt.shown}: the server refused the login of user {remote.user!r}") from exc
    except asyncssh.KeyExchangeFailed as exc:
        if expected is not None:
            # The server offers no key of the pinned key's type: it does not hold the pinned key either.
            raise FetchError(source, _changed_key(attempt, expected, origin, None)) from exc
        raise Retryable(f"could not connect to {attempt.shown}: {exc.reason}") from exc
    except (OSError, asyncssh.Error, TimeoutError) as exc:
        reason = exc.reason if isinstance(exc, asyncssh.Error) else (str(exc) or type(exc).__name__)
        raise Retryable(f"could not connect to {attempt.shown}: {reason}") from exc
    if expected is None:
        server_key = conn.get_server_host_key()
        assert server_key is not None  # a connected client has verified one
        seen = pinned(server_key)
        stored = attempt.host_keys.record(remote.host, remote.port, seen) if attempt.host_keys else seen
        if stored != seen:  # another fetch pinned a different key first
            conn.close()
            raise FetchError(source, _changed_key(attempt, stored, "the key recorded at the first fetch", seen))
    return conn


async def _fetch(attempt: Attempt) -> FetchResult:
    remote, source = attempt.remote, attempt.source
    conn = await connect(attempt)
    try:
        try:
            async with conn.start_sftp_client() as sftp:
                try:
                    attrs = await asyncio.wait_for(sftp.stat(remote.path), timeout=attempt.timeout())
                except asyncssh.SFTPNoSuchFile as exc:
                    raise FetchError(source, f"{attempt.shown}: no such file") from exc
                except asyncssh.SFTPPermissionDenied as exc:
                    raise FetchError(source, f"{attempt.shown}: permission denied") from exc
                stat = Stat(size=attrs.size, mtime=attrs.mtime)
                if (skipped := attempt.unchanged(stat)) is not None:
                    return skipped
                sink = attempt.sink()
                with sink:
                    async with sftp.open(remote.path, "rb") as f:
                        offset = 0
                        while True:
                            chunk = await asyncio.wait_for(f.read(_CHUNK, offset), timeout=attempt.timeout())
                            if not chunk:
                                break
                            offset += len(chunk)
                            sink.write(cast(bytes, chunk))  # opened "rb": bytes, typed as AnyStr
                    return sink.finish(stat)
        except asyncssh.SFTPError as exc:
            raise FetchError(source, f"{attempt.shown}: {exc.reason}") from exc
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            reason = exc.reason if isinstance(exc, asyncssh.Error) else (str(exc) or "timed out")
            raise Retryable(f"connection lost reading {attempt.shown}: {reason}") from exc
    finally:
        conn.close()
        await conn.wait_closed()


def _private_key(source: str, value: str) -> asyncssh.SSHKey:
    """The key a secret holds: the key file base64-encoded on one line (a secret holds no line break), or
    the file's own text."""
    data = value.encode()
    if not value.lstrip().startswith("-----BEGIN"):
        try:
            data = base64.b64decode(value.strip(), validate=True)
        except binascii.Error:
            data = b""
    try:
        return asyncssh.import_private_key(data)
    except (asyncssh.KeyImportError, ValueError):
        # The library's text may quote the key's first bytes: only say what the secret should hold.
        raise FetchError(
            source,
            "private_key: the secret does not hold an unencrypted private key (the key file base64-encoded "
            "on one line: `base64 -w0 KEYFILE | firefeed secret set --company COMPANY NAME`)",
        ) from None


def _expected_key(attempt: Attempt) -> tuple[PinnedKey | None, str]:
    """The key the server must present and where it comes from (for the error), or None on first use."""
    if attempt.host_key is not None:
        try:
            return pinned(parse_host_key(attempt.host_key)), "the source's host_key"
        except ValueError as err:
            raise FetchError(attempt.source, f"host_key: {err}") from None
    if attempt.host_keys is None:
        return None, ""
    found = attempt.host_keys.get(attempt.remote.host, attempt.remote.port)
    return found, "the key recorded at the first fetch"


def _changed_key(
    attempt: Attempt, expected: PinnedKey | None, origin: str, presented: asyncssh.SSHKey | PinnedKey | None
) -> str:
    remote = attempt.remote
    if isinstance(presented, PinnedKey):
        got = presented.fingerprint
    else:
        got = fingerprint(presented) if presented is not None else "a key of another type"
    want = expected.fingerprint if expected is not None else "?"
    if origin == "the source's host_key":
        accept = "If the server's key really changed, put its new known_hosts line in host_key"
    else:
        company = attempt.host_keys.company if attempt.host_keys is not None else "COMPANY"
        accept = (
            "If the server's key really changed, accept the new one with "
            f"{forget_hint(company, remote.host, remote.port)} (the next fetch records it)"
        )
    return (
        f"the host key of {remote.host}:{remote.port} changed: expected {want} ({origin}), the server presented "
        f"{got}; someone may be intercepting the connection. {accept}"
    )
