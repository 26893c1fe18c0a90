"""XML feeds: each item element is a row, its child elements the fields (SPEC 8.5).

lxml's iterparse streams the file; an item is read when its end tag arrives and
is then cleared with its preceding siblings, so memory stays flat. The parser
never expands entities, loads DTDs or touches the network: a billion-laughs or
external-entity feed cannot grow or read files (libxml2 rejects entity
amplification outright, and unexpanded references are simply not text).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lxml import etree

from firefeed.errors import ParseError
from firefeed.pipeline.parse._base import MAX_VALUE_CHARS, ParseStats, RowCounter, ValueTooLong, restartable, too_long
from firefeed.pipeline.parse._encoding import FeedText
from firefeed.pipeline.parse._lists import array_literal
from firefeed.pipeline.parse._names import FieldIndex, free_name

#: start tags the auto-detection looks at before deciding what the items are
_DETECT_EVENTS = 10_000
_POSITION = re.compile(r", line \d+, column \d+$")


def local_name(tag: str) -> str:
    """`{namespace}price` -> `price`."""
    return tag[tag.index("}") + 1 :] if tag[:1] == "{" else tag


class _ItemPath:
    """Which elements are items: a local name, and optionally the local names of their ancestors."""

    def __init__(self, name: str, ancestors: tuple[str, ...] | None, absolute: bool) -> None:
        self.name = name
        self.ancestors = ancestors
        self.absolute = absolute

    @classmethod
    def parse(cls, source: str, text: str) -> _ItemPath:
        parts = [p for p in text.strip().split("/") if p]
        if not parts:
            raise ParseError(source, f"item_path {text!r} names no element")
        ancestors = tuple(parts[:-1]) if len(parts) > 1 else None
        return cls(parts[-1], ancestors, text.strip().startswith("/"))

    def matches(self, el: Any) -> bool:
        if self.ancestors is None:
            # Anywhere, but not inside another item of the same name (that one is a field).
            return next(el.iterancestors("{*}" + self.name), None) is None
        chain = [local_name(a.tag) for a in el.iterancestors()]
        chain.reverse()
        if self.absolute:
            return tuple(chain) == self.ancestors
        return tuple(chain[-len(self.ancestors) :]) == self.ancestors


def _parse(stream: Any, **options: Any) -> Any:
    # The stream is always UTF-8 (transcoded by FeedText when the file is not).
    return etree.iterparse(
        stream,
        encoding="utf-8",
        resolve_entities=False,
        load_dtd=False,
        no_network=True,
        huge_tree=True,
        remove_comments=True,
        remove_pis=True,
        **options,
    )


class XmlReader:
    """Items of an XML feed: RSS `item`, Atom `entry`, else the repeated child element, or `item_path`."""

    #: the source's list fields -> separator (SPEC 9); set by open_reader
    lists: dict[str, str] = {}
    #: the longest value taken (FIREFEED_PARSE_MAX_VALUE_CHARS); set by open_reader
    max_value_chars = MAX_VALUE_CHARS

    def __init__(self, path: Path, *, source: str, encoding: str, item_path: str) -> None:
        self.source = source
        self._path = path
        self._text = FeedText(path, source, encoding, xml=True)
        self._items = None if item_path in ("auto", "") else _ItemPath.parse(source, item_path)
        self.fields: list[str] = []
        self.stats = ParseStats(encoding=self._text.codec)
        self._locals: dict[str, str] = {}

    def _syntax_error(self, exc: etree.XMLSyntaxError) -> ParseError:
        line = exc.position[0] if exc.position else exc.lineno
        return ParseError(self.source, f"line {line}: XML syntax error: {_POSITION.sub('', str(exc.msg))}")

    def _is_empty(self) -> bool:
        with open(self._path, "rb") as f:
            head = f.read(4096)
        return len(head) < 4096 and not head.strip(b" \t\r\n\x00\xef\xbb\xbf\xff\xfe")

    def _detect(self) -> _ItemPath | None:
        """RSS -> item, Atom -> entry; else the shallowest repeated element (with children) below the root.

        Reads only the start of the file; ties go to the first seen. With no
        repeated element, the shallowest element with children is the one item;
        with none of those, there are no items.
        """
        counts: dict[tuple[str, ...], int] = {}
        parents: set[tuple[str, ...]] = set()
        stack: list[str] = []
        seen = 0
        stream = self._text.binary()
        try:
            for event, el in _parse(stream, events=("start", "end")):
                if event == "end":
                    stack.pop()
                    continue
                name = local_name(el.tag)
                if not stack:
                    if name in ("rss", "RDF"):
                        return _ItemPath("item", None, False)
                    if name == "feed":
                        return _ItemPath("entry", None, False)
                else:
                    parents.add(tuple(stack))
                stack.append(name)
                path = tuple(stack)
                counts[path] = counts.get(path, 0) + 1
                seen += 1
                if seen >= _DETECT_EVENTS:
                    break
        finally:
            stream.close()
        # Items have fields: only elements with element children qualify.
        containers = [p for p in counts if len(p) >= 2 and p in parents]
        for pick in ([p for p in containers if counts[p] >= 2], containers):
            if pick:
                best = min(pick, key=len)
                return _ItemPath(best[-1], best[:-1], True)
        return None

    def _into(self, el: Any, prefix: str, row: list[str], index: FieldIndex) -> list[str]:
        """Add an element's children to `row` by local name; nested children flatten with dots.

        A text longer than the cap raises ValueTooLong naming its field (`_base.too_long`).
        """
        cap = self.max_value_chars
        seen: set[str] = set()
        locals_ = self._locals
        position = index.position
        lists = index.lists
        listed: dict[str, list[str]] | None = None
        for child in el:
            tag = child.tag
            name = locals_.get(tag)
            if name is None:
                # "" marks an unexpanded entity reference, whose tag is not text.
                name = locals_[tag] = local_name(tag) if isinstance(tag, str) else ""
            if not name:
                continue
            if lists and prefix + name in lists and not any(isinstance(c.tag, str) for c in child):
                # P5: each such element is one element of the list, in document order (no `_2`)
                key = prefix + name
                text = (child.text or "") + "".join(c.tail or "" for c in child)
                if len(text) > cap:
                    raise ValueTooLong(key)
                if listed is None:
                    listed = {}
                elements = listed.get(key)
                if elements is None:
                    # The list's column is placed at its first element (first-seen order, SPEC 8.18),
                    # not after the item's other children; its value is written once all are read.
                    elements = listed[key] = []
                    if key not in position:
                        at = index.add(key)
                        if at >= len(row):
                            row.extend([""] * (at + 1 - len(row)))
                elements.append(text)
                continue
            if name in seen:
                name = free_name(name, seen)
            seen.add(name)
            key = prefix + name
            if len(child):
                if any(isinstance(c.tag, str) for c in child):
                    row = self._into(child, key + ".", row, index)
                    continue
                # Only unexpanded entity references inside: the text around them.
                value = (child.text or "") + "".join(c.tail or "" for c in child)
            else:
                value = child.text or ""
            if len(value) > cap:
                raise ValueTooLong(key)
            pos = position.get(key)
            if pos is None:
                pos = index.add(key)
                if pos >= len(row):
                    row.extend([""] * (pos + 1 - len(row)))
            # A renamed repeat (`title_2`) may be a declared list's name: its text is one element, staged
            # as every list is, so no feed text ever reaches MERGE's array cast as a literal of its own.
            row[pos] = array_literal([value]) if lists and key in lists else value
        if listed:
            for key, elements in listed.items():
                row[position[key]] = array_literal(elements)
        return row

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        return restartable(self, self._text, self._attempt)

    def _attempt(self, counter: RowCounter) -> Iterator[tuple[int, list[str]]]:
        index = FieldIndex(self.fields, counter.stats, frozenset(self.lists))
        if self._is_empty():
            return
        stream = None
        try:
            items = self._items or self._detect()
            if items is None:
                return
            stream = self._text.binary()
            for _event, el in _parse(stream, events=("end",), tag="{*}" + items.name):
                if not items.matches(el):
                    continue
                try:
                    row = self._into(el, "", [""] * len(self.fields), index)
                except ValueTooLong as exc:
                    counter.malformed(el.sourceline or 0, too_long(exc.field, self.max_value_chars))
                else:
                    yield el.sourceline or 0, row
                el.clear(keep_tail=True)
                parent = el.getparent()
                if parent is not None:
                    while el.getprevious() is not None:
                        del parent[0]
        except etree.XMLSyntaxError as exc:
            raise self._syntax_error(exc) from None
        finally:
            if stream is not None:
                counter.stats.nul_removed += self._text.nul_removed
                stream.close()
