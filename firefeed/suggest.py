"""`did you mean 'price'?`: the closest known name to a misspelled one, for spec errors and field warnings.

A merchant who writes `prcie` or `fromat` should not have to find the right name in the docs. The
match is difflib's ratio (at least 0.6, the closest one); none is offered when nothing is that close.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

_CUTOFF = 0.6
#: names compared at most: a spec or a feed may hold thousands, and each comparison is quadratic in length
_MAX_CHOICES = 1000


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The known name closest to `name`, or None when none is close enough (or `name` is one of them)."""
    pool = [c for _, c in zip(range(_MAX_CHOICES), choices, strict=False) if isinstance(c, str)]
    if name in pool:
        return None
    quoted = _cut_at_comment(name, pool)
    if quoted is not None:
        return quoted
    found = difflib.get_close_matches(name, pool, n=1, cutoff=_CUTOFF)
    if not found:
        lowered = {c.lower(): c for c in pool}
        found = [lowered[name.lower()]] if name.lower() in lowered else []
    return found[0] if found else None


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """` (did you mean 'x'?)`, with advice to quote a name YAML cut at ` #`; "" when no name is close."""
    pool = list(choices)
    found = closest(name, pool)
    if found is None:
        return ""
    if _cut_at_comment(name, pool) is not None:
        return f" (did you mean {found!r}? In YAML ' #' starts a comment: quote the name, \"{found}\")"
    return f" (did you mean {found!r}?)"


def _cut_at_comment(name: str, pool: list[str]) -> str | None:
    """The known name that `name` is the start of, cut where ` #` began (an unquoted `Reference #` in YAML)."""
    return next((c for c in pool if c.startswith(name + " #")), None) if name else None
