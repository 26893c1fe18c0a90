"""A spec without section 9 features compiles to exactly the SQL it compiled to before lists existed.

`data/sql_without_lists.json` was written by `snapshot()` run on the code
before lists (commit 5e422a1): every pass statement of a rule list holding
every condition op and action kind (the benchmark's 20 rules, and the
excluding shapes), and each export format's row and filter SQL. Lists must
not change one character of it, so the no-lists path keeps its speed.

A fix made since is undone before comparing (`LATER_FIXES`), each with its measured
cost, so everything else is still held to the old text character for character.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from psycopg2 import sql

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "data" / "sql_without_lists.json"
FIELDS = ["id", "title", "price", "brand", "availability", "quantity", "description", "color"]
EXTRA_RULES: list[dict[str, Any]] = [
    {"name": "cheap", "when": {"field": "price", "op": "lt", "value": "5"}, "then": [{"exclude": True}]},
    {
        "name": "sets",
        "when": {
            "any": [
                {"field": "color", "op": "in", "value": ["a", "B"]},
                {"field": "title", "op": "matches", "value": "^x.y$"},
            ]
        },
        "then": [
            {"math": "price", "op": "divide", "value": "3", "round": "4"},
            {"prepend": "title", "value": "{brand}: "},
        ],
        "else": [{"regex_replace": "title", "pattern": "([0-9]+)", "with": "#\\1"}, {"capitalize": "brand"}],
    },
    {"name": "only excludes", "when": {"field": "brand", "op": "not_in", "value": ["x"]}, "then": [{"exclude": True}]},
]
EXPORTS: list[dict[str, Any]] = [
    {
        "name": "g",
        "format": "google-xml",
        "path": "g.xml",
        "fields": {"id": "id", "title": "{brand} {title}", "price": "{price} EUR", "link": "link"},
        "where": {"field": "availability", "op": "ne", "value": "discontinued"},
    },
    {"name": "c", "format": "csv", "path": "c.csv"},
    {"name": "j", "format": "json", "path": "j.json", "fields": {"id": "id", "t": "title"}},
    {
        "name": "l",
        "format": "jsonl",
        "path": "l.jsonl",
        "where": {
            "any": [{"field": "price", "op": "gt", "value": "3"}, {"field": "title", "op": "matches", "value": "^a"}]
        },
    },
    {"name": "t", "format": "tsv", "path": "t.tsv", "fields": {"only": "title"}},
]


def _text(c: sql.Composable) -> str:
    """A composed statement as text, without a connection."""
    if isinstance(c, sql.Composed):
        return "".join(_text(x) for x in c.seq)
    if isinstance(c, sql.SQL):
        return c.string
    if isinstance(c, sql.Identifier):
        return ".".join('"' + s.replace('"', '""') + '"' for s in c.strings)
    if isinstance(c, sql.Literal):
        return repr(c.wrapped)
    raise TypeError(type(c))


def _params(params: Any) -> list[str]:
    return [repr(bytes(p.adapted)) if hasattr(p, "adapted") else repr(p) for p in params]


def snapshot() -> dict[str, Any]:
    from firefeed.export.delimited import render_delimited
    from firefeed.export.google_xml import render_google_xml
    from firefeed.export.jsonish import render_json, render_jsonl
    from firefeed.export.select import output_columns, where_clause
    from firefeed.rules._plan import plan_passes
    from firefeed.rules.model import parse_rules
    from firefeed.rules.sqlgen import count_select, deletes_only, exclusion_delete, pass_insert
    from firefeed.spec.model import ProjectSpec

    raw = yaml.safe_load((ROOT / "bench" / "bench_rules.yaml").read_text(encoding="utf-8")) + EXTRA_RULES
    rules = parse_rules(raw, key_field="id")
    passes = []
    for plan in plan_passes(rules, FIELDS):
        frags = [
            pass_insert(plan, sql.Identifier("s", "src"), sql.Identifier("s", "dst")),
            pass_insert(plan, sql.Identifier("s", "src"), sql.Identifier("s", "dst"), 1, 2000),
            count_select(plan, sql.Identifier("s", "src"), 1, 5),
        ]
        if deletes_only(plan):
            frags.append(exclusion_delete(plan, sql.Identifier("s", "dst")))
        passes.extend([_text(f.sql), _params(f.params)] for f in frags)
    spec = ProjectSpec.model_validate(
        {"company": "c", "project": "p", "sources": [{"name": "m", "url": "m.csv"}], "exports": EXPORTS}
    )
    renderers: dict[str, Any] = {
        "csv": lambda c: render_delimited(c, "csv"),
        "tsv": lambda c: render_delimited(c, "tsv"),
        "json": render_json,
        "jsonl": render_jsonl,
        "google-xml": lambda c: render_google_xml(c, title="t", link="", description="d"),
    }
    exports = []
    for export in spec.exports:
        row = renderers[export.format](output_columns(FIELDS, export)).row
        where = where_clause(FIELDS, export)
        exports.append([_text(row.text), _params(row.params), _text(where.text), _params(where.params)])
    return {"passes": passes, "exports": exports}


#: (pattern, replacement) undoing, in the SQL text of today, a fix made after the golden file:
#: - a number is read from its first 16,383 characters (`NUMBER_MAX_CHARS`: a longer one failed
#:   the run); `left()` adds 0.03 s per million number reads, which take 1.5 s.
LATER_FIXES = [(re.compile(r"replace\(left\((.*?), 16383\), ','"), r"replace(\1, ','")]


#: (pattern, replacement) undoing a speed-up made after the golden file, in a statement and its values:
#: - a `length_gt`/`length_lt` condition and `truncate` compare the bytes first and count the
#:   characters only when those don't decide (`length_gt 4900` on 1M descriptions: 0.64 s -> ~0);
#:   the length is bound twice, so the second of the pattern's two placeholders loses its value.
LATER_SPEEDUPS = [
    (
        re.compile(r"\(octet_length\((.*?)\) (<=|<|>) %s::integer (?:OR|AND) char_length\(\1\) \2 %s::integer"),
        r"(char_length(\1) \2 %s::integer",
    ),
    (
        re.compile(r"CASE WHEN octet_length\((.*?)\) <= %s::integer OR char_length\(\1\) <= %s::integer THEN"),
        r"CASE WHEN char_length(\1) <= %s::integer THEN",
    ),
]


def _without_speedups(text: str, params: list[str]) -> tuple[str, list[str]]:
    """`LATER_SPEEDUPS` undone in a statement's text and its values (each match's second value dropped)."""
    params = list(params)
    for pattern, replacement in LATER_SPEEDUPS:
        drop = [text[: m.start()].count("%s") + 1 for m in pattern.finditer(text)]
        for at in reversed(drop):
            del params[at]
        text = pattern.sub(replacement, text)
    return text, params


def _statements(doc: Any) -> bool:
    """Whether `doc` is statements and their values: [text, values, text, values, ...]."""
    if not isinstance(doc, list) or not doc or len(doc) % 2:
        return False
    return all(isinstance(t, str) for t in doc[0::2]) and all(isinstance(v, list) for v in doc[1::2])


def _without_later_fixes(doc: Any) -> Any:
    if isinstance(doc, str):
        for pattern, replacement in LATER_FIXES:
            doc = pattern.sub(replacement, doc)
        return doc
    if _statements(doc):
        out: list[Any] = []
        for text, params in zip(doc[0::2], doc[1::2], strict=True):
            out.extend(_without_speedups(_without_later_fixes(text), params))
        return out
    if isinstance(doc, list):
        return [_without_later_fixes(d) for d in doc]
    if isinstance(doc, dict):
        return {k: _without_later_fixes(v) for k, v in doc.items()}
    return doc


def test_a_spec_without_lists_compiles_to_the_sql_it_compiled_to_before_lists() -> None:
    now = snapshot()
    assert "16383" in json.dumps(now), "the number bound is gone: drop it from LATER_FIXES"
    assert "octet_length" in json.dumps(now), "the byte test is gone: drop it from LATER_SPEEDUPS"
    assert _without_later_fixes(now) == json.loads(GOLDEN.read_text(encoding="utf-8"))


if __name__ == "__main__":  # writes the golden file: run it on the code the SQL must stay equal to
    print(json.dumps(snapshot(), ensure_ascii=False, indent=1))
