"""Plain-Python text operations of the rule language, written to agree with Postgres.

The SQL route (sqlgen) runs on a UTF-8 database whose ctype is C.UTF-8, where
lower()/upper()/initcap() use glibc's simple one-to-one case mapping. Python's
str.lower()/str.upper() use the *full* mapping (U+0130 -> "i̇", "ß" -> "SS",
final sigma by context), so the reference evaluator goes through the helpers
here instead. They were checked against Postgres over every code point
(tests/integration/test_rules_sql.py keeps that check).
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Context, Decimal

from firefeed.textutil import WHITESPACE

#: The number inside a field: its first match (a comma is a decimal point).
#: Non-capturing on purpose: Postgres' substring(x FROM re) returns group 1 when there is one.
NUMBER_PATTERN = r"-?[0-9]+(?:[.,][0-9]+)?"
NUMBER_RE = re.compile(NUMBER_PATTERN)
#: A matched number is read from its first this many characters: Postgres' numeric holds any text
#: this long (it refuses more than 16,383 decimals or 131,072 digits), so no item's value can fail a
#: run with "value overflows numeric format". A longer match is garbage in any feed; read this way,
#: the run goes on and both routes agree on it.
NUMBER_MAX_CHARS = 16_383

#: Highest `round` a math action accepts; the SQL route's exact division relies on it.
MAX_ROUND = 30

_WS_CLASS = "".join(WHITESPACE)
_WORD_RE = re.compile(f"[^{re.escape(_WS_CLASS)}]+")

# Python's full uppercase differs from the simple mapping only for the characters
# of SpecialCasing.txt, all in the BMP; their simple uppercase is the one-character
# titlecase when there is one (the Greek iota-subscript letters), else themselves.
_SPECIAL_UPPER: dict[str, str] = {}
for _cp in range(0x10000):
    _ch = chr(_cp)
    if len(_ch.upper()) != 1:
        _title = _ch.title()
        _SPECIAL_UPPER[_ch] = _title if len(_title) == 1 else _ch
del _cp, _ch

# Exact arithmetic for add/subtract/multiply/quantize, 28 significant digits for division.
_EXACT = Context(prec=100_000, rounding=ROUND_HALF_UP, Emax=999_999, Emin=-999_999)
_DIVISION = Context(prec=28, rounding=ROUND_HALF_UP, Emax=999_999, Emin=-999_999)


def simple_lower(text: str) -> str:
    """Lowercase with the simple mapping: U+0130 -> "i", and no final-sigma context."""
    if "\u0130" in text:
        text = text.replace("\u0130", "i")
    if "\u03a3" in text:
        text = text.replace("\u03a3", "\u03c3")
    return text.lower()


def simple_upper(text: str) -> str:
    """Uppercase with the simple mapping ("ß" stays "ß", "ᾳ" -> "ᾼ")."""
    if any(ch in _SPECIAL_UPPER for ch in text):
        return "".join(_SPECIAL_UPPER.get(ch) or ch.upper() for ch in text)
    return text.upper()


def is_blank(text: str) -> bool:
    """`empty`: only white space (or nothing)."""
    return text.strip() == ""


def capitalize(text: str) -> str:
    """Each maximal run of non-white-space: first character upper, the rest lower."""
    return _WORD_RE.sub(lambda m: simple_upper(m.group()[0]) + simple_lower(m.group()[1:]), text)


def trim(text: str) -> str:
    """Strip white space at both ends and fold inner runs to one space."""
    return " ".join(text.split())


def truncate(text: str, length: int) -> str:
    """Keep the first `length` characters, dropping a cut partial word and trailing white space."""
    if len(text) <= length:
        return text
    head = text[:length]
    if not text[length].isspace():
        cut = max((i for i, ch in enumerate(head) if ch.isspace()), default=-1)
        if cut >= 0:
            head = head[:cut]
    return head.rstrip()


def read_number(text: str) -> Decimal | None:
    """The first number in `text` (comma as decimal point), or None."""
    m = NUMBER_RE.search(text)
    return _decimal(m.group()) if m else None


def _decimal(matched: str) -> Decimal:
    return Decimal(matched[:NUMBER_MAX_CHARS].replace(",", "."))


def format_number(value: Decimal, places: int) -> str:
    """Round half away from zero to exactly `places` decimals; no negative zero."""
    rounded = value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP, context=_EXACT)
    if rounded.is_zero():
        rounded = rounded.copy_abs()
    return format(rounded, "f")


def compute(op: str, left: Decimal, right: Decimal) -> Decimal | None:
    """Exact decimal arithmetic; division to 28 significant digits; None on division by zero."""
    if op == "add":
        return _EXACT.add(left, right)
    if op == "subtract":
        return _EXACT.subtract(left, right)
    if op == "multiply":
        return _EXACT.multiply(left, right)
    if right.is_zero():
        return None
    return _DIVISION.divide(left, right)


def math(text: str, op: str, operand: Decimal, places: int) -> str:
    """Replace the field's first number by `number op operand`; unchanged when there is none."""
    m = NUMBER_RE.search(text)
    if not m:
        return text
    result = compute(op, _decimal(m.group()), operand)
    if result is None:
        return text
    return text[: m.start()] + format_number(result, places) + text[m.end() :]
