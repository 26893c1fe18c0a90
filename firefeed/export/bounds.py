"""What one export, and one run's exports, may write: a tiny feed must not write huge files (#47).

The rules' growth bounds (rules/value_growth.py) bound one field of one item, and an aggregate
`join` one value; nothing there bounds how many such fields an item has: a 10.7 KB feed with 200
fields templating others wrote a 121 MB export, one with 10 `join`s over a group 89 MB. The spec
limits (spec/limits.py) bound how many fields, exports and rules there are; what they make of the
data is only known as it is written, so EXPORT bounds the bytes themselves:

* one export: at most `export_max_item_bytes` per item the rules left, on average, plus
  HEAD_BYTES for the format's head and tail, and at most `export_max_bytes` in all;
* a run's files together: at most `run_max_export_bytes` (each export alone as it is written;
  all of them, as stored, once all are written, before anything is published).

An export's bytes are counted as the format renders them, before gzip (what a channel reads, and
what FireFeed spends its time making: 36 GB of repeated text gzip to little), once per chunk handed
to the file (about 1 MiB, `_atomic.AtomicOutput`), never per row: the benchmark pays nothing. Past
a bound the export's temporary file is removed and the run fails at EXPORT naming the export and
the bound; the previous files stay published.

Before an export is written, the file system its bytes land on (the export folder, or with s3
storage the local temporary folder) must have `export_min_free_bytes` free besides the export's
previous size, what it most likely writes again: a disk filled half-way through one tenant's
export fails every other tenant's too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from firefeed.errors import ExportError

if TYPE_CHECKING:
    from firefeed.config import Settings

#: what a format writes besides its items (an XML channel's head, a JSON array's brackets), and what a
#: tiny feed may always write
HEAD_BYTES = 1024**2


def _size(n: float) -> str:
    """Bytes for a message: 1234567 -> "1234567 bytes (1.2 MB)"."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{int(n)} bytes ({n / scale:.1f} {unit})"
    return f"{int(n)} bytes"


@dataclass(frozen=True)
class WriteBounds:
    """What one export may write (`limit` bytes, before gzip; `bound` says which setting decides it) and
    the free space its destination needs before a byte is written."""

    limit: int
    bound: str
    free_needed: int = 0


def export_bounds(settings: Settings, items: int | None, previous_bytes: int | None = None) -> WriteBounds:
    """The bounds of an export of at most `items` items (unknown: only the absolute ones), whose previous
    file took `previous_bytes` (unknown: only the minimum free space is asked for)."""
    limits = [
        (settings.export_max_bytes, f"export_max_bytes ({_size(settings.export_max_bytes)})"),
        (settings.run_max_export_bytes, f"run_max_export_bytes ({_size(settings.run_max_export_bytes)})"),
    ]
    if items is not None:
        per_item = settings.export_max_item_bytes
        limits.append(
            (
                per_item * items + HEAD_BYTES,
                f"export_max_item_bytes ({per_item} bytes an item on average: {items} items and 1 MiB "
                f"for the format, {_size(per_item * items + HEAD_BYTES)})",
            )
        )
    limit, bound = min(limits, key=lambda pair: pair[0])
    return WriteBounds(limit, bound, settings.export_min_free_bytes + (previous_bytes or 0))


def too_large(export: str, bounds: WriteBounds) -> ExportError:
    """The error of an export that wrote past its limit (its file was removed, nothing published)."""
    return ExportError(
        export,
        f"the export would write more than {bounds.bound}: it was stopped there and not published; "
        "fewer or shorter fields (each item's fields together), or fewer items, make it fit",
    )


def free_bytes(folder: Path) -> int:
    """Bytes an unprivileged writer may still use on `folder`'s file system."""
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


def check_free_space(export: str, folder: Path, bounds: WriteBounds) -> None:
    """ExportError, before anything is written, when `folder`'s file system has less than
    `bounds.free_needed` bytes free."""
    free = free_bytes(folder)
    if free < bounds.free_needed:
        # Not the folder (a server path): the tenant reads this message.
        raise ExportError(
            export,
            f"not written: {_size(free)} free where exports are written, it needs {_size(bounds.free_needed)} "
            "(export_min_free_bytes besides the export's previous size)",
        )


def check_run_bytes(exports: Sequence[Mapping[str, Any]], limit: int | None = None) -> None:
    """ExportError naming the export whose file takes the run's written exports (RunReport entries, in
    the spec's order) past `limit` bytes (default: the setting run_max_export_bytes)."""
    if limit is None:
        from firefeed.config import get_settings

        limit = get_settings().run_max_export_bytes
    total = 0
    for entry in exports:
        total += int(entry["bytes"])  # the file's, as stored (after gzip)
        if total > limit:
            raise ExportError(
                str(entry["name"]),
                f"the run's files together take {_size(total)} with this one, more than run_max_export_bytes "
                f"({_size(limit)}): none was published",
            )
