"""The sample's parsed source rows, kept a short while so an edit that changes only rules reuses them.

A merchant editing a rule previews again and again with the same sources. Each preview used to read
every source anew, and an enrich source to its end to find the sample's keys (seconds at 1M items);
the page's edit-to-preview round trip must stay under half a second (#53). So the rows a preview's
`SampleReader` passed on are kept, per source, and the next preview of the same sample replays them
into its scratch area instead of reading the file.

Safe to reuse only while the file is the same, so an entry is keyed by what decides its rows and is
checked against the file's validators on every use:

- the key: the company, the source's whole definition (URL, format, options, its `${secret:...}`
  references as written), the spec's key field and folder, whether it is the primary, and the sample
  (the first N items, or the wanted ids; a later source's rows also depend on the sample's keys);
- the validators: each preview still fetches the source (the same safety checks, with the caller's
  confinement and secrets), and the entry is used only when the fetch says the content is the same: a
  304 to the entry's ETag/Last-Modified, the same SHA-256, or for a local file read in place the same
  device, inode, size and modification time.

Bounded: PER_COMPANY entries per company, MAX_BYTES in all (values are capped where they are read, so a
row's size is known), each at most TTL_S old; the least recently used goes first. Another company never
sees an entry (the company is part of the key). The cache lives in the process (the API's, or the CLI's).
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from firefeed.pipeline.fetch import FetchResult, Validators
from firefeed.pipeline.parse import ParseStats

#: how long an entry is used: a merchant's edits come seconds apart; a feed refreshed meanwhile is seen by
#: the validators anyway, this only bounds how long memory is held for a sample nobody previews
TTL_S = 120.0
#: entries one company may hold: its sources times the samples it switches between
PER_COMPANY = 16
#: bytes of rows the whole process keeps (an entry is at most MAX_ITEMS rows of capped values)
MAX_BYTES = 64 * 1024**2
#: what a row costs besides its values (the tuple, the list); a value's own cost is sys.getsizeof: a text's
#: characters are 1, 2 or 4 bytes each in memory, so counting characters would let emoji rows hold 4x the bound
_ROW_OVERHEAD = 120

Validator = tuple[Any, ...]


@dataclass
class SourceRows:
    """One source's sample rows as its reader passed them on, and what the preview reports of them."""

    fields: list[str]
    rows: list[tuple[int, list[str]]]
    keys: list[str]
    stats: ParseStats
    lists: frozenset[str]
    delimited: dict[str, str]
    lists_filled: bool
    bytes: int
    rows_read: int
    validator: Validator = ()
    http: Validators | None = None
    size: int = 0
    at: float = field(default_factory=time.monotonic)

    def measured(self) -> SourceRows:
        size = sys.getsizeof
        self.size = sum(_ROW_OVERHEAD + sum(size(v) for v in values) for _, values in self.rows) + sum(
            size(k) for k in self.keys
        )
        return self


class Replay:
    """A FeedReader over kept rows: what the source's SampleReader passed on, passed on again."""

    def __init__(self, source: str, kept: SourceRows) -> None:
        self.source = source
        self.fields = list(kept.fields)
        self.stats = replace(kept.stats, malformed_lines=list(kept.stats.malformed_lines))
        self.lists = kept.lists
        self.delimited = dict(kept.delimited)
        self.lists_filled = kept.lists_filled
        self.kept = list(kept.keys)
        self.rows_read = kept.rows_read
        self._rows = kept.rows

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        for line, values in self._rows:
            yield line, list(values)  # a copy: staging pads and fills rows in place


def cache_key(company: str, definition: dict[str, Any], *, primary: bool, sample: Any, extra: Any) -> str:
    """The entry's key: a digest of everything that decides which rows a source passes on."""
    text = json.dumps([company, definition, primary, sample, extra], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def validator_of(fetched: FetchResult, kept: SourceRows | None) -> Validator | None:
    """What tells this fetch's content from another's (None: nothing does, no reuse then).

    A 304 to the entry's own validators is the entry's content.
    """
    if fetched.not_modified:
        return kept.validator if kept is not None else None
    v = fetched.validators
    if v.sha256:
        return ("sha256", v.sha256)
    if v.etag or v.last_modified:
        return ("http", v.etag, v.last_modified, fetched.bytes)
    if fetched.path is not None and fetched.final_url.startswith("file:"):
        st = Path(fetched.path).stat()
        return ("stat", st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if fetched.path is not None:
        # Downloaded whole without validators (a server that sends none, an FTP file): its digest, a read of
        # a file the fetch just wrote, far cheaper than parsing it again.
        digest = hashlib.sha256()
        with open(fetched.path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        return ("sha256", digest.hexdigest())
    return None


class SampleCache:
    """Kept source rows by company and key, bounded as the module says, safe across the preview threads."""

    def __init__(self, *, ttl_s: float = TTL_S, per_company: int = PER_COMPANY, max_bytes: int = MAX_BYTES) -> None:
        self.ttl_s, self.per_company, self.max_bytes = ttl_s, per_company, max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, str], SourceRows] = OrderedDict()
        self._bytes = 0
        #: sources replayed from an entry, and sources read (for the benchmark and the tests)
        self.hits = 0
        self.misses = 0

    def get(self, company: str, key: str) -> SourceRows | None:
        """The company's entry under `key` if it is fresh (it becomes the most recently used)."""
        with self._lock:
            entry = self._entries.get((company, key))
            if entry is None:
                return None
            if time.monotonic() - entry.at > self.ttl_s:
                self._drop((company, key))
                return None
            self._entries.move_to_end((company, key))
            return entry

    def put(self, company: str, key: str, rows: SourceRows) -> None:
        """Keep `rows` (ignored when one entry alone is over the bound), dropping the oldest past the bounds."""
        rows.measured()
        if rows.size > self.max_bytes // 4:
            return
        with self._lock:
            if (company, key) in self._entries:
                self._drop((company, key))
            self._entries[(company, key)] = rows
            self._bytes += rows.size
            now = time.monotonic()
            for k in [k for k, e in self._entries.items() if now - e.at > self.ttl_s]:
                self._drop(k)
            mine = [k for k in self._entries if k[0] == company]
            for k in mine[: max(0, len(mine) - self.per_company)]:
                self._drop(k)
            while self._bytes > self.max_bytes and self._entries:
                self._drop(next(iter(self._entries)))

    def counted(self, hit: bool) -> None:
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    def held(self, company: str) -> int:
        """How many entries the company holds."""
        with self._lock:
            return sum(1 for k in self._entries if k[0] == company)

    @property
    def size(self) -> int:
        """Bytes of rows held, as measured."""
        return self._bytes

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def _drop(self, k: tuple[str, str]) -> None:
        entry = self._entries.pop(k)
        self._bytes -= entry.size


#: the process's one cache (the API's preview threads share it)
SAMPLES = SampleCache()
