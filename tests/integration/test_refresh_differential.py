"""SPEC 11 I1 as a property (#52): a refresh gives what a full run gives, and what a fresh project gives.

Random specs (rules from the section-12 differential test's generator: lookups, groups and channel
rules included, or per-item rules only) and random change sets (edits, additions, removals, a changed
lookup table, a changed spec, a changed `stock` enrich source, often that alone, records of the primary
edited in place alone, or no change at all) are applied to two projects with the same history: one
refreshed as FireFeed chooses (`unchanged` when nothing changed, `delta` when only the stock source
did (its records edited in place are patched by PARSE and merged from the patch), or only records of
the primary, patched by PARSE, and the rules read one item at a time, else full), one with `--full`.
Their exports must be byte-identical and their reports equal but for `incremental` and timings; the
refreshed project's exports must be byte-identical to a fresh project's run of the same sources and spec.
`make test` tries a few examples, `make stress` (FIREFEED_THOROUGH_PROPERTIES=1) many.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from firefeed.config import reset_settings
from tests.integration.conftest import cli, published_files, write_csv
from tests.integration.test_rules_differential import (
    FIELDS,
    GROUP_FIELD,
    KEY_FIELD,
    LOOKUP_KEY,
    NEW_FIELDS,
    grouped_items,
    lookup_rows,
    rule_lists,
    values,
)
from tests.properties import THOROUGH

pytestmark = pytest.mark.integration

COMPANY = "refreshdiff"
#: the item fields an export writes (the field whose name holds a quote and a ';' is read by the rules only)
WRITTEN = [KEY_FIELD, "title", "price", "brand", GROUP_FIELD, *NEW_FIELDS]
ITEM_FIELDS = [KEY_FIELD, *FIELDS, GROUP_FIELD]
LOOKUP_FIELDS = [LOOKUP_KEY, "v1", "v2"]
#: the enrich source: it overwrites two written fields of the items it names (and of none it does not)
STOCK_FIELDS = [KEY_FIELD, "price", "brand"]

_EXAMPLES = 60 if THOROUGH else 4


def _spec(project: str, rules: list[dict[str, Any]], channel: list[dict[str, Any]]) -> dict[str, Any]:
    fields = {f"c_{i}": "{" + f + "}" for i, f in enumerate(WRITTEN)}
    return {
        "company": COMPANY,
        "project": project,
        "key": KEY_FIELD,
        "group": GROUP_FIELD,
        "sources": [
            {"name": "main", "url": "items.csv", "delimiter": ","},
            {"name": "stock", "url": "stock.csv", "delimiter": ",", "mode": "enrich"},
        ],
        "lookups": [{"name": "lk", "url": "lk.csv", "key": LOOKUP_KEY, "delimiter": ","}],
        "rules": rules,
        "exports": [
            {"name": "feed", "path": "feed.csv", "format": "csv", "fields": fields, "max_drop": "100%"},
            {"name": "channel", "path": "channel.json", "format": "json", "fields": fields, "rules": channel},
            # A delta patches these (export/patch.py) unless a changed item enters or leaves one (the stock
            # source writes the price) or a value holds a newline; the gzip one is written whole.
            {
                "name": "lines",
                "path": "lines.jsonl",
                "format": "jsonl",
                "fields": fields,
                "where": {"field": "price", "op": "contains", "value": "1"},
                "max_drop": "100%",
            },
            {"name": "tabs", "path": "tabs.tsv.gz", "format": "tsv", "gzip": True, "max_drop": "100%"},
        ],
    }


class Folder:
    """The sources, lookup table and spec files of one history (the projects reading them share the files)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True)

    def write(self, items: list[dict[str, str]], rows: list[dict[str, str]], stock: list[list[str]]) -> None:
        write_csv(self.root / "items.csv", ITEM_FIELDS, [[i.get(f, "") for f in ITEM_FIELDS] for i in items])
        write_csv(self.root / "lk.csv", LOOKUP_FIELDS, [[r.get(f, "") for f in LOOKUP_FIELDS] for r in rows])
        write_csv(self.root / "stock.csv", STOCK_FIELDS, stock)

    def spec(self, project: str, rules: list[dict[str, Any]], channel: list[dict[str, Any]]) -> Path:
        path = self.root / f"{project}.yaml"
        doc = _spec(project, rules, channel)
        path.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
        return path


def _run(spec: Path, *flags: str) -> tuple[int, dict[str, Any]]:
    code, out = cli("run", str(spec), "--json", *flags)
    return code, json.loads(out)


def _comparable(report: dict[str, Any], project: str) -> dict[str, Any]:
    """The report as two projects' runs of the same inputs share it: no ids, times, `incremental`, feed URLs."""
    doc = json.loads(json.dumps(report).replace(project, "<project>"))
    for key in ("run_id", "requested_at", "started_at", "finished_at", "duration_s", "incremental", "project"):
        doc.pop(key, None)
    doc["steps"] = [{k: st[k] for k in ("step", "status", "rows_in", "rows_out")} for st in doc.get("steps", [])]
    for entry in doc.get("exports", []):
        entry.pop("url", None)
        entry.pop("last_fetch", None)
    return doc


def _written(run_id: str) -> dict[str, str]:
    """How a delta run's EXPORT wrote each export: `patched`, or `full: why`."""
    from firefeed.runs.contract import Step
    from firefeed.runs.service import RunStore

    detail = next(dict(st.detail or {}) for st in RunStore().steps(run_id) if st.step == Step.EXPORT)
    return dict(detail.get("written") or {})


def _staged_as(run_id: str, source: str = "main") -> str:
    """How a run's PARSE staged a source: `patched`, or `full: why`."""
    from firefeed.runs.contract import Step
    from firefeed.runs.service import RunStore

    detail = next(dict(st.detail or {}) for st in RunStore().steps(run_id) if st.step == Step.PARSE)
    staging = (detail.get("staging") or {}).get(source) or {}
    return "patched" if staging.get("staged") == "patched" else f"full: {staging.get('reason')}"


def _changed_by(run_id: str) -> str:
    """How a delta's MERGE found the changed items (its detail's `changed_by`)."""
    from firefeed.runs.contract import Step
    from firefeed.runs.service import RunStore

    detail = next(dict(st.detail or {}) for st in RunStore().steps(run_id) if st.step == Step.MERGE)
    return str(detail.get("changed_by"))


def _ruled_by(run_id: str) -> str:
    """How a delta's RULES ruled the changed items' new rows (its detail's `ruled_by`)."""
    from firefeed.runs.contract import Step
    from firefeed.runs.service import RunStore

    detail = next(dict(st.detail or {}) for st in RunStore().steps(run_id) if st.step == Step.RULES)
    return str(detail.get("ruled_by"))


def _files(exports: Path, project: str) -> dict[str, bytes]:
    return published_files(exports / COMPANY / project)


#: the stock source's rows: an item's key (0-9: some name no item, some repeat) and its price and brand
stock_rows = st.lists(
    st.tuples(st.integers(0, 9).map(str), values, values).map(list),
    min_size=1,
    max_size=8,
)
#: the stock source changed alone: a few rows edited, added or removed (the delta's case)
stock_edits = st.fixed_dictionaries(
    {
        "edit": st.lists(st.tuples(st.integers(0, 7), st.integers(1, 2), values), min_size=1, max_size=3),
        "add": st.lists(st.tuples(st.integers(0, 9).map(str), values, values).map(list), max_size=2),
        "remove": st.lists(st.integers(0, 7), max_size=1),
    }
)
#: the stock source's rows edited in place alone (none added or removed): PARSE patches it, the delta's MERGE
#: reads the patch (repeated keys make it merge the patched keys again)
stock_in_place = st.fixed_dictionaries(
    {
        "edit": st.lists(st.tuples(st.integers(0, 7), st.integers(1, 2), values), min_size=1, max_size=3),
        "add": st.just([]),
        "remove": st.just([]),
    }
)

#: the primary's records edited in place, no item added or removed (the primary's delta: PARSE patches them)
primary_edits = st.lists(st.tuples(st.integers(0, 7), st.sampled_from(ITEM_FIELDS[1:]), values), min_size=1, max_size=3)

changes = st.one_of(
    st.none(),  # no change at all: the refresh reuses the last run
    st.fixed_dictionaries(
        {
            "edit": st.lists(st.tuples(st.integers(0, 7), st.sampled_from(ITEM_FIELDS[1:]), values), max_size=3),
            "add": st.lists(st.fixed_dictionaries({f: values for f in FIELDS}), max_size=2),
            "remove": st.lists(st.integers(0, 7), max_size=2),
            "lookup": st.one_of(st.none(), lookup_rows),
            "rules": st.one_of(st.none(), rule_lists(lookups=True, groups=True)),
            "stock": st.one_of(st.none(), stock_rows),
        }
    ),
    st.fixed_dictionaries({"stock_only": stock_edits}),
    st.fixed_dictionaries({"stock_only": stock_in_place}),
    st.fixed_dictionaries({"primary_only": primary_edits}),
)


def _stock_changed(stock: list[list[str]], edits: dict[str, Any]) -> list[list[str]]:
    out = [list(r) for r in stock]
    for index, column, value in edits["edit"]:
        if out:
            row = out[index % len(out)]
            row[column] = value if value != row[column] else value + "*"  # a change, always
    out.extend(list(r) for r in edits["add"])
    for index in edits["remove"]:
        if out:
            out.pop(index % len(out))
    return out


def _changed(
    items: list[dict[str, str]],
    rows: list[dict[str, str]],
    stock: list[list[str]],
    rules: list[dict[str, Any]],
    change: dict[str, Any] | None,
) -> tuple[list[dict[str, str]], list[dict[str, str]], list[list[str]], list[dict[str, Any]]]:
    if change is None:
        return items, rows, stock, rules
    if "stock_only" in change:
        return items, rows, _stock_changed(stock, change["stock_only"]), rules
    out = [dict(i) for i in items]
    if "primary_only" in change:
        for index, name, value in change["primary_only"]:
            item = out[index % len(out)]
            item[name] = value if value != item.get(name, "") else value + "*"  # a change, always
        return out, rows, stock, rules
    for index, name, value in change["edit"]:
        if out:
            out[index % len(out)][name] = value
    for n, added in enumerate(change["add"]):
        out.append({KEY_FIELD: str(100 + n), GROUP_FIELD: "a", **added})
    for index in change["remove"]:
        if len(out) > 1:
            out.pop(index % len(out))
    lookup = rows if change["lookup"] is None else change["lookup"]
    stocked = stock if change["stock"] is None else change["stock"]
    return out, lookup, stocked, rules if change["rules"] is None else change["rules"]


@settings(
    max_examples=_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
@given(
    items=grouped_items.filter(bool),
    rows=lookup_rows,
    stock=stock_rows,
    # Per-item rules often: a stock-only change of those is a delta.
    rules=st.one_of(rule_lists(lookups=True, groups=True), rule_lists()),
    channel=rule_lists(),
    change=changes,
)
def test_a_refresh_gives_a_full_runs_files_and_report_and_a_fresh_projects_files(
    run_env: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    items: list[dict[str, str]],
    rows: list[dict[str, str]],
    stock: list[list[str]],
    rules: list[dict[str, Any]],
    channel: list[dict[str, Any]],
    change: dict[str, Any] | None,
) -> None:
    # Every primary keeps its copy (the files are small): a changed primary is patched when it may be. Every
    # replaced export is kept as its spare, which the next write of the export (patched or full) writes over.
    monkeypatch.setenv("FIREFEED_PARSE_KEEP_COPY_MIN_BYTES", "1")
    monkeypatch.setenv("FIREFEED_EXPORT_SPARE_MIN_BYTES", "1")
    reset_settings()
    tag = uuid.uuid4().hex[:8]
    refreshed, full, fresh = f"r{tag}", f"f{tag}", f"n{tag}"
    folder = Folder(tmp_path / tag)
    folder.write(items, rows, stock)
    history = [_run(folder.spec(project, rules, channel))[0] for project in (refreshed, full)]
    assert history[0] == history[1]  # the same history
    assume(history[0] != 2)  # a spec the CLI refuses (rules_max_growth, ...) has no runs to compare

    items, rows, stock, rules = _changed(items, rows, stock, rules, change)
    folder.write(items, rows, stock)
    code_r, report_r = _run(folder.spec(refreshed, rules, channel))
    code_f, report_f = _run(folder.spec(full, rules, channel), "--full")
    if change is None and code_r == 0:
        assert report_r["incremental"]["mode"] == "unchanged", report_r["incremental"]
    if change is not None and "stock_only" in change and code_r == 0:
        # The stock source alone changed: a delta, or full saying why not (or unchanged: the same rows).
        part = report_r["incremental"]
        assert part["mode"] in ("delta", "unchanged") or "not a delta" in part["reason"], part
        if part["mode"] == "delta":
            assert part["items_added"] == part["items_removed"] == 0
            assert part["items_changed"] == part["items_recomputed"] <= len(items)
            # Edits in place are patched (the merge then reads the patch), added or removed rows parsed in full.
            event(f"stock: {_staged_as(report_r['run_id'], 'stock')[:40]}; {_changed_by(report_r['run_id'])[:60]}")
    if change is not None and "primary_only" in change and code_r == 0:
        # The primary's records alone changed: a delta, or full saying why not.
        part = report_r["incremental"]
        assert part["mode"] == "delta" or "not a delta" in part["reason"], part
        if part["mode"] == "delta":
            assert part["items_added"] == part["items_removed"] == 0
        event(f"primary: {_staged_as(report_r['run_id'])}")
    event(f"refresh: {(report_r.get('incremental') or {}).get('mode')}")  # --hypothesis-show-statistics
    if code_r == 0 and report_r["incremental"]["mode"] == "delta":
        for name, how in _written(report_r["run_id"]).items():
            event(f"delta export {name}: {how}")
        how = _ruled_by(report_r["run_id"])
        event(
            f"delta rules: {how[:5]}{'; no old row' if 'no old row' in how else ''}"
        )  # a slice (pipeline/delta_slice.py) or every rule
    assert code_r == code_f
    assume(code_r != 2)
    assert _comparable(report_r, refreshed) == _comparable(report_f, full)
    assert _files(run_env, refreshed) == _files(run_env, full)

    code_n, _ = _run(folder.spec(fresh, rules, channel))
    if code_r == 0:
        assert code_n == 0
        assert _files(run_env, refreshed) == _files(run_env, fresh)
