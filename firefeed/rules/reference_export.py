"""The reference evaluator's reading of an export's `fields` (SPEC 8.18, P25-P27, C1), in plain Python.

The SQL route renders columns in firefeed/export/select.py; the differential tests compare its files
with these values, written by hand, so each kind of column is stated a second way: a field name (its
value, a list kept as its elements), a template (rendered as the rules render one) and a literal
`{value: TEXT}` (TEXT as written, never read as a name or a template).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from firefeed.rules.reference import Value
from firefeed.rules.template import as_text, parse_template

if TYPE_CHECKING:
    from firefeed.spec.model import FieldLiteral


def export_columns(
    item: Mapping[str, Value], fields: Mapping[str, str | FieldLiteral] | None, names: Sequence[str]
) -> dict[str, Value]:
    """One item's columns in `fields` order, before nesting; without `fields`, every name in `names` as itself."""
    if fields is None:
        return {name: item.get(name, "") for name in names}
    out: dict[str, Value] = {}
    for name, value in fields.items():
        if not isinstance(value, str):
            out[name] = value.value
        elif "{" in value or "}" in value:
            out[name] = parse_template(value, name).render(item)
        else:
            out[name] = item.get(value, "")
    return out


def nested(columns: Mapping[str, Value]) -> dict[str, Value | dict[str, str]]:
    """Dotted names as sub-values of their parent, placed where its first sub-value is; a sub-value is a
    text, a list's elements joined with "," (P25, P26)."""
    out: dict[str, Value | dict[str, str]] = {}
    for name, value in columns.items():
        if "." not in name:
            out[name] = value
            continue
        parent, sub = name.split(".", 1)
        group = out.setdefault(parent, {})
        assert isinstance(group, dict)
        group[sub] = as_text(value)
    return out
