"""Child processes of `firefeed fleet`: started in their own process groups, their output
prefixed with their name, and stopped as whole trees (foreman/honcho style).

Each child is the leader of a new session, so a Ctrl-C on the terminal reaches only
the fleet, which then stops the children in order; a child's own children (Celery's
prefork pool) share its group, so one `killpg` reaches the whole tree. On Linux a
child also gets SIGTERM from the kernel when the fleet dies without cleaning up
(`kill -9`): PR_SET_PDEATHSIG, set between fork and exec.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO

PR_SET_PDEATHSIG = 1
READ_CHUNK = 65536


class LinePrefixer:
    """Splits a child's output into lines and prefixes each with `name |`, keeping a partial last line.

    Works on bytes as they come off the pipe: a line cut between two reads is
    printed once, whole; a child's bytes that are not UTF-8 are shown, not lost.
    """

    def __init__(self, name: str, width: int = 0) -> None:
        self.prefix = f"{name:<{width}} | "
        self._partial = b""

    def feed(self, data: bytes) -> list[str]:
        """The complete lines in `data` (after what was held back), prefixed; holds back a partial last line."""
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        return [self._format(line) for line in lines]

    def flush(self) -> list[str]:
        """At the end of the stream: the held-back partial line, if any."""
        rest, self._partial = self._partial, b""
        return [self._format(rest)] if rest else []

    def _format(self, line: bytes) -> str:
        return self.prefix + line.rstrip(b"\r").decode("utf-8", errors="replace")


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up in the parent (nothing is loaded between fork and exec); None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        prctl: Callable[..., int] = libc.prctl
    except (OSError, AttributeError):
        return None
    return prctl


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A preexec_fn: ask the kernel for SIGTERM when the parent dies; exit at once if it already has."""
    prctl = _prctl()

    def preexec() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


@dataclass
class Child:
    """One named child: its command, and once started its process (the leader of its own group)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    prefixer: LinePrefixer | None = None
    returncode: int | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal_group(self, signum: int) -> None:
        """Signal the child's whole process group (it and its pool), even after the leader has exited."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)


@dataclass
class Fleet:
    """Starts children, pumps their output to `out` with name prefixes, and stops them all.

    Run from the main thread only: PR_SET_PDEATHSIG follows the thread that forked.
    """

    children: list[Child]
    out: IO[str] = field(default_factory=lambda: sys.stdout)
    grace_s: float = 10.0
    name: str = "fleet"
    stop_signal: int | None = None
    _selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    _forced: bool = False

    @property
    def width(self) -> int:
        return max([len(self.name)] + [len(c.name) for c in self.children])

    def say(self, message: str) -> None:
        """A line of the fleet's own, prefixed like the children's."""
        self._write([f"{self.name:<{self.width}} | {message}"])

    def _write(self, lines: Sequence[str]) -> None:
        if lines:
            self.out.write("".join(line + "\n" for line in lines))
            self.out.flush()

    def start(self) -> None:
        parent = os.getpid()
        for child in self.children:
            child.prefixer = LinePrefixer(child.name, self.width)
            child.proc = subprocess.Popen(
                child.argv,
                env=child.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent(parent),
            )
            assert child.proc.stdout is not None
            os.set_blocking(child.proc.stdout.fileno(), False)
            self._selector.register(child.proc.stdout, selectors.EVENT_READ, child)
            self.say(f"started {child.name} (pid {child.proc.pid}): {' '.join(child.argv[2:])}")

    def request_stop(self, signum: int, frame: object = None) -> None:
        """Signal handler: the first signal stops the fleet gracefully, a second one kills it now."""
        if self.stop_signal is None:
            self.stop_signal = signum
        else:
            self._forced = True

    def pump(self, timeout: float) -> None:
        """Print whatever the children wrote within `timeout` seconds."""
        for key, _ in self._selector.select(timeout):
            child: Child = key.data
            assert child.proc is not None and child.proc.stdout is not None and child.prefixer is not None
            stream = child.proc.stdout
            try:
                data = os.read(stream.fileno(), READ_CHUNK)
            except BlockingIOError:
                continue
            if data:
                self._write(child.prefixer.feed(data))
            else:  # end of file: the child (and everything that shared its pipe) is gone
                self._write(child.prefixer.flush())
                self._selector.unregister(stream)
                stream.close()

    def exited(self) -> list[Child]:
        """Children that exited since the last look (their exit code recorded)."""
        gone = []
        for child in self.children:
            if child.proc is not None and child.returncode is None:
                code = child.proc.poll()
                if code is not None:
                    child.returncode = code
                    gone.append(child)
        return gone

    def running(self) -> list[Child]:
        return [c for c in self.children if c.proc is not None and c.returncode is None]

    def supervise(self, every: Callable[[], object] | None = None, every_s: float = 60.0) -> int:
        """Pump output until a stop signal or until a child exits on its own; then stop all. The exit code."""
        code = 0
        next_tick = time.monotonic() + every_s
        while self.stop_signal is None:
            self.pump(0.5)
            gone = self.exited()
            if gone:
                for child in gone:
                    self.say(f"{child.name} exited with code {child.returncode}: stopping the fleet")
                code = 1
                break
            if every is not None and time.monotonic() >= next_tick:
                next_tick = time.monotonic() + every_s
                try:
                    every()
                except Exception as err:  # housekeeping must never take the fleet down
                    self.say(f"housekeeping failed: {err}")
        else:
            self.say(f"got {signal.Signals(self.stop_signal).name}: stopping (again to kill at once)")
        self.stop()
        return code

    def stop(self) -> None:
        """SIGTERM every child, wait up to the grace period (printing output), then SIGKILL every group.

        SIGTERM goes to the leader alone: a Celery worker then stops its own pool in
        order (a pool child signalled directly dies mid-task and is logged as lost).
        """
        for child in self.running():
            assert child.proc is not None
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        while self.running() and time.monotonic() < deadline and not self._forced:
            self.pump(0.2)
            for child in self.exited():
                self.say(f"{child.name} stopped (code {child.returncode})")
        late = self.running()
        if late:
            self.say(f"killing {', '.join(c.name for c in late)} (still running after {self.grace_s:g} s)")
        # Every group, not only the late leaders: a pool child may outlive its leader.
        for child in self.children:
            child.signal_group(signal.SIGKILL)
        for child in self.children:
            if child.proc is not None:
                child.returncode = child.proc.wait()
        end = time.monotonic() + 2.0
        while self._selector.get_map() and time.monotonic() < end:
            self.pump(0.1)
        for key in list(self._selector.get_map().values()):
            child = key.data
            if child.prefixer is not None:
                self._write(child.prefixer.flush())
            self._selector.unregister(key.fileobj)
        self._selector.close()


def child_env(base: Mapping[str, str], **overrides: str) -> dict[str, str]:
    """The environment of a child: the fleet's, plus `overrides`, with unbuffered Python output."""
    env = dict(base)
    env.update(overrides)
    env["PYTHONUNBUFFERED"] = "1"
    return env
