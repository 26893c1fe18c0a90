"""A spec without SPEC 9 features compiles to exactly the statements it compiled to before section 9.

`data/rules_sql_before_section9.txt` was written by the compiler as it was before section 9
(commit 5e422a1) for the benchmark's 20 rules plus an excluding rule and a later math rule:
every pass's INSERT (whole and chunked), its count and, for a pass that only excludes, its
DELETE, as the psycopg2 composition and the bound values. Same text, same plans, same speed,
but for the fixes made since (`LATER_FIXES`, undone before comparing, each with its cost).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from firefeed.rules._plan import plan_passes
from firefeed.rules.limits import spec_fields
from firefeed.rules.model import parse_rules
from firefeed.rules.sqlgen import count_select, deletes_only, exclusion_delete, pass_insert
from firefeed.schema.identifiers import ident

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "data" / "rules_sql_before_section9.txt"


def _rules() -> list[Any]:
    raw = yaml.load((ROOT / "bench" / "bench_rules.yaml").read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    raw += [
        {
            "name": "drop tests",
            "when": {"any": [{"field": "title", "op": "matches", "value": "^test"}, {"field": "price", "op": "empty"}]},
            "then": [{"exclude": "true"}],
        },
        {
            "name": "after",
            "when": {"field": "color", "op": "in", "value": ["Red", "Blue"]},
            "then": [{"math": "price", "op": "divide", "value": "3", "round": "3"}],
        },
    ]
    return parse_rules(raw, key_field="id")


def _statements() -> str:
    rules = _rules()
    out = []
    for plan in plan_passes(rules, spec_fields(rules, "id")):
        src, dst = ident("company_acme", "items_p1"), ident("company_acme", "rules_tmp_x_1")
        frags = [pass_insert(plan, src, dst), pass_insert(plan, src, dst, 1, 2000), count_select(plan, src)]
        if deletes_only(plan):
            frags.append(exclusion_delete(plan, dst))
        out.extend(repr(frag.sql) + "\n" + repr(frag.params) for frag in frags)
    return "\n;\n".join(out) + "\n"


#: (today's text, the text before) of each fix made after the golden file:
#: - a number is read from its first 16,383 characters (`NUMBER_MAX_CHARS`: a longer one failed
#:   the run); `left()` adds 0.03 s per million number reads, which take 1.5 s.
LATER_FIXES = [
    ("SQL('replace(left('), ", "SQL('replace('), "),
    ("""SQL(', '), SQL('16383'), SQL("), ','""", """SQL(", ','"""),
]


#: (pattern of today's text, the text before) of each speed-up made after the golden file:
#: - a `length_gt`/`length_lt` condition and `truncate` compare the bytes first and count the
#:   characters only when those don't decide (a text has at least as many bytes as characters):
#:   the length test binds its number twice. `length_gt 4900` on 1M descriptions: 0.64 s -> ~0.
LATER_SPEEDUPS = [
    (
        r"SQL\('(\(CASE WHEN |\()octet_length\('\), (Identifier\('[^']*'\)), SQL\('\) (?:<=|<|>) '\),"
        r" SQL\('%s::integer'\), SQL\(' (?:OR|AND) char_length\('\), \2, ",
        r"SQL('\1char_length('), \2, ",
    ),
    # the bench rules' lengths, bound twice (truncate's is followed by the white space it cuts at)
    (r"\b(8|4900), \1\b", r"\1"),
    (r"\b150, 150, (?='\\t)", "150, "),
]


def test_rules_without_section_9_features_compile_to_the_statements_of_before() -> None:
    text = _statements()
    for now, before in LATER_FIXES:
        assert now in text, f"{now!r} is gone: drop it from LATER_FIXES"
        text = text.replace(now, before)
    for pattern, before in LATER_SPEEDUPS:
        text, n = re.subn(pattern, before, text)
        assert n, f"{pattern!r} is gone: drop it from LATER_SPEEDUPS"
    assert text == GOLDEN.read_text(encoding="utf-8")
