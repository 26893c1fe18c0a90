"""How large the rules can make a value: a spec whose rules could grow one without bound is refused.

A rule's value may hold the values it reads, so a few rules grow values
exponentially: `set: d, value: "{d}{d}"` sixteen times turns 100 items of
100 bytes into a 655 MB table (measured), twenty-four times into 168 GB, which
fills the database's disk for every company before any statement timeout ends
it. The SQL cap (`limits.py`) cannot see this: the statements stay small.

So each field gets an upper bound, in bytes, of what the rules can make of it,
taking every value the run reads (a source's, a lookup's) as `REFERENCE_BYTES`
long: a template adds its parts, `replace` multiplies by how much longer its
`with` is than its `find`, and so on, for each branch of each rule in order; a
rule with `when` leaves the larger of its branches' bounds. Consecutive
`replace`s of one character each on a field (escaping `&`, `<` and `>`) are,
together, a substitution of characters: the field grows by the most that one
character becomes through all of them (5x for those three, not 5 x 4 x 4). The bound is
conservative (a list is counted as its text joined with ",", with as many
elements as that text could hold; after a `map` or `math`, which add none,
the count they found). When a field's bound passes
`rules_max_growth` times `REFERENCE_BYTES`, the spec is refused, naming the
first rule that takes it there. Channel rules continue from the bounds the
project's rules leave.

An aggregate `join` holds a whole group, whatever its size: its value is
bounded where it is computed instead (`groups.JOIN_MAX_CHARS`).

Bounded by the feed, not by the rules: a `map` over a list whose target
reads a field may copy that field into every element, so a list of n elements
can become n times the field. The bound counts the field once (a target's
literal text counts per element), which keeps P11's `default: "{sizes[0]}?"`
usable. That allowance is taken once along any chain of values: a field it
was taken for, and every field whose bound holds such a field, is *loose*,
and a later `map` reading a loose field counts it once per element. Without
that, maps reading what an earlier one made (`default: "{tags}"` on `tags`,
eight times) would grow a 10-byte list to 200 MB an item while its bound
grew by 32 KiB a map; with it, only a feed with long lists and long values
can reach the unbounded case, and only once.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from firefeed.errors import SpecError
from firefeed.rules import model as m
from firefeed.rules._text import MAX_ROUND, NUMBER_MAX_CHARS
from firefeed.rules.groups import JOIN_MAX_CHARS, Aggregate
from firefeed.rules.lookups import LookupSet
from firefeed.rules.template import FieldRef, Template

#: what every value the run reads counts as, in bytes (a long product description). The bound is relative:
#: what a value can really be is the cap PARSE puts on every value read, in every format
#: (FIREFEED_PARSE_MAX_VALUE_CHARS, 131,072 characters, at most 4 bytes each), so a value the rules write
#: is at most rules_max_growth times that: 32 MiB at the defaults, and the issue's eight copies of a
#: 20 MB value (160 MB, 1.1 GB in one Postgres backend) cannot be read to begin with.
REFERENCE_BYTES = 64 * 1024
#: a case mapping makes a character at most this much longer in UTF-8 (two bytes to three: ɐ -> Ɐ)
_CASE_GROWTH = 1.5
#: an aggregate's number: its decimals, a sum's more digits, a sign and a point
_NUMBER_EXTRA = MAX_ROUND + 25

Bounds = dict[str, float]


@dataclass(frozen=True)
class Grown:
    """Each field's bound after some rules, and the loose fields among them (see the module's docstring):
    what channel rules continue from."""

    bounds: Bounds
    loose: frozenset[str] = frozenset()


def _bytes(text: str) -> int:
    return len(text.encode())


def _template(t: Template, bounds: Mapping[str, float], unknown: float = REFERENCE_BYTES) -> float:
    """A rendered template: its literal bytes and each reference's value (an element is at most its list)."""
    return sum(bounds.get(p.name, unknown) if isinstance(p, FieldRef) else _bytes(p) for p in t.parts)


def _refs(t: Template) -> set[str]:
    return {p.name for p in t.parts if isinstance(p, FieldRef)}


def _flows(action: m.FieldAction) -> set[str]:
    """The fields whose values the action's result may hold (its own field for one that edits it)."""
    if isinstance(action, m.Set):
        return _refs(action.value)
    if isinstance(action, m.Copy):
        return {action.source}
    if isinstance(action, m.Append | m.Prepend):
        return {action.field} | _refs(action.value)
    if isinstance(action, m.MapValues):
        return {action.field} | _map_refs(action)
    if isinstance(action, LookupSet):
        kept = {action.field} if action.column is None else set()
        return kept | (_refs(action.default) if action.default is not None else set())
    if isinstance(action, Aggregate):
        # a join is capped where it is computed, a number by its digits: only first/last copy a value
        return _refs(action.of) if action.of is not None and action.op in ("first", "last") else set()
    return {action.field}


def _map_targets(action: m.MapValues) -> list[Template]:
    return [t for _, t in action.values] + ([action.default] if action.default is not None else [])


def _map_refs(action: m.MapValues) -> set[str]:
    return set().union(*(_refs(t) for t in _map_targets(action)))


def _elements(size: float) -> float:
    """How many elements a list of this many bytes (joined with ",") can hold: one byte and a comma each."""
    return size / 2 + 1


def _min_match(pattern: str) -> int:
    """The fewest characters a match of `pattern` (Python syntax) covers; 0 when unknown."""
    parser = getattr(re, "_parser", None)
    try:
        return int(parser.parse(pattern).getwidth()[0]) if parser is not None else 0
    except Exception:
        return 0


def _regex_replace(action: m.RegexReplace, size: float) -> float:
    literal = sum(_bytes(p) for p in action.with_ if isinstance(p, str))
    groups = sum(1 for p in action.with_ if isinstance(p, int))
    shortest = _min_match(action.pattern.py)
    if shortest > 0:
        # Each match of k >= shortest characters becomes the literal and at most `groups` copies of it.
        return size * max(1.0, literal / shortest + groups)
    # Empty matches: the literal may land between any two characters (and a group holds at most its match).
    return size * (max(1, literal + groups) + literal) + literal


#: a chain of one-character `replace`s is bounded as one substitution for at most this many of them,
#: each `with` at most this many characters, while it tracks at most this many (character, count)
#: entries (then the next one starts a new chain, multiplying as any step did): HTML escaping takes
#: four steps of six characters and some thirty entries. Each step copies the entries, so the caps
#: keep a hostile spec's validation short (5,000 steps each bringing new characters: well under 1 s;
#: without the entries cap, 70 s).
_CHAIN_MAX = 32
_CHAIN_WITH_MAX = 16
_CHAIN_ENTRIES = 128


@dataclass(frozen=True)
class _Chain:
    """Consecutive one-character literal `replace`s on one field (a rule's branch, or rules without
    `when`). Each maps one character to a text everywhere, so together they map every character to a
    text: `made[c]` holds, per character, how many of it `c` has become (a character no `find` names
    stays itself). The field grows by the most bytes any character becomes, per byte it had."""

    start: float  # the field's bound before the chain
    made: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()
    steps: int = 0

    @staticmethod
    def takes(action: m.FieldAction) -> bool:
        return isinstance(action, m.Replace) and len(action.find) == 1 and len(action.with_) <= _CHAIN_WITH_MAX

    @property
    def full(self) -> bool:
        """Whether the next step starts a new chain."""
        return self.steps >= _CHAIN_MAX or sum(len(counts) for _, counts in self.made) >= _CHAIN_ENTRIES

    def then(self, action: m.Replace) -> _Chain:
        """The chain with `action` after its steps."""
        find, adds = action.find, Counter(action.with_)
        made: dict[str, dict[str, float]] = {}
        for c, counts in self.made:
            now = dict(counts)
            n = now.pop(find, 0.0)
            if n:
                for ch, k in adds.items():
                    now[ch] = now.get(ch, 0.0) + n * k
            made[c] = now
        # A character no earlier step changed is itself until now.
        made.setdefault(find, dict(adds))
        packed = tuple((c, tuple(counts.items())) for c, counts in made.items())
        return _Chain(self.start, packed, self.steps + 1)

    def bound(self) -> float:
        growth = max(
            (sum(n * _bytes(ch) for ch, n in counts) / _bytes(c) for c, counts in self.made),
            default=1.0,
        )
        return self.start * max(1.0, growth)


Chains = dict[str, _Chain]


def _action(
    action: m.FieldAction,
    bounds: Mapping[str, float],
    lists: m.ListFields,
    counts: Mapping[str, float],
    loose: frozenset[str] = frozenset(),
) -> float:
    """The bound of `action.field` after `action`, from `bounds` before it (`counts`: see `_count`;
    `loose`: the fields a `map` counts once per element)."""
    size = bounds.get(action.field, REFERENCE_BYTES)
    if isinstance(action, m.Set):
        return _template(action.value, bounds)
    if isinstance(action, m.Copy):
        return bounds.get(action.source, REFERENCE_BYTES)
    if isinstance(action, m.Append | m.Prepend):
        return size + 1 + _template(action.value, bounds)  # the text, or one more element and its comma
    if isinstance(action, m.Replace):
        return size * max(1.0, _bytes(action.with_) / _bytes(action.find))
    if isinstance(action, m.RegexReplace):
        return _regex_replace(action, size)
    if isinstance(action, m.Lowercase | m.Uppercase | m.Capitalize):
        return size * _CASE_GROWTH
    if isinstance(action, m.Math):
        extra = _bytes(format(action.value, "f")) + action.round + 3
        return size + extra * (_count(action.field, bounds, counts) if action.field in lists else 1)
    if isinstance(action, m.MapValues):
        targets = _map_targets(action)
        if action.field not in lists:
            return max([size, *(_template(t, bounds) for t in targets)])
        # Each element may become a target: its literal text counts once per element, the values it
        # reads once (see the module's docstring).
        literal = max((_template(t, {}, 0.0) for t in targets), default=0.0)
        read = max((_template(t, bounds) - _template(t, {}, 0.0) for t in targets), default=0.0)
        if _map_refs(action) & loose:
            return max(size, _count(action.field, bounds, counts) * (literal + 1 + read))
        return max(size, _count(action.field, bounds, counts) * (literal + 1) + read)
    if isinstance(action, m.Join):
        return size * max(1, _bytes(action.separator))
    if isinstance(action, LookupSet):
        found = REFERENCE_BYTES if action.column is not None else size
        return max(found, _template(action.default, bounds) if action.default is not None else size)
    if isinstance(action, Aggregate):
        if action.op == "join":
            return 4.0 * JOIN_MAX_CHARS
        of = _template(action.of, bounds) if action.of is not None else 0.0
        return of if action.op in ("first", "last") else min(of, NUMBER_MAX_CHARS) + _NUMBER_EXTRA
    # trim, truncate, split, take, dedupe, remove: never longer than before
    return size


def _count(field: str, bounds: Mapping[str, float], counts: Mapping[str, float]) -> float:
    """How many elements list `field` can hold: what an element-wise action left (`counts`), else
    what its bytes can hold. A `map` or `math` changes each element and adds none, so the next one
    multiplies by the same count: estimated from the grown bytes, two maps would count elements that
    were never added (and refuse a plain spec)."""
    return counts[field] if field in counts else _elements(bounds.get(field, REFERENCE_BYTES))


def _branch(
    actions: tuple[m.Action, ...],
    bounds: Bounds,
    lists: m.ListFields,
    counts: Bounds,
    loose: frozenset[str],
    chains: Chains | None = None,
) -> tuple[Bounds, Bounds, frozenset[str], Chains]:
    """The bounds after `actions`, the element counts that element-wise actions keep known, the loose
    fields, and the chains of one-character replaces still open at the end (`_Chain`)."""
    out, kept, slack = dict(bounds), dict(counts), set(loose)
    open_chains: Chains = dict(chains or {})
    for action in m.effective(actions):
        elementwise = action.field in lists and isinstance(action, m.MapValues | m.Math)
        count = _count(action.field, out, kept) if elementwise else None
        chain = open_chains.get(action.field)
        try:
            if isinstance(action, m.Replace) and _Chain.takes(action):
                if chain is None or chain.full:
                    chain = _Chain(out.get(action.field, REFERENCE_BYTES))
                open_chains[action.field] = chain = chain.then(action)
                out[action.field] = chain.bound()
            else:
                open_chains.pop(action.field, None)
                # An aggregate reads its members' values as its rule started, not what earlier actions made.
                reads = bounds if isinstance(action, Aggregate) else out
                out[action.field] = _action(action, reads, lists, kept, frozenset(slack))
        except OverflowError:
            # An exact integer bound past a float's range (doublings), then a step multiplying by a
            # float: infinite, which refuses the spec like any bound past the limit.
            out[action.field] = math.inf
        if count is not None:
            kept[action.field] = count
        else:
            kept.pop(action.field, None)  # any other action may change how many elements there are
        once = elementwise and isinstance(action, m.MapValues) and bool(_map_refs(action))
        if once or _flows(action) & slack:
            slack.add(action.field)
        else:
            slack.discard(action.field)
    return out, kept, frozenset(slack), open_chains


def _times(grown: float) -> str:
    """How many times REFERENCE_BYTES a bound is, for a message. Bounds stay exact integers while
    every part is one, so a long chain of doubling actions in one rule can pass a float's range."""
    try:
        if not math.isinf(grown):
            return f"{grown / REFERENCE_BYTES:.3g}"
    except OverflowError:
        pass
    return "more than 1e308"


def _limit(limit: float | None) -> float:
    if limit is None:
        from firefeed.config import get_settings

        return get_settings().rules_max_growth
    return limit


def check_template_growth(
    template: Template, bounds: Mapping[str, float], *, path: str, limit: float | None = None
) -> None:
    """An export's field template (`fields: {title: "{brand} {title}"}`): the same bound as a rule's."""
    grown = _template(template, bounds)
    limit = _limit(limit)
    if grown > limit * REFERENCE_BYTES:
        raise SpecError(
            path,
            f"the template can be {_times(grown)} times as long as the values it reads "
            f"(at most rules_max_growth: {limit:g}): name each field fewer times",
        )


def check_value_growth(
    rules: Sequence[m.Rule],
    limit: float | None = None,
    *,
    path: str = "rules",
    start: Grown | None = None,
) -> Grown:
    """Each field's bound after `rules`, from `start` (a field not in it: a value the run reads); a
    SpecError naming the first rule that can make a value larger than `limit` times REFERENCE_BYTES
    (default: the setting rules_max_growth)."""
    limit = _limit(limit)
    bounds: Bounds = dict(start.bounds) if start is not None else {}
    loose = start.loose if start is not None else frozenset()
    counts: Bounds = {}
    chains: Chains = {}
    for rule in rules:
        if not rule.enabled:
            continue
        then, then_counts, then_loose, then_chains = _branch(rule.then, bounds, rule.lists, counts, loose, chains)
        # Without `when` every item takes `then`; with it, the others take `else` (or keep their value).
        if rule.when is None:
            else_, else_counts, else_loose = then, then_counts, then_loose
            chains = then_chains
        else:
            else_, else_counts, else_loose, _ = _branch(rule.else_, bounds, rule.lists, counts, loose, chains)
            # A field one branch may have changed starts its next chain from the larger bound.
            chains = {f: c for f, c in chains.items() if f not in rule.writes}
        # A count stays known when both branches know it (the larger one holds for either).
        counts = {f: max(n, else_counts[f]) for f, n in then_counts.items() if f in else_counts}
        loose = then_loose | else_loose  # loose after either branch
        for name in rule.writes:
            grown = max(then.get(name, REFERENCE_BYTES), else_.get(name, REFERENCE_BYTES))
            if grown > limit * REFERENCE_BYTES:
                times = _times(grown)
                raise SpecError(
                    f"{path}[{rule.index - 1}]",
                    f"rule {rule.name!r} can make {name!r} {times} times as long as the values the rules read "
                    f"(at most rules_max_growth: {limit:g}); a value that holds itself twice doubles at every "
                    "rule: write it once, or use fewer rules that repeat it",
                )
            bounds[name] = grown
    return Grown(bounds, loose)
