"""Choosing a preview's sample while a source is parsed, so only the sample reaches Postgres.

`SampleReader` wraps a source's real reader (the same readers a run uses) and
passes on only each sample key's first row, as MERGE would keep it. It stops
reading as soon as it has every row it can use: after the first N keys of the
primary, or once every wanted key was seen. Keys are compared as MERGE
compares them: trimmed of white space, exact text. A preview's deadline is
checked every CHECK_EVERY rows, so a long file read for wanted ids stops in time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from firefeed.pipeline.parse import FeedReader, ParseStats
from firefeed.pipeline.parse._lists import delimited_elements, literal_elements
from firefeed.rules.template import Template
from firefeed.textutil import strip_ws

#: rows between two calls of `check`
CHECK_EVERY = 256


class SampleReader:
    """A FeedReader yielding the first row of each sample key of `inner`, and nothing else.

    With `first`, the sample is the first `first` distinct non-empty keys; with
    `keys`, the rows whose key is one of them. `kept` holds the keys yielded, in
    order, and `rows_read` how many rows of the file were read. Iterating again
    (after an EncodingRestart) starts over. `check` (the preview's deadline) may
    raise to stop the reading.
    """

    def __init__(
        self,
        inner: FeedReader,
        key_field: str,
        *,
        first: int | None = None,
        keys: frozenset[str] | None = None,
        check: Callable[[], None] | None = None,
        key_from: Template | None = None,
        lists: frozenset[str] = frozenset(),
    ) -> None:
        if (first is None) == (keys is None):
            raise ValueError("a sample is either the first N keys or a set of keys")
        self.inner = inner
        self.source = str(getattr(inner, "source", "?"))
        self.key_field = key_field
        self.first = first
        self.keys = keys
        self.check = check
        self.key_from = key_from  # the source's `key_from` (SPEC 9): its rows' keys are rendered, as MERGE does
        self.lists = lists  # the source's list fields, as the inner reader stages them: key_from reads their elements
        self.kept: list[str] = []
        #: the rows passed on, each as it was yielded (the preview's cache keeps them: preview/cache.py)
        self.taken: list[tuple[int, list[str]]] = []
        self.rows_read = 0

    @property
    def fields(self) -> list[str]:
        return self.inner.fields

    @fields.setter
    def fields(self, value: list[str]) -> None:
        self.inner.fields = value

    @property
    def stats(self) -> ParseStats:
        return self.inner.stats

    @stats.setter
    def stats(self, value: ParseStats) -> None:
        self.inner.stats = value

    @property
    def delimited(self) -> dict[str, str]:
        """The list fields the inner reader stages delimited (parse._lists)."""
        return dict(getattr(self.inner, "delimited", None) or {})

    @property
    def lists_filled(self) -> bool:
        """Whether the inner reader's rows hold a staged value at every list field."""
        return bool(getattr(self.inner, "lists_filled", False))

    def _wanted(self) -> int:
        return self.first if self.first is not None else len(self.keys or ())

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        self.kept, self.taken, self.rows_read = [], [], 0
        wanted = self._wanted()
        if wanted == 0:
            return
        seen: set[str] = set()
        rows = iter(self.inner)
        at, width = -1, -1  # the key's index in the fields, recomputed when the fields grow
        delimited = self.delimited
        try:
            for line, values in rows:
                self.rows_read += 1
                if self.check is not None and self.rows_read % CHECK_EVERY == 0:
                    self.check()
                fields = self.inner.fields
                if len(fields) != width:
                    width = len(fields)
                    at = fields.index(self.key_field) if self.key_field in fields else -1
                if self.key_from is not None:
                    row: dict[str, Any] = dict(zip(fields, values, strict=False))
                    for name in self.lists & row.keys():
                        separator = delimited.get(name)
                        staged = row[name]
                        row[name] = (
                            literal_elements(staged) if separator is None else delimited_elements(staged, separator)
                        )
                    key = strip_ws(self.key_from.render(row))
                else:
                    key = strip_ws(values[at]) if 0 <= at < len(values) else ""
                if not key or key in seen or (self.keys is not None and key not in self.keys):
                    continue
                seen.add(key)
                self.kept.append(key)
                self.taken.append((line, list(values)))
                yield line, values
                if len(seen) >= wanted:
                    return
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                close()  # stopping early: let the reader close its file now, not at garbage collection
