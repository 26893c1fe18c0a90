"""SFTP host keys: a spec's pinned `host_key`, and the key first seen per company, host and port (SPEC 10 C6).

Trust on first use, as ssh does with ~/.ssh/known_hosts, but kept in Postgres (table `host_keys`)
so every worker of the fleet expects the same key. A server that presents another key later fails
the fetch (a man in the middle, or a server rebuilt: only a person can tell), and
`firefeed host-key forget COMPANY HOST[:PORT]` accepts the new key at the next fetch.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import text

if TYPE_CHECKING:
    import asyncssh
    from sqlalchemy import Engine

# known_hosts markers (`@cert-authority`, `@revoked`) change what a line means: refused, not ignored.
_MARKERS = ("@cert-authority", "@revoked")


@dataclass(frozen=True)
class PinnedKey:
    """One host key: its OpenSSH text (`<type> <base64>`) and its SHA256 fingerprint."""

    public_key: str
    fingerprint: str


def parse_host_key(line: str) -> asyncssh.SSHKey:
    """The public key of a known_hosts line (`[host]:port ssh-ed25519 AAAA…`, or just `ssh-ed25519 AAAA…`).

    The host names at the start of the line are not read: the source's URL says where to connect.
    """
    import asyncssh

    words = line.strip().split()
    if not words:
        raise ValueError("is empty; give a known_hosts line such as `ssh-ed25519 AAAA…`")
    if words[0] in _MARKERS:
        raise ValueError(f"a {words[0]} line is not a host key; give the server's own key")
    for i, word in enumerate(words[:-1]):
        if word.startswith(("ssh-", "ecdsa-", "sk-")):
            try:
                return asyncssh.import_public_key(f"{word} {words[i + 1]}")
            except (asyncssh.KeyImportError, ValueError):
                break
    raise ValueError("is not a known_hosts line (`[host]:port <key type> <base64 key>`, as ssh-keyscan prints it)")


def pinned(key: asyncssh.SSHKey) -> PinnedKey:
    return PinnedKey(public_key=key.export_public_key("openssh").decode().strip(), fingerprint=fingerprint(key))


def fingerprint(key: asyncssh.SSHKey) -> str:
    """`SHA256:<base64>`, as `ssh-keygen -l` and ssh's own host key messages print it."""
    return str(key.get_fingerprint("sha256"))


def forget_hint(company: str, host: str, port: int) -> str:
    where = host if port == 22 else f"{host}:{port}"
    return f"`firefeed host-key forget {company} {where}`"


@dataclass(frozen=True)
class StoredKey:
    host: str
    port: int
    public_key: str
    fingerprint: str
    created_at: datetime


class HostKeyStore:
    """The keys first seen for one company's SFTP servers."""

    def __init__(self, engine: Engine, company: str) -> None:
        self.engine = engine
        self.company = company

    def get(self, host: str, port: int) -> PinnedKey | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                text("SELECT public_key, fingerprint FROM host_keys WHERE company_id = :c AND host = :h AND port = :p"),
                {"c": self.company, "h": host, "p": port},
            ).first()
        return PinnedKey(row.public_key, row.fingerprint) if row is not None else None

    def record(self, host: str, port: int, key: PinnedKey) -> PinnedKey:
        """Pin `key` unless a key is pinned already (another worker's first fetch); returns the pinned key.

        A company not stored yet (the CLI previewing a spec never applied) pins nothing: its first run will.
        """
        with self.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO host_keys (company_id, host, port, public_key, fingerprint) "
                    "SELECT :c, :h, :p, :k, :f WHERE EXISTS (SELECT 1 FROM companies WHERE id = :c) "
                    "ON CONFLICT (company_id, host, port) DO NOTHING"
                ),
                {"c": self.company, "h": host, "p": port, "k": key.public_key, "f": key.fingerprint},
            )
        stored = self.get(host, port)
        return stored if stored is not None else key

    def forget(self, host: str, port: int) -> bool:
        with self.engine.begin() as conn:
            result = conn.execute(
                text("DELETE FROM host_keys WHERE company_id = :c AND host = :h AND port = :p"),
                {"c": self.company, "h": host, "p": port},
            )
        return bool(result.rowcount)

    def list(self) -> list[StoredKey]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT host, port, public_key, fingerprint, created_at FROM host_keys "
                    "WHERE company_id = :c ORDER BY host, port"
                ),
                {"c": self.company},
            ).all()
        return [StoredKey(r.host, r.port, r.public_key, r.fingerprint, r.created_at) for r in rows]
