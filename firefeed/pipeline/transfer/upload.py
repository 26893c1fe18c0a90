"""Uploads to file servers: an export's sftp://, ftp:// and ftps:// delivery targets (SPEC 10 C7).

The same connection rules as a download (host rules before any connection, SFTP host-key
pinning, explicit FTPS with a verified certificate, credentials from the company's secrets, no
secret in any message). The file goes to a temporary name in the target's folder, then a rename
puts it over the final name, so a reader of the server sees the old file or the new one, whole.

The temporary name is `.NAME.ff-TAG-ATTEMPT.part`: unique per attempt, so an attempt never writes
into a file a killed one left open; before uploading, an attempt removes the files of its own
`TAG` (earlier attempts of the same delivery) that are still there.
"""

from __future__ import annotations

import asyncio
import contextlib
import ftplib
import posixpath
import ssl
import time
from pathlib import Path
from typing import TYPE_CHECKING

import asyncssh

from firefeed.config import Settings
from firefeed.errors import FetchError, InvalidSourceRequestError
from firefeed.pipeline._netguard import check_host_notation
from firefeed.pipeline._retries import Retryable
from firefeed.pipeline.transfer import RemoteAccess, _addresses, _decoded, _hostport
from firefeed.pipeline.transfer._common import Attempt
from firefeed.spec.remote import split_remote_url

if TYPE_CHECKING:
    from firefeed.pipeline.transfer.host_keys import HostKeyStore
    from firefeed.secrets.references import Resolver

_BLOCK = 256 * 1024


def temp_name(final: str, tag: str, attempt: str) -> str:
    """The temporary name of one attempt's upload, beside the final file (hidden by its leading dot)."""
    return f".{posixpath.basename(final)}.ff-{tag}-{attempt}.part"


def upload_remote(
    *,
    label: str,
    url: str,
    access: RemoteAccess,
    references: Resolver,
    local: Path,
    tag: str,
    attempt_no: str,
    settings: Settings,
    host_keys: HostKeyStore | None,
) -> None:
    """Upload `local` to the file-server `url` (references expanded) under a temporary name, then rename it.

    FetchError (named by `label`) for what another try would not change, Retryable for a connection failure.
    """
    try:
        parts = split_remote_url(url)
    except ValueError as err:
        raise InvalidSourceRequestError(label, str(err)) from None
    remote = _decoded(label, parts)
    shown = references.mask(f"{remote.scheme}://{parts.user + '@' if parts.user else ''}{_hostport(parts)}{parts.path}")
    password = references.expand(access.password, source=label, where="password") if access.password else None
    private_key = (
        references.expand(access.private_key, source=label, where="private_key") if access.private_key else None
    )
    check_host_notation(label, remote.host)
    temp = posixpath.join(posixpath.dirname(remote.path), temp_name(remote.path, tag, attempt_no))
    own = f".{posixpath.basename(remote.path)}.ff-{tag}-"
    last: Retryable | None = None
    with references.hiding():
        for address in _addresses(label, remote, settings):
            attempt = Attempt(
                source=label,
                remote=remote,
                address=address,
                shown=shown,
                settings=settings,
                dest_dir=local.parent,
                compression="none",
                previous=None,
                deadline=None,
                started=time.monotonic(),
                password=password,
                private_key=private_key,
                host_key=access.host_key,
                host_keys=host_keys,
            )
            try:
                if remote.scheme == "sftp":
                    asyncio.run(_sftp_put(attempt, local, temp, own))
                else:
                    _ftp_put(attempt, local, temp, own)
                return
            except Retryable as failure:
                last = failure
    assert last is not None
    raise last


# -- SFTP ---------------------------------------------------------------------------------------
async def _sftp_put(attempt: Attempt, local: Path, temp: str, own: str) -> None:
    from firefeed.pipeline.transfer.sftp import connect

    final = attempt.remote.path
    conn = await connect(attempt)
    try:
        async with conn.start_sftp_client() as sftp:
            try:
                await _sftp_forget_own(sftp, final, own)
                # The whole upload is bounded by the step's time limit, as a download is.
                await asyncio.wait_for(
                    sftp.put(str(local), temp, block_size=_BLOCK), timeout=attempt.settings.step_time_limit_s
                )
                try:
                    await sftp.posix_rename(temp, final)
                except asyncssh.SFTPOpUnsupported:
                    # Plain SFTP rename refuses an existing name: the old file goes first (a short gap,
                    # never a partial file).
                    with contextlib.suppress(asyncssh.SFTPNoSuchFile):
                        await sftp.remove(final)
                    await sftp.rename(temp, final)
            except BaseException:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(sftp.remove(temp), timeout=5)
                raise
    except asyncssh.SFTPError as exc:
        if isinstance(exc, asyncssh.SFTPConnectionLost):
            raise Retryable(f"connection lost writing to {attempt.shown}: {exc.reason}") from exc
        raise FetchError(attempt.source, f"{attempt.shown}: {exc.reason}") from exc
    except (OSError, asyncssh.Error, TimeoutError) as exc:
        reason = exc.reason if isinstance(exc, asyncssh.Error) else (str(exc) or "timed out")
        raise Retryable(f"connection lost writing to {attempt.shown}: {reason}") from exc
    finally:
        conn.close()
        await conn.wait_closed()


async def _sftp_forget_own(sftp: asyncssh.SFTPClient, final: str, own: str) -> None:
    folder = posixpath.dirname(final) or "."
    try:
        names = await sftp.listdir(folder)
    except asyncssh.SFTPError:
        return  # a folder we may not list: the put below says what is wrong
    for name in names:
        if isinstance(name, str) and name.startswith(own):
            with contextlib.suppress(asyncssh.SFTPError):
                await sftp.remove(posixpath.join(posixpath.dirname(final), name))


# -- FTP and FTPS -------------------------------------------------------------------------------
def _ftp_put(attempt: Attempt, local: Path, temp: str, own: str) -> None:
    from firefeed.pipeline.transfer.ftp import _code, connect

    final = attempt.remote.path
    ftp = connect(attempt)
    try:
        try:
            _ftp_forget_own(ftp, final, own)
            _store(ftp, attempt, local, temp)
            try:
                ftp.rename(temp, final)
            except ftplib.error_perm:
                # A server that will not rename over an existing file: the old one goes first.
                with contextlib.suppress(ftplib.error_perm):
                    ftp.delete(final)
                ftp.rename(temp, final)
        except BaseException:
            with contextlib.suppress(Exception):
                ftp.delete(temp)
            raise
    except ftplib.error_perm as exc:
        raise FetchError(attempt.source, f"{attempt.shown}: {_code(exc)}") from exc
    except (OSError, EOFError, ftplib.Error) as exc:
        raise Retryable(f"connection lost writing to {attempt.shown}: {exc or type(exc).__name__}") from exc
    finally:
        ftp.close()


def _store(ftp: ftplib.FTP, attempt: Attempt, local: Path, temp: str) -> None:
    """STOR as ftplib's storbinary, but a TLS close that fails is no failure: with TLS 1.3 the unwrap of a
    small file's data connection can meet a handshake the server has not finished (SHUTDOWN_WHILE_IN_INIT);
    the server's reply after the transfer says whether the file arrived whole."""
    conn = ftp.transfercmd(f"STOR {temp}")
    try:
        with local.open("rb") as f:
            while chunk := f.read(_BLOCK):
                conn.settimeout(attempt.timeout())
                conn.sendall(chunk)
        if isinstance(conn, ssl.SSLSocket):
            with contextlib.suppress(OSError, ValueError):
                conn.unwrap()
    finally:
        conn.close()
    ftp.voidresp()


def _nlst(ftp: ftplib.FTP, folder: str) -> list[str]:
    """NLST as ftplib's, with the same forgiving TLS close as `_store`."""
    conn = ftp.transfercmd(f"NLST {folder}" if folder else "NLST")
    data = b""
    try:
        while chunk := conn.recv(_BLOCK):
            data += chunk
        if isinstance(conn, ssl.SSLSocket):
            with contextlib.suppress(OSError, ValueError):
                conn.unwrap()
    finally:
        conn.close()
    ftp.voidresp()
    return [line for line in data.decode("utf-8", "replace").splitlines() if line]


def _ftp_forget_own(ftp: ftplib.FTP, final: str, own: str) -> None:
    folder = posixpath.dirname(final)
    try:
        names = _nlst(ftp, folder)
    except ftplib.error_perm:
        return
    for name in names:
        if posixpath.basename(name).startswith(own):
            with contextlib.suppress(ftplib.error_perm):
                ftp.delete(posixpath.join(folder, posixpath.basename(name)))
