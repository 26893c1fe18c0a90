"""Replace a large file by rename, its old blocks freed on a thread of its own.

`os.replace` onto a file frees the replaced file's blocks and page-cache pages
inside the rename when that was its last name: for a 690 MB export or a kept
copy of the feed, 0.5-1.6 s of kernel time on this kind of VM, spent on the
run's serial path (#52: a 1% refresh publishes one of each). Here the replaced
file first gets a second name (a hard link, same folder), so the rename frees
nothing; that name is removed on a deleter thread (`unlink` releases the GIL)
while the run goes on. `drain()` waits for the deleter: a run calls it before it
ends, so its freed blocks are counted in its time, only no longer one after the
other with the rest.

A process killed before the deleter ran leaves the second name behind; the
caller picks a name its own sweep already removes (the janitor's temporary
export names, a kept copy's temporary prefix).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import queue
import threading
from pathlib import Path

log = logging.getLogger(__name__)

#: Smaller files are replaced as they are: freeing them costs nothing worth a thread.
MIN_BYTES = 1 << 20

_queue: queue.Queue[Path] = queue.Queue()
_started = False
_start_lock = threading.Lock()
_at_exit: list[bool] = []


def replace(src: Path, dest: Path, retired: Path) -> None:
    """`os.replace(src, dest)`; a replaced `dest` of `MIN_BYTES` or more is linked as `retired` first and
    removed by the deleter. Where a link cannot be made (a file system without them, `retired` taken), the
    replace frees the old file itself, as before."""
    linked = False
    try:
        if dest.stat().st_size >= MIN_BYTES:
            os.link(dest, retired)
            linked = True
    except OSError:
        pass  # no file to replace, or no second name to be had: a plain replace
    try:
        os.replace(src, dest)
    except BaseException:
        if linked:
            with contextlib.suppress(OSError):
                retired.unlink()
        raise
    if linked:
        _start()
        _queue.put(retired)


def later(path: Path) -> None:
    """Remove `path` on the deleter's thread (a file that already has a name of its caller's sweep)."""
    _start()
    _queue.put(path)


def drain() -> None:
    """Wait until every file handed to the deleter is removed."""
    if _started:
        _queue.join()


def _start() -> None:
    global _started
    with _start_lock:
        if not _started:
            threading.Thread(target=_delete_forever, name="retire", daemon=True).start()
            if not _at_exit:
                atexit.register(drain)
                _at_exit.append(True)
            _started = True


def _forget_in_child() -> None:
    """A forked child (a prefork worker) has no deleter thread: it starts its own, with a queue of its own."""
    global _queue, _started, _start_lock
    _queue, _started, _start_lock = queue.Queue(), False, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def _delete_forever() -> None:
    while True:
        path = _queue.get()
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:  # left for the caller's sweep
            log.warning("could not remove the replaced file %s: %s", path.name, exc.strerror)
        finally:
            _queue.task_done()
