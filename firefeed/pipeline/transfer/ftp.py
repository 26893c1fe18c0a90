"""One FTP or FTPS download (ftplib), to an address the host rules checked.

`ftps://` is explicit FTPS: a plain connection on port 21 (unless the URL says otherwise) that
`AUTH TLS` turns into TLS before the login, then `PROT P` so the file travels encrypted too. The
server's certificate is verified against the host name of the URL, as an https source's is.
A passive-mode reply's address is never used: the data connection goes to the control
connection's (checked) address, so a server cannot point the worker elsewhere (ftplib's default).
"""

from __future__ import annotations

import calendar
import contextlib
import ftplib
import ssl
import time
from typing import TYPE_CHECKING

from firefeed.errors import FetchError
from firefeed.pipeline._retries import Retryable
from firefeed.pipeline.transfer._common import Attempt, Stat

if TYPE_CHECKING:
    from firefeed.pipeline.fetch import FetchResult

_CHUNK = 256 * 1024


def tls_context() -> ssl.SSLContext:
    """The verifying context of an ftps:// fetch: the one https sources use."""
    from firefeed.pipeline._netguard import tls_context as shared

    return shared()


def fetch_ftp(attempt: Attempt) -> FetchResult:
    """Download the file over FTP/FTPS; FetchError for a refusal, Retryable for a connection failure."""
    remote, source = attempt.remote, attempt.source
    ftp = connect(attempt)
    try:
        try:
            stat = Stat(size=_size(ftp, remote.path), mtime=_mtime(ftp, remote.path))
            if (skipped := attempt.unchanged(stat)) is not None:
                return skipped
            return _retrieve(ftp, attempt, stat)
        except ftplib.error_perm as exc:
            raise FetchError(source, f"{attempt.shown}: {_code(exc)}") from exc
        except (OSError, EOFError, ftplib.Error) as exc:
            raise Retryable(f"connection lost reading {attempt.shown}: {exc or type(exc).__name__}") from exc
    finally:
        ftp.close()


def connect(attempt: Attempt) -> ftplib.FTP:
    """A logged-in connection in binary mode (TLS first and for the data too with ftps://); FetchError for a
    refusal, Retryable for a connection failure. The caller closes it."""
    remote, source = attempt.remote, attempt.source
    secure = remote.scheme == "ftps"
    ftp: ftplib.FTP = ftplib.FTP_TLS(context=tls_context()) if secure else ftplib.FTP()
    try:
        try:
            ftp.connect(attempt.address, remote.port, timeout=attempt.timeout())
            if isinstance(ftp, ftplib.FTP_TLS):
                ftp.host = remote.host  # the certificate is checked against the URL's name, not the address
                ftp.auth()
        except ftplib.error_perm as exc:
            raise FetchError(source, f"{attempt.shown}: the server refused TLS (AUTH TLS): {_code(exc)}") from exc
        except ssl.SSLCertVerificationError as exc:
            raise FetchError(source, f"{attempt.shown}: the server's certificate: {exc.verify_message}") from exc
        except (OSError, EOFError, ftplib.Error) as exc:
            raise Retryable(f"could not connect to {attempt.shown}: {exc or type(exc).__name__}") from exc
        try:
            ftp.login(remote.user or "anonymous", attempt.password or "")
        except ftplib.error_perm as exc:
            raise FetchError(
                source, f"{attempt.shown}: the server refused the login of user {remote.user or 'anonymous'!r}"
            ) from exc
        except (OSError, EOFError, ftplib.Error) as exc:
            raise Retryable(f"connection lost logging in to {attempt.shown}: {type(exc).__name__}") from exc
        try:
            if isinstance(ftp, ftplib.FTP_TLS):
                ftp.prot_p()
            ftp.voidcmd("TYPE I")
        except ftplib.error_perm as exc:
            raise FetchError(source, f"{attempt.shown}: {_code(exc)}") from exc
        except (OSError, EOFError, ftplib.Error) as exc:
            raise Retryable(f"connection lost talking to {attempt.shown}: {exc or type(exc).__name__}") from exc
    except BaseException:
        ftp.close()
        raise
    return ftp


def _retrieve(ftp: ftplib.FTP, attempt: Attempt, stat: Stat) -> FetchResult:
    with attempt.sink() as sink:
        conn = ftp.transfercmd(f"RETR {attempt.remote.path}")
        complete = False
        try:
            while True:
                conn.settimeout(attempt.timeout())
                chunk = conn.recv(_CHUNK)
                if not chunk:
                    break
                sink.write(chunk)
            complete = True
        finally:
            if isinstance(conn, ssl.SSLSocket) and complete:
                with contextlib.suppress(OSError, ValueError):
                    conn.unwrap()  # a clean TLS close, as the server expects before its 226
            conn.close()
        ftp.voidresp()
        return sink.finish(stat)


def _size(ftp: ftplib.FTP, path: str) -> int | None:
    try:
        return ftp.size(path)
    except ftplib.error_perm as exc:
        if str(exc).startswith("550"):
            raise  # no such file: said once, by the caller
        return None  # SIZE not implemented: the download's digest still tells an unchanged file
    except ValueError:
        return None


def _mtime(ftp: ftplib.FTP, path: str) -> int | None:
    """MDTM's `YYYYMMDDHHMMSS[.sss]` (UTC, RFC 3659) as seconds, None when the server has no MDTM."""
    try:
        reply = ftp.sendcmd(f"MDTM {path}")
    except ftplib.error_perm:
        return None
    text = reply[4:].strip().split(".", 1)[0]
    try:
        return calendar.timegm(time.strptime(text, "%Y%m%d%H%M%S"))
    except ValueError:
        return None


def _code(exc: BaseException) -> str:
    """The server's reply without anything after its first line (a reply may echo what was sent)."""
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
