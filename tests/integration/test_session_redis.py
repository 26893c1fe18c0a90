"""The test session's Redis is its own (#48): started on a free port, ended by its pid, with the session if killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from tests.redis_server import PrivateRedis, remove_stale_folders, session_redis
from tests.services import REDIS_SERVER, REDIS_URL, redis_db

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not REDIS_SERVER, reason="no redis-server (PATH, FIREFEED_TEST_REDIS_SERVER)"),
]
ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int, timeout: float = 20) -> bool:
    """The process ended (a zombie waiting for its parent counts: it serves nothing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def _refuses(port: int) -> bool:
    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
    try:
        client.ping()
    except redis.ConnectionError:
        return True
    finally:
        client.close()
    return False


@pytest.mark.skipif(session_redis() is None, reason="the session started no Redis of its own")
def test_the_sessions_redis_is_a_child_of_this_process_on_its_own_port_keeping_nothing() -> None:
    server = session_redis()
    assert server is not None and server.pid is not None
    assert f"redis://127.0.0.1:{server.port}/13" == REDIS_URL and server.port != 6379
    assert redis_db(9) == f"redis://127.0.0.1:{server.port}/9"
    parent = int(Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    assert parent == os.getpid()
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("appendonly") == {"appendonly": "no"}
        assert client.config_get("dir") == {"dir": str(server.folder)}
    finally:
        client.close()


def test_closing_a_private_redis_ends_its_pid_and_removes_its_folder() -> None:
    server = PrivateRedis(REDIS_SERVER)
    server.start()
    pid, port = server.pid, server.port
    assert pid is not None and server.folder.is_dir()
    server.close()
    assert _gone(pid) and _refuses(port)
    assert not server.folder.exists()


def test_a_private_redis_ends_with_the_process_that_started_it_even_when_that_is_killed(tmp_path: Path) -> None:
    script = (
        "import sys, time\n"
        "from tests.redis_server import PrivateRedis\n"
        f"server = PrivateRedis({REDIS_SERVER!r})\n"
        "server.start()\n"
        "print(server.pid, server.port, server.folder, flush=True)\n"
        "time.sleep(600)\n"
    )
    starter = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert starter.stdout is not None
        pid, port, folder = starter.stdout.readline().split()
        assert not _refuses(int(port))
        os.kill(starter.pid, signal.SIGKILL)  # no atexit, no pytest hook: only the kernel can end it now
        starter.wait(timeout=20)
        assert _gone(int(pid)), "the killed session's Redis still runs"
        assert _refuses(int(port))
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait(timeout=20)
    # The killed session's folder stays; the next session's start removes it, its owner being gone. (Another
    # test session starting on the machine meanwhile may have removed it already: the same removal.)
    remove_stale_folders()
    assert not Path(folder).exists()
