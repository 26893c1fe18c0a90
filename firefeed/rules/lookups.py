"""The `lookup` action (SPEC 9, P21-P24): parsed into one part per field it writes.

`{lookup: categories, match: F, set: {google_product_category: gpc}, default: {custom_label_0: none}}`
becomes a `LookupSet` per target field, all sharing the action's `tag`. The rule language's
actions each write one field (passes, levels and the SQL all rely on it), so the parts are
ordinary field actions that read the same joined row: the pass joins the lookup table once
per tag, at the level where its parts are computed, on the trimmed value F has there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from firefeed.errors import SpecError
from firefeed.rules._scalars import _field_name, _kind, _mapping, _text
from firefeed.rules.template import Template, parse_template

LOOKUP_KEYS = ("lookup", "match", "set", "default")


@dataclass(frozen=True)
class LookupSet:
    """One field a lookup action writes: the matched row's `column`, else the `default` template.

    `column` None: the field is only in `default` (a matched item keeps its value);
    `default` None: an unmatched item keeps its value. `columns` are every column the
    action reads from the table, in order; a part's column is `columns.index(column)`.
    """

    field: str
    lookup: str  # the lookup's name
    table: str  # its table in the schema of the pass
    match: str  # the field whose trimmed text is matched against the key column
    column: str | None
    default: Template | None
    tag: str  # the action's id among the rules (`<rule index>_<t|e><position>`)
    columns: tuple[str, ...]
    path: str  # where the action is written (`rules[2].then[0]`), for the report
    order: tuple[str, ...]  # the fields of all the action's parts, in the order they are computed
    #: the same fields in the order the spec writes them: the order a field the action creates takes
    #: among the export's default columns (8.21), which computing the matched field last must not change
    written: tuple[str, ...]

    @property
    def first(self) -> bool:
        """The action's first part (its report columns are computed with it)."""
        return self.field == self.order[0]


def parse_lookup(
    raw: Mapping[str, Any], path: str, *, key_field: str, lookups: Mapping[str, str] | None, tag: str
) -> tuple[LookupSet, ...]:
    """A lookup action's parts, the one writing the matched field last (the others never read it)."""
    _mapping(raw, path, LOOKUP_KEYS, ("lookup", "match"))
    name = _text(raw["lookup"], f"{path}.lookup")
    known = lookups or {}
    if name not in known:
        listed = ", ".join(repr(n) for n in known) or "none"
        raise SpecError(f"{path}.lookup", f"names no lookup of the spec's `lookups` (known: {listed})")
    match = _field_name(raw["match"], f"{path}.match")
    targets: dict[str, str | None] = {}
    raw_set = raw.get("set") if raw.get("set") is not None else {}
    if not isinstance(raw_set, Mapping):
        raise SpecError(f"{path}.set", f"must be a mapping of field -> lookup column, not {_kind(raw_set)}")
    for target, column in raw_set.items():
        targets[_field_name(target, f"{path}.set")] = _field_name(column, f"{path}.set.{target}")
    defaults: dict[str, Template] = {}
    raw_default = raw.get("default") if raw.get("default") is not None else {}
    if not isinstance(raw_default, Mapping):
        raise SpecError(f"{path}.default", f"must be a mapping of field -> template, not {_kind(raw_default)}")
    for target, text in raw_default.items():
        where = f"{path}.default.{target}"
        defaults[_field_name(target, f"{path}.default")] = parse_template(_text(text, where, allow_none=True), where)
    if not targets and not defaults:
        raise SpecError(f"{path}.set", "must name at least one field to set")
    fields = list(dict.fromkeys([*targets, *defaults]))
    written = tuple(fields)
    if key_field in fields:
        where = f"{path}.set.{key_field}" if key_field in targets else f"{path}.default.{key_field}"
        raise SpecError(where, f"may not change the key field {key_field!r}")
    if match in fields:
        fields.remove(match)
        fields.append(match)
    columns = tuple(dict.fromkeys(c for c in targets.values() if c is not None))
    order = tuple(fields)
    return tuple(
        LookupSet(t, name, known[name], match, targets.get(t), defaults.get(t), tag, columns, path, order, written)
        for t in fields
    )
