"""The test session's own Redis: a `redis-server` on a free port, in a temporary folder, nothing saved.

The suite once used whatever Redis answered on 127.0.0.1:6379 and emptied its databases 7 to 15
(FLUSHDB): on a shared machine, someone else's data. Now a session starts a server of its own when
the `redis-server` program exists (tests/services.py decides), and ends it by its pid, never by
name: when pytest unconfigures, at interpreter exit, and, should the session be killed outright,
with it (the kernel sends the server SIGTERM when the process that started it dies). The folder of
a killed session stays behind; the next session removes it (its owner's pid, in it, is gone).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from firefeed.procutil import pid_alive
from tests.ports import free_ports

#: how long a new server may take to answer PING (it answers in milliseconds; a loaded machine is slower)
START_TIMEOUT_S = 30.0
_PR_SET_PDEATHSIG = 1
FOLDER_PREFIX = "firefeed-test-redis-"
#: in each folder: the pid of the process that started its server (the session)
OWNER_FILE = "owner.pid"


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the starting process dies (Linux; elsewhere atexit must do)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class PrivateRedis:
    """One `redis-server` listening on 127.0.0.1 only, no RDB or AOF, in a folder removed when it stops."""

    def __init__(self, program: str) -> None:
        self.program = program
        self.port = 0
        self.folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
        (self.folder / OWNER_FILE).write_text(str(os.getpid()))
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's URL without a database number (tests/services.py adds one per test file)."""
        return f"redis://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start on a free port (the same one again after `stop`), and wait until it answers PING."""
        attempts = 1 if self.port else 3
        for _ in range(attempts):
            self.port = self.port or free_ports(1)
            if self._spawn():
                return
            self.port = 0  # taken between the check and the bind: another port
        log = (self.folder / "redis.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{self.program} did not start in {self.folder} (its log ends:\n{log})")

    def _spawn(self) -> bool:
        args = [self.program, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(self.folder), "--logfile", str(self.folder / "redis.log"), "--daemonize", "no"]
        self._proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._proc = None
                return False
            client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1, socket_timeout=1)
            try:
                if client.ping():
                    return True
            except redis.RedisError:
                time.sleep(0.02)
            finally:
                client.close()
        self.stop()
        return False

    def stop(self) -> None:
        """SIGTERM to our pid (no save is configured, so it exits at once), SIGKILL if it lingers."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def restart(self) -> None:
        """Stop and start again on the same port (a broker restart, for the fault tests); its data is lost."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the server and remove its folder."""
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def remove_stale_folders() -> None:
    """Remove the folders of killed sessions: those whose owner's pid no longer runs (their server died with it)."""
    for folder in Path(tempfile.gettempdir()).glob(FOLDER_PREFIX + "*"):
        try:
            owner = int((folder / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not one of ours, or one being made right now
        if not pid_alive(owner):
            shutil.rmtree(folder, ignore_errors=True)


_session: PrivateRedis | None = None


def start_session_redis(program: str) -> PrivateRedis:
    """The session's server, started once; stopped by `stop_session_redis` (pytest's unconfigure) or at exit."""
    global _session
    if _session is None:
        remove_stale_folders()
        server = PrivateRedis(program)
        atexit.register(server.close)
        server.start()
        _session = server
    return _session


def session_redis() -> PrivateRedis | None:
    """The server this session started, if it started one."""
    return _session


def stop_session_redis() -> None:
    if _session is not None:
        _session.close()
