"""Fields a rule reads that nothing has made by the time it runs: the RunReport warns about them.

A field no source carries and no earlier rule sets reads as empty on every item
(SPEC 8), which is what the language must do for a field a feed sometimes
leaves out. A misspelled name reads the same way: `Quantty lte 0` excluded
every item of a merchant's feed and only the drop guard caught it. The run
goes on as the rules say, and the report names the rule and the field, so the
mistake is seen on the first run instead of in the channel's rejections.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from firefeed.rules.groups import Aggregate
from firefeed.rules.lookups import LookupSet
from firefeed.rules.model import ELEMENT, Action, Exclude, Rule, action_reads, condition_fields
from firefeed.rules.template import parse_template
from firefeed.suggest import did_you_mean

if TYPE_CHECKING:
    from firefeed.spec.model import ExportSpec, ProjectSpec


def spec_warnings(spec: ProjectSpec, merged: Sequence[str], result: Sequence[str]) -> list[str]:
    """Every field-nothing-made warning of a spec, as a run's RULES step and a preview give them: `merged`
    are the merged items' fields, `result` the project's result's (what its rules made added)."""
    warnings = unread_field_warnings(spec.parsed_rules, merged)
    for i, exp in enumerate(spec.exports):
        # An export's own rules start from the project's result (P29).
        warnings += unread_field_warnings(exp.parsed_rules, result, path=f"exports[{i}].rules")
        warnings += unread_export_field_warnings(exp, result, path=f"exports[{i}]")
    if len(warnings) > MAX_WARNINGS:
        rest = len(warnings) - MAX_WARNINGS
        warnings = [*warnings[:MAX_WARNINGS], f"and {rest} more rules or exports read fields nothing makes"]
    return warnings


#: the field warnings a run or a preview lists (a spec may hold thousands of rules)
MAX_WARNINGS = 50


def _reads(action: Action) -> list[str]:
    """What the action reads as input. A lookup's target is read only to keep it for an unmatched item:
    a target nothing made yet is the usual case (a new `google_product_category`), not a mistake."""
    if isinstance(action, Aggregate):
        return list(action.of.fields) if action.of is not None else []
    reads = list(action_reads(action))
    if isinstance(action, LookupSet):
        reads = [f for f in reads if f != action.field or f == action.match]
    return reads


def unread_field_warnings(rules: Sequence[Rule], fields: Iterable[str], *, path: str = "rules") -> list[str]:
    """One warning per enabled rule that reads a field unknown when it runs; `fields`: those the rules start
    from (the merged items', or the project's result for an export's own rules); `path`: where the rules are.

    Known, in order: `fields`, then what each action before writes (a rule's `else` knows what its own `then`
    writes, a little generous: the check warns only about names nothing in the spec could have made)."""
    known = set(fields)
    warnings: list[str] = []
    budget = [_SUGGESTED]
    for rule in rules:
        if not rule.enabled:
            continue
        unknown: dict[str, None] = {}
        reads = list(condition_fields(rule.when)) if rule.when is not None else []
        unknown.update((f, None) for f in reads if f not in known and f != ELEMENT)
        for action in (*rule.then, *rule.else_):
            unknown.update((f, None) for f in _reads(action) if f not in known and f != ELEMENT)
            if not isinstance(action, Exclude):
                known.add(action.field)
        if unknown:
            names = _listed([repr(f) + _hint(f, known, budget) for f in unknown])
            warnings.append(
                f"{path}[{rule.index - 1}] ({rule.name!r}) reads {names}, which no source has and no earlier rule"
                " sets: it reads as empty on every item (a misspelled field name?)"
            )
    return warnings


def unread_export_field_warnings(export: ExportSpec, fields: Iterable[str], *, path: str) -> list[str]:
    """One warning per export whose `fields` or `where` read a field nothing made: `fields` are the project's
    result's, to which the export's own rules add what they write; `path`: the export's (`exports[i]`).

    A `fields` value without braces is a field name (P9), so `shipping.country: US` writes an empty
    sub-attribute on every item, silently: the warning says how to write a fixed text (`{value: US}`,
    C1), which reads no field and so is never warned about."""
    known = set(fields)
    for rule in export.parsed_rules:
        if rule.enabled:
            known.update(a.field for a in (*rule.then, *rule.else_) if not isinstance(a, Exclude))
    unknown: dict[str, dict[str, None]] = {}  # field -> where it is read, each place once
    for out, value in (export.fields or {}).items():
        if not isinstance(value, str):
            continue  # C1: a fixed text reads no field
        names = parse_template(value, f"{path}.fields.{out}").fields if "{" in value or "}" in value else (value,)
        for name in names:
            if name not in known:
                unknown.setdefault(name, {})[f"fields.{out}"] = None
    where = export.where_condition
    for name in condition_fields(where) if where is not None else ():
        if name not in known and name != ELEMENT:
            unknown.setdefault(name, {})["where"] = None
    if not unknown:
        return []
    reads = _listed(
        [f"{name!r}{_hint(name, known, [_SUGGESTED])} ({_listed(list(places))})" for name, places in unknown.items()]
    )
    return [
        f"{path} ({export.name!r}) reads fields that no source has and no rule sets: {reads}. They read as"
        " empty on every item (a misspelled field name? A value without braces is a field name: write a"
        " fixed text as {value: US}, with a rule's `set`, or as a template such as '{price} USD')"
    ]


#: the fields one warning names (and, per field, the places an export's names): a spec may hold thousands
_LISTED = 20
#: the unknown names of one call given a "did you mean" (each compares the name with every known field)
_SUGGESTED = 100


def _hint(name: str, known: set[str], budget: list[int]) -> str:
    """A suggestion for a misspelled field while the call's budget lasts (a hostile spec may misspell thousands)."""
    if budget[0] <= 0:
        return ""
    budget[0] -= 1
    return did_you_mean(name, known)


def _listed(items: list[str]) -> str:
    shown = ", ".join(items[:_LISTED])
    return shown + (f" and {len(items) - _LISTED} more" if len(items) > _LISTED else "")
