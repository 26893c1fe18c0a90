"""google-xml: an RSS 2.0 feed in Google Merchant's `g:` namespace, built in SQL, finished in Python.

Postgres builds each `<item>` as bytes (bytea): the values as they are
(`textsend`), each wrapped in its element, an empty value left out (no empty
element). The markup's `<`, `>` and the line end are written as the bytes
0xF8, 0xF9 and 0xFA, which never occur in UTF-8 text. The items are
aggregated in groups of heap pages (`copy_item_groups`: one COPY row per
~32 pages instead of one per item), so Python sees a few thousand chunks and
finishes each with whole-chunk byte operations at C speed (`_finished`):
values' `&`, `<`, `>` to entities, CR and LF to `&#13;`/`&#10;` (a parser gives
them back exactly; a raw CR would be read as LF), then the placeholders to
markup. Characters XML 1.0 forbids (C0 controls other than tab, LF, CR;
U+FFFE; U+FFFF) are removed, and an element left empty by that dropped (and
a parent of sub-attributes left empty by that in its turn).

Why this shape (1M items, one backend): escaping every value in SQL with
nested replace() cost 2.4 s of the 4.3 s of building the lines, one COPY row
per item another ~1 s in the backend and ~3 s in Python (a write() call per
row, framing, joining); escaping every value in Python cost about 3x the csv
export. Searching bytes for one byte is a memchr; for two or more it is ten
times slower here, hence one-byte placeholders.

The channel (SPEC 8.19, P32): `<title>`, `<link>` and `<description>` (the
export's `channel_description`, else the title). The link is the export's
`channel_link`, else the first exported item's flat `link` column; so
the head is written with the first group of items, whose first line is that
item (finished, so its `<g:link>` value is already escaped as the head needs),
or with the tail when no item was exported. No query or pass of its own.

Element names: an output name becomes `g:<NCName>`: each character that may
not appear in an XML name (and `:`) becomes `_`; a name that cannot start an
XML name (a digit, `-`, `.`, an empty name) gets a leading `_`; a name that
collides with an earlier column's takes the lowest free `_n`, n >= 2 (as a
repeated header does on import). So `unit price` -> `g:unit_price`,
`2nd` -> `g:_2nd`, `a:b` -> `g:a_b`.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence

import psycopg2
from psycopg2 import sql

from firefeed.export._atomic import Sink
from firefeed.export.rendering import Rendering
from firefeed.export.select import OutputColumn, Piece, concat, sql_text

GOOGLE_NS = "http://base.google.com/ns/1.0"

_C0_FORBIDDEN = bytes(c for c in range(1, 32) if c not in (0x09, 0x0A, 0x0D))
_FORBIDDEN_RE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
_EMPTY_ELEMENT = re.compile(rb"<(g:[^<>/]+)></\1>")

# XML 1.0 (5th edition) NameStartChar / NameChar, without ':' (an NCName).
_START = (
    "A-Z_a-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u02ff\u0370-\u037d\u037f-\u1fff\u200c-\u200d"
    "\u2070-\u218f\u2c00-\u2fef\u3001-\ud7ff\uf900-\ufdcf\ufdf0-\ufffd\U00010000-\U000effff"
)
_NAME = _START + r"\-.0-9\u00b7\u0300-\u036f\u203f-\u2040"
_NOT_NAME_CHAR = re.compile(f"[^{_NAME}]")
_NAME_START = re.compile(f"[{_START}]")


def xml_name(name: str) -> str:
    """`name` made a valid NCName, deterministically (see the module docstring)."""
    fixed = _NOT_NAME_CHAR.sub("_", name)
    if not fixed or not _NAME_START.match(fixed):
        fixed = "_" + fixed
    return fixed


def element_names(names: Sequence[str]) -> list[str]:
    """The element name of each column, in order, unique."""
    taken: set[str] = set()
    result: list[str] = []
    for name in names:
        base = xml_name(name)
        candidate, n = base, 2
        while candidate in taken:
            candidate, n = f"{base}_{n}", n + 1
        taken.add(candidate)
        result.append(candidate)
    return result


def xml_text(value: str) -> str:
    """The escaping of `_finished` for a text of FireFeed's own (the channel's title, link, description)."""
    value = _FORBIDDEN_RE.sub("", value)
    value = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return value.replace("\r", "&#13;").replace("\n", "&#10;")


#: Markup bytes that UTF-8 text never holds: `<`, `>` and the line end, as written by SQL.
_OPEN, _CLOSE, _END = b"\xf8", b"\xf9", b"\xfa"
#: placeholders to markup, and every forbidden C0 byte to \x01, in one pass (see `_finished`)
_MARKUP = bytes.maketrans(_OPEN + _CLOSE + _END, b"<>\n")
_MARKUP_FLAGGED = bytes(1 if b in _C0_FORBIDDEN else _MARKUP[b] for b in range(256))
#: a value's own characters, `&` first so the entities added for `<` and `>` are not escaped again
_VALUE_ESCAPES = ((b"&", b"&amp;"), (b"<", b"&lt;"), (b">", b"&gt;"), (b"\r", b"&#13;"), (b"\n", b"&#10;"))
_NONCHARACTERS = ("\ufffe".encode(), "\uffff".encode())


def _markup(text: str, end: bytes = b"") -> Piece:
    """FireFeed's own markup as a bytea value, `<` and `>` as placeholders."""
    raw = text.encode("utf-8").replace(b"<", _OPEN).replace(b">", _CLOSE)
    return Piece(sql.SQL("%s::bytea"), (psycopg2.Binary(raw + end),))


#: Google takes at most this many values of these attributes; the rest are dropped with a warning (P28)
CAPPED = {"additional_image_link": 10}


def _repeated(column: OutputColumn, element: str) -> Piece:
    """One element per list element, in order, at most CAPPED of a capped name (SPEC 9)."""
    assert column.elements is not None
    cap = CAPPED.get(column.name)
    limit = sql_text("") if cap is None else sql_text(f" WHERE _ff_o <= {int(cap)}")
    return (
        sql_text("coalesce((SELECT string_agg(")
        + _markup(f"<g:{element}>")
        + sql_text(" || textsend(_ff_e) || ")
        + _markup(f"</g:{element}>")
        + sql_text(", ''::bytea ORDER BY _ff_o) FROM unnest(")
        + column.elements
        + sql_text(") WITH ORDINALITY AS _ff_u(_ff_e, _ff_o)")
        + limit
        + sql_text("), '\\x'::bytea)")
    )


def _elements(columns: Sequence[OutputColumn]) -> list[Piece]:
    """Each column's element(s) as bytea; an empty value contributes nothing."""
    parts = []
    for column, element in zip(columns, element_names([c.name for c in columns]), strict=True):
        if column.parts:
            # <g:shipping><g:country>..</g:country>..</g:shipping>: no parent when every sub-value is empty
            inner = concat(_elements(column.parts))
            tagged = _markup(f"<g:{element}>") + sql_text(" || nullif(") + inner + sql_text(", '\\x'::bytea) || ")
            tagged = tagged + _markup(f"</g:{element}>")
            parts.append(sql_text("coalesce(") + tagged + sql_text(", '\\x'::bytea)"))
            continue
        if column.elements is not None:
            parts.append(_repeated(column, element))
            continue
        tagged = (
            _markup(f"<g:{element}>")
            + sql_text(" || textsend(nullif(")
            + column.value
            + sql_text(", '')) || ")
            + _markup(f"</g:{element}>")
        )
        parts.append(sql_text("coalesce(") + tagged + sql_text(", '\\x'::bytea)"))
    return parts


def item_sql(columns: Sequence[OutputColumn]) -> Piece:
    """One item line as bytea, placeholders for markup; an empty value contributes nothing."""
    return concat([_markup("<item>"), *_elements(columns), _markup("</item>", end=_END)])


def _finished(chunk: bytes) -> bytes:
    """Item lines as SQL built them (markup as placeholders) made lines of the file.

    The values' characters are escaped first, while no markup is in the way,
    then one translate() turns the placeholders into markup and flags any
    forbidden C0 control as \\x01. Real feeds almost never hold one; when
    they do, the chunk is redone removing them (and U+FFFE/U+FFFF) first.
    Removing bytes is exact in UTF-8: C0 controls are single bytes that never
    occur inside a multi-byte character, and U+FFFE/U+FFFF are fixed 3-byte
    sequences.
    """
    for raw, entity in _VALUE_ESCAPES:
        if chunk.find(raw) != -1:  # one byte: a memchr, and mostly nothing to replace
            chunk = chunk.replace(raw, entity)
    lines = chunk.translate(_MARKUP_FLAGGED)
    # U+FFFE/U+FFFF both start with \xef, which is rare outside Asian scripts.
    if lines.find(b"\x01") == -1 and (lines.find(b"\xef") == -1 or not any(n in lines for n in _NONCHARACTERS)):
        return lines
    chunk = chunk.translate(None, _C0_FORBIDDEN)
    for noncharacter in _NONCHARACTERS:
        chunk = chunk.replace(noncharacter, b"")
    lines = chunk.translate(_MARKUP)
    # a parent whose sub-elements were all emptied is empty in its turn: repeat until nothing changes
    while True:
        emptied = _EMPTY_ELEMENT.sub(b"", lines)
        if emptied == lines:
            return lines
        lines = emptied


_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
_FILE_HEADER = len(_SIGNATURE) + 8  # flags and header extension length, both int32
#: a group's row: 3 fields (position bigint, items bigint, lines bytea), each after its int32 length
_GROUP_ROW = struct.Struct(">hiqiqi")
_TRAILER = b"\xff\xff"


_LINK_OPEN, _LINK_CLOSE = b"<g:link>", b"</g:link>"
_ELEMENT_OPEN, _ELEMENT_CLOSE = b"<g:", b"</g:"


def first_link(lines: bytes, *, joined: bool = False) -> bytes:
    """The `link` value of the first item line of finished `lines` ("" when it has none).

    Only the column named `link` becomes a top-level `g:link` (`xml_name`
    never makes that name of another); a sub-attribute `shipping.link` is a
    `<g:link>` inside its parent, told apart by the depth of the elements open
    before it (a value's own `<` is `&lt;` by now, so every `<g:` is markup).
    A list `link` (`joined`) is its elements joined with ",", as its value is;
    an empty value has no element.
    """
    end = lines.find(b"\n")
    end = len(lines) if end == -1 else end
    values = []
    # The depth is carried from one `<g:link>` to the next (each span is counted once): a list link of
    # n elements costs O(line), not O(n * line).
    depth = counted = 0
    at = lines.find(_LINK_OPEN, 0, end)
    while at != -1:
        start = at + len(_LINK_OPEN)
        close = lines.index(_LINK_CLOSE, start, end)
        depth += lines.count(_ELEMENT_OPEN, counted, at) - lines.count(_ELEMENT_CLOSE, counted, at)
        counted = at
        if depth == 0:
            values.append(lines[start:close])
            if not joined:
                break
        at = lines.find(_LINK_OPEN, close, end)
    return b",".join(values)


class ChannelHead:
    """The file's head up to the first item, written once: before the first items, else with the tail."""

    def __init__(self, *, title: str, link: str, description: str, link_column: OutputColumn | None = None) -> None:
        self._title = xml_text(title).encode("utf-8")
        #: None: the first item's link (no `channel_link`)
        self._link = xml_text(link).encode("utf-8") if link or link_column is None else None
        self._joined = link_column is not None and link_column.elements is not None
        self._description = xml_text(description).encode("utf-8")
        self.written = False

    def head(self, first_lines: bytes) -> bytes:
        """The head, its link taken from `first_lines` (the first exported items) when the export sets none."""
        self.written = True
        link = self._link if self._link is not None else first_link(first_lines, joined=self._joined)
        return b"".join(
            [
                f'<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0" xmlns:g="{GOOGLE_NS}">\n'.encode(),
                b"<channel>\n<title>" + self._title + b"</title>\n<link>" + link + b"</link>\n",
                b"<description>" + self._description + b"</description>\n",
            ]
        )

    def tail(self, rows: int) -> bytes:
        return (b"" if self.written else self.head(b"")) + b"</channel>\n</rss>\n"


class XmlGroups:
    """Where `copy_item_groups` writes: one binary COPY row per group of items, finished and passed on.

    COPY hands over one row per write() (the first after the file header, then
    a 2-byte trailer). Each row holds its group's position, which must grow
    (item order), its number of items and its lines. With a `channel`, its head
    goes out just before the first group's lines.
    """

    def __init__(self, sink: Sink, channel: ChannelHead | None = None) -> None:
        self._sink = sink
        self._channel = channel
        self._started = False
        self._last: int | None = None
        self.items = 0

    def write(self, data: bytes, /) -> int:
        at = 0
        if not self._started:
            if not data.startswith(_SIGNATURE):
                raise ValueError("google-xml groups must come from a binary COPY")
            at, self._started = _FILE_HEADER, True
        rest = len(data) - at
        if rest == 0 or (rest == len(_TRAILER) and data.endswith(_TRAILER)):
            return len(data)
        fields, _, position, _, items, size = _GROUP_ROW.unpack_from(data, at)
        body = at + _GROUP_ROW.size
        if fields != 3 or size < 0 or body + size != len(data):
            raise ValueError("unexpected row in the google-xml groups")
        if self._last is not None and position <= self._last:
            raise ValueError("google-xml groups arrived out of order")
        self._last = position
        self.items += items
        lines = _finished(data[body:])
        if self._channel is not None and not self._channel.written:
            self._sink.write(self._channel.head(lines))
        self._sink.write(lines)
        return len(data)

    def finish(self) -> None:
        pass


def render_google_xml(columns: Sequence[OutputColumn], *, title: str, link: str, description: str) -> Rendering:
    """The google-xml rendering; `link` "" means the first exported item's `link` (SPEC 8.19, P32).

    The head (through `<description>`) is not the rendering's `head`: it waits
    for the first items, so `framing` and `tail` share one ChannelHead. Only a
    flat column named `link` gives the channel its link: a parent `link` of
    sub-attributes has no value of its own, so the link is then "".
    """
    link_column = next((c for c in columns if c.name == "link" and not c.parts), None)
    channel = ChannelHead(title=title, link=link, description=description, link_column=link_column)
    return Rendering(
        head=b"",
        row=item_sql(columns),
        tail=channel.tail,
        framing=lambda sink: XmlGroups(sink, channel),
    )
