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
rule with `when` leaves the larger of its branches' bounds. The bound is
conservative (a list is counted as its text joined with ",", with as many
elements as that text could hold; after a `map` or `math`, which add none,
the count they found). When a field's bound passes
`rules_max_growth` times `REFERENCE_BYTES`, the spec is refused, naming the
first rule that takes it there. Channel rules continue from the bounds the
project's rules leave.

An aggregate `join` holds a whole group, whatever its size: its value is
bounded where it is computed instead (`groups.JOIN_MAX_CHARS`).

Not bounded: a `map` over a list whose target reads a field may copy that
field into every element, so a list of n elements can become n times the
field. The bound counts the field once (a target's literal text counts per
element), which keeps P11's `default: "{sizes[0]}?"` usable; only a feed with
long lists and long values can make that grow, not the rules alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from firefeed.errors import SpecError
from firefeed.rules import model as m
from firefeed.rules._text import MAX_ROUND, NUMBER_MAX_CHARS
from firefeed.rules.groups import JOIN_MAX_CHARS, Aggregate
from firefeed.rules.lookups import LookupSet
from firefeed.rules.template import FieldRef, Template

#: what every value the run reads counts as, in bytes (a long product description; the csv reader's
#: own cap on a cell is 128 KiB)
REFERENCE_BYTES = 64 * 1024
#: a case mapping makes a character at most this much longer in UTF-8 (two bytes to three: ɐ -> Ɐ)
_CASE_GROWTH = 1.5
#: an aggregate's number: its decimals, a sum's more digits, a sign and a point
_NUMBER_EXTRA = MAX_ROUND + 25

Bounds = dict[str, float]


def _bytes(text: str) -> int:
    return len(text.encode())


def _template(t: Template, bounds: Mapping[str, float], unknown: float = REFERENCE_BYTES) -> float:
    """A rendered template: its literal bytes and each reference's value (an element is at most its list)."""
    return sum(bounds.get(p.name, unknown) if isinstance(p, FieldRef) else _bytes(p) for p in t.parts)


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


def _action(
    action: m.FieldAction, bounds: Mapping[str, float], lists: m.ListFields, counts: Mapping[str, float]
) -> float:
    """The bound of `action.field` after `action`, from `bounds` before it (`counts`: see `_count`)."""
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
        targets = [t for _, t in action.values] + ([action.default] if action.default is not None else [])
        if action.field not in lists:
            return max([size, *(_template(t, bounds) for t in targets)])
        # Each element may become a target: its literal text counts once per element, the values it
        # reads once (see the module's docstring).
        literal = max((_template(t, {}, 0.0) for t in targets), default=0.0)
        read = max((_template(t, bounds) - _template(t, {}, 0.0) for t in targets), default=0.0)
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
    actions: tuple[m.Action, ...], bounds: Bounds, lists: m.ListFields, counts: Bounds
) -> tuple[Bounds, Bounds]:
    """The bounds after `actions`, and the element counts that element-wise actions keep known."""
    out, kept = dict(bounds), dict(counts)
    for action in m.effective(actions):
        elementwise = action.field in lists and isinstance(action, m.MapValues | m.Math)
        count = _count(action.field, out, kept) if elementwise else None
        out[action.field] = _action(action, out, lists, kept)
        if count is not None:
            kept[action.field] = count
        else:
            kept.pop(action.field, None)  # any other action may change how many elements there are
    return out, kept


def _times(grown: float) -> str:
    """How many times REFERENCE_BYTES a bound is, for a message. Bounds stay exact integers while
    every part is one, so a long chain of doubling actions in one rule can pass a float's range."""
    try:
        return f"{grown / REFERENCE_BYTES:.3g}"
    except OverflowError:
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
    start: Mapping[str, float] | None = None,
) -> Bounds:
    """Each field's bound after `rules`, from `start` (a field not in it: a value the run reads); a
    SpecError naming the first rule that can make a value larger than `limit` times REFERENCE_BYTES
    (default: the setting rules_max_growth)."""
    limit = _limit(limit)
    bounds: Bounds = dict(start or {})
    counts: Bounds = {}
    for rule in rules:
        if not rule.enabled:
            continue
        then, then_counts = _branch(rule.then, bounds, rule.lists, counts)
        # Without `when` every item takes `then`; with it, the others take `else` (or keep their value).
        else_, else_counts = (
            _branch(rule.else_, bounds, rule.lists, counts) if rule.when is not None else (then, then_counts)
        )
        # A count stays known when both branches know it (the larger one holds for either).
        counts = {f: max(n, else_counts[f]) for f, n in then_counts.items() if f in else_counts}
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
    return bounds
