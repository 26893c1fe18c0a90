"""Source presets (#49): a platform's product export turned into one row per sellable item while it is read.

A preset source's reader is wrapped: the platform's reader (csv, or WXR for
WooCommerce's xml) reads the file, and the preset's transform turns its rows
into items, one dict each, before anything is staged. So MERGE, the rules and
the exports see plain items and know nothing of presets; what each preset
yields, field by field, is docs/presets.md.

The transforms stream. Shopify's rows of one Handle are contiguous: one Handle
is held at a time. WooCommerce's variations name their parent anywhere in the
file: a first pass notes which products are parents (and, in a WXR, the
attachments' URLs, which come after the products), a second keeps only those
parents' inherited fields, within a budget of characters.

List fields: the preset's own lists (`images`, `additional_image_link`) are
declared by the spec model (`SourceSpec`), so every later step knows them; this
wrapper stages every declared list itself, from the items it makes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from firefeed.pipeline.parse._base import MAX_MALFORMED_LINES, FeedReader, ParseStats, too_long
from firefeed.pipeline.parse._lists import array_literal, delimited_cell, delimited_lists

PRESETS = ("shopify", "woocommerce")
#: the list fields every preset yields, and the separator the spec model declares them with: two
#: characters, so they are staged as array literals in every format (an element is never split again)
PRESET_LISTS = {"images": ", ", "additional_image_link": ", "}

#: an item as a transform yields it: field -> text, or the elements of a list
Item = dict[str, Any]
#: a transform: the platform reader's rows -> (line, item); `note` records a warning once per kind
Transform = Callable[[FeedReader, "Notes"], Iterator[tuple[int, Item]]]


class Notes:
    """What a transform wants the report to say: a count per kind of oddity, written as warnings at the end."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def note(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def write(self, stats: ParseStats) -> None:
        for what, n in self.counts.items():
            stats.warnings.append(f"{what} ({n})" if n > 1 else what)


class PresetReader:
    """The items of a preset source: a FeedReader over another FeedReader and a transform.

    `fields` grows as items reveal fields (the transforms put their named fields
    first); `stats` is the platform reader's, plus the preset's warnings.
    """

    #: a list field an item lacks is "" in its row, which the framing stages as `{}` (`_chunks.frames`)
    lists_filled = False

    def __init__(self, inner: FeedReader, *, source: str, fmt: str, transform: Transform) -> None:
        self.source = source
        self._inner = inner
        self._fmt = fmt
        self._transform = transform
        self.fields: list[str] = []
        #: the source's list fields -> separator, the preset's own among them; set by open_reader
        self.lists: dict[str, str] = dict(PRESET_LISTS)

    @property
    def stats(self) -> ParseStats:
        return self._inner.stats

    @stats.setter
    def stats(self, value: ParseStats) -> None:
        self._inner.stats = value

    @property
    def max_value_chars(self) -> int:
        return int(getattr(self._inner, "max_value_chars"))  # noqa: B009  # every reader has it

    @max_value_chars.setter
    def max_value_chars(self, value: int) -> None:
        self._inner.max_value_chars = value  # type: ignore[attr-defined]

    @property
    def delimited(self) -> dict[str, str]:
        """The list fields MERGE splits (csv one-character separators): staged as joined text, as csv does."""
        return delimited_lists(self._fmt, self.lists)

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        return self._rows()

    def _rows(self) -> Iterator[tuple[int, list[str]]]:
        # A fresh pass (an EncodingRestart makes the consumer iterate again): fields start over.
        fields: list[str] = []
        self.fields = fields
        position: dict[str, int] = {}
        lists = dict(self.lists)
        delimited = self.delimited
        cap = self.max_value_chars
        notes = Notes()
        for line, item in self._transform(self._inner, notes):
            values = [""] * len(fields)
            problem = None
            for name, value in item.items():
                at = position.get(name)
                if at is None:
                    at = position[name] = len(fields)
                    fields.append(name)
                    values.append("")
                separator = lists.get(name)
                if separator is not None:
                    text = _staged(value, separator, name in delimited) if value else ""
                elif isinstance(value, list):
                    text = ",".join(value)  # a list the spec does not declare: its elements joined, as text
                else:
                    text = value
                if len(text) > cap and problem is None:
                    problem = name
                values[at] = text
            if problem is not None:
                _malformed(self.stats, notes, line, too_long(problem, cap))
                continue
            yield line, values
        notes.write(self.stats)


def number(text: str) -> float | None:
    """A platform export's price or quantity as a number (a decimal comma read as a point); None when it is none."""
    try:
        return float(text.strip().replace(",", "."))
    except ValueError:
        return None


def _staged(value: str | list[str], separator: str, delimited: bool) -> str:
    """A declared list's staged value: an array literal, or (csv, one-character separator) delimited text."""
    if isinstance(value, list):
        if delimited:
            return separator.join(e.strip() for e in value if e.strip() and separator not in e)
        return array_literal(value)
    if delimited:
        return delimited_cell(value, separator)
    return array_literal(value.split(separator)) if value else "{}"


def _malformed(stats: ParseStats, notes: Notes, line: int, why: str) -> None:
    """An item the preset made holds a value over the cap (a title with its variant's options, say)."""
    stats.malformed += 1
    if len(stats.malformed_lines) < MAX_MALFORMED_LINES:
        stats.malformed_lines.append(line)
    if stats.malformed == 1:
        stats.warnings.append(f"line {line}: item skipped: {why}")
    notes.note("items skipped: a value over the cap")


def preset_reader(
    inner: FeedReader, *, preset: str, source: str, fmt: str, lists: Mapping[str, str] | None
) -> PresetReader:
    """Wrap the platform reader of a preset source (`open_reader` calls this; the spec model checked the
    preset fits the format)."""
    from firefeed.pipeline.parse.presets_shopify import items as shopify_items
    from firefeed.pipeline.parse.presets_woocommerce import items as woocommerce_items

    transform: Transform = shopify_items if preset == "shopify" else woocommerce_items
    reader = PresetReader(inner, source=source, fmt=fmt, transform=transform)
    reader.lists = {**(lists or {}), **PRESET_LISTS}
    return reader
