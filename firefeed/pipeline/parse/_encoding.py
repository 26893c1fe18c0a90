"""A feed file's bytes as UTF-8: BOM sniffing, UTF-8 with a windows-1252 fallback, NUL removal.

Every reader gets its input through `FeedText`, which hands out either a text
stream (csv, json) or a UTF-8 byte stream (xml). Valid UTF-8 — the common case —
passes through untouched: CPython's own UTF-8 decoder (inside TextIOWrapper, or
libxml2 for XML) is the validation, so the happy path costs one decode. Any
other encoding is transcoded to UTF-8 in 64 KiB chunks. NUL characters, which
Postgres cannot store, are removed from whole chunks, never per value.

When `auto` meets bytes that are not UTF-8, `decode_failed` switches the file to
windows-1252 (as WHATWG reads it: no byte is an error) and the reader starts over.
"""

from __future__ import annotations

import codecs
import io
import re
from collections.abc import Callable
from pathlib import Path

from firefeed.errors import ParseError

CHUNK_BYTES = 1 << 16
UTF8 = "utf-8"
WINDOWS_1252 = "windows-1252"

# UTF-32 LE first: its BOM starts with the UTF-16 LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, UTF8),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def _whatwg_1252_table() -> str:
    """cp1252, except that the five bytes Python leaves undefined map to U+0081 etc. (WHATWG)."""
    chars = []
    for byte in range(256):
        try:
            chars.append(bytes([byte]).decode("cp1252"))
        except UnicodeDecodeError:
            chars.append(chr(byte))
    return "".join(chars)


_WHATWG_1252 = _whatwg_1252_table()


def decode_windows_1252(data: bytes, final: bool = False) -> str:
    """Decode windows-1252 the way browsers do; single-byte, so chunks need no carry-over."""
    return codecs.charmap_decode(data, "strict", _WHATWG_1252)[0]


Decoder = Callable[[bytes, bool], str]


def _decoder_for(codec: str) -> Decoder:
    if codec == WINDOWS_1252:
        return decode_windows_1252
    return codecs.getincrementaldecoder(codec)().decode


def _normalize(source: str, encoding: str) -> str:
    """A user-given encoding name as the codec we will use; unknown names are the user's error."""
    try:
        info = codecs.lookup(encoding)
        is_text = isinstance(info.decode(b"")[0], str)
    except (LookupError, TypeError, ValueError):
        is_text = False
    if not is_text:
        raise ParseError(source, f"unknown text encoding {encoding!r}")
    if info.name in ("cp1252", "windows-1252"):
        # A superset of Python's cp1252 that never fails: what the user means by windows-1252.
        return WINDOWS_1252
    return UTF8 if info.name == "utf-8-sig" else info.name


_XML_DECL = re.compile(rb"^\s*<\?xml[^>]*?encoding\s*=\s*[\"']([A-Za-z0-9._:-]+)[\"']")


class _ByteFilter(io.BufferedIOBase):
    """The file as UTF-8 bytes without NULs, read in chunks; what TextIOWrapper and lxml read from."""

    def __init__(self, text: FeedText, *, transcode: Decoder | None, validate: bool) -> None:
        super().__init__()
        self._raw = open(text.path, "rb", buffering=0)  # noqa: SIM115 - closed with this object
        self._raw.seek(text.skip)
        self._text = text
        self._transcode = transcode
        self._validate = codecs.getincrementaldecoder(UTF8)().decode if validate else None
        self._eof = False

    @property
    def name(self) -> str:
        return str(self._text.path)

    def readable(self) -> bool:
        return True

    def read1(self, size: int | None = -1) -> bytes:
        while not self._eof:
            data = self._raw.read(CHUNK_BYTES)
            final = not data
            self._eof = final
            if self._transcode is not None:
                text = self._transcode(data, final)
                if "\x00" in text:
                    self._text.nul_removed += text.count("\x00")
                    text = text.replace("\x00", "")
                # A lone surrogate (only from exotic codecs) must not reach Postgres.
                data = text.encode(UTF8, "replace")
            else:
                if self._validate is not None:
                    self._validate(data, final)
                if b"\x00" in data:
                    self._text.nul_removed += data.count(b"\x00")
                    data = data.replace(b"\x00", b"")
            if not self._text.rs_seen and b"\x1e" in data:
                self._text.rs_seen = True
            if data:
                return data
        return b""

    def read(self, size: int | None = -1) -> bytes:
        if size is not None and size >= 0:
            return self.read1(size)
        return b"".join(iter(self.read1, b""))

    def close(self) -> None:
        self._raw.close()
        super().close()


class FeedText:
    """One feed file and the encoding it is read in; re-openable, since the file is local."""

    def __init__(self, path: Path, source: str, encoding: str, *, xml: bool = False) -> None:
        self.path = path
        self.source = source
        self.skip = 0
        self.can_fall_back = False
        #: NULs removed by the last stream handed out (readers copy it into their stats)
        self.nul_removed = 0
        #: whether the last stream handed out has yielded a U+001E (RS): until then no text read holds one,
        #: which spares the COPY encoder a check (it separates rows with RS)
        self.rs_seen = False
        with open(path, "rb") as f:
            head = f.read(1024)
        bom = next(((b, c) for b, c in _BOMS if head.startswith(b)), None)
        declared = _XML_DECL.match(head) if xml and bom is None else None
        if encoding.strip().lower() != "auto":
            self.codec = _normalize(source, encoding)
            if self.codec == UTF8 and head.startswith(codecs.BOM_UTF8):
                self.skip = len(codecs.BOM_UTF8)
        elif bom is not None:
            self.skip, self.codec = len(bom[0]), bom[1]
        elif declared is not None:
            # XML follows its own declaration (and a wrong one is the feed's error).
            self.codec = _normalize(source, declared.group(1).decode("ascii"))
        else:
            self.codec = UTF8
            self.can_fall_back = True

    def _stream(self, *, validate: bool) -> _ByteFilter:
        self.nul_removed = 0
        self.rs_seen = False
        native = self.codec == UTF8
        return _ByteFilter(
            self,
            transcode=None if native else _decoder_for(self.codec),
            validate=validate and native and self.can_fall_back,
        )

    def text(self, newline: str) -> io.TextIOWrapper:
        """A fresh text stream over the whole file (UTF-8 errors surface as UnicodeDecodeError)."""
        # TextIOWrapper's own UTF-8 decode is the validation: don't pay for it twice.
        return io.TextIOWrapper(self._stream(validate=False), encoding=UTF8, newline=newline)

    def binary(self) -> _ByteFilter:
        """A fresh UTF-8 byte stream over the whole file, for lxml (which must be told 'utf-8')."""
        # libxml2 would reject bad UTF-8 as a syntax error; validate here to fall back instead.
        return self._stream(validate=True)

    def decode_failed(self, exc: UnicodeError) -> None:
        """Switch an `auto` file that is not UTF-8 to windows-1252, or raise the ParseError."""
        if self.can_fall_back:
            self.codec = WINDOWS_1252
            self.can_fall_back = False
            return
        reason = getattr(exc, "reason", None) or str(exc)
        raise ParseError(self.source, f"line {self._error_line()}: not valid {self.codec} text ({reason})")

    def _error_line(self) -> int:
        """The line of the first undecodable byte (found again from the start: errors are rare)."""
        decode = _decoder_for(self.codec)
        line = 1
        with open(self.path, "rb") as f:
            f.seek(self.skip)
            while True:
                data = f.read(CHUNK_BYTES)
                try:
                    line += decode(data, not data).count("\n")
                except UnicodeDecodeError as exc:
                    good = exc.object[: exc.start]
                    return line + codecs.decode(good, self.codec, "replace").count("\n")
                except UnicodeError:  # e.g. UTF-16 without a BOM: no position to report
                    return line
                if not data:
                    return line
