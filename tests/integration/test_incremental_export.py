"""A delta run's EXPORT (#52): a csv, tsv or jsonl export is the last file with the changed items' lines
replaced (export/patch.py), and is written in full whenever that is not safe; either way the files and the
report are a full run's."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from firefeed.export import line_index
from firefeed.runs.contract import Step
from firefeed.runs.service import RunStore
from tests.integration.conftest import write_csv
from tests.integration.test_incremental import files, named, ok

pytestmark = pytest.mark.integration

#: a plain csv with the stock, a google-checked tsv (its id the key: plain field names), a jsonl without it
EXPORTS: list[dict[str, Any]] = [
    {"name": "feed", "path": "feed.csv", "format": "csv", "fields": {"id": "id", "title": "title", "stock": "stock"}},
    {
        "name": "google",
        "path": "google.tsv",
        "format": "tsv",
        "channel": "google",
        "max_invalid": 100,
        "fields": {"id": "id", "title": "title", "price": "price", "availability": "stock"},
    },
    {"name": "lines", "path": "lines.jsonl", "format": "jsonl", "fields": {"id": "id", "title": "title"}},
    # The channel id from the stock: most items share one (duplicate ids, found again over all items).
    {
        "name": "ids",
        "path": "ids.csv",
        "format": "csv",
        "channel": "google",
        "max_invalid": 100,
        "fields": {"id": "{stock}", "title": "title", "price": "price", "availability": "stock"},
    },
]


def project(tmp: Path, name: str, exports: list[dict[str, Any]] | None = None) -> Path:
    spec = {
        "company": "increfresh",
        "project": name,
        "key": "id",
        "sources": [{"name": "main", "url": "main.csv"}, {"name": "stock", "url": "stock.csv", "mode": "enrich"}],
        "rules": [
            {"name": "low", "when": {"field": "stock", "op": "eq", "value": "gone"}, "then": [{"exclude": True}]}
        ],
        "exports": exports if exports is not None else EXPORTS,
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True, sort_keys=False), encoding="utf-8")
    return path


def sources(tmp: Path, stock: dict[int, str] | None = None, n: int = 20) -> None:
    write_csv(
        tmp / "main.csv", ["id", "title", "price"], [[str(i), f"item {i}", f"{i}.00 EUR"] for i in range(1, n + 1)]
    )
    values = {i: "in_stock" for i in range(1, n + 1)} | (stock or {})
    write_csv(tmp / "stock.csv", ["id", "stock"], [[str(i), v] for i, v in sorted(values.items())])


def written(run_id: str) -> dict[str, str]:
    """How the run's EXPORT wrote each export (`patched`, or `full: why`)."""
    detail = next(dict(st.detail or {}) for st in RunStore().steps(run_id) if st.step == Step.EXPORT)
    return dict(detail.get("written") or {})


def three(tmp: Path, exports: list[dict[str, Any]] | None = None) -> tuple[Path, Path, Path]:
    """A project refreshed by deltas, one run with --full, one fresh: the same sources and spec."""
    refreshed, full, fresh = (f"ix{uuid.uuid4().hex[:8]}" for _ in range(3))
    return project(tmp, refreshed, exports), project(tmp, full, exports), project(tmp, fresh, exports)


def first_delta(tmp: Path) -> tuple[tuple[Path, Path, Path], dict[str, Any]]:
    """`three` with the first export, the first two run, then items 3 and 7's stock changed and the first
    refreshed (a delta whose export is patched): the projects and that run's report."""
    sources(tmp)
    specs = three(tmp, EXPORTS[:1])
    ok(specs[0])
    ok(specs[1])
    sources(tmp, {3: "out_of_stock", 7: "preorder"})
    return specs, ok(specs[0])


def same_as_full(run_env: Path, delta: dict[str, Any], specs: tuple[Path, Path, Path]) -> None:
    """The delta's files and report are those of a --full run and of a fresh project's first run."""
    refreshed, full, fresh = (s.stem for s in specs)
    assert named(delta, refreshed) == named(ok(specs[1], "--full"), full)
    assert files(run_env, refreshed) == files(run_env, full)
    fresh_report = ok(specs[2])
    assert files(run_env, refreshed) == files(run_env, fresh)
    assert fresh_report["exports"][0]["rows"] == delta["exports"][0]["rows"]


def test_a_stock_change_patches_each_line_export_with_the_files_and_report_of_a_full_run(
    run_env: Path, tmp_path: Path
) -> None:
    sources(tmp_path)
    specs = three(tmp_path)
    ok(specs[0])
    ok(specs[1])
    # Items 3 and 7 change what the csv and the google tsv write (7's new value needs quoting; 7 an unknown
    # availability: a finding); the jsonl writes nothing that changed.
    sources(tmp_path, {3: "out_of_stock", 7: 'bad, "value"'})
    before = files(run_env, specs[0].stem)
    delta = ok(specs[0])
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    # The run table of an export with channel ids is copied: its duplicate ids are flagged over all rows.
    copied = "patched, the run table copied: the duplicate ids are flagged over all rows"
    assert written(delta["run_id"]) == dict.fromkeys(("feed", "google", "lines"), "patched") | {"ids": copied}
    after = files(run_env, specs[0].stem)
    assert after["lines.jsonl"] == before["lines.jsonl"]
    assert b'7,item 7,"bad, ""value"""\n' in after["feed.csv"]
    by_name = {e["name"]: e for e in delta["exports"]}
    assert (by_name["feed"]["diff"]["changed"], by_name["feed"]["diff"]["samples"]["changed"]) == (2, ["3", "7"])
    assert by_name["lines"]["diff"]["changed"] == 0
    duplicates = {f["check"]: f["count"] for f in by_name["ids"]["diagnostics"]["findings"]}["duplicate_id"]
    assert duplicates == 17  # 20 items, 3 ids
    same_as_full(run_env, delta, specs)

    # A delta on a delta, its baseline the patched run's table: back to the first stock.
    sources(tmp_path)
    again = ok(specs[0])
    assert again["incremental"]["mode"] == "delta", again["incremental"]
    assert written(again["run_id"]) == dict.fromkeys(("feed", "google", "lines"), "patched") | {"ids": copied}
    assert files(run_env, specs[0].stem) == before
    same_as_full(run_env, again, specs)


def test_the_first_patch_keeps_the_items_positions_and_the_next_finds_its_places_by_them(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from firefeed.export import patch

    calls: list[str] = []
    for name in ("baseline_ords", "find_places"):
        real = getattr(patch, name)

        def spy(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(patch, name, spy)
    sources(tmp_path)
    specs = three(tmp_path, EXPORTS[:1])
    ok(specs[0])
    ok(specs[1])
    (index,) = (p for p in (tmp_path / "var" / line_index.FOLDER).rglob("*.lines") if p.parent.name == specs[0].stem)
    sources(tmp_path, {3: "out_of_stock", 7: "preorder"})
    calls.clear()
    delta = ok(specs[0])
    assert written(delta["run_id"]) == {"feed": "patched"}
    assert calls == ["baseline_ords"]  # the full run kept no positions: read once from the published keys
    same_as_full(run_env, delta, specs)
    kept = line_index.load(index, delta["exports"][0]["sha256"], delta["exports"][0]["bytes"])
    assert kept is not None and kept.ords is not None and len(kept.ords) == delta["exports"][0]["rows"]

    sources(tmp_path, {7: "out_of_stock", 12: "preorder"})
    calls.clear()
    again = ok(specs[0])
    assert written(again["run_id"]) == {"feed": "patched"}
    assert calls == []  # the places found by the kept positions: no scan of the published keys
    same_as_full(run_env, again, specs)


def test_a_changed_item_that_leaves_the_export_or_holds_a_newline_writes_it_in_full(
    run_env: Path, tmp_path: Path
) -> None:
    exports = [*EXPORTS[:1], {**EXPORTS[0], "name": "zipped", "path": "feed.csv.gz", "gzip": True}]
    sources(tmp_path)
    specs = three(tmp_path, exports)
    ok(specs[0])
    ok(specs[1])

    sources(tmp_path, {4: "gone"})  # the rule `low` excludes item 4 now
    delta = ok(specs[0])
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert written(delta["run_id"]) == {
        "feed": "full: a changed item enters or leaves the export",
        "zipped": "full: gzip",
    }
    same_as_full(run_env, delta, specs)

    sources(tmp_path, {5: "two\nlines"})  # item 4 back, item 5's value quoted over two lines
    delta = ok(specs[0])
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert written(delta["run_id"])["feed"] == "full: a changed item enters or leaves the export"
    same_as_full(run_env, delta, specs)

    sources(tmp_path, {5: "two\nlines", 6: "three\nlines"})  # item 6 too, item 5's line as it was
    delta = ok(specs[0])
    assert written(delta["run_id"])["feed"] == "full: a changed item's value holds a newline"
    same_as_full(run_env, delta, specs)

    sources(tmp_path, {5: "two\nlines"})  # item 6 changes back: the last file holds item 5 across two lines
    delta = ok(specs[0])
    # The full export kept each item's length beside its file (export/line_index.py): item 5 is copied whole.
    assert written(delta["run_id"])["feed"] == "patched"
    same_as_full(run_env, delta, specs)

    # Without them the last file is cut at its line ends, which item 5's two lines break.
    kept = list((tmp_path / "var" / line_index.FOLDER).rglob("*.lines"))
    assert len(kept) == 3  # one a project: the delta's, the --full run's and the fresh one's
    for path in kept:
        path.unlink()
    sources(tmp_path, {5: "two\nlines", 6: "out_of_stock"})
    delta = ok(specs[0])
    assert written(delta["run_id"])["feed"] == "full: the last file is not one line per item"
    same_as_full(run_env, delta, specs)


def test_a_published_file_edited_by_hand_makes_the_next_run_full(run_env: Path, tmp_path: Path) -> None:
    sources(tmp_path)
    specs = three(tmp_path, EXPORTS[:1])
    ok(specs[0])
    ok(specs[1])
    path = run_env / "increfresh" / specs[0].stem / "feed.csv"
    path.write_bytes(path.read_bytes().replace(b"item 2,", b"item 2 (edited),"))
    sources(tmp_path, {3: "out_of_stock"})
    report = ok(specs[0])
    # Not a delta (unchanged condition 8), whose patch would have kept the edit: the first reason is the source's.
    assert report["incremental"]["mode"] == "full", report["incremental"]
    assert written(report["run_id"]) == {}
    same_as_full(run_env, report, specs)


def test_a_baseline_older_than_the_live_file_is_never_patched_by(
    run_env: Path, tmp_path: Path, database_url: str
) -> None:
    """A publish whose baseline could not be kept (its promote failed after the switch) leaves the older
    baseline under a newer file. Its positions are another file's: the patch must not use them."""
    import psycopg2

    from firefeed.schema.identifiers import company_schema, published_keys_table

    sources(tmp_path)
    specs = three(tmp_path, EXPORTS[:1])
    ok(specs[0])
    ok(specs[1])
    schema, table = company_schema("increfresh"), published_keys_table(specs[0].stem, "feed")
    conn = psycopg2.connect(database_url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:  # the first run's baseline, put aside as a failed promote would leave it
            cur.execute(f'ALTER TABLE "{schema}"."{table}" RENAME TO "{table}_old"')
        # The next publish has as many items, others: item 21 added, item 4 excluded by the rule `low`.
        write_csv(
            tmp_path / "main.csv",
            ["id", "title", "price"],
            [[str(i), f"item {i}", f"{i}.00 EUR"] for i in range(1, 22)],
        )
        write_csv(
            tmp_path / "stock.csv",
            ["id", "stock"],
            [[str(i), "gone" if i == 4 else "in_stock"] for i in range(1, 22)],
        )
        ok(specs[0])
        ok(specs[1])
        with conn.cursor() as cur:
            cur.execute(f'DROP TABLE "{schema}"."{table}"')
            cur.execute(f'ALTER TABLE "{schema}"."{table}_old" RENAME TO "{table}"')
    finally:
        conn.close()
    # A stock-only change: a delta, whose patch would replace item 10's line at its old place (item 11's now).
    write_csv(
        tmp_path / "stock.csv",
        ["id", "stock"],
        [[str(i), {4: "gone", 10: "out_of_stock"}.get(i, "in_stock")] for i in range(1, 22)],
    )
    delta = ok(specs[0])
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert written(delta["run_id"]) == {"feed": "full: the published keys are not known to be the last file's"}
    ok(specs[1], "--full")
    assert files(run_env, specs[0].stem) == files(run_env, specs[1].stem)


def test_an_export_the_spec_no_longer_names_loses_its_line_index(run_env: Path, tmp_path: Path) -> None:
    sources(tmp_path)
    spec = project(tmp_path, f"ipl{uuid.uuid4().hex[:8]}", EXPORTS[:1])
    ok(spec)
    folder = tmp_path / "var" / line_index.FOLDER
    (old,) = folder.rglob("*.lines")
    doc = yaml.safe_load(spec.read_text(encoding="utf-8"))
    doc["exports"][0]["name"] = "renamed"
    spec.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    ok(spec)
    (new,) = folder.rglob("*.lines")
    assert new != old and not old.exists()
