"""Reading the scalars of raw spec data: YAML gives text ("0", "true", "1.22"), JSON gives
int, float and bool; both mean the same. Every error names the path it was found at."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from firefeed.errors import SpecError
from firefeed.rules._text import read_number
from firefeed.suggest import did_you_mean

_TRUE = {"true", "yes", "y", "on", "1"}
_FALSE = {"false", "no", "n", "off", "0"}


def _text(raw: Any, path: str, *, allow_none: bool = False) -> str:
    """A text scalar: YAML gives str, JSON may give numbers or booleans."""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, float):
        return format(Decimal(repr(raw)), "f")
    if raw is None and allow_none:
        return ""
    raise SpecError(path, f"must be text, not {_kind(raw)}")


def _kind(raw: Any) -> str:
    if raw is None:
        return "nothing (null)"
    if isinstance(raw, Mapping):
        return "a mapping"
    if isinstance(raw, list | tuple):
        return "a list"
    return type(raw).__name__


def _field_name(raw: Any, path: str) -> str:
    name = _text(raw, path) if not isinstance(raw, bool) else None
    if not name:
        raise SpecError(path, "must be a field name (non-empty text)")
    return name


def parse_bool(raw: Any, path: str) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    if isinstance(raw, str) and raw.strip().lower() in _TRUE | _FALSE:
        return raw.strip().lower() in _TRUE
    raise SpecError(path, "must be true or false")


#: the largest whole number a rule may hold (a length, a count): a Postgres text holds at most 1 GB,
#: so nothing larger means anything. The SQL route binds them as integers (and adds one to some); a
#: larger one validated, then failed the run with "integer out of range", naming nothing
WHOLE_MAX = 2**30


#: digits read as a number at most: a longer run (leading zeros aside) is past every bound a spec's
#: whole numbers have, and Python refuses to read more than 4,300 digits at once (a ValueError, not a
#: spec error)
_MAX_DIGITS = 18


def digits_value(digits: str) -> int:
    """The value of a run of ASCII digits; 10**18 for one longer than that, whatever its digits."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= _MAX_DIGITS else 10**_MAX_DIGITS


def parse_whole(raw: Any, path: str, *, maximum: int = WHOLE_MAX) -> int:
    value: int | None = None
    if isinstance(raw, bool):
        value = None
    elif isinstance(raw, int):
        value = raw
    elif isinstance(raw, float) and raw.is_integer():
        value = int(raw)
    elif isinstance(raw, str) and (text := raw.strip()).isascii() and text.isdigit():
        value = digits_value(text)
    if value is None or value < 0 or value > maximum:
        raise SpecError(path, f"must be a whole number >= 0 and <= {maximum}")
    return value


def _number(raw: Any, path: str) -> Decimal:
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise SpecError(path, f"must be a number, not {_kind(raw)}")
    number = read_number(_text(raw, path))
    if number is None:
        raise SpecError(path, f"must contain a number, got {raw!r}")
    return number


def _mapping(raw: Any, path: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise SpecError(path, f"must be a mapping, not {_kind(raw)}")
    for key in raw:
        if key not in allowed:
            hint = did_you_mean(str(key), allowed)
            raise SpecError(f"{path}.{key}", f"unknown key{hint} (expected one of {', '.join(allowed)})")
    for key in required:
        if key not in raw:
            raise SpecError(f"{path}.{key}", "is required")
    return raw
