"""Each item's byte length in a published csv or tsv file, kept beside it for a delta run's patch (#52).

A delta run's patched export (export/patch.py) replaces the changed items' lines of the last file.
Without knowing where each line starts it must cut the whole file at its line ends in Python (~1.1 s
of 690 MB on one core); with each item's length it joins the unchanged spans as they are and the
changed lines between them. COPY hands the writer one item per write (a value quoted over several
lines is still one write), so the full export records the lengths for an append per item
(`_atomic.AtomicOutput.record`), and the patch derives the next file's from the last one's.

A delta run also needs the changed items' places among the file's items. The first patch reads every
item's position (`_ff_ord`) from the published keys once and keeps them here too (`ords`); a delta
moves no item, so the next patch finds each changed item's place by a binary search of them instead
of a scan of the published keys, and can write the file while the changed lines are still rendered.

Kept on the machine that wrote the file, in <data_dir>/export-lines/<company schema>/<project>/, one
file per export (named as its published keys table: no user text in the path), replaced by each run
that writes the export. It describes a file by its sha256 and size, so it is a function of the file's
bytes alone: the patch takes it only for the file live now (the last succeeded run's sha256) and
checks the bytes at each replaced line's ends, so an index of another file, a damaged one, or none
(another machine, a run that wrote a file it did not publish) costs the cut, never a wrong byte.
"""

from __future__ import annotations

import logging
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from firefeed.config import Settings
from firefeed.dataplane.parsed_copy import remove_others
from firefeed.schema.identifiers import check_project_id, company_schema, published_keys_table

log = logging.getLogger(__name__)

FOLDER = "export-lines"
#: the formats whose COPY rows reach the file unframed, one item per write, after a head and before no tail
FORMATS = ("csv", "tsv")
_MAGIC = b"FFLINES2"
#: magic, the file's sha256 (32 bytes), its size, its head's length, the items, the positions kept (0 or the
#: items), the crc32 of the lengths and positions (each little-endian, 8 bytes an item)
_HEADER = struct.Struct("<8s32sQQQQI")
#: the first format (lengths only), still read: magic, sha256, size, head, items, crc32 of the lengths
_MAGIC_1, _HEADER_1 = b"FFLINES1", struct.Struct("<8s32sQQQI")


@dataclass(frozen=True)
class LineIndex:
    """A file of `size` bytes with this `sha256`: `head` bytes, then one item of each length in `lengths`."""

    sha256: str
    size: int
    head: int
    #: one unsigned 64-bit length an item, in the file's order
    lengths: array[int]
    #: each item's position (`_ff_ord`), ascending, as the published keys hold them; None when not kept
    ords: array[int] | None = None


def recorder() -> array[int]:
    """An empty list of lengths for a writer to fill (`AtomicOutput.record`)."""
    return array("Q")


def path(settings: Settings, company: str, project: str, export: str) -> Path:
    """Where export `export` of `project` keeps the index of its last written file."""
    name = published_keys_table(project, export)
    return settings.data_dir / FOLDER / company_schema(company) / check_project_id(project) / f"{name}.lines"


def drop_unnamed(settings: Settings, company: str, project: str, exports: Iterable[str]) -> None:
    """Remove the indexes of the project's exports other than `exports` (renamed or removed ones), and
    temporaries runs left (a run of the project holds its lock: none is being written now)."""
    folder = settings.data_dir / FOLDER / company_schema(company) / check_project_id(project)
    remove_others(folder, {f"{published_keys_table(project, e)}.lines" for e in exports})


def save(where: Path, index: LineIndex) -> None:
    """Write `index` to `where` (a temporary renamed over it). Never raises: without it the next patch cuts
    the file instead (logged)."""
    lengths, ords = index.lengths, index.ords
    if lengths.itemsize != 8 or index.head + sum(lengths) != index.size:
        log.warning("export line index not kept: its lengths do not add up to the file's size")
        return
    if ords is not None and (ords.itemsize != 8 or len(ords) != len(lengths)):
        ords = None
    payload = _little_endian(lengths) + (_little_endian(ords) if ords is not None else b"")
    header = _HEADER.pack(
        _MAGIC,
        bytes.fromhex(index.sha256),
        index.size,
        index.head,
        len(lengths),
        len(ords) if ords is not None else 0,
        zlib.crc32(payload),
    )
    tmp = where.with_name(f".{where.name}.{os.getpid()}.tmp")
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as out:
            out.write(header)
            out.write(payload)
        os.replace(tmp, where)
    except OSError as err:
        log.warning("export line index not kept: %s", err.strerror or type(err).__name__)
        tmp.unlink(missing_ok=True)


def load(where: Path, sha256: str, size: int) -> LineIndex | None:
    """The index kept at `where` when it describes the file of this `sha256` and `size`, whole; else None."""
    try:
        data = where.read_bytes()
    except OSError:
        return None
    if data[:8] == _MAGIC_1 and len(data) >= _HEADER_1.size:
        magic, digest, kept_size, head, items, crc = _HEADER_1.unpack_from(data)
        magic, positions, payload = _MAGIC, 0, memoryview(data)[_HEADER_1.size :]
    elif len(data) >= _HEADER.size:
        magic, digest, kept_size, head, items, positions, crc = _HEADER.unpack_from(data)
        payload = memoryview(data)[_HEADER.size :]
    else:
        return None
    if magic != _MAGIC or digest.hex() != sha256 or kept_size != size or positions not in (0, items):
        return None
    if len(payload) != (items + positions) * 8:
        return None
    if zlib.crc32(payload) != crc:
        log.warning("export line index %s is damaged: not used", where.name)
        return None
    lengths = _native("Q", payload[: items * 8])
    if head + sum(lengths) != size:
        return None
    # The crc proves them what `save` wrote: positions read in order (`patch.baseline_ords`), or carried on.
    ords = _native("q", payload[items * 8 :]) if positions else None
    return LineIndex(sha256=sha256, size=size, head=head, lengths=lengths, ords=ords)


def _native(typecode: str, data: memoryview) -> array[int]:
    values = array(typecode)
    values.frombytes(data)
    if sys.byteorder != "little":
        values.byteswap()
    return values


def _little_endian(values: array[int]) -> bytes:
    if sys.byteorder == "little":
        return values.tobytes()
    swapped = array(values.typecode, values)
    swapped.byteswap()
    return swapped.tobytes()
