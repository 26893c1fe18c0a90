"""Groups of variants in the rule language (SPEC 9, P16-P20): the `aggregate` action and `group_first`.

`group: item_group_id` at the top of a spec names the field whose trimmed text groups the
items (blank: a group of one). A rule that aggregates or asks `group_first` reads the
groups as they are when it starts, so it always starts a pass of its own (_plan); that
pass joins one grouped aggregate of its input table (sqlgen), so every member counts,
matched by the rule's `when` or not, and nothing the rule changes feeds back into it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from firefeed.errors import SpecError
from firefeed.rules._scalars import _field_name, _mapping, _text, parse_bool, parse_whole
from firefeed.rules._text import MAX_ROUND
from firefeed.rules.lists import ListFields
from firefeed.rules.template import FieldRef, Template, parse_template

AGGREGATE_OPS = ("count", "min", "max", "sum", "first", "last", "join")
AGGREGATE_KEYS = ("aggregate", "op", "of", "separator", "round")
#: a `join` keeps the first this many characters of its group's joined values. Every member holds
#: the group's join, so an unbounded one grows with the square of the group: 2,000 items of
#: 100 bytes in one group made a 404 MB export (measured); a million, a terabyte. Ten thousand
#: characters is twice what Google takes in any attribute.
JOIN_MAX_CHARS = 10_000


@dataclass(frozen=True)
class GroupFirst:
    """Condition leaf `{group_first: true}`: the item is the first of its group in export order."""

    group: str  # the spec's group field
    value: bool = True

    @property
    def reads(self) -> tuple[str, ...]:
        return ()


@dataclass(frozen=True)
class Aggregate:
    """`{aggregate: F, op, of: G, separator, round}`: F becomes the aggregate of G over the item's group."""

    field: str
    op: str
    of: Template | None  # None for count
    separator: str
    round: int | None  # min/max/sum only; None: as many decimals as the most precise input
    group: str
    tag: str  # the action's id among the rules (`<rule index>_<t|e><position>`)

    @property
    def of_field(self) -> str | None:
        """The field `of` names when it is a bare name, not a template: its value is read as it is,
        so a list field's elements count one by one and first/last keep the list (P16)."""
        if self.of is None or "{" in self.of.source:
            return None
        (ref,) = self.of.parts
        assert isinstance(ref, FieldRef)
        return ref.name

    def over_list(self, lists: ListFields) -> bool:
        """It reads a list field's elements (join/min/max/sum) or keeps its list (first/last)."""
        return self.op != "count" and self.of_field is not None and self.of_field in lists

    def keeps_list(self, lists: ListFields) -> bool:
        """Its value is a list: first/last of a list field (P16), so its target is a list field too."""
        return self.op in ("first", "last") and self.over_list(lists)


def _no_group(path: str, what: str) -> SpecError:
    return SpecError(path, f"{what} needs a top-level `group` naming the field that groups variants")


def parse_group_first(raw: Mapping[str, Any], path: str, *, group: str | None) -> GroupFirst:
    _mapping(raw, path, ("group_first",), ("group_first",))
    if group is None:
        raise _no_group(f"{path}.group_first", "group_first")
    return GroupFirst(group, parse_bool(raw["group_first"], f"{path}.group_first"))


def _of(raw: Any, path: str) -> Template:
    """P17 (as 8.18): with a `{` a template rendered per member, else the name of a field."""
    text = _text(raw, path)
    if "{" in text:
        return parse_template(text, path)
    return Template((FieldRef(_field_name(text, path)),), text)


def parse_aggregate(raw: Mapping[str, Any], path: str, *, target: str, group: str | None, tag: str) -> Aggregate:
    _mapping(raw, path, AGGREGATE_KEYS, ("aggregate", "op"))
    if group is None:
        raise _no_group(f"{path}.aggregate", "aggregate")
    op = _text(raw["op"], f"{path}.op")
    if op not in AGGREGATE_OPS:
        raise SpecError(f"{path}.op", f"must be one of {', '.join(AGGREGATE_OPS)}")
    of = None
    if op != "count":
        if raw.get("of") is None:
            raise SpecError(f"{path}.of", f"is required for op {op}")
        of = _of(raw["of"], f"{path}.of")
    separator = ","
    if raw.get("separator") is not None:
        separator = _text(raw["separator"], f"{path}.separator", allow_none=True)
    places = None
    if raw.get("round") is not None:
        places = parse_whole(raw["round"], f"{path}.round", maximum=MAX_ROUND)
    return Aggregate(target, op, of, separator, places, group, tag)


#: the grouped join's columns, as a pass sees them: the first position of the item's group
GROUP_FIRST_COLUMN = "_ff_gfirst"


def aggregate_column(tag: str) -> str:
    """The grouped join's column holding an aggregate action's value for the item's group."""
    return f"_ff_ga{tag}"
