"""How the enabled rules are cut into passes, levels and steps.

A *pass* is one INSERT ... SELECT from the previous table into a new one (the
expensive part: every row is written). Inside a pass, nested subqueries
(*levels*) let a rule see what an earlier rule of the same pass wrote, at the
cost of one cheap projection; so passes are only cut where counting needs
it: an excluding rule starts a new pass. There it is the first rule, every
row of the pass input reaches it, and the rows it drops (rows in - rows out)
are exactly the ones it excluded, while the later rules of the pass only see
the kept rows, which is what the INSERT's RETURNING counts.

Inside a level, rules are independent (none reads a field another one of the
level wrote, except to rewrite that field reading its value once), so all
their `when`s are computed side by side once per row (flag columns) and their
actions composed into one CASE per field; a rewrite wraps the earlier CASE.
A rule's action chain is composed inline; where an action would repeat an
already composed value several times (truncate, math), the rest of the chain
becomes a new *step* in the next level, which reuses the rule's flag.

Composing inline writes a value out once per place that reads it, so steps
and actions only join a level while its text stays linear in the rules
(_growth.Scope); otherwise they go to the next level, where the values are
columns. That is what keeps a long rule list from compiling to a statement
that doubles with every rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from firefeed.rules._growth import Scope
from firefeed.rules.groups import Aggregate, GroupFirst
from firefeed.rules.lists import NO_LISTS, ListFields
from firefeed.rules.lookups import LookupSet
from firefeed.rules.model import (
    Action,
    AllOf,
    AnyOf,
    Condition,
    Exclude,
    FieldAction,
    Not,
    Rule,
    action_reads,
    branch_excludes,
    condition_fields,
    effective,
)
from firefeed.schema.identifiers import column_for_field

#: more levels than this in one pass starts a new pass (keeps statements and plans small)
MAX_LEVELS = 40
#: Postgres allows 1600 columns; leave room for the flag columns
MAX_COLUMNS = 1500


@dataclass(frozen=True)
class Step:
    """Part of one rule's actions, computed in one level."""

    rule: Rule
    then: tuple[FieldAction, ...]
    else_: tuple[FieldAction, ...]
    first: bool  # the rule's first step: its flag is computed in this level

    @property
    def writes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a.field for a in (*self.then, *self.else_)))

    @property
    def reads(self) -> set[str]:
        names = {f for a in (*self.then, *self.else_) for f in action_reads(a)}
        if self.first and self.rule.when is not None:
            names.update(condition_fields(self.rule.when))
        return names


@dataclass(frozen=True)
class PassPlan:
    """One pass: its rules, their levels, and the fields it reads and writes."""

    number: int  # 1-based
    rules: tuple[Rule, ...]
    levels: tuple[tuple[Step, ...], ...]
    fields_in: tuple[str, ...]
    fields_out: tuple[str, ...]
    excluding: Rule | None  # the pass's first rule when it excludes
    lists: ListFields = NO_LISTS  # the project's list fields: their columns are text[]
    #: rules of this pass moved before the next pass, a DELETE in place (_hoist): that pass counts them
    deferred: tuple[Rule, ...] = ()
    #: for that DELETE pass: the previous pass's deferred rules, counted among the rows it keeps
    counts_after: tuple[Rule, ...] = ()
    #: a later grouped pass's group field: this pass's table also holds its trimmed value (GROUP_TEXT_COLUMN)
    keys_group: str | None = None
    #: a grouped pass whose input tables hold GROUP_TEXT_COLUMN (written by the pass before: `keys_group`)
    keyed_input: bool = False

    @property
    def created(self) -> tuple[str, ...]:
        return self.fields_out[len(self.fields_in) :]

    @property
    def flagged(self) -> tuple[Rule, ...]:
        """Rules with a `when`: their per-row match flag is a boolean column of the pass table."""
        return tuple(r for r in self.rules if r.when is not None)

    def columns(self, fields: Sequence[str] | None = None) -> list[str]:
        return [column_for_field(f) for f in (self.fields_out if fields is None else fields)]

    @property
    def grouped(self) -> bool:
        """The pass's first rule reads groups: the pass joins its input's grouped aggregate (sqlgen)."""
        return self.rules[0].uses_groups

    @property
    def group(self) -> str | None:
        """The spec's group field, when the pass is grouped."""
        return _group_field(self.rules[0]) if self.grouped else None

    @property
    def aggregates(self) -> tuple[Aggregate, ...]:
        """The aggregate actions the pass's first rule runs (the only rule of a pass that may)."""
        first = self.rules[0]
        return tuple(a for a in (*effective(first.then), *effective(first.else_)) if isinstance(a, Aggregate))

    @property
    def lookups(self) -> tuple[tuple[Rule, LookupSet], ...]:
        """The lookup actions the pass runs (each by its first part), in rule and action order."""
        return lookups_of(self.rules)

    def extra(self) -> list[tuple[str, str]]:
        """The pass table's own columns after the fields: the rules' flags, then each lookup's
        value and matched columns (what its report counts are read from), then the group value a
        later grouped pass reads (`keys_group`)."""
        flags = [(flag_column(r), "boolean") for r in self.flagged]
        reports = [(c, t) for _, part in self.lookups for c, t in lookup_report_columns(part.tag)]
        keyed = [(GROUP_TEXT_COLUMN, "text")] if self.keys_group is not None else []
        return flags + reports + keyed

    def list_columns(self) -> list[str]:
        """The columns of `fields_out` that hold lists (text[])."""
        return [column_for_field(f) for f in self.fields_out if f in self.lists]


def lookups_of(rules: Sequence[Rule]) -> tuple[tuple[Rule, LookupSet], ...]:
    """The lookup actions `rules` run (each by its first part), in rule and action order."""
    return tuple(
        (rule, a)
        for rule in rules
        for a in (*effective(rule.then), *effective(rule.else_))
        if isinstance(a, LookupSet) and a.first
    )


def excluded_lookups_rule(rule: Rule) -> Rule | None:
    """`rule`'s branches that exclude, as a rule that keeps its items (each branch without its
    `exclude`, the other branch empty): run as a SELECT over the rule's pass input, it reports the
    lookups those branches run before their items leave (P23). None when they hold no lookup."""

    def ran(branch: tuple[Action, ...]) -> tuple[Action, ...]:
        return tuple(a for a in branch if not isinstance(a, Exclude)) if branch_excludes(branch) else ()

    then, else_ = ran(rule.then), ran(rule.else_)
    if not any(isinstance(a, LookupSet) and a.first for a in (*then, *else_)):
        return None
    return dataclasses.replace(rule, then=then, else_=else_)


def _group_of(cond: Condition) -> str | None:
    if isinstance(cond, GroupFirst):
        return cond.group
    if isinstance(cond, Not):
        return _group_of(cond.item)
    if isinstance(cond, AllOf | AnyOf):
        return next((g for g in map(_group_of, cond.items) if g is not None), None)
    return None


#: a pass table's column holding each item's group value, trimmed (P18), for the grouped pass after it
GROUP_TEXT_COLUMN = "_ff_gt"


def lookup_report_columns(tag: str) -> list[tuple[str, str]]:
    """A lookup action's report columns: the trimmed value it found no row for, and whether it found
    one (both NULL where it did not run on the item; the value NULL too where it found one)."""
    return [(f"_ff_lv{tag}", "text"), (f"_ff_lm{tag}", "boolean")]


def flag_column(rule: Rule) -> str:
    return f"_ff_m{rule.index}"


def _segments(actions: tuple[FieldAction, ...]) -> list[tuple[FieldAction, ...]]:
    """Cut a branch where an action would repeat a value composed earlier in the same segment,
    or would make the segment's text grow faster than its actions (_growth)."""
    segments: list[tuple[FieldAction, ...]] = []
    current: list[FieldAction] = []
    written: set[str] = set()
    scope = Scope()
    for action in actions:
        if isinstance(action, LookupSet) and not action.first:
            # A lookup's parts read one joined row: they stay in one step, so one level joins it.
            scope.admit((action,), force=True)
            current.append(action)
            written.add(action.field)
            continue
        repeats = any(times > 1 and name in written for name, times in action_reads(action).items())
        # A lookup joins on the value its level starts with: it opens a step of its own.
        lookup = isinstance(action, LookupSet) and any(action.match == a.field for a in current)
        if current and (repeats or lookup or not scope.admit((action,))):
            segments.append(tuple(current))
            current, written, scope = [], set(), Scope()
            scope.admit((action,), force=True)
        elif not current:
            scope.admit((action,), force=True)
        current.append(action)
        written.add(action.field)
    segments.append(tuple(current))
    return segments


def steps_of(rule: Rule) -> list[Step]:
    then = _segments(effective(rule.then))
    else_ = _segments(effective(rule.else_))
    count = max(len(then), len(else_))
    return [
        Step(rule, then[i] if i < len(then) else (), else_[i] if i < len(else_) else (), i == 0) for i in range(count)
    ]


def _rewrites_once(branch: tuple[FieldAction, ...], name: str) -> bool:
    """The branch reads the value `name` had before it only to rewrite `name`, and at most once."""
    for action in branch:
        times = action_reads(action).get(name, 0)
        if times:
            return action.field == name and times == 1
        if action.field == name:
            return True  # overwritten before being read
    return True


def _fits(step: Step, written: set[str]) -> bool:
    """Whether `step` can join a level whose earlier steps wrote `written`.

    It can when it touches none of those fields, or when it only rewrites them,
    reading each earlier value once: its expression then wraps the earlier
    step's (see sqlgen) instead of nesting one more subquery (the 20 benchmark
    rules: 7 levels -> 4; no time difference measured on 1M items, but smaller
    statements to plan, which chunked runs do once per connection). Reading
    once per branch is not enough by itself: with a `when`, the CASE names the
    earlier value in both branches, so the level's Scope decides too (_Levels).
    """
    touched = (step.reads | set(step.writes)) & written
    if not touched:
        return True
    if step.first and step.rule.when is not None and set(condition_fields(step.rule.when)) & touched:
        return False  # flags are computed from the values the level starts with
    return all(
        name in step.writes and _rewrites_once(step.then, name) and _rewrites_once(step.else_, name) for name in touched
    )


class _Levels:
    """The levels of a pass's rules so far; rules are added one at a time (plan_passes tries each)."""

    def __init__(self) -> None:
        self.levels: list[tuple[Step, ...]] = []
        self._current: list[Step] = []
        self._written: set[str] = set()
        self._scope = Scope()

    @property
    def count(self) -> int:
        return len(self.levels) + (1 if self._current else 0)

    def add(self, rule: Rule) -> None:
        for step in steps_of(rule):
            conditional = step.rule.when is not None
            if not self._current:
                self._scope.admit(step.then, step.else_, conditional=conditional, force=True)
            elif not (_fits(step, self._written) and self._scope.admit(step.then, step.else_, conditional=conditional)):
                self.levels.append(tuple(self._current))
                self._current, self._written, self._scope = [], set(), Scope()
                self._scope.admit(step.then, step.else_, conditional=conditional, force=True)
            self._current.append(step)
            self._written.update(step.writes)

    def done(self) -> list[tuple[Step, ...]]:
        return [*self.levels, tuple(self._current)] if self._current else list(self.levels)


def _levels(rules: Sequence[Rule]) -> list[tuple[Step, ...]]:
    builder = _Levels()
    for rule in rules:
        builder.add(rule)
    return builder.done()


@dataclass
class _Group:
    """A pass's rules and their levels, kept from when the rules were cut (not planned twice)."""

    rules: list[Rule]
    levels: list[tuple[Step, ...]]


def _groups(rules: Sequence[Rule], known: list[str]) -> list[_Group]:
    """Cut the enabled rules into passes; `known` (the input fields) gains the fields they create."""
    groups: list[_Group] = []
    current: list[Rule] = []
    seen = set(known)  # `known` in order, `seen` to test membership: a list scan made this quadratic
    levels = _Levels()
    for rule in (r for r in rules if r.enabled):
        new = [f for f in rule.writes if f not in seen]
        too_wide = len(known) + len(new) + len(current) + 1 > MAX_COLUMNS
        # A rule reading groups sees them as its pass's input holds them: it starts a pass (P16).
        if current and (rule.excludes or rule.uses_groups or too_wide):
            groups.append(_Group(current, levels.done()))
            current, levels = [], _Levels()
        levels.add(rule)
        if current and levels.count > MAX_LEVELS:
            # the rule starts the next pass (a builder is not rolled back: a new one holds the rule)
            groups.append(_Group(current, _levels(current)))
            current, levels = [], _Levels()
            levels.add(rule)
        current.append(rule)
        known.extend(new)
        seen.update(new)
    if current:
        groups.append(_Group(current, levels.done()))
    return groups


def iter_passes(rules: Sequence[Rule], fields: Sequence[str]) -> Iterator[PassPlan]:
    """The passes of plan_passes, one at a time: a caller that stops early (the SQL-size check, at
    the pass that crosses its cap) does not build the rest, each of which lists every column."""
    known = list(dict.fromkeys(fields))
    groups, deferred = _hoist(_groups(rules, known), len(known))
    keys, keyed = _group_keys(groups)
    fields_in = tuple(dict.fromkeys(fields))
    for number, group in enumerate(groups, start=1):
        out = list(fields_in)
        seen = set(out)
        for rule in group.rules:
            new = [f for f in rule.writes if f not in seen]
            out.extend(new)
            seen.update(new)
        first = group.rules[0]
        yield PassPlan(
            number,
            tuple(group.rules),
            tuple(group.levels),
            fields_in,
            tuple(out),
            first if first.excludes else None,
            first.lists,
            deferred=deferred.get(number, ()),
            counts_after=deferred.get(number - 1, ()),
            keys_group=keys.get(number - 1),
            keyed_input=number - 1 in keyed,
        )
        fields_in = tuple(out)


def _group_keys(groups: Sequence[_Group]) -> tuple[dict[int, str], set[int]]:
    """Per pass (0-based), the group field whose trimmed value its table holds for a grouped pass after
    it; and the grouped passes that read that column.

    A grouped pass other than the first reads what the pass before it wrote, through any passes
    that only delete in place (they keep the table, and its column). The first pass reads the
    rules' input, which has no such column: it computes the value itself, as does a pass whose
    writer changes the group field in its last level (the value would be written out again,
    inside the trim, once per use). Computed once in the writing pass (its parts run side by
    side), the value is a column each reader of the grouped pass joins its groups on, instead
    of computing it per item (1M catalog items: ~0.3 s a reader).
    """
    keys: dict[int, str] = {}
    keyed: set[int] = set()
    for j in range(1, len(groups)):
        first = groups[j].rules[0]
        if not first.uses_groups:
            continue
        group = _group_field(first)
        chain = [j - 1]
        while chain[-1] > 0 and len(groups[chain[-1]].rules) == 1 and only_excludes(groups[chain[-1]].rules[0]):
            chain.append(chain[-1] - 1)
        writer = groups[chain[-1]]
        if any(group in step.writes for step in writer.levels[-1]):
            continue
        keys.update((i, group) for i in chain)
        keyed.add(j)
    return keys, keyed


def _group_field(rule: Rule) -> str:
    """The group field a rule that reads groups reads (its aggregate's, or its group_first's)."""
    for a in (*rule.then, *rule.else_):
        if isinstance(a, Aggregate):
            return a.group
    assert rule.when is not None
    group = _group_of(rule.when)
    assert group is not None
    return group


def plan_passes(rules: Sequence[Rule], fields: Sequence[str]) -> list[PassPlan]:
    """Cut the enabled rules into passes; `fields` are the input table's fields, in order."""
    return list(iter_passes(rules, fields))


def only_excludes(rule: Rule) -> bool:
    """The rule only excludes (it changes no field and reads no group): alone, its pass is a DELETE
    (sqlgen.deletes_only)."""
    return rule.excludes and not rule.uses_groups and not rule.writes


def _hoist(groups: list[_Group], width: int) -> tuple[list[_Group], dict[int, tuple[Rule, ...]]]:
    """Move the rules after a rule that only excludes into the pass before it, where that saves a pass.

    A pass of one rule that only excludes runs as a DELETE in the previous pass's table
    (rule_passes), but with more rules after it in its pass, the pass copies every kept item.
    When none of those rules writes a field the excluding rule reads (its `when`, and the actions of
    a branch whose lookups are reported, P23; by construction none of
    them excludes or reads groups: those start a pass), they give every kept item the same values
    computed before the DELETE as after it: they join the previous pass, and the excluding rule
    becomes a DELETE pass of its own. Their matches are counted among the kept rows once the
    DELETE ran (its `counts_after`). Returns the new groups and, per pass number (1-based), the
    rules it defers.
    """
    out: list[_Group] = []
    deferred: dict[int, tuple[Rule, ...]] = {}
    for group in groups:
        rule, rest = group.rules[0], group.rules[1:]
        reads = set(condition_fields(rule.when)) if rule.when is not None else set()
        reported = excluded_lookups_rule(rule)
        if reported is not None:
            # Its lookups are reported from the values the rule sees, before the rules after it (P23).
            reads.update(f for a in (*reported.then, *reported.else_) for f in action_reads(a))
        if (
            out
            and rest
            and only_excludes(rule)
            and not (len(out[-1].rules) == 1 and only_excludes(out[-1].rules[0]))  # never into another DELETE
            and not {f for r in rest for f in r.writes} & reads
        ):
            merged = [*out[-1].rules, *rest]
            levels = _levels(merged)
            if len(levels) <= MAX_LEVELS and width + len(merged) + 1 <= MAX_COLUMNS:
                out[-1] = _Group(merged, levels)
                deferred[len(out)] = tuple(rest)
                out.append(_Group([rule], _levels([rule])))
                continue
        out.append(group)
    return out, deferred
