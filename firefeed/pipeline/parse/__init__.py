"""PARSE: streaming readers that turn a feed file into rows of text (SPEC 2 "Items", 8.4-8.7).

`open_reader` picks the reader for a format. Every reader yields
`(line, values)` with values aligned to `reader.fields` as it was at that
moment (xml and json discover fields as they go, so a row may be shorter than
the final field list: pad with ""). Memory stays flat whatever the file size.

Encoding `auto` reads UTF-8 optimistically. If a later byte proves the file is
not UTF-8, the reader switches to windows-1252 and, if it had already yielded
rows, raises `EncodingRestart`: the consumer discards what it got and iterates
again (stage.stage_source does this by recreating the staging table).

`copy_frames` gives a reader's rows the way STAGE loads them: cut into COPY
chunks and encoded as COPY text (`_chunks`), by a parser child process when
the feed is big enough to pay for one (`_child`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from firefeed.errors import ParseError
from firefeed.pipeline.parse._base import EncodingRestart, FeedReader, ParseStats
from firefeed.pipeline.parse._child import ParserDied, copy_frames
from firefeed.pipeline.parse._chunks import Block, End, Fields, Frame
from firefeed.pipeline.parse.csv_reader import CsvReader
from firefeed.pipeline.parse.json_reader import JsonlReader, JsonReader
from firefeed.pipeline.parse.presets import preset_reader
from firefeed.pipeline.parse.presets_wxr import WxrReader
from firefeed.pipeline.parse.xml_reader import XmlReader

FORMATS = ("csv", "tsv", "json", "jsonl", "xml")


def open_reader(
    path: Path,
    *,
    source: str,
    format: str,
    encoding: str = "auto",
    delimiter: str = "auto",
    item_path: str = "auto",
    lists: Mapping[str, str] | None = None,
    max_value_chars: int | None = None,
    preset: str | None = None,
) -> FeedReader:
    """The reader for one decompressed, local feed file (it may be opened more than once).

    Settings that do not apply to the format are ignored. `lists` are the
    source's list fields (SPEC 9), written as Postgres array literals into text[]
    columns. A file that cannot be opened, or an unknown encoding, raises ParseError
    naming the source. `max_value_chars` is the longest value taken, the same for every format
    (default: FIREFEED_PARSE_MAX_VALUE_CHARS); a row holding a longer one is malformed. A `preset`
    (#49) wraps the reader in the platform's transform (`presets`), which stages the lists itself.
    """
    reader: CsvReader | JsonReader | JsonlReader | XmlReader
    try:
        if format in ("csv", "tsv"):
            reader = CsvReader(path, source=source, encoding=encoding, delimiter=delimiter, fmt=format)
        elif format == "json":
            reader = JsonReader(path, source=source, encoding=encoding, item_path=item_path)
        elif format == "jsonl":
            reader = JsonlReader(path, source=source, encoding=encoding)
        elif format == "xml" and preset == "woocommerce":
            reader = WxrReader(path, source=source, encoding=encoding, item_path=item_path)
        elif format == "xml":
            reader = XmlReader(path, source=source, encoding=encoding, item_path=item_path)
        else:
            raise ParseError(source, f"format must be one of {', '.join(FORMATS)}, not {format!r}")
    except OSError as exc:
        raise ParseError(source, f"cannot read the feed file: {exc.strerror or exc}") from exc
    if max_value_chars is None:
        from firefeed.config import get_settings  # here: the parser child imports the readers only

        max_value_chars = get_settings().parse_max_value_chars
    reader.max_value_chars = max_value_chars
    if preset is not None:
        return preset_reader(reader, preset=preset, source=source, fmt=format, lists=lists)
    if lists:
        # SPEC 9: the list fields' values are staged as array literals (parse._lists)
        reader.lists = dict(lists)
    return reader


__all__ = [
    "FORMATS",
    "Block",
    "EncodingRestart",
    "End",
    "FeedReader",
    "Fields",
    "Frame",
    "ParseStats",
    "ParserDied",
    "copy_frames",
    "open_reader",
]
