"""FireFeed's own temporary files in a local export folder, told apart from everything else there.

A run writes each export to `.<name>.<run>.partial` (`keys.partial_key`), and a
local folder fills that key through a hidden temporary beside it,
`..<name>.<run>.partial.<random>.tmp` (`LocalStorage.writing`, by `mkstemp`).
Before the export stopped writing through a second temporary, a third name,
`...<name>.<run>.partial.<random>.tmp.<random>.tmp`, could be left too. A worker
killed mid-export leaves these behind, and nothing else would remove them: the
run may well succeed when its step is sent again, under the same partial key
but a new temporary.

Only these exact shapes count (never a user's `feed.csv.tmp`, and the spec
refuses an export path of such a name), and each names its run, so the janitor
can leave every file of a run still in progress alone, whichever project it
belongs to.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Collection
from pathlib import Path

#: `.<name>.<first 8 hex digits of the run id>.partial` (keys.partial_key)
_PARTIAL = re.compile(r"\.(?P<name>.+)\.(?P<run>[0-9a-f]{8})\.partial")
#: one `mkstemp(prefix=f".{name}.", suffix=".tmp")` around a name: 8 characters of its alphabet
_TEMPORARY = re.compile(r"\.(?P<inner>.+)\.[a-z0-9_]{8}\.tmp")
#: the storage's temporary, and the export writer's former one inside it
_MAX_TEMPORARIES = 2


def published_name(filename: str) -> str | None:
    """The file name a run's partial export (`keys.partial_key`) is published as; None for any other name."""
    partial = _PARTIAL.fullmatch(filename)
    return partial["name"] if partial is not None else None


def leftover_run(filename: str) -> str | None:
    """The run-id prefix a FireFeed temporary export file names; None for any other file.

    A bare `.partial` is not one: its run publishes or discards it (`publishing.publish`,
    `steps.cleanup`, the reaper), and a step sent again writes the same key.
    """
    name, layers = filename, 0
    while layers < _MAX_TEMPORARIES and (temporary := _TEMPORARY.fullmatch(name)) is not None:
        name, layers = temporary["inner"], layers + 1
    partial = _PARTIAL.fullmatch(name) if layers else None
    return partial["run"] if partial is not None else None


def stale_leftovers(
    root: Path, *, older_than_s: float, active_runs: Collection[str], now: float | None = None
) -> list[Path]:
    """FireFeed's temporary export files under `root` unchanged for `older_than_s`, of no run in `active_runs`.

    `active_runs` holds the 8-character run-id prefixes of the runs still
    PENDING or RUNNING. A writer changes its file's mtime with every write, and
    its run is active until it ends, so neither a file being written nor one a
    run still has to publish is ever returned. Symlinks are neither followed
    nor returned: every file the storage writes is really inside `root`.
    """
    now = time.time() if now is None else now
    found: list[Path] = []
    for folder, _dirs, files in os.walk(root):
        for filename in files:
            run = leftover_run(filename)
            if run is None or run in active_runs:
                continue
            path = Path(folder) / filename
            try:
                info = path.lstat()
            except FileNotFoundError:  # its run removed or published it meanwhile
                continue
            if stat.S_ISREG(info.st_mode) and now - info.st_mtime > older_than_s:
                found.append(path)
    return sorted(found)
