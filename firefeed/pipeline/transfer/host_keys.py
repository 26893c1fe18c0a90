"""SFTP host keys: a spec's pinned `host_key`, and the key first seen per company, host and port (SPEC 10 C6).

Trust on first use, as ssh does with ~/.ssh/known_hosts, but kept in Postgres (table `host_keys`)
so every worker of the fleet expects the same key. A server that presents another key later fails
the fetch (a man in the middle, or a server rebuilt: only a person can tell), and
`firefeed host-key forget COMPANY HOST[:PORT]` accepts the new key at the next fetch. A company may
also pin a key itself before any fetch (`PUT /api/host-keys/HOST:PORT`, `HostKeyStore.pin`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import text

from firefeed.errors import CompanyLimitError

if TYPE_CHECKING:
    import asyncssh
    from sqlalchemy import Engine

# known_hosts markers (`@cert-authority`, `@revoked`) change what a line means: refused, not ignored.
_MARKERS = ("@cert-authority", "@revoked")
#: The most host keys one company may hold when it pins one by hand (the keys its fetches record are not
#: refused: a fetch never fails for the table's size). A company has a few servers; this bounds a script.
PINS_PER_COMPANY = 500
#: A known_hosts line of the largest key ssh makes (RSA 16384: about 2.8 KB) fits several times over.
MAX_KEY_LINE_CHARS = 8192
_MAX_HOST_CHARS = 253


def parse_host_port(text: str) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]:port` or a bare IPv6 address, as the host keys are kept (the host as an
    sftp:// URL's, lower case, an IPv6 address without brackets), port 22 when none is given. ValueError
    otherwise."""
    host, port = text, "22"
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else "" if rest else "22"
    elif text.count(":") == 1:
        host, port = text.split(":")
    host = host.lower()
    bracketed = ":" in host or text.startswith("[")
    valid = _is_ipv6(host) if bracketed else _is_host_name(host)
    if not valid or not port.isdigit() or len(port) > 5 or not 0 < int(port) < 65536:
        shown = text if len(text) <= 80 else text[:80] + "…"
        raise ValueError(f"{shown!r} is not HOST, HOST:PORT or [IPv6]:PORT")
    return host, int(port)


def _is_host_name(text: str) -> bool:
    """Letters (an internationalised name as its URL writes it too), digits, `.`, `-` and `_`."""
    return 0 < len(text) <= _MAX_HOST_CHARS and all(c.isalnum() or c in "._-" for c in text)


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def host_port_text(host: str, port: int) -> str:
    """How a host and port are written back: `host:port`, `[v6]:port`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


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

    def pin(self, host: str, port: int, key: PinnedKey) -> tuple[StoredKey, bool]:
        """Pin `key` for the host and port, replacing a key recorded or pinned before; the pinned key, and
        True when none was pinned before.

        CompanyLimitError when it would be one more than PINS_PER_COMPANY keys (replacing one is fine).
        """
        params = {"c": self.company, "h": host, "p": port, "k": key.public_key, "f": key.fingerprint}
        with self.engine.begin() as conn:
            conn.execute(text("INSERT INTO companies (id) VALUES (:c) ON CONFLICT DO NOTHING"), params)
            # One company's pins one at a time (FOR NO KEY UPDATE: a fetch's foreign-key check does not wait),
            # so two new hosts at once cannot both see room for one more.
            conn.execute(text("SELECT id FROM companies WHERE id = :c FOR NO KEY UPDATE"), params)
            held = conn.execute(
                text("SELECT count(*) FROM host_keys WHERE company_id = :c AND NOT (host = :h AND port = :p)"),
                params,
            ).scalar_one()
            if held >= PINS_PER_COMPANY:
                raise CompanyLimitError(
                    f"the company already holds {held} host keys, the most one may ({PINS_PER_COMPANY}): "
                    f"{host_port_text(host, port)} was not pinned; forget one it no longer uses first"
                )
            r = conn.execute(
                text(
                    "INSERT INTO host_keys (company_id, host, port, public_key, fingerprint) "
                    "VALUES (:c, :h, :p, :k, :f) "
                    "ON CONFLICT (company_id, host, port) DO UPDATE "
                    "SET public_key = EXCLUDED.public_key, fingerprint = EXCLUDED.fingerprint, created_at = now() "
                    "RETURNING host, port, public_key, fingerprint, created_at, (xmax = 0) AS created"
                ),
                params,
            ).one()
        return StoredKey(r.host, r.port, r.public_key, r.fingerprint, r.created_at), bool(r.created)

    def stored(self, host: str, port: int) -> StoredKey | None:
        """The key pinned for the host and port, with when it was recorded."""
        with self.engine.connect() as conn:
            r = conn.execute(
                text(
                    "SELECT host, port, public_key, fingerprint, created_at FROM host_keys "
                    "WHERE company_id = :c AND host = :h AND port = :p"
                ),
                {"c": self.company, "h": host, "p": port},
            ).first()
        return StoredKey(r.host, r.port, r.public_key, r.fingerprint, r.created_at) if r is not None else None

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
