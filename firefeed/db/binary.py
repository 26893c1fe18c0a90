"""Integers Postgres sends in binary (`int4send`, `int8send`: big-endian), aggregated into one value.

A `string_agg` of them is one bytea where 80k rows fetched one by one cost ~0.1 s of Python.
"""

from __future__ import annotations

import sys
from array import array


def network_ints(data: bytes, typecode: str) -> array[int]:
    """`data`, big-endian integers of `typecode`'s size ("i": int4send, "q": int8send), as an array."""
    values = array(typecode)
    values.frombytes(data)
    if sys.byteorder == "little":
        values.byteswap()
    return values
