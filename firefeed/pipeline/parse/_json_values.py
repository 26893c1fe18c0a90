"""JSON values as field text (SPEC 8.4): numbers as written, objects flattened with dots.

The decoder turns every number into a `Num` (a str holding the number's text),
so `1.50` stays "1.50" at the top level and inside arrays alike.
"""

from __future__ import annotations

import json
import re
from typing import Any

from firefeed.pipeline.parse._names import FieldIndex, clean_text


class Num(str):
    """A JSON number, kept as the text the feed wrote."""

    __slots__ = ()


def make_decoder() -> json.JSONDecoder:
    # strict=False: raw control characters inside strings are a common, harmless feed sloppiness.
    return json.JSONDecoder(parse_int=Num, parse_float=Num, parse_constant=Num, strict=False)


#: escapes that decode to something Postgres cannot store (NUL) or UTF-8 cannot encode (surrogates)
DIRTY_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
#: a value can be at most this many times as long as the JSON text it was read from: an array's raw
#: control character (`strict=False` lets one in) is written back as `\u0001`
VALUE_GROWTH = 6


def compact(value: Any) -> str:
    """Compact JSON text of an array or object, numbers as written."""
    t = type(value)
    if t is Num:
        return str.__str__(value)
    if t is str:
        return _dumps(value)
    if t is list:
        return "[" + ",".join([compact(v) for v in value]) + "]"
    if t is dict:
        return "{" + ",".join([_dumps(k) + ":" + compact(v) for k, v in value.items()]) + "}"
    return _dumps(value)  # true, false, null


def flatten(obj: dict[str, Any], index: FieldIndex, dirty: bool, prefix: str = "") -> list[str]:
    """One item as values aligned with `index.fields` (which grows for names not seen before)."""
    if index.lists:
        from firefeed.pipeline.parse._lists import mark_json_lists

        mark_json_lists(obj, index.lists, prefix)
    position = index.position
    row = [""] * len(index.fields)
    _into(obj, row, position, index, dirty, prefix)
    return row


def _into(
    obj: dict[str, Any], row: list[str], position: dict[str, int], index: FieldIndex, dirty: bool, prefix: str
) -> None:
    for key, value in obj.items():
        if prefix:
            key = prefix + key
        t = type(value)
        if t is str or t is Num:
            pass
        elif t is dict:
            # An empty object has no fields: like a missing value.
            _into(value, row, position, index, dirty, key + ".")
            continue
        elif value is None:
            value = ""
        elif value is True:
            value = "true"
        elif value is False:
            value = "false"
        else:
            value = compact(value)
        if dirty:
            value = clean_text(value, index.stats)
        pos = position.get(key)
        if pos is None:
            pos = index.add(key)
            if pos >= len(row):
                row.extend([""] * (pos + 1 - len(row)))
        row[pos] = value
