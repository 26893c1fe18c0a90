"""JSON (one array of item objects, streamed) and JSON Lines (one object per line).

A JSON feed can be a gigabyte, so it is never loaded whole: a sliding text
buffer is walked to the items array, then each element is decoded on its own
with `raw_decode`, and the buffer drops what was consumed. Memory holds one
chunk plus the current item.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from firefeed.errors import ParseError
from firefeed.pipeline.parse._base import (
    MAX_VALUE_CHARS,
    ParseStats,
    RowCounter,
    ValueTooLong,
    check_values,
    restartable,
    too_long,
)
from firefeed.pipeline.parse._encoding import FeedText
from firefeed.pipeline.parse._json_values import DIRTY_ESCAPE, VALUE_GROWTH, flatten, make_decoder
from firefeed.pipeline.parse._names import FieldIndex

CHUNK_CHARS = 1 << 20
_WS = re.compile(r"[ \t\r\n]*")
#: what `skip_value` looks for: outside strings, where one starts or a nesting level; inside, its end
_STRUCTURE = re.compile(r'["{}\[\]]')
_IN_STRING = re.compile(r'["\\]')
#: the key a value follows, at the end of the text before it
_KEY_BEFORE = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:\s*\Z')
#: an escape is at most this many characters of JSON text for one character (a surrogate pair's two `\uXXXX`)
_ESCAPE_CHARS = 12
#: a decode error this close to the end of the buffer may just mean "read more"
_TAIL = 16


class _LongString(Exception):
    """A string of the item being decoded is certainly over the value cap, before it was read to its end."""

    def __init__(self, at: int) -> None:
        super().__init__(at)
        self.at = at


class _Buffer:
    """A window on the text: position, line counting, and decoding one value at a time."""

    def __init__(self, text: IO[str], source: str) -> None:
        self.text = text
        self.source = source
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.dirty = False
        self._line = 1
        self._counted = 0  # buf offset up to which newlines are in _line
        #: the length of the text of the value `decode` last read
        self.decoded_chars = 0

    def more(self) -> bool:
        """Drop the consumed prefix and append a chunk; False at end of file."""
        if self.eof:
            return False
        chunk = self.text.read(CHUNK_CHARS)
        if not chunk:
            self.eof = True
            return False
        if not self.dirty and DIRTY_ESCAPE.search(self.buf[-6:] + chunk):
            self.dirty = True
        self._line += self.buf.count("\n", self._counted, self.pos)
        self.buf = self.buf[self.pos :] + chunk
        self.pos = self._counted = 0
        return True

    def peek(self) -> str:
        """The next non-blank character (the position moves onto it); "" at end of file."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()  # type: ignore[union-attr]
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.more():
                return ""

    def line(self, pos: int | None = None) -> int:
        """The line at `pos` (default: the position); newlines are counted once, moving forward."""
        pos = self.pos if pos is None else pos
        if pos < self._counted:
            return self._line - self.buf.count("\n", pos, self._counted)
        self._line += self.buf.count("\n", self._counted, pos)
        self._counted = pos
        return self._line

    def decode(self, decoder: json.JSONDecoder, string_max: int | None = None) -> Any:
        """Decode the value at the position (after peek) and move past it.

        With `string_max`, a string whose text passes that many characters before its end raises
        _LongString (the position stays on the value): the buffer would otherwise hold all of it, and
        decode it again for every chunk added (a 60 MB value took 2.7 s and 120 MB).
        """
        while True:
            try:
                value, end = decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                unterminated = exc.msg.startswith("Unterminated string")
                if unterminated and string_max is not None and len(self.buf) - exc.pos > string_max:
                    raise _LongString(exc.pos) from None
                near_end = exc.pos >= len(self.buf) - _TAIL or unterminated
                if near_end and self.more():
                    continue
                raise self.error(f"JSON syntax error: {exc.msg}", exc.pos) from None
            except RecursionError:
                raise self.error("JSON nested too deeply") from None
            # A number at the very end of the buffer may continue in the next chunk.
            if end == len(self.buf) and self.more():
                continue
            self.decoded_chars = end - self.pos
            self.pos = end
            return value

    def key_before(self, at: int) -> str | None:
        """The key of the value starting at `at`, when the text just before it is one (None: not found).

        Only the last key: a value nested in an object is named by its own key, not the dotted path.
        """
        match = _KEY_BEFORE.search(self.buf, max(self.pos, at - 4096), at)
        if match is None:
            return None
        try:
            key = json.loads('"' + match.group(1) + '"')
        except json.JSONDecodeError:
            return None
        return key if isinstance(key, str) else None

    def skip_value(self) -> None:
        """Move past the value at the position without decoding it, a chunk at a time (memory: a chunk)."""
        depth = 0
        in_string = False
        while True:
            if self.pos >= len(self.buf) and not self.more():
                raise self.error("JSON syntax error: the items array is not closed")
            pattern = _IN_STRING if in_string else _STRUCTURE
            match = pattern.search(self.buf, self.pos)
            if match is None:
                self.pos = len(self.buf)
                continue
            char = match.group()
            if char == "\\":
                if match.end() >= len(self.buf):  # the escaped character is in the next chunk
                    self.pos = match.start()
                    if not self.more():
                        raise self.error("JSON syntax error: the items array is not closed")
                    continue
                self.pos = match.end() + 1
                continue
            self.pos = match.end()
            if char == '"':
                in_string = not in_string
                if in_string or depth:
                    continue
                return
            if char in "{[":
                depth += 1
            elif depth <= 1:
                return
            else:
                depth -= 1

    def expect(self, char: str, what: str) -> None:
        if self.peek() != char:
            raise self.error(f"JSON syntax error: expected {what}")
        self.pos += 1

    def error(self, message: str, pos: int | None = None) -> ParseError:
        return ParseError(self.source, f"line {self.line(pos)}: {message}")


class JsonReader:
    #: the source's list fields -> separator (SPEC 9); set by open_reader
    lists: dict[str, str] = {}
    #: the longest value taken (FIREFEED_PARSE_MAX_VALUE_CHARS); set by open_reader
    max_value_chars = MAX_VALUE_CHARS

    """Items of a JSON array: top-level, the first array of objects in a top-level object, or a dotted path."""

    def __init__(self, path: Path, *, source: str, encoding: str, item_path: str) -> None:
        self.source = source
        self._text = FeedText(path, source, encoding)
        self._path = None if item_path in ("auto", "") else item_path.split(".")
        self.fields: list[str] = []
        self.stats = ParseStats(encoding=self._text.codec)

    # -- finding the items array ----------------------------------------------
    def _keys(self, buf: _Buffer, decoder: json.JSONDecoder) -> Iterator[str]:
        """Walk an object (position on its '{'): each key, with the position on its value."""
        buf.pos += 1
        first = True
        while True:
            c = buf.peek()
            if c == "}":
                buf.pos += 1
                return
            if not first:
                buf.expect(",", "',' or '}'")
                c = buf.peek()
            first = False
            if c != '"':
                raise buf.error("JSON syntax error: expected a key")
            key = buf.decode(decoder)
            buf.expect(":", "':'")
            buf.peek()
            yield key

    def _skip_array(self, buf: _Buffer, decoder: json.JSONDecoder) -> None:
        """Skip the rest of an array, element by element (position just after '[')."""
        if buf.peek() == "]":
            buf.pos += 1
            return
        while True:
            buf.decode(decoder)
            if buf.peek() == "]":
                buf.pos += 1
                return
            buf.expect(",", "',' or ']'")
            buf.peek()

    def _find_items(self, buf: _Buffer, decoder: json.JSONDecoder) -> bool:
        """Move just past the '[' of the items array; False when the feed has no items."""
        c = buf.peek()
        if c == "":
            return False
        if c == "[" and self._path is None:
            buf.pos += 1
            return True
        if c != "{":
            want = "an array or object" if self._path is None else "an object"
            raise buf.error(f"not a JSON feed: expected {want} at the top")
        if self._path is None:
            return self._find_auto(buf, decoder)
        return self._find_path(buf, decoder, self._path)

    def _find_auto(self, buf: _Buffer, decoder: json.JSONDecoder) -> bool:
        empty = False
        for _key in self._keys(buf, decoder):
            if buf.peek() != "[":
                buf.decode(decoder)
                continue
            buf.pos += 1
            c = buf.peek()
            if c == "{":
                return True
            if c == "]":
                buf.pos += 1
                empty = True
            else:
                self._skip_array(buf, decoder)
        if empty:
            return False
        raise ParseError(self.source, "no array of objects in the top-level object: set item_path")

    def _find_path(self, buf: _Buffer, decoder: json.JSONDecoder, parts: list[str]) -> bool:
        for key in self._keys(buf, decoder):
            if key != parts[0]:
                buf.decode(decoder)
                continue
            want = "[" if len(parts) == 1 else "{"
            if buf.peek() != want:
                raise buf.error(
                    f"item_path {'.'.join(self._path or [])!r}: {key!r} is not an "
                    + ("array" if want == "[" else "object")
                )
            if len(parts) == 1:
                buf.pos += 1
                return True
            return self._find_path(buf, decoder, parts[1:])
        raise ParseError(self.source, f"item_path {'.'.join(self._path or [])!r} not found")

    # -- the items ---------------------------------------------------------
    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        return restartable(self, self._text, self._attempt)

    def _attempt(self, counter: RowCounter) -> Iterator[tuple[int, list[str]]]:
        index = FieldIndex(self.fields, counter.stats, frozenset(self.lists))
        decoder = make_decoder()
        text = self._text.text(newline="")
        buf = _Buffer(text, self.source)
        # a string this long in the text is longer than the cap once decoded, whatever its escapes
        string_max = _ESCAPE_CHARS * (self.max_value_chars + 1)
        try:
            if not self._find_items(buf, decoder):
                return
            first = True
            while True:
                c = buf.peek()
                if c == "]":
                    break
                if not first:
                    buf.expect(",", "',' or ']'")
                    c = buf.peek()
                    if c == "]":  # a trailing comma: forgiven
                        break
                first = False
                if c == "":
                    raise buf.error("JSON syntax error: the items array is not closed")
                line = buf.line()
                try:
                    value = buf.decode(decoder, string_max)
                except _LongString as exc:
                    counter.malformed(line, too_long(buf.key_before(exc.at), self.max_value_chars))
                    buf.skip_value()
                    continue
                if type(value) is not dict:
                    counter.malformed(line, "item is not a JSON object")
                    continue
                try:
                    row = flatten(value, index, buf.dirty)
                    if buf.decoded_chars * VALUE_GROWTH > self.max_value_chars:
                        check_values(row, self.fields, self.max_value_chars)
                except RecursionError:
                    raise buf.error("JSON nested too deeply") from None
                except ValueTooLong as exc:
                    counter.malformed(line, too_long(exc.field, self.max_value_chars))
                    continue
                yield line, row
        finally:
            counter.stats.nul_removed += self._text.nul_removed
            text.close()


class JsonlReader:
    lists: dict[str, str] = {}
    max_value_chars = MAX_VALUE_CHARS

    """One JSON object per line; blank lines are ignored and a bad line is a malformed row."""

    def __init__(self, path: Path, *, source: str, encoding: str) -> None:
        self.source = source
        self._text = FeedText(path, source, encoding)
        self.fields: list[str] = []
        self.stats = ParseStats(encoding=self._text.codec)

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        return restartable(self, self._text, self._attempt)

    def _attempt(self, counter: RowCounter) -> Iterator[tuple[int, list[str]]]:
        index = FieldIndex(self.fields, counter.stats, frozenset(self.lists))
        decode = make_decoder().decode
        # Only "\n" ends a line: U+2028 and friends are data inside JSON strings.
        text = self._text.text(newline="\n")
        try:
            for lineno, raw in enumerate(text, 1):
                if raw.isspace():
                    continue
                try:
                    value = decode(raw)
                    if type(value) is not dict:
                        counter.malformed(lineno, "line is not a JSON object")
                        continue
                    row = flatten(value, index, "\\u" in raw and DIRTY_ESCAPE.search(raw) is not None)
                    if len(raw) * VALUE_GROWTH > self.max_value_chars:
                        check_values(row, self.fields, self.max_value_chars)
                except json.JSONDecodeError as exc:
                    counter.malformed(lineno, f"JSON syntax error: {exc.msg}")
                    continue
                except RecursionError:
                    counter.malformed(lineno, "JSON nested too deeply")
                    continue
                except ValueTooLong as exc:
                    counter.malformed(lineno, too_long(exc.field, self.max_value_chars))
                    continue
                yield lineno, row
        finally:
            counter.stats.nul_removed += self._text.nul_removed
            text.close()
