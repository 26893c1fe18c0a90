"""Both RULES strategies through the one pass loop (pipeline/rule_passes.py) give the same rows and counts.

The chunked strategy's slices run here, each on its own connection and in reverse
order (as chunk jobs on many workers may finish), through `execute_chunk`, the
very function a `rules_chunk` job runs.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg2 import sql
from sqlalchemy import Engine

from firefeed.dataplane.run_tables import RunTables
from firefeed.db import plans
from firefeed.db.engine import raw_connection
from firefeed.pipeline.rule_passes import (
    ChunkJobPasses,
    InProcessPasses,
    RulesResult,
    apply_passes,
    execute_chunk,
    pass_plan,
)
from firefeed.rules import executor
from firefeed.rules.model import Rule, parse_rules
from firefeed.rules.sqlgen import pages_filter
from firefeed.runs.contract import ChunkResult, RulesChunkParams
from firefeed.schema.identifiers import ORD, column_for_field, company_schema, ident
from firefeed.schema.service import SchemaService
from tests.integration.test_rules_differential import KEY_FIELD, load_items

pytestmark = pytest.mark.integration

COMPANY = "rulepasses"
FIELDS = [KEY_FIELD, "title", "brand", "price", "quantity", "pad"]
ITEMS = 230
CHUNK_ROWS = 17

RAW_RULES: list[dict[str, Any]] = [
    {
        "name": "out of stock",
        "when": {"field": "quantity", "op": "lte", "value": "0"},
        "then": [{"set": "availability", "value": "out of stock"}],
    },
    {"name": "vat", "then": [{"math": "price", "op": "multiply", "value": "1.22", "round": "2"}]},
    {"name": "drop cheap", "when": {"field": "price", "op": "lt", "value": "20"}, "then": [{"exclude": "true"}]},
    {"name": "title", "then": [{"capitalize": "title"}, {"append": "title", "value": " | {brand}"}]},
    # Reads the title the rule before writes: a pass of its own that only excludes, deleted in place.
    {
        "name": "drop brand1",
        "when": {"field": "title", "op": "ends_with", "value": "| brand1"},
        "then": [{"exclude": "true"}],
    },
    {"name": "off", "enabled": "false", "then": [{"exclude": "true"}]},
]


def _items() -> list[dict[str, str]]:
    return [
        {
            KEY_FIELD: f"K{i}",
            "title": f"item number {i}",
            "brand": f"brand{i % 3}",
            "price": f"{i}.50",
            "quantity": str(i % 4),
            # Spreads the items over more heap pages than there are parts: the fleet cuts the items by pages.
            "pad": f"{i:04d}" * 150,
        }
        for i in range(ITEMS)
    ]


def _read_sorted(engine: Engine, table: str, fields: list[str]) -> list[tuple[Any, ...]]:
    """The table's rows in _ff_ord order (chunk jobs may write them in any physical order)."""
    columns = [ORD, *(column_for_field(f) for f in fields)]
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(
            sql.SQL("SELECT {} FROM {} ORDER BY {}").format(
                sql.SQL(", ").join(ident(c) for c in columns), ident(company_schema(COMPANY), table), ident(ORD)
            )
        )
        return [tuple(r) for r in cur.fetchall()]


@pytest.fixture()
def source(engine: Engine) -> Iterator[str]:
    service = SchemaService(engine)
    table = f"items_{uuid.uuid4().hex[:8]}"
    load_items(engine, service, COMPANY, table, FIELDS, _items())
    try:
        yield table
    finally:
        service.drop_table(COMPANY, table)


class SliceRecorder:
    """Runs a pass's slices here, in reverse order, each on its own connection, as chunk jobs would."""

    def __init__(self, engine: Engine, run_id: str, rules: list[Rule], fields: list[str]) -> None:
        self.engine, self.run_id, self.rules, self.fields = engine, run_id, rules, fields
        self.slices: dict[int, list[RulesChunkParams]] = {}

    def __call__(self, pass_no: int, slices: list[RulesChunkParams]) -> list[ChunkResult]:
        self.slices[pass_no] = slices
        plan = pass_plan(self.run_id, self.rules, self.fields, pass_no)
        results: dict[int, ChunkResult] = {}
        for i in reversed(range(len(slices))):
            with raw_connection(self.engine) as conn:
                # Through the job's JSON, as a worker on another machine reads it.
                chunk = RulesChunkParams.from_json(slices[i].to_json())
                done = execute_chunk(conn, SchemaService(self.engine), plan, chunk, company=COMPANY, run_id=self.run_id)
                results[i] = ChunkResult.from_json(done.to_json())
        return [results[i] for i in range(len(slices))]


def _in_process(
    engine: Engine, source: str, rules: list[Rule], *, split: bool, fields: list[str] = FIELDS
) -> tuple[RulesResult, str]:
    service = SchemaService(engine)
    run_id = str(uuid.uuid4())
    runner = InProcessPasses(engine, service, company=COMPANY, run_id=run_id, split_min_rows=1 if split else ITEMS + 1)
    result = apply_passes(runner, service, company=COMPANY, source_table=source, fields=fields, rules=rules, rows=ITEMS)
    return result, run_id


def _whole_and_halves(
    engine: Engine, source: str, rules: list[Rule], runs: list[str]
) -> tuple[RulesResult, RulesResult]:
    """The rules run in one part, then in halves; each run's id is added to `runs` (to drop its tables)."""
    whole, run_id = _in_process(engine, source, rules, split=False)
    runs.append(run_id)
    halves, run_id = _in_process(engine, source, rules, split=True)
    runs.append(run_id)
    return whole, halves


def _chunked(
    engine: Engine, source: str, rules: list[Rule], fields: list[str] = FIELDS, max_slices: int = 16
) -> tuple[RulesResult, str, SliceRecorder]:
    service = SchemaService(engine)
    run_id = str(uuid.uuid4())
    recorder = SliceRecorder(engine, run_id, rules, fields)
    runner = ChunkJobPasses(
        engine,
        service,
        company=COMPANY,
        run_id=run_id,
        fields=fields,
        chunk_rows=CHUNK_ROWS,
        run_chunks=recorder,
        max_slices=max_slices,
    )
    result = apply_passes(runner, service, company=COMPANY, source_table=source, fields=fields, rules=rules, rows=ITEMS)
    return result, run_id, recorder


def _run_tables(service: SchemaService, run_id: str) -> list[str]:
    prefix = f"rules_tmp_{run_id.replace('-', '')}"
    return sorted(t for _, t in RunTables(service).list_rules_tmp(COMPANY) if t.startswith(prefix))


def test_in_process_and_chunk_job_passes_give_the_same_items_and_counts(engine: Engine, source: str) -> None:
    service = SchemaService(engine)
    rules = parse_rules(RAW_RULES, key_field=KEY_FIELD)
    runs: list[str] = []
    try:
        whole, halves = _whole_and_halves(engine, source, rules, runs)
        chunked, run_id, recorder = _chunked(engine, source, rules)
        runs.append(run_id)

        assert whole.passes == 3 and whole.excluded > 0 and whole.rows_in == ITEMS
        assert list(whole.matched) == ["out of stock", "vat", "drop cheap", "title", "drop brand1"]
        for other in (halves, chunked):
            assert (other.matched, other.excluded, other.rows_in, other.rows_out) == (
                whole.matched,
                whole.excluded,
                whole.rows_in,
                whole.rows_out,
            )
            assert (other.passes, other.fields) == (whole.passes, whole.fields)
        rows = _read_sorted(engine, whole.table, whole.fields)
        assert len(rows) == whole.rows_out
        assert _read_sorted(engine, halves.table, halves.fields) == rows
        assert _read_sorted(engine, chunked.table, chunked.fields) == rows

        # "title" moved before "drop cheap" (which then only deletes, in place) and was counted among the
        # rows "drop cheap" kept: every one of them, as the rule has no `when`.
        assert whole.matched["title"] == ITEMS - whole.matched["drop cheap"]
        # The chunked run really was cut: parts of CHUNK_ROWS items, each with its own chain of pass tables,
        # and one in-place DELETE per part for the passes that only exclude ("drop cheap", "drop brand1").
        parts = -(-ITEMS // CHUNK_ROWS)
        assert [len(slices) for slices in recorder.slices.values()] == [parts] * 3
        assert all(s.in_place for n in (2, 3) for s in recorder.slices[n])
        assert not any(s.in_place for s in recorder.slices[1])
        # Only the first pass reads the items table, by ranges; the next ones read their part's own table.
        assert all(s.lo is not None or s.hi is not None for s in recorder.slices[1])
        assert all(s.lo is None and s.hi is None and s.src != source for s in recorder.slices[2])
        # The loop dropped each pass table once the next was written: only the parts' last tables are left,
        # which the result (a view) reads.
        assert chunked.table.endswith("_0") and len(_run_tables(service, runs[2])) == parts
        assert _run_tables(service, runs[0]) == [whole.table]
        assert service.table_exists(COMPANY, source)
    finally:
        for run_id in runs:
            RunTables(service).drop_rules_tmp_for_run(COMPANY, run_id)


def test_with_no_enabled_rule_both_strategies_keep_the_items_table(engine: Engine, source: str) -> None:
    rules = parse_rules([RAW_RULES[-1]], key_field=KEY_FIELD)
    whole, _ = _in_process(engine, source, rules, split=False)
    chunked, _, recorder = _chunked(engine, source, rules)
    assert whole == chunked
    assert (whole.table, whole.passes, whole.rows_in, whole.rows_out, whole.matched) == (source, 0, ITEMS, ITEMS, {})
    assert recorder.slices == {}


def test_a_pass_is_cut_into_at_most_max_slices_chunk_jobs_with_the_same_result(engine: Engine, source: str) -> None:
    """Past max_slices x chunk_rows items the slices grow instead of multiplying (a chunk job has a cost)."""
    service = SchemaService(engine)
    rules = parse_rules(RAW_RULES, key_field=KEY_FIELD)
    runs: list[str] = []
    try:
        whole, run_id = _in_process(engine, source, rules, split=False)
        runs.append(run_id)
        few, run_id, recorder = _chunked(engine, source, rules, max_slices=4)
        runs.append(run_id)
        # Four runs of heap pages, the first open below and the last above, with no gap and no overlap.
        bounds = [(s.lo, s.hi) for s in recorder.slices[1]]
        assert len(bounds) == 4 and bounds[0][0] is None and bounds[-1][1] is None, bounds
        assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds)), bounds
        assert (few.matched, few.excluded, few.rows_out) == (whole.matched, whole.excluded, whole.rows_out)
        assert _read_sorted(engine, few.table, few.fields) == _read_sorted(engine, whole.table, whole.fields)
    finally:
        for run_id in runs:
            RunTables(service).drop_rules_tmp_for_run(COMPANY, run_id)


LIST_RULES: list[dict[str, Any]] = [
    {"name": "gold", "when": {"field": "tags", "op": "eq", "value": "gold"}, "then": [{"uppercase": "tags"}]},
    {"name": "few", "when": {"field": "tags", "op": "count_lt", "value": "2"}, "then": [{"exclude": "true"}]},
    {"name": "parts", "then": [{"split": "title", "separator": " "}, {"take": "title", "count": "2"}]},
    {"name": "extra", "then": [{"append": "tags", "value": "{title[-1]}"}, {"dedupe": "tags"}]},
]


def test_list_fields_give_the_same_items_in_process_in_halves_and_as_chunk_jobs(engine: Engine) -> None:
    """text[] pass tables made up front (chunk jobs INSERT into them) hold what CREATE TABLE AS holds."""
    service = SchemaService(engine)
    fields = [KEY_FIELD, "title", "tags"]
    rules = parse_rules(LIST_RULES, key_field=KEY_FIELD, declared_lists=frozenset({"tags"}))
    lists = rules[0].lists
    assert lists.fields == {"tags", "title"}
    items = [
        {KEY_FIELD: f"K{i}", "title": (f"item number {i}",), "tags": tuple(["gold", "silver", "gold"][: i % 4])}
        for i in range(ITEMS)
    ]
    table = f"items_{uuid.uuid4().hex[:8]}"
    load_items(engine, service, COMPANY, table, fields, items, lists)
    runs: list[str] = []
    try:
        whole, run_id = _in_process(engine, table, rules, split=False, fields=fields)
        runs.append(run_id)
        halves, run_id = _in_process(engine, table, rules, split=True, fields=fields)
        runs.append(run_id)
        chunked, run_id, _recorder = _chunked(engine, table, rules, fields)
        runs.append(run_id)
        rows = _read_sorted(engine, whole.table, whole.fields)
        assert rows[0][1:] == ("K2", ["item", "number"], ["GOLD", "SILVER", "number"])
        assert len(rows) == whole.rows_out == sum(1 for i in range(ITEMS) if i % 4 >= 2)
        assert _read_sorted(engine, halves.table, halves.fields) == rows
        assert _read_sorted(engine, chunked.table, chunked.fields) == rows
        assert chunked.matched == whole.matched and chunked.excluded == whole.excluded
    finally:
        for run_id in runs:
            RunTables(service).drop_rules_tmp_for_run(COMPANY, run_id)
        service.drop_table(COMPANY, table)


@pytest.mark.parametrize("parts", [1, 3, 7, 50])
def test_page_parts_cover_every_page_once_in_order(engine: Engine, parts: int) -> None:
    """Runs of heap pages of the same length: every row in exactly one part, the parts in feed order."""
    from firefeed.rules.executor import page_parts

    service = SchemaService(engine)
    service.create_company_schema(COMPANY)
    table = f"pages_{uuid.uuid4().hex[:8]}"
    target = ident(company_schema(COMPANY), table)
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("CREATE TABLE {} ({} bigint NOT NULL, pad text)").format(target, ident(ORD)))
        cur.execute(sql.SQL("INSERT INTO {} SELECT g, repeat('x', 200) FROM generate_series(1, 1000) g").format(target))
    try:
        cut = page_parts(engine, COMPANY, table, parts)
        assert 1 <= len(cut) <= parts and cut[0][0] is None and cut[-1][1] is None
        assert all(a[1] == b[0] for a, b in itertools.pairwise(cut))  # no gap, no overlap
        seen: list[int] = []
        with raw_connection(engine) as conn, conn.cursor() as cur:
            for lo, hi in cut:
                where = pages_filter(lo, hi)
                query = sql.SQL("SELECT {} FROM {} AS t").format(ident(ORD), target)
                if where is not None:
                    query = query + sql.SQL(" WHERE ") + where.sql
                cur.execute(query, where.params if where is not None else None)
                got = [r[0] for r in cur.fetchall()]
                assert got, (lo, hi)
                seen.extend(got)
        assert seen == list(range(1, 1001))
    finally:
        service.drop_table(COMPANY, table)


GROUP_RULES: list[dict[str, Any]] = [
    {"name": "vat", "then": [{"math": "price", "op": "multiply", "value": "1.22", "round": "2"}]},
    {
        "name": "count",
        "then": [{"aggregate": "variants", "op": "count"}, {"aggregate": "low", "op": "min", "of": "price"}],
    },
    {"name": "one per brand", "when": {"not": {"group_first": "true"}}, "then": [{"exclude": "true"}]},
]


def test_a_grouped_pass_over_parts_joins_the_groups_of_all_of_them(engine: Engine, source: str) -> None:
    """Groups span any cut by position (the brands alternate item by item): every part of a grouped pass
    joins one groups table made from the whole pass input, in halves and in chunk jobs alike."""
    service = SchemaService(engine)
    rules = parse_rules(GROUP_RULES, key_field=KEY_FIELD, group="brand")
    runs: list[str] = []
    try:
        whole, halves = _whole_and_halves(engine, source, rules, runs)
        chunked, run_id, recorder = _chunked(engine, source, rules)
        runs.append(run_id)
        assert whole.rows_out == 3  # three brands
        assert halves.table.endswith("_0") and chunked.table.endswith("_0")  # views of their parts
        rows = _read_sorted(engine, whole.table, whole.fields)
        assert [r[-2] for r in rows] == ["77", "77", "76"]  # 230 items over three brands
        for other in (halves, chunked):
            assert (other.matched, other.excluded, other.rows_out) == (whole.matched, whole.excluded, 3)
            assert _read_sorted(engine, other.table, other.fields) == rows
        parts = -(-ITEMS // CHUNK_ROWS)
        assert [len(s) for _, s in sorted(recorder.slices.items())] == [parts] * 3
        groups = {s.groups for n in (2, 3) for s in recorder.slices[n]}
        assert len(groups) == 2 and None not in groups and not any(s.groups for s in recorder.slices[1])
        # Each groups table is dropped once its pass ran.
        assert not any(t.endswith("_g") for r in runs for t in _run_tables(service, r))
    finally:
        for run_id in runs:
            RunTables(service).drop_rules_tmp_for_run(COMPANY, run_id)


def test_a_grouped_pass_over_halves_whose_plan_would_reorder_probes_the_groups_in_feed_order(
    engine: Engine, source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each half joins the groups table by a plain LEFT JOIN; when its plan would not keep the items' order
    (`keeps_order` refuses it: here always), the half runs without hash joins (an index probe per item). The
    halves give the whole run's values, and each half's table is stored in feed order (a plain scan of the
    result yields _ff_ord ascending: the export reads it so)."""
    seen: list[bool] = []

    def refuse(cur: Any, statement: Any, params: Any = None) -> bool:
        seen.append(plans.keeps_order(cur, statement, params))
        return False

    monkeypatch.setattr(executor, "keeps_order", refuse)
    service = SchemaService(engine)
    rules = parse_rules(GROUP_RULES[:2], key_field=KEY_FIELD, group="title")  # every item kept, a group each
    runs: list[str] = []
    try:
        whole, halves = _whole_and_halves(engine, source, rules, runs)
        assert len(seen) >= 2  # both halves' passes were planned, then run as probes
        assert _read_sorted(engine, halves.table, halves.fields) == _read_sorted(engine, whole.table, whole.fields)
        with raw_connection(engine) as conn, conn.cursor() as cur:
            cur.execute(sql.SQL("SELECT {} FROM {}").format(ident(ORD), ident(company_schema(COMPANY), halves.table)))
            order = [r[0] for r in cur.fetchall()]
        assert len(order) == ITEMS and order == sorted(order)
    finally:
        for run_id in runs:
            RunTables(service).drop_rules_tmp_for_run(COMPANY, run_id)


def test_keeps_order_accepts_a_hash_of_the_groups_and_refuses_one_of_the_items(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """keeps_order reads the plan: many items and few groups hash the groups (the items' order kept);
    few items and many groups hash the items, which yields the groups' order: refused; and so is a hash of
    a groups table larger than GROUPS_HASH_MAX_BYTES (it could take several batches)."""
    schema = company_schema(COMPANY)
    SchemaService(engine).create_company_schema(COMPANY)
    tag = uuid.uuid4().hex[:8]
    many, few, groups = f"many_{tag}", f"rules_tmp_{tag}_1_g", f"grp_{tag}"
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute("SET LOCAL enable_mergejoin = off")
        for name, rows in ((many, 20000), (few, 3)):
            cur.execute(
                sql.SQL("CREATE TABLE {} AS SELECT g AS o, mod(g, 50)::text AS k FROM generate_series(1, %s) g").format(
                    ident(schema, name)
                ),
                (rows,),
            )
        cur.execute(
            sql.SQL("CREATE TABLE {} AS SELECT g::text AS k FROM generate_series(1, 20000) g").format(
                ident(schema, groups)
            )
        )
        cur.execute(sql.SQL("ANALYZE {}, {}, {}").format(*(ident(schema, t) for t in (many, few, groups))))

        def joined(items: str, grouped: str) -> Any:
            return sql.SQL("SELECT t.o FROM {} AS t LEFT JOIN {} AS g ON g.k = t.k").format(
                ident(schema, items), ident(schema, grouped)
            )

        assert plans.keeps_order(cur, joined(many, few))  # the 3-row groups table is hashed
        assert not plans.keeps_order(cur, joined(few, groups))  # the 3 items are hashed: refused
        # A view of parts is an Append: each member must keep its order, the second as much as the first.
        assert plans.keeps_order(cur, joined(many, few) + sql.SQL(" UNION ALL ") + joined(many, few))
        assert not plans.keeps_order(cur, joined(many, few) + sql.SQL(" UNION ALL ") + joined(few, groups))
        # Each hash is kept to the statement's end: the hashes of one statement are bounded together too.
        both = joined(many, few) + sql.SQL(" UNION ALL ") + joined(many, few)
        monkeypatch.setattr(plans, "GROUPS_HASH_TOTAL_BYTES", 8192)  # the 3-row table's one page, once
        assert plans.keeps_order(cur, joined(many, few)) and not plans.keeps_order(cur, both)
        monkeypatch.setattr(plans, "GROUPS_HASH_MAX_BYTES", 0)
        assert not plans.keeps_order(cur, joined(many, few))  # a groups table over the size: refused
        conn.rollback()
