"""Text facts shared by parsing, merging, rules and exports, so Python and SQL agree."""

from __future__ import annotations

#: Every character Python's str.isspace() accepts: the rule language's "white space".
#: (checked against str.isspace over all of Unicode by tests/unit/test_textutil.py)
WHITESPACE: str = (
    "\u0009\u000a\u000b\u000c\u000d\u001c\u001d\u001e\u001f \u0085\u00a0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def strip_ws(value: str) -> str:
    """Trim Unicode white space at both ends (keys are compared after this)."""
    return value.strip()
