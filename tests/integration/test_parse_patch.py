"""PARSE by patch and the primary's delta (#52, the 1% refresh): a refresh after some records of the primary
csv changed stages only those records again (pipeline/stage_patch.py) and merges and rules only their
items (pipeline/delta.py), giving the files and report of a `--full` run and of a fresh project, and a
staging table equal to a full parse's. Whatever cannot be proven the same parses in full, saying why."""

from __future__ import annotations

import csv
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import Engine, text

from firefeed.config import get_settings, reset_settings
from firefeed.dataplane import parsed_copy
from firefeed.runs.service import RunStore
from firefeed.schema.identifiers import company_schema, staging_table
from tests.integration.conftest import write_csv
from tests.integration.test_incremental import PER_ITEM_RULES, files, merge_detail, named, ok

pytestmark = pytest.mark.integration

HEADER = ["id", "title", "price", "brand"]
RULES = [
    *PER_ITEM_RULES,
    {
        "name": "cheap",
        "when": {"field": "price", "op": "lt", "value": "10"},
        "then": [{"set": "label", "value": "cheap"}],
    },
]
FIELDS = {"id": "{id}", "title": "{title}", "price": "{price}", "stock": "{stock}", "label": "{label}"}


def main_rows() -> list[list[str]]:
    rows = [[str(i), f"item {i}", str(i), f"b{i % 3}"] for i in range(1, 41)]
    rows[4][1] = 'a "quoted", two-line\ntitle'  # item 5
    rows[9][1] = "three\nline\ntitle"  # item 10
    return rows


def write_main(tmp: Path, rows: list[list[str]], header: list[str] = HEADER) -> None:
    write_csv(tmp / "main.csv", header, rows)


#: the primary and the stock enriching it
SOURCES: list[dict[str, Any]] = [
    {"name": "main", "url": "main.csv"},
    {"name": "stock", "url": "stock.csv", "mode": "enrich"},
]


def projects(
    tmp: Path, n: int = 3, exports: list[dict[str, Any]] | None = None, sources: list[dict[str, Any]] = SOURCES
) -> list[Path]:
    """`n` projects of the same spec over the files in `tmp` (the refreshed one, its `--full` twin, a fresh one)."""
    specs = []
    for _ in range(n):
        project = f"pp{uuid.uuid4().hex[:8]}"
        spec = {
            "company": "increfresh",
            "project": project,
            "key": "id",
            "sources": sources,
            "rules": RULES,
            "exports": exports
            or [
                {"name": "feed", "path": "feed.csv", "format": "csv", "fields": FIELDS},
                {"name": "lines", "path": "feed.jsonl", "format": "jsonl", "fields": FIELDS},
            ],
        }
        path = tmp / f"{project}.yaml"
        path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
        specs.append(path)
    return specs


def start(tmp: Path, n: int = 3) -> list[Path]:
    write_main(tmp, main_rows())
    write_csv(tmp / "stock.csv", ["id", "stock"], [[str(i), str(i % 5)] for i in range(1, 41)])
    specs = projects(tmp, n)
    for spec in specs[:-1]:  # the last one is the fresh project
        ok(spec)
    return specs


def parse_staging(run_id: str) -> dict[str, Any]:
    from firefeed.runs.contract import Step

    detail = next(dict(st.detail or {}) for st in RunStore().steps(run_id) if st.step == Step.PARSE)
    return dict(detail.get("staging", {}).get("main", {}))


def staged(engine: Engine, project: str, source: str = "main") -> list[tuple[Any, ...]]:
    table = f'"{company_schema("increfresh")}"."{staging_table(project, source)}"'
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text(f"SELECT * FROM {table} ORDER BY _ff_ord"))]


def same_as_full_and_fresh(
    engine: Engine,
    exports: Path,
    refreshed: Path,
    full: Path,
    fresh: Path,
    report: dict[str, Any],
    source: str = "main",
) -> None:
    """The refreshed project's report and files are its `--full` twin's and a fresh project's, and the patched
    source's staging table holds what a full parse stages: values, ords and line numbers."""
    assert named(report, refreshed.stem) == named(ok(full, "--full"), full.stem)
    assert files(exports, refreshed.stem) == files(exports, full.stem)
    ok(fresh)
    assert files(exports, refreshed.stem) == files(exports, fresh.stem)
    assert staged(engine, refreshed.stem, source) == staged(engine, fresh.stem, source)


def edited(rows: list[list[str]]) -> list[list[str]]:
    """Records edited in place: quotes and commas, a value gaining lines, one losing them, a price."""
    out = [list(r) for r in rows]
    out[2][1] = 'now "quoted", with, commas'  # item 3
    out[4][1] = "one line now"  # item 5: its record spans fewer lines
    out[6][1] = "gains\na line"  # item 7: more lines
    out[11][2] = "5"  # item 12: cheap now
    out[39][1] = "the last item"  # item 40, the file's last record
    return out


def test_a_refresh_after_records_of_the_primary_changed_is_a_patched_parse_and_a_delta(
    patch_env: Path, tmp_path: Path, engine: Engine
) -> None:
    refreshed, full, fresh = start(tmp_path)
    rows = edited(main_rows())
    write_main(tmp_path, rows)
    report = ok(refreshed)
    staging = parse_staging(report["run_id"])
    assert staging["staged"] == "patched" and staging["changed"] == 5, staging
    assert staging["found_by"] == "keys", staging  # each key one staged row: no old record parsed again
    assert report["incremental"]["mode"] == "delta", report["incremental"]
    assert report["incremental"]["reason"].startswith("only records of the primary source 'main' changed")
    assert merge_detail(report["run_id"])["changed_by"] == "patched rows"
    assert report["incremental"]["items_changed"] == 5, report["incremental"]
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)


@pytest.mark.stress  # seven runs: ~8 s on a loaded machine
def test_a_patch_on_a_patch_then_a_full_run_of_the_patched_staging(
    patch_env: Path, tmp_path: Path, engine: Engine
) -> None:
    """The kept copy is now the patched file (its quotes vouched for by the diff); a full run then merges the
    patched staging, whose changed rows moved in the heap."""
    refreshed, full, fresh = start(tmp_path)
    rows = edited(main_rows())
    write_main(tmp_path, rows)
    assert parse_staging(ok(refreshed)["run_id"])["staged"] == "patched"
    ok(full)
    rows[2][1], rows[11][2] = "item 3", "12"
    write_main(tmp_path, rows)
    again = ok(refreshed)
    assert parse_staging(again["run_id"])["staged"] == "patched", parse_staging(again["run_id"])
    assert again["incremental"]["mode"] == "delta", again["incremental"]
    assert again["incremental"]["items_changed"] == 2
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, again)
    # A full run merging the patched staging (not parsed again): its changed rows moved in the heap.
    assert files(patch_env, refreshed.stem) != {}
    ok(refreshed, "--full")
    assert files(patch_env, refreshed.stem) == files(patch_env, fresh.stem)


def _edit_file(tmp: Path, how: str, project: str, engine: Engine) -> None:
    rows = main_rows()
    settings = get_settings()
    if how == "added":
        write_main(tmp, [*rows, ["41", "new", "1", "b0"]])
    elif how == "removed":
        write_main(tmp, rows[:20] + rows[21:])
    elif how == "key":
        rows[3][0] = "4b"
        write_main(tmp, rows)
    elif how == "empty key":
        rows[3][0] = " "
        write_main(tmp, rows)
    elif how == "header":
        write_main(tmp, edited(rows), ["id", "title", "price", "maker"])
    elif how == "lines moved":
        rows[1][1] = "two\nlines"  # moves the line numbers of the 38 rows after it (more than 16)
        write_main(tmp, rows)
    elif how == "not utf-8":
        write_main(tmp, edited(rows))
        data = (tmp / "main.csv").read_bytes().replace(b"the last item", b"the last \xe9t\xe9")
        (tmp / "main.csv").write_bytes(data)
    else:
        write_main(tmp, edited(rows))
        kept = parsed_copy.path(settings, "increfresh", project, "main")
        table = f'"{company_schema("increfresh")}"."{staging_table(project, "main")}"'
        if how == "copy deleted":
            kept.unlink()
        elif how == "copy changed":
            kept.write_bytes(kept.read_bytes().replace(b"item 1,", b"item 9,"))
        elif how == "copy kept":
            pass
        elif how == "staging emptied":
            with engine.begin() as conn:
                conn.execute(text(f"TRUNCATE {table}"))
        else:
            raise AssertionError(how)


REFUSALS = {
    "added": "records",
    "removed": "records",
    "key": "changes its key",
    "empty key": "changes its key",
    "header": "header",
    "not utf-8": "not UTF-8",
    "lines moved": "move the lines of 38 rows",
    "cap changed": "FIREFEED_PARSE_MAX_VALUE_CHARS",
    "copy deleted": "gone or changed on disk",
    "copy changed": "gone or changed on disk",
    "staging emptied": "staging table is empty",
}


@pytest.mark.parametrize("how", sorted(REFUSALS))
def test_what_a_patch_cannot_prove_the_same_is_parsed_in_full(
    patch_env: Path, tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    refreshed, full, fresh = start(tmp_path)
    if how == "cap changed":
        monkeypatch.setenv("FIREFEED_PARSE_MAX_VALUE_CHARS", "100000")
        reset_settings()
    _edit_file(tmp_path, "copy kept" if how == "cap changed" else how, refreshed.stem, engine)
    report = ok(refreshed)
    staging = parse_staging(report["run_id"])
    assert staging["staged"] == "full", staging
    assert REFUSALS[how].lower() in staging["reason"].lower(), staging
    assert report["incremental"]["mode"] == "full", report["incremental"]
    assert "not a delta: the primary was parsed in full" in report["incremental"]["reason"]
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)
    # The full parse kept the new file: the next edit is patched again (a windows-1252 parse is never patched).
    if how in ("copy deleted", "copy changed", "staging emptied", "cap changed"):
        rows = edited(main_rows())
        rows[0][1] = "changed again"
        write_main(tmp_path, rows)
        assert parse_staging(ok(refreshed)["run_id"])["staged"] == "patched"


def test_a_last_parse_with_malformed_rows_is_not_patched(patch_env: Path, tmp_path: Path, engine: Engine) -> None:
    refreshed, full, fresh = start(tmp_path)
    with (tmp_path / "main.csv").open("a", newline="", encoding="utf-8") as f:
        csv.writer(f).writerow(["99", "too", "many", "cells", "here"])
    ok(refreshed)
    ok(full)
    text_ = (tmp_path / "main.csv").read_text(encoding="utf-8").replace("item 2,", "item two,")
    (tmp_path / "main.csv").write_text(text_, encoding="utf-8", newline="")
    report = ok(refreshed)
    assert "malformed" in parse_staging(report["run_id"])["reason"]
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)


def test_no_copy_is_kept_below_the_size_or_when_disabled(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (spec,) = start(tmp_path, n=2)[:1]
    kept = parsed_copy.path(get_settings(), "increfresh", spec.stem, "main")
    assert not kept.exists()  # the default keeps only files over 16 MiB
    monkeypatch.setenv("FIREFEED_PARSE_KEEP_COPY_MIN_BYTES", "1")
    reset_settings()
    write_main(tmp_path, edited(main_rows()))
    report = ok(spec)
    assert parse_staging(report["run_id"])["staged"] == "full"
    assert kept.read_bytes() == (tmp_path / "main.csv").read_bytes()
    monkeypatch.setenv("FIREFEED_PARSE_KEEP_COPY_MIN_BYTES", "0")
    reset_settings()
    write_main(tmp_path, main_rows())
    report = ok(spec)
    assert "FIREFEED_PARSE_KEEP_COPY_MIN_BYTES is 0" in parse_staging(report["run_id"])["reason"]
    assert not kept.exists()


def test_a_source_the_spec_no_longer_names_loses_its_kept_copy(patch_env: Path, tmp_path: Path) -> None:
    (spec,) = start(tmp_path, n=2)[:1]
    settings = get_settings()
    old = parsed_copy.path(settings, "increfresh", spec.stem, "main")
    assert old.read_bytes() == (tmp_path / "main.csv").read_bytes()
    doc = yaml.safe_load(spec.read_text(encoding="utf-8"))
    doc["sources"][0]["name"] = "primary"
    spec.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    ok(spec)
    assert not old.exists()
    assert parsed_copy.path(settings, "increfresh", spec.stem, "primary").exists()


def test_many_changed_records_are_patched_together(patch_env: Path, tmp_path: Path, engine: Engine) -> None:
    """More changed records than a statement's page of values (100), within a tenth of the rows."""
    big = [[str(i), f"item {i}", str(i % 50), f"b{i % 3}"] for i in range(1, 1301)]
    write_main(tmp_path, big)
    write_csv(tmp_path / "stock.csv", ["id", "stock"], [[str(i), str(i % 5)] for i in range(1, 1301)])
    refreshed, full, fresh = projects(tmp_path)
    ok(refreshed)
    ok(full)
    for row in big[::12]:
        row[1] += " (new)"
    write_main(tmp_path, big)
    report = ok(refreshed)
    assert parse_staging(report["run_id"]) | {"new_rows": "", "old_rows": "", "from": ""} == {
        "staged": "patched",
        "changed": 109,
        "new_rows": "",
        "old_rows": "",
        "from": "",
        "found_by": "keys",
    }
    assert report["incremental"]["mode"] == "delta", report["incremental"]
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)
