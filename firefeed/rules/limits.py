"""What one project's rules may cost: how many rules (`spec_max_rules`) and actions a spec holds, and
their compiled SQL (`rules_max_sql_bytes`).

The counts are checked first, on the spec as written, before any rule is parsed or planned: the
API, the processes worker and previews validate on a request's thread, and a spec of thousands of
rules is a generated one, not a merchant's. With them and the SQL check's stop at the crossing pass,
validation takes seconds at most (composing up to the cap's bytes of SQL), never minutes.

The planner keeps a pass's text linear in its rules (_growth), but a long
enough list, or a feed with very many columns (every level of a pass lists
every column), still makes statements that take the backend's memory and
time to parse and plan before a single row is read. The cap counts the bytes
of every pass statement with its values bound, summed over the passes.

It is checked twice: when a spec is validated, with only the fields the rules
name (the feed's columns are not known yet: a lower bound of the real plan),
and when RULES starts, with the real columns, before any pass runs. Either
way it is a spec error naming the first rule whose addition crosses the cap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, NoReturn

from psycopg2 import sql

from firefeed.errors import SpecError
from firefeed.rules._frag import Frag
from firefeed.rules._plan import PassPlan, iter_passes, plan_passes
from firefeed.rules.model import Rule, action_reads, condition_fields, effective
from firefeed.rules.sqlgen import pass_insert

# The most rules one spec holds, the project's and every export's together, is the setting
# spec_max_rules (real catalogs use a few dozen; its default, a thousand, is already a generated spec).
#: the most actions those rules hold, `then` and `else` together (five a rule of the default's on average)
MAX_ACTIONS = 5000

# Stand-ins for the pass tables: real names are about as long (schema-qualified rules_tmp_* names).
_SOURCE = sql.Identifier("ff_company_schema_name", "rules_tmp_00000000000000000000000000000000_00")
_TARGET = _SOURCE


def _actions_in(rule: Any) -> int:
    """The actions a rule holds as written (a lone action counts one; a malformed one is parse_rules' to report)."""
    if not isinstance(rule, Mapping):
        return 0
    total = 0
    for key in ("then", "else"):
        branch = rule.get(key)
        if isinstance(branch, Mapping):
            total += 1
        elif isinstance(branch, list | tuple):
            total += len(branch)
    return total


def check_rule_counts(lists: Sequence[tuple[str, Any]]) -> None:
    """A SpecError when the rule lists (path, rules as written), together, hold more than spec_max_rules
    rules or MAX_ACTIONS actions; its path is that of the list where the count crosses the cap."""
    from firefeed.config import get_settings

    counts = [(path, len(raw), sum(map(_actions_in, raw))) for path, raw in lists if isinstance(raw, list | tuple)]
    rules = get_settings().spec_max_rules
    _refuse_over("rules", [(path, n) for path, n, _ in counts], rules, " (spec_max_rules)")
    _refuse_over("actions", [(path, n) for path, _, n in counts], MAX_ACTIONS)


def _refuse_over(what: str, counts: Sequence[tuple[str, int]], cap: int, setting: str = "") -> None:
    total = sum(n for _, n in counts)
    running = 0
    for path, n in counts:
        running += n
        if running > cap:
            raise SpecError(
                path,
                f"the spec holds {total} {what} (the project's and its exports' rules together); "
                f"at most {cap} are supported{setting}",
            )


def _text_bytes(node: sql.Composable) -> int:
    """Bytes of a composed statement's text, `%s` placeholders included (no connection needed)."""
    total = 0
    stack: list[Any] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, sql.Composed):
            stack.extend(item.seq)
        elif isinstance(item, sql.SQL):
            total += len(item.string.encode())
        elif isinstance(item, sql.Identifier):
            total += sum(len(s.encode()) + 2 + s.count('"') for s in item.strings) + len(item.strings) - 1
        else:  # Literal, Placeholder: short, FireFeed's own
            total += len(str(getattr(item, "wrapped", "")).encode()) + 2
    return total


def _value_bytes(value: Any) -> int:
    """Bytes of a bound value as psycopg2 writes it into the statement."""
    if isinstance(value, str):
        return len(value.encode()) + 2 + value.count("'")
    if isinstance(value, list | tuple):
        return 7 + sum(_value_bytes(v) + 1 for v in value)  # ARRAY[a,b,...]
    if isinstance(value, bool | int | float | Decimal):
        return len(str(value))
    return len(str(value).encode()) + 2


def statement_bytes(frag: Frag) -> int:
    """The size of a statement's text once its values are bound."""
    return _text_bytes(frag.sql) - 2 * len(frag.params) + sum(_value_bytes(v) for v in frag.params)


def plan_bytes(plans: Sequence[PassPlan]) -> int:
    """The bytes of SQL the passes' statements take, together."""
    return sum(statement_bytes(pass_insert(plan, _SOURCE, _TARGET)) for plan in plans)


def spec_fields(rules: Sequence[Rule], key_field: str) -> list[str]:
    """The fields a spec's rules name (those that read or write them), the key first."""
    names: dict[str, None] = {key_field: None}
    for rule in rules:
        if rule.when is not None:
            names.update(dict.fromkeys(condition_fields(rule.when)))
        for action in (*effective(rule.then), *effective(rule.else_)):
            names.update(dict.fromkeys(action_reads(action)))
            names[action.field] = None
    return list(names)


def check_sql_size(
    rules: Sequence[Rule], fields: Sequence[str], limit: int | None = None, *, path: str = "rules"
) -> list[PassPlan]:
    """The rules' passes over `fields`; a SpecError naming the first rule that takes their SQL over
    `limit` bytes (default: the setting rules_max_sql_bytes).

    Passes are planned and measured one at a time, stopping at the one that crosses the cap: every
    pass lists every column, so the passes past it can add up to far more than the cap (2,000 rules
    each writing its own field took a minute to measure 60 MB). The work is bounded by the cap."""
    if limit is None:
        from firefeed.config import get_settings

        limit = get_settings().rules_max_sql_bytes
    plans: list[PassPlan] = []
    before = 0
    for plan in iter_passes(rules, fields):
        size = plan_bytes([plan])
        if before + size > limit:
            _refuse(rules, plan, before, before + size, limit, path)
        plans.append(plan)
        before += size
    return plans


def _refuse(rules: Sequence[Rule], crossing: PassPlan, before: int, known: int, limit: int, path: str) -> NoReturn:
    """The SpecError naming the rule of `crossing` (whose passes before it take `before` bytes) that
    takes the SQL past `limit`; `known`: the bytes measured up to the end of that pass."""
    # Passes are cut greedily, so the first rules of the crossing pass plan as that pass's start:
    # the shortest start over the cap ends with the rule that crosses it.
    group = crossing.rules
    lo, hi = 1, len(group)  # the start of lo - 1 rules fits (no rule does), that of hi does not
    while lo < hi:
        mid = (lo + hi) // 2
        if before + plan_bytes(plan_passes(group[:mid], crossing.fields_in)) > limit:
            hi = mid
        else:
            lo = mid + 1
    rule = group[hi - 1]
    enabled = sum(1 for r in rules if r.enabled)
    raise SpecError(
        f"{path}[{rule.index - 1}]",
        f"rule {rule.name!r} takes the compiled rules past rules_max_sql_bytes ({limit} bytes of SQL; "
        f"all {enabled} enabled rules would need at least {known}): use fewer or simpler rules",
    )
