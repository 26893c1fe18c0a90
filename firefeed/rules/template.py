"""Templates: `{field}` is the field's current value, `{{` and `}}` are literal braces.

Shared by rules (set/append/prepend/map values, text condition values) and
exports (`fields` values with a `{`), in Python and in SQL, so both routes read
a template the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from psycopg2 import sql

from firefeed.errors import SpecError
from firefeed.rules._scalars import digits_value


@dataclass(frozen=True)
class FieldRef:
    """`{name}`, or `{name[i]}`: element i of a list (negative from the end; P9)."""

    name: str
    index: int | None = None


#: `name[i]` in a reference always means an index (P9)
_INDEXED = re.compile(r"^(.*)\[([-+]?)([0-9]+)\]$", re.DOTALL)


def _ref(inner: str) -> FieldRef:
    m = _INDEXED.match(inner)
    if m is None or m.group(1) == "":
        return FieldRef(inner)
    # a longer index than digits_value reads is past any list either way
    return FieldRef(m.group(1), (-1 if m.group(2) == "-" else 1) * digits_value(m.group(3)))


def element(value: str | tuple[str, ...], index: int) -> str:
    """Element `index` of a value (a text is a one-element list, "" has none, P2); "" when out of range."""
    items = value if isinstance(value, tuple) else ((value,) if value else ())
    if -len(items) <= index < len(items):
        return items[index]
    return ""


def as_text(value: str | tuple[str, ...]) -> str:
    """A value as text: a list's elements joined with ","."""
    return ",".join(value) if isinstance(value, tuple) else value


Part = str | FieldRef


@dataclass(frozen=True)
class Template:
    """A parsed template: literal text and field references, in order."""

    parts: tuple[Part, ...]
    source: str

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parts if isinstance(p, FieldRef))

    @property
    def is_literal(self) -> bool:
        return not self.fields

    def render(self, item: Mapping[str, Any]) -> str:
        out = []
        for p in self.parts:
            if isinstance(p, str):
                out.append(p)
                continue
            value = item.get(p.name, "")
            out.append(as_text(value) if p.index is None else element(value, p.index))
        return "".join(out)

    def to_sql(self, column: Callable[[str], sql.Composable], params: list[Any]) -> sql.Composable:
        """SQL text for the rendered value; literal parts are appended to `params` as bound values."""
        pieces: list[sql.Composable] = []
        for p in self.parts:
            if isinstance(p, str):
                params.append(p)
                pieces.append(sql.SQL("%s::text"))
            else:
                pieces.append(column(p.name))
        if not pieces:
            return sql.SQL("''::text")
        if len(pieces) == 1:
            return pieces[0]
        return sql.SQL("(") + sql.SQL(" || ").join(pieces) + sql.SQL(")")


def parse_template(text: str, path: str) -> Template:
    """Parse `text`; a lone `{` or `}` is a spec error naming `path`."""
    parts: list[Part] = []
    buf: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "{":
            if i + 1 < n and text[i + 1] == "{":
                buf.append("{")
                i += 2
                continue
            end = text.find("}", i + 1)
            inner = text[i + 1 : end] if end != -1 else ""
            if end == -1 or "{" in inner or inner == "":
                raise SpecError(path, f"lone '{{' at character {i + 1} of template {text!r} (write '{{{{' for a brace)")
            if buf:
                parts.append("".join(buf))
                buf = []
            parts.append(_ref(inner))
            i = end + 1
            continue
        if ch == "}":
            if i + 1 < n and text[i + 1] == "}":
                buf.append("}")
                i += 2
                continue
            raise SpecError(path, f"lone '}}' at character {i + 1} of template {text!r} (write '}}}}' for a brace)")
        buf.append(ch)
        i += 1
    if buf:
        parts.append("".join(buf))
    return Template(tuple(parts), text)
