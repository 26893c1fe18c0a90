"""What a request header may be (RFC 9110): checked in the spec, and again once references are expanded.

The spec refuses a bad name or a literal line break at once, naming
`sources[i].headers`; the fetch checks the value again after `${secret:…}` and
`${VAR}` are expanded, since a secret may hold what the spec could not show.
"""

from __future__ import annotations

import re

#: a field name is an RFC 9110 token
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: visible ASCII, space and tab: no line break (header injection), nothing httpx would encode its own way
HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")


def header_problem(name: str, value: str) -> str | None:
    """What is wrong with one header, for a message that never shows the value (it may hold a secret)."""
    if not HEADER_NAME.fullmatch(name):
        return f"{name!r} is not a valid header name (letters, digits and !#$%&'*+.^_`|~-)"
    if not HEADER_VALUE.fullmatch(value):
        return (
            f"header {name!r} has a character not allowed in a header (non-ASCII or a line break); "
            "the value is not shown"
        )
    return None
