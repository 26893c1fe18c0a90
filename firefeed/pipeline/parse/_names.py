"""Field names: unique, non-empty, storable — whatever the feed's header says (SPEC 8.7)."""

from __future__ import annotations

import re

from firefeed.pipeline.parse._base import ParseStats

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(value: str, stats: ParseStats) -> str:
    """Drop NULs (counted) and lone surrogates, which Postgres cannot store; for the rare dirty value."""
    if "\x00" in value:
        stats.nul_removed += value.count("\x00")
        value = value.replace("\x00", "")
    return _SURROGATE.sub("\ufffd", value)


def free_name(name: str, taken: set[str] | dict[str, int]) -> str:
    """`name` if free, else `name_n` with the lowest free n >= 2."""
    if name not in taken:
        return name
    n = 2
    while f"{name}_{n}" in taken:
        n += 1
    return f"{name}_{n}"


def header_names(raw: list[str], stats: ParseStats) -> list[str]:
    """A CSV header as unique field names, taken left to right the way XML takes them (SPEC 8.23).

    An empty name becomes `column_<n>` (its 1-based position); a name already
    taken by a column to its left takes the lowest free `_n`, n >= 2, among the
    names taken so far (`color, color, color_2` -> `color, color_2, color_2_2`).
    Each change is a warning.
    """
    taken: set[str] = set()
    out = []
    for i, written in enumerate(raw):
        name = clean_text(written, stats)
        if name == "":
            name = f"column_{i + 1}"
            stats.warnings.append(f"empty header name in column {i + 1} named {name!r}")
        unique = free_name(name, taken)
        if unique != name:
            stats.warnings.append(f"repeated header {name!r} renamed to {unique!r}")
        taken.add(unique)
        out.append(unique)
    return out


class FieldIndex:
    """Fields discovered while reading (xml, json): a name's position never changes once given."""

    def __init__(self, fields: list[str], stats: ParseStats, lists: frozenset[str] = frozenset()) -> None:
        self.fields = fields
        self.stats = stats
        #: the source's list fields by their flattened name (SPEC 9)
        self.lists = lists
        #: name as the feed wrote it -> position in `fields`
        self.position: dict[str, int] = {}
        self._names: set[str] = set()

    def add(self, raw: str) -> int:
        """The position of a name not seen before (appended to `fields`)."""
        name = clean_text(raw, self.stats)
        if name == "":
            name = free_name(f"column_{len(self.fields) + 1}", self._names)
            self.stats.warnings.append(f"empty field name named {name!r}")
        elif name in self._names:
            # Cleaning made it collide with another name: SPEC 8.7, lowest free _n.
            unique = free_name(name, self._names)
            self.stats.warnings.append(f"field {name!r} renamed to {unique!r}")
            name = unique
        pos = len(self.fields)
        self.fields.append(name)
        self._names.add(name)
        self.position[raw] = pos
        return pos
