"""List fields as the readers stage them (SPEC 9, P3-P5).

Most list fields are staged as a Postgres array literal (`{}` when empty) into
a text[] column, so the COPY that stages the rows parses the literal, and
MERGE reads an array. Elements are trimmed (Unicode white space, `str.strip`)
and empty ones dropped; each is quoted, with `\\` and `"` escaped, so any text
survives the parsing exactly. A JSON array that stays text (it holds an object
or an array, P4) is staged as a text: `[0:0]={"..."}`, an array whose lower
bound is 0 (rules/_lists_sql.from_text).

A csv/tsv list whose separator is one character (`,`, `|`, `;`, a tab: nearly
all of them) is staged *delimited* instead: a text column holding the elements
joined by the separator, which MERGE splits with `string_to_array`. An element
never holds its separator (it was split on it), so the split gives the elements
back exactly. Most cells need nothing (no white space, no empty element) and
are staged as they are, a block of them checked at once (`delimit_block`): the
reader skips the split, and the COPY skips parsing an array. On a 1M-item
catalog with a 5-URL image list this took 1.9 s off PARSE (reader and
backend, both cores busy) for 0.3 s more of MERGE. A longer separator may
overlap itself (`aa`), where elements joined after trimming could split
differently, so those stay literals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from firefeed.pipeline.parse._json_values import Num, compact

#: the staged literal of a list without elements (and the readers' value of a list field an item lacks)
EMPTY = "{}"


def array_literal(elements: Iterable[str]) -> str:
    """`{"a","b"}` for the trimmed, non-empty elements; `{}` when none is left (P1, P3)."""
    quoted = []
    for element in elements:
        text = element.strip()
        if text:
            quoted.append('"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return "{" + ",".join(quoted) + "}"


#: before the braces of a staged text (one element, lower bound 0)
TEXT_PREFIX = "[0:0]="


def literal_elements(text: str) -> tuple[str, ...]:
    """The elements of a staged list (what `array_literal` wrote; `{}`, or "" from a reader, has none)."""
    out: list[str] = []
    start = len(TEXT_PREFIX) if text.startswith(TEXT_PREFIX) else 0
    i, end = start + 1, len(text) - 1  # inside the braces
    while i < end:
        i += 1  # the opening quote
        buf: list[str] = []
        while text[i] != '"':
            if text[i] == "\\":
                i += 1
            buf.append(text[i])
            i += 1
        out.append("".join(buf))
        i += 2  # the closing quote and the comma after it
    return tuple(out)


def split_cell(cell: str, separator: str) -> str:
    """A csv/tsv cell of a list field: split on the separator, taken literally.

    What `array_literal` writes; a cell with nothing to escape (the usual image URLs) skips the
    per-element escaping, a third of a 1M-item catalog's list splitting (and `filter`/`map` instead of
    a comprehension another 15%: 0.60 against 0.70 us a cell of five URLs).
    """
    if not cell:
        return EMPTY
    if '"' in cell or "\\" in cell:
        return array_literal(cell.split(separator))
    # Kept elements are never "", so the joined text is "" exactly when none is kept.
    joined = '","'.join(filter(None, map(str.strip, cell.split(separator))))
    return '{"' + joined + '"}' if joined else EMPTY


def delimited_lists(fmt: str, lists: Mapping[str, str] | None) -> dict[str, str]:
    """The list fields of a source of format `fmt` staged delimited (field -> separator), see above."""
    if fmt not in ("csv", "tsv") or not lists:
        return {}
    return {name: separator for name, separator in lists.items() if len(separator) == 1}


def _is_delimited(text: str, separator: str) -> bool:
    """Whether a non-empty `text` already is trimmed, non-empty elements joined by `separator`: no white
    space anywhere (`str.split()` gives back one part as long as the text, at C speed) and no empty
    element (none at either end, no two separators side by side)."""
    parts = text.split()
    return (
        len(parts) == 1
        and len(parts[0]) == len(text)
        and text[0] != separator
        and text[-1] != separator
        and separator * 2 not in text
    )


def delimited_cell(cell: str, separator: str) -> str:
    """A csv/tsv cell of a list field staged delimited: its trimmed, non-empty elements joined by `separator`.

    The cell itself when it already is that (`_is_delimited`).
    """
    if not cell or _is_delimited(cell, separator):
        return cell
    return separator.join(filter(None, map(str.strip, cell.split(separator))))


def delimit_block(rows: Sequence[tuple[int, list[str]]], at: int, separator: str) -> None:
    """Stage, in place, the list cells at position `at` of a block of rows as `delimited_cell` does.

    A call per cell cost a 1M-item catalog's parser child, PARSE's bottleneck, 0.7 s of CPU. Joined by
    the separator, a block's non-empty cells make one text that holds white space, or an empty element
    (the separator at its start or end, or twice in a row), exactly when one of the cells does. One check
    of that text at C speed clears the usual block (URLs); only a block that fails it goes cell by cell.
    """
    joined = separator.join(filter(None, [values[at] for _, values in rows]))
    if not joined or _is_delimited(joined, separator):
        return  # every cell is "", or the block needs nothing: staged as it is
    for _, values in rows:
        values[at] = delimited_cell(values[at], separator)


def delimited_elements(text: str, separator: str) -> tuple[str, ...]:
    """The elements of a delimited staged list (what `delimited_cell` wrote; "" has none)."""
    return tuple(text.split(separator)) if text else ()


def json_list(value: Any) -> str | None:
    """A JSON value of a list field (P4), or None when it stays text (an object flattens, as before).

    An array of scalars is the list (numbers as written, true/false, nulls
    dropped); an array holding an array or an object is compact JSON text (a
    one-element list); any other scalar is a one-element list, never split.
    """
    t = type(value)
    if t is dict:
        return None
    if t is list:
        if any(type(v) in (list, dict) for v in value):
            return TEXT_PREFIX + array_literal([compact(value)])  # a text (P4), never "": it holds [...]
        return array_literal(_scalar(v) for v in value if v is not None)
    if value is None:
        return EMPTY
    return array_literal([_scalar(value)])


def mark_json_lists(obj: dict[str, Any], lists: frozenset[str], prefix: str = "") -> None:
    """Replace, in place, each list field's JSON value by its staged text, before the item is flattened.

    Done beforehand so flattening itself is the code it was before lists (and keeps the fields'
    first-seen order): a staged list is a plain str, which flattening stores as it is.
    """
    for key, value in obj.items():
        name = prefix + key
        if name in lists:
            listed = json_list(value)
            if listed is not None:
                obj[key] = listed
                continue
        if type(value) is dict:
            mark_json_lists(value, lists, name + ".")


def _scalar(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is Num:
        return str.__str__(value)
    return str(value)


def fill_empty_lists(rows: Iterable[tuple[int, list[str]]], positions: Sequence[int]) -> None:
    """Set, in place, each row's value at `positions` (list fields) to `{}` where it is "": a field the item
    lacks (readers fill those with "") staged into a text[] column, which takes no ""."""
    for _, values in rows:
        for i in positions:
            if not values[i]:
                values[i] = EMPTY


def list_positions(fields: list[str], lists: Mapping[str, str]) -> list[tuple[int, str]]:
    """(position, separator) of each csv column that is a declared list field."""
    return [(i, lists[name]) for i, name in enumerate(fields) if name in lists]
