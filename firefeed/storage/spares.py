"""The last replaced copy of a large export, kept to be written over by the export's next file (#52).

A refresh that patches a 690 MB export writes a new file of that size. On the VMs these benchmarks run
on, the page-cache pages a new file takes come from memory the host took back once it was freed
(free page reporting), and faulting them in again cost 0.4-2 s of a 5-7 s stock refresh, from run to
run; writing over the pages of a file still cached cost 0.07-0.16 s. So when a publish replaces a live
export of `FIREFEED_EXPORT_SPARE_MIN_BYTES` or more (64 MiB; a smaller one is freed as before: writing
over it saves nothing worth its copy on disk), the replaced file is not freed but kept under a second
name beside it, `.<name>.spare` (a hard link, made before the rename: the publish stays one atomic
rename). The export's next write takes that file as its temporary (`claim`); the writers write from its
first byte and cut it where they end (`_atomic.open_over`). The cost: one more copy of each large
export on disk.

A reader of a replaced file may still be reading it (a channel downloading the feed, a delivery):
FireFeed's readers hold a shared `flock` on what they read (`read_lock`), and `claim` takes the
exclusive lock without waiting, so a spare someone reads is never written over (the export then
writes a new file, and the next publish frees that spare). A reader that opened the live file just
before it was replaced and claimed finds the lock taken and opens the live name again. Readers
outside FireFeed (a copy by hand of the export folder) are not protected: docs/operations.md says so.

An export path of the spare's shape is refused by the spec (`is_spare`), so a spare never stands for
another export's file; a spare whose export is gone (its path changed, the project deleted) is the
janitor's (`orphans`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from firefeed.storage.copying import copy_in_kernel

_SUFFIX = ".spare"
#: a spare being made (`prefill`)
_FILLING = ".tmp"


def prefill(live: Path, min_bytes: int) -> bool:
    """Give `live` a spare now when it has none (the first refresh after a project's first run, or after a spare
    was being read): a copy of it made in the kernel (`copy_file_range`: the page cache's own pages, no user
    buffer), under a temporary name and linked as the spare once whole, so that no write takes it half made.
    Its bytes do not matter (the write takes its pages, writing from its first byte); what it saves is the
    new pages' first touch, on a core the run leaves idle (the driver begins it with MERGE). Whether it made one."""
    spare = spare_of(live)
    try:
        if live.stat().st_size < min_bytes or spare.exists():
            return False
    except OSError:
        return False
    filling = spare.with_name(spare.name + _FILLING)
    filling.unlink(missing_ok=True)  # one a killed run left (one run of a project at a time)
    try:
        with open(live, "rb") as src, open(filling, "xb") as out:
            copy_in_kernel(src.fileno(), out.fileno())
        os.link(filling, spare)  # never over a spare a publish made meanwhile
    except OSError:
        return False
    finally:
        filling.unlink(missing_ok=True)
    return True


def spare_of(live: Path) -> Path:
    """Where the live file `live`'s last replaced copy is kept."""
    return live.with_name(f".{live.name}{_SUFFIX}")


def is_spare(filename: str) -> bool:
    """Whether `filename` has a spare's shape (`.<name>.spare`, or `.<name>.spare.tmp` while one is made)."""
    name = filename.removesuffix(_FILLING)
    return name.startswith(".") and name.endswith(_SUFFIX) and len(name) > len(_SUFFIX) + 1


def live_of(spare: Path) -> Path:
    """The live file a spare (or one being made) was replaced from."""
    return spare.with_name(spare.name.removesuffix(_FILLING)[1 : -len(_SUFFIX)])


def claim(spare: Path, into: Path) -> int | None:
    """Make `spare` the file `into` (a writer's empty temporary, replaced) when no reader holds it; the
    descriptor holding its exclusive lock (close it once the file is published or removed), or None:
    no spare, or one being read (left where it is)."""
    try:
        fd = os.open(spare, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        # Still the spare (not freed or replaced between the open and the lock), and its only name: a kill
        # between a publish's link and its rename leaves the live file under the spare's name too.
        held = os.fstat(fd)
        if held.st_ino != os.stat(spare).st_ino or held.st_nlink != 1:
            raise FileNotFoundError(errno.ENOENT, "not a spare")
        os.replace(spare, into)
    except OSError:
        os.close(fd)
        return None
    return fd


def open_shared(path: Path, *, tries: int = 3) -> int:
    """`path` opened for reading with a shared lock, held until the descriptor is closed (see the module). A
    file whose exclusive lock is taken is being written over as a new file: the name, published anew, is
    opened again (BlockingIOError after `tries`); OSError when it cannot be opened."""
    for attempt in range(tries):
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            if attempt + 1 == tries:
                raise
            continue
        except OSError:
            pass  # a file system without flock: read as before
        return fd
    raise AssertionError("unreachable")


@contextlib.contextmanager
def read_lock(path: Path) -> Iterator[int]:
    """`open_shared` for the block."""
    fd = open_shared(path)
    try:
        yield fd
    finally:
        os.close(fd)


def orphans(root: Path) -> list[Path]:
    """The spares under `root` whose live file is gone."""
    found: list[Path] = []
    for folder, _dirs, files in os.walk(root):
        for filename in files:
            if is_spare(filename):
                spare = Path(folder) / filename
                if not live_of(spare).exists():
                    found.append(spare)
    return sorted(found)
