"""The delta's RULES over only what the changed fields reach (#52): the stock refresh's rules in a slice.

When a refresh changes a few fields of the items it touches (an enrich source's availability, say), most
of the rules read none of them: an item's output in every column those rules alone write is the one the
kept result holds. The 1M stock delta ruled its 80k changed items through all 20 rules (1.1-1.3 s of
one core, RULES' longest piece), where one rule reads what changed.

`reach` follows the changed fields through the rules in order, action by action (an action's field is
reached when its rule's `when` or the action reads a reached field); the rules the output's reached
columns need (those writing them, and every earlier rule writing a field one of those reads) are the
slice, run over the changed items' new rows. Their reached columns and the flags of the rules whose
`when` reads a reached field come from the slice, every other column from the item's kept row. Their
counts: a rule whose `when` reads nothing reached counts each item as before; the others are counted by
the slice.

It applies only where that is exact, else the rules run in full (`None`):
- no enabled rule reads across items (groups, aggregates, group_first, lookups: a changed member changes
  others' rows) and the rules' names are unique (the counts are by name);
- no excluding rule's `when` reads a reached field: each changed item is then kept or excluded as it was,
  so the kept result holds exactly the changed items it will hold. Those it lacks (excluded last time)
  are ruled in full, and must be excluded again;
- the changed fields are known: MERGE made the changed items' new rows from their items rows (one enrich
  source changed some of their values: no item added, removed or moved);
- the kept result's flag columns of the rules counted by the slice are in the slice's result.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from psycopg2 import sql

from firefeed.rules._plan import flag_column
from firefeed.rules.lookups import LookupSet
from firefeed.rules.model import Rule, action_reads, action_writes, condition_fields, effective
from firefeed.schema.identifiers import KEY, ORD, column_for_field, ident


@dataclass(frozen=True)
class Slice:
    """What a change of `changed` fields reaches through the rules."""

    changed: frozenset[str]
    #: the fields whose output may differ from the kept row's
    reached: frozenset[str]
    #: the rules run over the changed items (in order): those the reached fields and counts need
    rules: tuple[Rule, ...]
    #: the names of the rules whose `when` reads a reached field: their counts and flags are the slice's
    counted: frozenset[str]

    def describe(self) -> str:
        """How the step's detail names it: `slice: <n> rules (<changed fields>)`."""
        return f"slice: {len(self.rules)} rules ({', '.join(sorted(self.changed))} changed)"

    def from_slice(self, column: str) -> bool:
        """Whether the result's `column` is taken from the slice's row (else from the kept row)."""
        return column in self._taken

    @cached_property
    def _taken(self) -> frozenset[str]:
        return frozenset(column_for_field(f) for f in self.reached) | self.flags

    @property
    def fields(self) -> frozenset[str]:
        """The fields the slice's rules read or write, and the reached ones: all its tables need hold."""
        used = set(self.reached)
        for rule in self.rules:
            used.update(rule.reads)
            used.update(rule.writes)
        return frozenset(used)

    @property
    def counted_flags(self) -> list[tuple[str, str]]:
        """The counted rules' names and flag columns, in the rules' order (a counted rule has a `when`)."""
        return [(r.name, flag_column(r)) for r in self.rules if r.name in self.counted and r.when is not None]

    @property
    def flags(self) -> frozenset[str]:
        return frozenset(column for _, column in self.counted_flags)


def reads_across_items(rule: Rule) -> str | None:
    """What makes a rule's outcome for one item depend on more than that item; None: nothing does."""
    if rule.uses_groups:
        return f"rule {rule.name!r} reads groups (aggregate or group_first)"
    if any(isinstance(a, LookupSet) for a in (*rule.then, *rule.else_)):
        # Its report lists the top unmatched values over all items: not a sum of the items' counts.
        return f"rule {rule.name!r} uses a lookup"
    return None


def counts_unchanged(rules: Sequence[Rule], changed: Iterable[str]) -> bool:
    """Whether a change of the fields `changed` leaves every count as it was: the slice is exact and no rule
    decides on a reached field. Each changed item is then kept or excluded as before, and counted by each
    rule as before: its old row is never needed (MERGE reads none, RULES rules none)."""
    the_slice = reach(rules, changed)
    return the_slice is not None and not the_slice.counted


def sliceable(rules: Sequence[Rule]) -> bool:
    """Whether any change could be sliced: no enabled rule reads across items, and names are unique."""
    enabled = [r for r in rules if r.enabled]
    if len({r.name for r in enabled}) != len(enabled):
        return False
    return all(reads_across_items(r) is None for r in enabled)


def reach(rules: Sequence[Rule], changed: Iterable[str]) -> Slice | None:
    """The slice of `rules` a change of the fields `changed` needs; None when slicing is not exact (an
    excluding rule's `when` reads a reached field, or a rule reads across items)."""
    if not sliceable(rules):
        return None
    enabled = [r for r in rules if r.enabled]
    reached = set(changed)
    counted: set[str] = set()
    for rule in enabled:
        when = set(condition_fields(rule.when)) if rule.when is not None else set()
        decided = bool(when & reached)  # the rule's verdict on an item may change
        if decided:
            if rule.excludes:
                return None
            counted.add(rule.name)
        for branch in (rule.then, rule.else_):
            for action in effective(branch):
                if decided or set(action_reads(action)) & reached:
                    reached.update(action_writes(action))
    # The rules those outputs and counts need, and every earlier rule writing a field one of them reads.
    needed = [r for r in enabled if r.name in counted or set(r.writes) & reached]
    chosen = {r.name for r in needed}
    wanted = {f for r in needed for f in r.reads}
    for rule in reversed(enabled):
        if rule.name in chosen:
            wanted.update(rule.reads)
        elif set(rule.writes) & wanted:
            if rule.excludes:
                return None  # an excluding rule that also writes: its exclusions would run in the slice
            chosen.add(rule.name)
            wanted.update(rule.reads)
    sliced = tuple(r for r in enabled if r.name in chosen)
    return Slice(frozenset(changed), frozenset(reached), sliced, frozenset(counted))


def assembled_select(schema: str, kept: str, sliced: str, columns: Sequence[str], the_slice: Slice) -> sql.Composable:
    """The changed items' result rows in `_ff_ord` order: each kept row (in the table `kept`, read whole)
    with the slice's columns taken from its row of `sliced`, in the kept result's `columns` order; an item
    the kept result lacks has none."""
    picks = sql.SQL(", ").join(
        sql.SQL("{side}.{c}").format(side=sql.SQL("s" if the_slice.from_slice(c) else "k"), c=ident(c)) for c in columns
    )
    return sql.SQL("SELECT {picks} FROM {kept} k JOIN {sliced} s ON s.{key} = k.{key} ORDER BY k.{ord}").format(
        picks=picks, kept=ident(schema, kept), sliced=ident(schema, sliced), key=ident(KEY), ord=ident(ORD)
    )


def replace_counts(
    before: dict[str, int], the_slice: Slice, sliced: dict[str, int], lacked: dict[str, int]
) -> dict[str, int]:
    """The changed items' new rows' counts: the kept rows' own (`before`) for a rule the slice does not
    count, the slice's for one it does, plus the counts of the rows the kept result lacks."""
    out = {name: (sliced.get(name, 0) if name in the_slice.counted else n) for name, n in before.items()}
    for name, n in lacked.items():
        out[name] = out.get(name, 0) + n
    return out
