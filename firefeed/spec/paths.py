"""Key paths in spec errors (`rules[0].then[1].value`), written so that every path names one key.

A mapping key is free text: it may hold `.`, `[`, quotes, control characters, or be
empty. Written bare, `a.b` could be the key `b` inside `a` or the one key `a.b`, and an
empty key would vanish. Such keys are written JSON-quoted in brackets (`fields["a.b"]`,
`[""]`), so a reader (or a program) can always split a path back into its keys.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

# Characters that carry meaning in a path; a key holding one is quoted.
_SYNTAX = frozenset('.[]"\\')


def quote_key(key: str) -> str:
    """The key as a path part: bare when it cannot be misread, else `["..."]` (JSON string escapes)."""
    if key and key.isprintable() and key == key.strip() and not _SYNTAX.intersection(key):
        return key
    return "[" + json.dumps(key, ensure_ascii=False) + "]"


def join_key(path: str, key: str | int) -> str:
    """`path` followed by one more key (a list index when `key` is an int)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    part = quote_key(key)
    if part.startswith("[") or not path:
        return path + part
    return f"{path}.{part}"


def render_path(parts: Iterable[str | int]) -> str:
    """A whole path from its keys and indexes, outermost first."""
    out = ""
    for part in parts:
        out = join_key(out, part if isinstance(part, int) else str(part))
    return out
