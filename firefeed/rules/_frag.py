"""SQL fragments that carry their own bound values.

Rule expressions are nested inside each other (an action wraps the value the
previous action left) and sometimes repeated. With positional `%s` parameters
the values must follow the text order, so every fragment keeps its values
next to its text and joining fragments joins both in order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from psycopg2 import sql

_ARG = re.compile(r"\{(\d+)\}")


@dataclass(frozen=True)
class Frag:
    """SQL text with `%s` placeholders and the values they take, in order."""

    sql: sql.Composable
    params: tuple[Any, ...] = ()

    def __add__(self, other: Frag) -> Frag:
        return Frag(sql.Composed([self.sql, other.sql]), self.params + other.params)


def raw(text: str) -> Frag:
    """Constant SQL text written by FireFeed itself (never user input)."""
    return Frag(sql.SQL(text))


def val(value: Any, cast: str = "") -> Frag:
    """A bound value, optionally cast (`val(x, "text")` -> `%s::text`)."""
    return Frag(sql.SQL("%s::" + cast if cast else "%s"), (value,))


def of(composable: sql.Composable) -> Frag:
    """A fragment without values (an identifier, a column reference)."""
    return Frag(composable)


def fmt(template: str, *args: Frag) -> Frag:
    """`fmt("lower({0}) = {1}", a, b)`: constant text with fragments spliced in (repeats allowed)."""
    pieces: list[sql.Composable] = []
    params: list[Any] = []
    pos = 0
    for m in _ARG.finditer(template):
        if m.start() > pos:
            pieces.append(sql.SQL(template[pos : m.start()]))
        arg = args[int(m.group(1))]
        pieces.append(arg.sql)
        params.extend(arg.params)
        pos = m.end()
    if pos < len(template):
        pieces.append(sql.SQL(template[pos:]))
    return Frag(sql.Composed(pieces), tuple(params))


def join(frags: Iterable[Frag], sep: str) -> Frag:
    items = list(frags)
    pieces: list[sql.Composable] = []
    params: list[Any] = []
    for i, f in enumerate(items):
        if i:
            pieces.append(sql.SQL(sep))
        pieces.append(f.sql)
        params.extend(f.params)
    return Frag(sql.Composed(pieces), tuple(params))
