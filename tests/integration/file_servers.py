"""File servers on 127.0.0.1 for the SFTP/FTP tests (sources and delivery targets, SPEC 10 C6-C7).

An asyncssh SFTP server (password and public-key logins, a host key the test chooses) and a
pyftpdlib FTP server (optionally FTPS with a certificate the test makes), each on a free port,
each counting what it is asked.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import threading
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from firefeed.config import reset_settings
from firefeed.secrets.crypto import generate_key
from firefeed.secrets.store import SecretStore

with warnings.catch_warnings():
    # pyftpdlib 2.x imports asyncore and asynchat, which Python 3.11 calls deprecated.
    warnings.simplefilter("ignore", DeprecationWarning)
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler, TLS_FTPHandler
    from pyftpdlib.servers import ThreadedFTPServer

CSV = b"id,title,price\nA1,Shoe,10\nA2,Boot,20\n"
USER = "feeds"


# ---------------------------------------------------------------- an SFTP server


class SFTPServer:
    """asyncssh serving `root` on 127.0.0.1 from its own event loop thread; counts connections and opens."""

    def __init__(self, root: Path, password: str, authorized: asyncssh.SSHKey | None = None) -> None:
        self.root, self.password, self.authorized = root, password, authorized
        self.connections = 0
        self.opens = 0
        self.port = 0
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-sftp", daemon=True)
        self._thread.start()
        self._server: asyncssh.SSHAcceptor | None = None

    def start(self, host_key: asyncssh.SSHKey) -> None:
        self.host_key = host_key
        asyncio.run_coroutine_threadsafe(self._listen(host_key), self.loop).result(10)

    def stop(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None

            async def close() -> None:
                server.close()
                await server.wait_closed()

            asyncio.run_coroutine_threadsafe(close(), self.loop).result(10)

    def close(self) -> None:
        self.stop()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    async def _listen(self, host_key: asyncssh.SSHKey) -> None:
        outer = self

        class Server(asyncssh.SSHServer):
            def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
                outer.connections += 1

            def begin_auth(self, username: str) -> bool:
                return True

            def password_auth_supported(self) -> bool:
                return True

            def validate_password(self, username: str, password: str) -> bool:
                return username == USER and password == outer.password

            def public_key_auth_supported(self) -> bool:
                return outer.authorized is not None

            def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
                return username == USER and outer.authorized is not None and key == outer.authorized

        class Files(asyncssh.SFTPServer):
            def __init__(self, chan: asyncssh.SSHServerChannel) -> None:
                super().__init__(chan, chroot=str(outer.root).encode())

            def open(self, path: bytes, pflags: int, attrs: asyncssh.SFTPAttrs) -> object:
                outer.opens += 1
                return super().open(path, pflags, attrs)

        self._server = await asyncssh.listen(
            "127.0.0.1",
            self.port,
            server_factory=Server,
            server_host_keys=[host_key],
            sftp_factory=Files,
            allow_scp=False,
        )
        self.port = self._server.sockets[0].getsockname()[1]


@pytest.fixture()
def sftp(tmp_path: Path) -> Iterator[SFTPServer]:
    root = tmp_path / "sftp"
    (root / "out").mkdir(parents=True)
    (root / "out" / "feed.csv").write_bytes(CSV)
    server = SFTPServer(root, password="pw-" + uuid.uuid4().hex)
    server.start(asyncssh.generate_private_key("ssh-ed25519"))
    try:
        yield server
    finally:
        server.close()


# ---------------------------------------------------------------- an FTP server


class FTPServer:
    """pyftpdlib on 127.0.0.1 in a thread, serving `root`; counts the files it sent and received.

    `perm` is pyftpdlib's (elr: read only; elradfmw: write too); `tls` (certificate, key) makes it an
    explicit FTPS server that requires TLS on the control and data connections.
    """

    def __init__(self, root: Path, password: str, *, perm: str = "elr", tls: tuple[Path, Path] | None = None) -> None:
        outer = self
        self.sent = 0
        self.received = 0
        authorizer = DummyAuthorizer()
        authorizer.add_user(USER, password, str(root), perm=perm)
        base: type[FTPHandler] = TLS_FTPHandler if tls is not None else FTPHandler

        class Handler(base):  # type: ignore[valid-type,misc]
            def on_file_sent(self, file: str) -> None:
                outer.sent += 1

            def on_file_received(self, file: str) -> None:
                outer.received += 1

        if tls is not None:
            Handler.certfile, Handler.keyfile = str(tls[0]), str(tls[1])
            Handler.tls_control_required = Handler.tls_data_required = True
        Handler.authorizer = authorizer
        Handler.banner = "test ftp"
        self._server = ThreadedFTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.address[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="test-ftp", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        """The server's loop, closed by its own thread: `close_all` from another thread while the loop polls
        raced it (an exception in this thread, failing whichever test was tearing down)."""
        while not self._stop.is_set():
            self._server.serve_forever(timeout=0.05, blocking=False, handle_exit=False)
        self._server.close_all()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (an IP SAN) and its key: the FTPS test server's, trusted by the test as a CA."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)

    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture()
def trusted_cert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """A self-signed certificate for 127.0.0.1 that the https/ftps clients trust (SSL_CERT_FILE, which the
    shared TLS context reads when it is made: its cache is cleared before and after)."""
    from firefeed.pipeline._netguard import tls_context

    cert, key = self_signed(tmp_path / "tls")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    tls_context.cache_clear()
    try:
        yield cert, key
    finally:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        tls_context.cache_clear()


@pytest.fixture()
def ftp(tmp_path: Path) -> Iterator[tuple[FTPServer, str]]:
    root = tmp_path / "ftp"
    (root / "out").mkdir(parents=True)
    (root / "out" / "feed.csv").write_bytes(CSV)
    password = "pw-" + uuid.uuid4().hex
    logging.getLogger("pyftpdlib").setLevel(logging.WARNING)
    server = FTPServer(root, password)
    try:
        yield server, password
    finally:
        server.close()


# ---------------------------------------------------------------- runs


@pytest.fixture()
def transfer_env(run_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A secrets key, 127.0.0.1 named as an allowed host (the servers live there), quick retries."""
    monkeypatch.setenv("FIREFEED_SECRETS_KEY", generate_key())
    monkeypatch.setenv("FIREFEED_FETCH_ALLOWED_HOSTS", "127.0.0.1")
    monkeypatch.setenv("FIREFEED_FETCH_BACKOFF_S", "0.01")
    monkeypatch.setenv("FIREFEED_FETCH_RETRIES", "1")
    reset_settings()
    yield run_env
    reset_settings()


def company_with(**secrets: str) -> str:
    company = "co_" + uuid.uuid4().hex[:10]
    for name, value in secrets.items():
        SecretStore().set(company, name, value)
    return company
