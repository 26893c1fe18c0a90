"""The rule language's model (SPEC section 3 and 8.8-8.17), parsed and checked from raw spec data.

Raw input comes from YAML read with every scalar as text ("0", "true", "1.22")
or from JSON (int, float, bool): both are accepted. Every mistake is a
SpecError naming its path with 0-based indices (`rules[3].then[0].length`), so
a user can find it; nothing is checked later at run time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from firefeed.errors import SpecError
from firefeed.rules._regex import RegexError, translate
from firefeed.rules._scalars import (
    WHOLE_MAX,
    _field_name,
    _kind,
    _mapping,
    _number,
    _text,
    digits_value,
    parse_bool,
    parse_whole,
)
from firefeed.rules._text import MAX_ROUND
from firefeed.rules.groups import Aggregate, GroupFirst, parse_aggregate, parse_group_first
from firefeed.rules.lists import NO_LISTS, ListFields
from firefeed.rules.lookups import LookupSet, parse_lookup
from firefeed.rules.template import Template, parse_template
from firefeed.suggest import did_you_mean

TEMPLATE_OPS = ("eq", "ne", "contains", "not_contains", "starts_with", "ends_with")
LIST_OPS = ("in", "not_in")
NUMBER_OPS = ("gt", "gte", "lt", "lte")
LENGTH_OPS = ("length_gt", "length_lt")
EMPTY_OPS = ("empty", "not_empty")
COUNT_OPS = ("count_gt", "count_lt", "count_eq")
OPS = (*TEMPLATE_OPS, *LIST_OPS, "matches", "empty", "not_empty", *NUMBER_OPS, *LENGTH_OPS, *COUNT_OPS)
#: the name a `remove` condition gives the element it looks at (SPEC 9, P20)
ELEMENT = "_"
MATH_OPS = ("add", "subtract", "multiply", "divide")


# -- regular expressions ---------------------------------------------------
@dataclass(frozen=True)
class Regex:
    """A checked pattern, spelled for Python (`py`) and Postgres (`pg`)."""

    source: str
    py: str
    pg: str
    groups: int
    #: `ignore_case: true`: Postgres' `~*` reading of `pg` (the `py` spelling matches the same)
    ignore_case: bool = False


def _checked_regex(source: str, path: str, *, fold_case: bool, ignore_case: bool = False) -> Regex:
    try:
        t = translate(source, fold_case=fold_case, ignore_case=ignore_case)
    except RegexError as exc:
        raise SpecError(path, f"invalid regular expression {source!r}: {exc}") from None
    return Regex(source, t.py, t.pg, t.groups, ignore_case)


def _ignore_case(raw: Mapping[str, Any], path: str) -> bool:
    """`ignore_case` of a `matches` leaf or a `regex_replace` action (default false)."""
    return parse_bool(raw["ignore_case"], f"{path}.ignore_case") if "ignore_case" in raw else False


# -- conditions ------------------------------------------------------------
@dataclass(frozen=True)
class Leaf:
    """`{field, op, value}`; exactly the attribute its op needs is set."""

    field: str
    op: str
    case_sensitive: bool = False
    template: Template | None = None  # eq, ne, contains, not_contains, starts_with, ends_with
    values: tuple[str, ...] = ()  # in, not_in
    regex: Regex | None = None  # matches (lowercased literals unless case_sensitive)
    number: Decimal | None = None  # gt, gte, lt, lte
    length: int | None = None  # length_gt, length_lt; count_gt, count_lt, count_eq

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.field, *(self.template.fields if self.template else ()))


@dataclass(frozen=True)
class AllOf:
    items: tuple[Condition, ...]


@dataclass(frozen=True)
class AnyOf:
    items: tuple[Condition, ...]


@dataclass(frozen=True)
class Not:
    item: Condition


Condition = Leaf | AllOf | AnyOf | Not | GroupFirst


def condition_fields(cond: Condition) -> tuple[str, ...]:
    """Every field a condition reads, in order (with repeats); group_first reads its pass's groups."""
    if isinstance(cond, Leaf | GroupFirst):
        return cond.reads
    if isinstance(cond, Not):
        return condition_fields(cond.item)
    return tuple(f for c in cond.items for f in condition_fields(c))


# -- actions ---------------------------------------------------------------
@dataclass(frozen=True)
class Set:
    field: str
    value: Template


@dataclass(frozen=True)
class Copy:
    field: str
    source: str


@dataclass(frozen=True)
class Append:
    field: str
    value: Template


@dataclass(frozen=True)
class Prepend:
    field: str
    value: Template


@dataclass(frozen=True)
class Replace:
    field: str
    find: str
    with_: str


@dataclass(frozen=True)
class RegexReplace:
    """`with` as parts: literal text, or an int for a group reference \\1-\\9."""

    field: str
    pattern: Regex
    with_: tuple[str | int, ...]


@dataclass(frozen=True)
class Lowercase:
    field: str


@dataclass(frozen=True)
class Uppercase:
    field: str


@dataclass(frozen=True)
class Capitalize:
    field: str


@dataclass(frozen=True)
class Trim:
    field: str


@dataclass(frozen=True)
class Truncate:
    field: str
    length: int


@dataclass(frozen=True)
class Math:
    field: str
    op: str
    value: Decimal
    round: int = 2


@dataclass(frozen=True)
class MapValues:
    field: str
    values: tuple[tuple[str, Template], ...]
    default: Template | None = None


@dataclass(frozen=True)
class Split:
    """Text -> list (SPEC 9): as a csv cell, each element trimmed, empty ones dropped."""

    field: str
    separator: str = ","


@dataclass(frozen=True)
class Join:
    field: str
    separator: str = ","


@dataclass(frozen=True)
class Take:
    field: str
    count: int


@dataclass(frozen=True)
class Dedupe:
    field: str


@dataclass(frozen=True)
class Remove:
    """Drop the elements for which `when` holds; its leaves name `field: _`, the element (P20)."""

    field: str
    when: Condition


@dataclass(frozen=True)
class Exclude:
    pass


FieldAction = (
    Set
    | Copy
    | Append
    | Prepend
    | Replace
    | RegexReplace
    | Lowercase
    | Uppercase
    | Capitalize
    | Trim
    | Truncate
    | Math
    | MapValues
    | Split
    | Join
    | Take
    | Dedupe
    | Remove
    | LookupSet
    | Aggregate
)
Action = FieldAction | Exclude
#: actions that act on a list as a whole (SPEC 9): they make sense only on list fields
LIST_ACTIONS = (Split, Join, Take, Dedupe, Remove)


def action_reads(action: Action) -> dict[str, int]:
    """Fields an action reads, with how many times its SQL refers to each (for expression sizing)."""
    counts: dict[str, int] = {}

    def add(name: str, times: int = 1) -> None:
        counts[name] = counts.get(name, 0) + times

    if isinstance(action, Exclude | Aggregate):
        return counts  # an aggregate's value is a column of its pass's grouped join
    if isinstance(action, Set):
        for f in action.value.fields:
            add(f)
    elif isinstance(action, Copy):
        add(action.source)
    elif isinstance(action, Append | Prepend):
        add(action.field)
        for f in action.value.fields:
            add(f)
    elif isinstance(action, Truncate):
        add(action.field, 6)
    elif isinstance(action, Trim):
        add(action.field, 3)
    elif isinstance(action, Math):
        add(action.field, 4 if action.op == "divide" else 3)
    elif isinstance(action, Remove):
        add(action.field, 3)
        for f in condition_fields(action.when):
            if f != ELEMENT:
                add(f)
    elif isinstance(action, LookupSet):
        # The match value is read by the join of the level (never inline): twice, so a level that
        # wrote it earlier cannot also hold the lookup (_plan), and the target once when it may stay.
        add(action.match, 2)
        if action.column is None or action.default is None:
            add(action.field)
        for f in action.default.fields if action.default else ():
            add(f)
    elif isinstance(action, MapValues):
        add(action.field, 2)
        for _, target in action.values:
            for f in target.fields:
                add(f)
        for f in action.default.fields if action.default else ():
            add(f)
    else:
        add(action.field)
    return counts


@dataclass(frozen=True)
class Rule:
    index: int  # 1-based over the whole list, disabled rules included
    name: str
    enabled: bool
    when: Condition | None
    then: tuple[Action, ...] = ()
    else_: tuple[Action, ...] = field(default=())
    #: the project's list fields (SPEC 9): the rule compiles knowing which fields hold lists
    lists: ListFields = field(default_factory=lambda: NO_LISTS)

    @property
    def excludes(self) -> bool:
        return any(isinstance(a, Exclude) for a in (*self.then, *self.else_))

    @property
    def uses_groups(self) -> bool:
        """It aggregates or asks group_first: it reads the groups as they are when it starts (P16, P19)."""
        return any(isinstance(a, Aggregate) for a in (*self.then, *self.else_)) or (
            self.when is not None and uses_group_first(self.when)
        )

    @property
    def reads(self) -> frozenset[str]:
        """Fields the rule reads: its `when`'s and every action's (a rule's `writes`' other side)."""
        names = set(condition_fields(self.when)) if self.when is not None else set()
        for action in (*self.then, *self.else_):
            names.update(action_reads(action))
        return frozenset(names)

    @property
    def writes(self) -> tuple[str, ...]:
        """Fields the rule may change on an item it keeps (a branch that excludes changes nothing), in the
        order the rule writes them: a field it creates takes that place among the default columns (8.21)."""
        return tuple(
            dict.fromkeys(f for a in (*effective(self.then), *effective(self.else_)) for f in action_writes(a))
        )


def action_writes(action: FieldAction) -> tuple[str, ...]:
    """The fields an action writes, in written order: a lookup's parts compute its matched field last."""
    if isinstance(action, LookupSet):
        return action.written
    return (action.field,)


def uses_group_first(cond: Condition) -> bool:
    if isinstance(cond, GroupFirst):
        return True
    if isinstance(cond, Not):
        return uses_group_first(cond.item)
    if isinstance(cond, AllOf | AnyOf):
        return any(uses_group_first(c) for c in cond.items)
    return False


def branch_excludes(branch: tuple[Action, ...]) -> bool:
    return any(isinstance(a, Exclude) for a in branch)


def effective(branch: tuple[Action, ...]) -> tuple[FieldAction, ...]:
    """The actions of a branch that can show: none when the branch excludes the item."""
    if branch_excludes(branch):
        return ()
    return tuple(a for a in branch if not isinstance(a, Exclude))


# -- conditions ------------------------------------------------------------
_LEAF_KEYS = ("field", "op", "value", "case_sensitive", "ignore_case")
#: how deep all/any/not may nest: parsing, compiling and Postgres' planner all recurse once per level
#: (a few thousand levels overflowed Python's stack); real conditions nest two or three
MAX_CONDITION_DEPTH = 32


def parse_condition(raw: Any, path: str, *, depth: int = 1, group: str | None = None) -> Condition:
    """A leaf `{field, op, value}`, `{group_first: true}` or a group `{all: [...]}`, `{any: [...]}`,
    `{not: ...}` (`depth`: how many groups this one is inside, itself included; `group`: the
    spec's group field, which group_first needs)."""
    if not isinstance(raw, Mapping):
        raise SpecError(path, f"must be a condition mapping, not {_kind(raw)}")
    if "group_first" in raw:
        return parse_group_first(raw, path, group=group)
    groups = [k for k in ("all", "any", "not") if k in raw]
    if groups:
        key = groups[0]
        _mapping(raw, path, (key,))
        if depth > MAX_CONDITION_DEPTH:
            raise SpecError(path, f"nests all/any/not more than {MAX_CONDITION_DEPTH} levels deep")
        inner = raw[key]
        if key == "not":
            return Not(parse_condition(inner, f"{path}.not", depth=depth + 1, group=group))
        if not isinstance(inner, list | tuple):
            raise SpecError(f"{path}.{key}", f"must be a list of conditions, not {_kind(inner)}")
        items = tuple(
            parse_condition(c, f"{path}.{key}[{i}]", depth=depth + 1, group=group) for i, c in enumerate(inner)
        )
        return AllOf(items) if key == "all" else AnyOf(items)
    _mapping(raw, path, _LEAF_KEYS, ("field", "op"))
    name = _field_name(raw["field"], f"{path}.field")
    op = _text(raw["op"], f"{path}.op")
    if op not in OPS:
        hint = did_you_mean(op, OPS)
        raise SpecError(f"{path}.op", f"unknown op {op!r}{hint} (expected one of {', '.join(OPS)})")
    cs = parse_bool(raw["case_sensitive"], f"{path}.case_sensitive") if "case_sensitive" in raw else False
    if "ignore_case" in raw and op != "matches":
        raise SpecError(f"{path}.ignore_case", f"is for op matches; op {op} takes case_sensitive")
    icase = _ignore_case(raw, path)
    if icase and cs:
        raise SpecError(f"{path}.ignore_case", "contradicts case_sensitive: true (give one of them)")
    vpath = f"{path}.value"
    has_value = "value" in raw and raw["value"] is not None
    if op in EMPTY_OPS:
        if has_value and raw["value"] != "":
            raise SpecError(vpath, f"op {op} takes no value")
        return Leaf(name, op, cs)
    if not has_value:
        raise SpecError(vpath, f"is required for op {op}")
    value = raw["value"]
    if op in TEMPLATE_OPS:
        return Leaf(name, op, cs, template=parse_template(_text(value, vpath), vpath))
    if op in LIST_OPS:
        if not isinstance(value, list | tuple):
            raise SpecError(vpath, f"must be a list for op {op}, not {_kind(value)}")
        return Leaf(name, op, cs, values=tuple(_text(v, f"{vpath}[{i}]", allow_none=True) for i, v in enumerate(value)))
    if op == "matches":
        if icase:  # Postgres' ~* on the value as it is (#49), not lower() of both sides
            return Leaf(
                name, op, True, regex=_checked_regex(_text(value, vpath), vpath, fold_case=False, ignore_case=True)
            )
        if "ignore_case" in raw:  # `ignore_case: false`: as case-sensitive as it says
            if "case_sensitive" in raw and not cs:
                raise SpecError(f"{path}.ignore_case", "contradicts case_sensitive: false (give one of them)")
            cs = True
        return Leaf(name, op, cs, regex=_checked_regex(_text(value, vpath), vpath, fold_case=not cs))
    if op in NUMBER_OPS:
        return Leaf(name, op, cs, number=_number(value, vpath))
    if op in COUNT_OPS:
        # P8: digits only, taken literally (not a template)
        digits = _text(value, vpath) if not isinstance(value, bool) else ""
        count = digits_value(digits) if digits.isascii() and digits.isdigit() else None
        if count is None or count > WHOLE_MAX:
            raise SpecError(vpath, f"must be a whole number (digits only) <= {WHOLE_MAX} for op {op}")
        return Leaf(name, op, cs, length=count)
    return Leaf(name, op, cs, length=parse_whole(value, vpath))


# -- actions ---------------------------------------------------------------
_ACTION_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # kind: (other allowed keys, required keys)
    "set": (("value",), ("value",)),
    "copy": (("from",), ("from",)),
    "append": (("value",), ("value",)),
    "prepend": (("value",), ("value",)),
    "replace": (("find", "with"), ("find",)),
    "regex_replace": (("pattern", "with", "ignore_case"), ("pattern",)),
    "lowercase": ((), ()),
    "uppercase": ((), ()),
    "capitalize": ((), ()),
    "trim": ((), ()),
    "truncate": (("length",), ("length",)),
    "math": (("op", "value", "round"), ("op", "value")),
    "map": (("values", "default"), ("values",)),
    "split": (("separator",), ()),
    "join": (("separator",), ()),
    "take": (("count",), ("count",)),
    "dedupe": ((), ()),
    "remove": (("when",), ("when",)),
    "exclude": ((), ()),
}


def _replacement(text: str, groups: int, path: str) -> tuple[str | int, ...]:
    """`with` of regex_replace: only \\1-\\9 and \\\\ are special (SPEC 8.15)."""
    parts: list[str | int] = []
    buf: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if ch == "\\" and nxt in "123456789" and nxt:
            n = int(nxt)
            if n > groups:
                raise SpecError(path, f"\\{n} refers to group {n} but the pattern has {groups}")
            if buf:
                parts.append("".join(buf))
                buf = []
            parts.append(n)
            i += 2
        elif ch == "\\" and nxt == "\\":
            buf.append("\\")
            i += 2
        else:
            buf.append(ch)
            i += 1
    if buf:
        parts.append("".join(buf))
    return tuple(parts)


def parse_action(
    raw: Any,
    path: str,
    *,
    key_field: str,
    lookups: Mapping[str, str] | None = None,
    tag: str = "",
    group: str | None = None,
) -> Action | tuple[LookupSet, ...] | None:
    """One action; None for `{exclude: false}`, which does nothing; a lookup's parts (P24) as a tuple."""
    if not isinstance(raw, Mapping):
        raise SpecError(path, f"must be an action mapping, not {_kind(raw)}")
    if "lookup" in raw:
        return parse_lookup(raw, path, key_field=key_field, lookups=lookups, tag=tag)
    if "aggregate" in raw:
        target = _field_name(raw["aggregate"], f"{path}.aggregate")
        if target == key_field:
            raise SpecError(f"{path}.aggregate", f"may not change the key field {key_field!r}")
        return parse_aggregate(raw, path, target=target, group=group, tag=tag)
    kinds = [k for k in raw if k in _ACTION_KEYS]
    if not kinds:
        raise SpecError(path, f"must name one action ({', '.join(_ACTION_KEYS)})")
    if len(kinds) > 1:
        raise SpecError(path, f"names two actions ({kinds[0]}, {kinds[1]}); write one per list item")
    kind = kinds[0]
    allowed, required = _ACTION_KEYS[kind]
    _mapping(raw, path, (kind, *allowed), required)
    if kind == "exclude":
        return Exclude() if parse_bool(raw["exclude"], f"{path}.exclude") else None
    target = _field_name(raw[kind], f"{path}.{kind}")
    if target == key_field:
        raise SpecError(f"{path}.{kind}", f"may not change the key field {key_field!r}")

    def tpl(key: str) -> Template:
        return parse_template(_text(raw[key], f"{path}.{key}", allow_none=True), f"{path}.{key}")

    if kind == "set":
        return Set(target, tpl("value"))
    if kind == "copy":
        return Copy(target, _field_name(raw["from"], f"{path}.from"))
    if kind == "append":
        return Append(target, tpl("value"))
    if kind == "prepend":
        return Prepend(target, tpl("value"))
    if kind == "replace":
        find = _text(raw["find"], f"{path}.find")
        if find == "":
            raise SpecError(f"{path}.find", "must not be empty")
        return Replace(target, find, _text(raw.get("with", ""), f"{path}.with", allow_none=True))
    if kind == "regex_replace":
        pattern = _checked_regex(
            _text(raw["pattern"], f"{path}.pattern"),
            f"{path}.pattern",
            fold_case=False,
            ignore_case=_ignore_case(raw, path),
        )
        repl = _replacement(_text(raw.get("with", ""), f"{path}.with", allow_none=True), pattern.groups, f"{path}.with")
        return RegexReplace(target, pattern, repl)
    if kind == "truncate":
        return Truncate(target, parse_whole(raw["length"], f"{path}.length"))
    if kind == "math":
        op = _text(raw["op"], f"{path}.op")
        if op not in MATH_OPS:
            raise SpecError(f"{path}.op", f"must be one of {', '.join(MATH_OPS)}")
        places = parse_whole(raw["round"], f"{path}.round", maximum=MAX_ROUND) if "round" in raw else 2
        return Math(target, op, _number(raw["value"], f"{path}.value"), places)
    if kind == "map":
        values = raw["values"]
        if not isinstance(values, Mapping):
            raise SpecError(f"{path}.values", f"must be a mapping of value -> template, not {_kind(values)}")
        pairs = tuple(
            (
                _text(k, f"{path}.values", allow_none=True),
                parse_template(_text(v, f"{path}.values.{k}", allow_none=True), f"{path}.values.{k}"),
            )
            for k, v in values.items()
        )
        default = tpl("default") if "default" in raw and raw["default"] is not None else None
        return MapValues(target, pairs, default)
    if kind in ("split", "join"):
        separator = _text(raw["separator"], f"{path}.separator", allow_none=True) if "separator" in raw else ","
        if kind == "split":
            if separator == "":
                raise SpecError(f"{path}.separator", "must not be empty for split")
            return Split(target, separator)
        return Join(target, separator)
    if kind == "take":
        return Take(target, parse_whole(raw["count"], f"{path}.count"))
    if kind == "dedupe":
        return Dedupe(target)
    if kind == "remove":
        when = parse_condition(raw["when"], f"{path}.when", group=group)
        _element_only(when, f"{path}.when")
        return Remove(target, when)
    simple: dict[str, type[Lowercase | Uppercase | Capitalize | Trim]] = {
        "lowercase": Lowercase,
        "uppercase": Uppercase,
        "capitalize": Capitalize,
        "trim": Trim,
    }
    return simple[kind](target)


def _element_only(cond: Condition, path: str) -> None:
    """P20: every leaf of a `remove` condition names `field: _` (the element)."""
    if isinstance(cond, Leaf):
        if cond.field != ELEMENT:
            raise SpecError(f"{path}.field", f"must be {ELEMENT!r} (the element) in a remove condition")
        return
    if isinstance(cond, Not):
        _element_only(cond.item, f"{path}.not")
        return
    if not isinstance(cond, AllOf | AnyOf):
        # any other kind of condition (one about the item, not its element) has no place here
        raise SpecError(path, f"a remove condition tests the element: only leaves with field {ELEMENT!r}")
    key = "all" if isinstance(cond, AllOf) else "any"
    for i, c in enumerate(cond.items):
        _element_only(c, f"{path}.{key}[{i}]")


def _actions(
    raw: Any,
    path: str,
    *,
    key_field: str,
    lookups: Mapping[str, str] | None = None,
    tag: str = "",
    group: str | None = None,
) -> tuple[Action, ...]:
    if raw is None:
        return ()
    if isinstance(raw, Mapping):
        raw = [raw]
    if not isinstance(raw, list | tuple):
        raise SpecError(path, f"must be a list of actions, not {_kind(raw)}")
    out: list[Action] = []
    for i, a in enumerate(raw):
        parsed = parse_action(a, f"{path}[{i}]", key_field=key_field, lookups=lookups, tag=f"{tag}{i}", group=group)
        if isinstance(parsed, tuple):
            out.extend(parsed)
        elif parsed is not None:
            out.append(parsed)
    return tuple(out)


def derive_lists(declared: frozenset[str], rules: list[Rule], inherited: frozenset[str] = frozenset()) -> ListFields:
    """The declared list fields, the `inherited` ones (lists before these rules start: the project's,
    for an export's own rules) and those enabled rules make lists (`split`, `copy` from a list field,
    an aggregate's `first`/`last` of a list field)."""
    fields = set(declared) | set(inherited)
    changed = True
    while changed:  # a copy may read a field a later rule makes a list
        changed = False
        for rule in rules:
            if not rule.enabled:
                continue
            for action in (*effective(rule.then), *effective(rule.else_)):
                made = (
                    isinstance(action, Split)
                    or (isinstance(action, Copy) and action.source in fields)
                    # first/last of a list field keep that member's list (P16)
                    or (
                        isinstance(action, Aggregate)
                        and action.op in ("first", "last")
                        and action.of_field is not None
                        and action.of_field in fields
                    )
                )
                if made and action.field not in fields:
                    fields.add(action.field)
                    changed = True
    return ListFields(frozenset(fields), frozenset(declared)) if fields else NO_LISTS


# -- rules -----------------------------------------------------------------
_RULE_KEYS = ("name", "enabled", "when", "then", "else")


def parse_rules(
    raw: Any,
    *,
    key_field: str,
    path: str = "rules",
    declared_lists: frozenset[str] = frozenset(),
    inherited_lists: frozenset[str] = frozenset(),
    lookups: Mapping[str, str] | None = None,
    group: str | None = None,
) -> list[Rule]:
    """The ordered rule list; names default to `rule <n>` (1-based) and must be unique.

    `declared_lists`: the fields the sources declare in `lists`; with the fields
    the rules make lists (`derive_lists`), every rule carries them; `inherited_lists`: the
    fields that are lists before these rules run (an export's own rules start from the project's).
    `lookups`: the spec's lookup names -> their tables, which `lookup` actions may name;
    `group`: the spec's group field, which `aggregate` and `group_first` need.
    """
    if raw is None:
        return []
    if not isinstance(raw, list | tuple):
        raise SpecError(path, f"must be a list of rules, not {_kind(raw)}")
    rules: list[Rule] = []
    seen: dict[str, int] = {}
    problems: list[SpecError] = []  # every rule is checked, so all of its mistakes are said at once
    for i, item in enumerate(raw):
        try:
            rules.append(_parse_rule(item, i, path, seen, key_field=key_field, lookups=lookups, group=group))
        except SpecError as err:
            problems.append(err)
    if problems:
        raise SpecError.of(problems)
    lists = derive_lists(declared_lists, rules, inherited_lists)
    if lists:
        rules = [dataclasses.replace(r, lists=lists) for r in rules]
    return rules


def _parse_rule(
    item: Any,
    i: int,
    path: str,
    seen: dict[str, int],
    *,
    key_field: str,
    lookups: Mapping[str, str] | None,
    group: str | None,
) -> Rule:
    """Rule `i` of the list at `path`; its `when`, `then` and `else` are each checked, their mistakes said together."""
    rpath = f"{path}[{i}]"
    _mapping(item, rpath, _RULE_KEYS)
    index = i + 1
    if "name" in item and item["name"] is not None:
        name = _text(item["name"], f"{rpath}.name")
        if not name.strip():
            raise SpecError(f"{rpath}.name", "must not be empty")
    else:
        name = f"rule {index}"
    if name in seen:
        raise SpecError(f"{rpath}.name", f"duplicate rule name {name!r} (also {path}[{seen[name]}])")
    seen[name] = i
    enabled = parse_bool(item["enabled"], f"{rpath}.enabled") if "enabled" in item else True
    common: dict[str, Any] = {"key_field": key_field, "lookups": lookups, "group": group}
    parts = {
        "when": lambda: (
            parse_condition(item["when"], f"{rpath}.when", group=group) if item.get("when") is not None else None
        ),
        "then": lambda: _actions(item.get("then"), f"{rpath}.then", tag=f"{index}_t", **common),
        "else": lambda: _actions(item.get("else"), f"{rpath}.else", tag=f"{index}_e", **common),
    }
    parsed: dict[str, Any] = {}
    problems: list[SpecError] = []
    for part, parse in parts.items():
        try:
            parsed[part] = parse()
        except SpecError as err:
            problems.append(err)
    if problems:
        raise SpecError.of(problems)
    return Rule(index, name, enabled, parsed["when"], parsed["then"], parsed["else"])
