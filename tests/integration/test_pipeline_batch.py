"""`firefeed run SPEC` end to end on the real Postgres: the exports are what the reference evaluator predicts."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg2 import sql

from firefeed.dataplane.names import kept_result_table
from firefeed.db.engine import raw_connection
from firefeed.errors import SpecError
from firefeed.rules.model import parse_rules
from firefeed.rules.reference import apply_rules
from tests.integration.conftest import cli, filler, read_csv, run_json, write_csv

RULES = [
    {
        "name": "out of stock",
        "when": {"field": "quantity", "op": "lte", "value": "0"},
        "then": [{"set": "availability", "value": "out of stock"}],
    },
    {
        "name": "drop tests",
        "when": {"any": [{"field": "title", "op": "contains", "value": "test"}, {"field": "price", "op": "empty"}]},
        "then": [{"exclude": "true"}],
    },
    {"name": "vat", "then": [{"math": "price", "op": "multiply", "value": "1.22", "round": "2"}]},
    {
        "name": "brand in title",
        "when": {"not": {"field": "title", "op": "starts_with", "value": "{brand}"}},
        "then": [{"set": "title", "value": "{brand} {title}"}],
    },
    {
        "name": "label",
        "when": {"field": "quantity", "op": "gt", "value": "5"},
        "then": [{"set": "label", "value": "plenty"}],
        "else": [{"set": "label", "value": "few"}],
    },
]


def _project(
    tmp: Path,
    *,
    rules: list | None = None,
    exports: list | None = None,
    project: str = "shoes_it",
    notes: int = 0,
) -> Path:
    """`notes`: a column of that many letters per item (the same in every call), to fill heap pages."""
    rows = [
        ["A1", "Mocassino", "Lux", "19,99 EUR", "3", "in stock"],
        ["A2", "Lux Sandalo", "Lux", "10.00 EUR", "9", "in stock"],
        ["A3", "test item", "Mare", "5 EUR", "1", "in stock"],
        [" A4 ", "Stivale", "Vento", "", "1", "in stock"],
        ["", "no key", "Vento", "1 EUR", "1", "in stock"],
        ["A1", "dup of A1", "Lux", "1 EUR", "1", "in stock"],
        ["A5", "Sneaker", "Sole", "0.125 EUR", "7", "in stock"],
    ]
    header = ["id", "title", "brand", "price", "quantity", "availability"]
    if notes:
        header.append("notes")
        rows = [[*r, filler(i, notes)] for i, r in enumerate(rows)]
    write_csv(tmp / "main.csv", header, rows)
    write_csv(
        tmp / "stock.csv",
        ["id", "quantity", "availability", "price"],
        [["A1", "0", "", ""], ["A2", "12", "in stock", "11.00 EUR"], ["A9", "4", "in stock", "2 EUR"]],
        delimiter=";",
    )
    spec = {
        "company": "acme",
        "project": project,
        "sources": [
            {"name": "main", "url": "main.csv"},
            {"name": "stock", "url": "stock.csv", "mode": "enrich", "fields": ["quantity", "availability", "price"]},
        ],
        "rules": RULES if rules is None else rules,
        "exports": exports
        if exports is not None
        else [
            {"name": "csv", "format": "csv", "path": "out.csv"},
            # C3: these items are not Google-complete; the tests read what a run writes and keeps.
            {"name": "google", "format": "google-xml", "path": "google.xml", "max_invalid": "100%"},
        ],
    }
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True), encoding="utf-8")
    return path


def _oracle(tmp: Path) -> list[dict[str, str]]:
    """Merge the two CSVs in plain Python (SPEC 8.2-8.3) and apply the reference evaluator."""
    _, main_rows = read_csv(tmp / "main.csv")
    header = ["id", "title", "brand", "price", "quantity", "availability"]
    items: dict[str, dict[str, str]] = {}
    for row in main_rows:
        item = dict(zip(header, row, strict=True))
        key = item["id"].strip()
        if key and key not in items:
            item["id"] = key
            items[key] = item
    with (tmp / "stock.csv").open(newline="", encoding="utf-8") as f:
        stock = list(csv.reader(f, delimiter=";"))
    seen: set[str] = set()
    for row in stock[1:]:
        s = dict(zip(stock[0], row, strict=True))
        key = s["id"].strip()
        if key in seen or key not in items:
            continue
        seen.add(key)
        for f_ in ("quantity", "availability", "price"):
            if s[f_] != "":
                items[key][f_] = s[f_]
    outcome = apply_rules(list(items.values()), parse_rules(RULES, key_field="id"))
    return outcome.items


def test_a_two_source_project_exports_what_the_reference_evaluator_predicts(run_env: Path, tmp_path: Path) -> None:
    spec = _project(tmp_path)
    code, report = run_json(spec)
    assert code == 0, report["error"]
    assert report["status"] == "SUCCEEDED"
    assert [s["step"] for s in report["steps"]] == ["FETCH", "PARSE", "MERGE", "RULES", "EXPORT"]
    main = next(s for s in report["sources"] if s["name"] == "main")
    assert main["skipped"] == {"empty_key": 1, "duplicate_key": 1, "malformed": 0}
    expected = _oracle(tmp_path)
    header, rows = read_csv(run_env / "acme" / "shoes_it" / "out.csv")
    assert header == ["id", "title", "brand", "price", "quantity", "availability", "label"]
    got = [dict(zip(header, r, strict=True)) for r in rows]
    assert got == [{h: item.get(h, "") for h in header} for item in expected]
    assert report["rules"]["excluded"] == 2
    assert report["rules"]["matched"]["out of stock"] == 1
    export = next(e for e in report["exports"] if e["name"] == "csv")
    assert export["rows"] == len(expected)


def test_a_source_job_that_fails_its_fetch_logs_the_fetch_step(
    run_env: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # One job fetches and parses a source; its failure line named PARSE whatever failed.
    import logging

    from firefeed.logging import RunContextFilter

    spec = _project(tmp_path, project="fetch_log")
    (tmp_path / "stock.csv").unlink()
    caplog.handler.addFilter(RunContextFilter())
    with caplog.at_level(logging.ERROR, logger="firefeed.pipeline.jobs"):
        code, report = run_json(spec)
    assert code == 1 and report["error"]["step"] == "FETCH"
    (line,) = [r for r in caplog.records if "job failed" in r.getMessage()]
    assert line.step == "FETCH"  # type: ignore[attr-defined]
    assert line.project == "fetch_log"  # type: ignore[attr-defined]  # the job's other fields stay


def test_a_failed_run_keeps_the_previous_exports_and_frees_the_project(run_env: Path, tmp_path: Path) -> None:
    spec = _project(tmp_path, project="fails")
    assert run_json(spec)[0] == 0
    out = run_env / "acme" / "fails" / "out.csv"
    before = out.read_bytes()
    (tmp_path / "stock.csv").unlink()
    code, report = run_json(spec)
    assert code == 1
    assert report["status"] == "FAILED"
    assert report["error"]["step"] == "FETCH"
    assert "stock" in report["error"]["message"]
    assert out.read_bytes() == before
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".partial")]
    with raw_connection() as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE %s",
            ("rules_tmp_" + report["run_id"].replace("-", "") + "%",),
        )
        assert cur.fetchone()[0] == 0
    _project(tmp_path, project="fails")
    assert run_json(spec)[0] == 0


def test_an_unchanged_source_is_reported_not_modified_and_gives_the_same_export(run_env: Path, tmp_path: Path) -> None:
    spec = _project(tmp_path, project="unchanged")
    with (tmp_path / "main.csv").open("a", encoding="utf-8") as f:
        f.write("A7,one,cell,too,many,x,y\n")  # skipped as malformed, by the parse the second run reuses
    code1, first = run_json(spec)
    code2, second = run_json(spec)
    assert (code1, code2) == (0, 0)
    assert [s["not_modified"] for s in first["sources"]] == [False, False]
    assert [s["not_modified"] for s in second["sources"]] == [True, True]
    assert [e["sha256"] for e in first["exports"]] == [e["sha256"] for e in second["exports"]]
    # The staged rows still lack the malformed one: the second report says so as the first did.
    assert first["sources"][0]["malformed_lines"] == second["sources"][0]["malformed_lines"] == [9]

    def parse_warnings(report: dict) -> list[str]:
        return [w for w in report["warnings"] if w.startswith("source ")]

    assert (
        parse_warnings(first)
        == parse_warnings(second)
        == ["source 'main': 1 malformed row skipped; the first, line 9: 7 cells but the header has 6"]
    )


def test_hostile_field_names_parse_export_and_round_trip(run_env: Path, tmp_path: Path) -> None:
    names = [
        "id",
        'quo"te',
        "semi;colon",
        "drop table x;--",
        "select",
        "prezzo €",
        "L" * 200,
        "color",
        "color",
        "_ff_ord",
        "from",
    ]
    values = ["K1", 'a "b"', "x;y", "'); DROP TABLE companies; --", "s", "€ 5", "long", "red", "blue", "o", "f"]
    write_csv(tmp_path / "main.csv", names, [values])
    spec = {
        "company": "acme",
        "project": "hostile",
        "sources": [{"name": "main", "url": "main.csv"}],
        "rules": [
            {
                "name": "touch",
                "when": {"field": "50% off", "op": "eq", "value": "{50% off}"},
                "then": [{"set": "semi;colon", "value": "{drop table x;--}|{" + "L" * 200 + "}"}],
            },
        ],
        "exports": [
            {"name": "csv", "format": "csv", "path": "h.csv"},
            {"name": "j", "format": "jsonl", "path": "h.jsonl"},
        ],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, allow_unicode=True), encoding="utf-8")
    code, report = run_json(path)
    assert code == 0, report["error"]
    header, rows = read_csv(run_env / "acme" / "hostile" / "h.csv")
    expected_names = [*names[:8], "color_2", *names[9:]]
    assert header == expected_names
    expected = dict(zip(expected_names, values, strict=True))
    expected["semi;colon"] = "'); DROP TABLE companies; --|long"
    assert dict(zip(header, rows[0], strict=True)) == expected
    line = json.loads((run_env / "acme" / "hostile" / "h.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert line == expected
    assert any("color_2" in w for w in report["warnings"])
    with raw_connection() as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("SELECT count(*) FROM companies"))
        assert cur.fetchone()[0] >= 1


def test_a_bad_spec_exits_2_naming_the_key(run_env: Path, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = _project(tmp_path)
    doc = yaml.safe_load(path.read_text())
    doc["sources"][1]["format"] = "xlsx"
    path.write_text(yaml.safe_dump(doc))
    code, _ = cli("run", str(path))
    assert code == 2
    assert "sources[1].format: must be one of csv, tsv, json, jsonl, xml" in capsys.readouterr().err


def test_a_project_with_an_active_run_is_refused_with_exit_3(run_env: Path, tmp_path: Path) -> None:
    from firefeed.runs.service import RunStore

    path = _project(tmp_path, project="busy_one")
    assert cli("apply", str(path))[0] == 0
    run_id = RunStore().request_run("busy_one", "api")
    code, out = cli("run", str(path))
    assert code == 3
    assert run_id in out
    RunStore().request_cancel(run_id)
    assert cli("run", str(path))[0] == 0


def test_a_spec_applied_while_a_run_waits_takes_effect_with_the_next_run(run_env: Path, tmp_path: Path) -> None:
    from firefeed.pipeline.run import execute_run
    from firefeed.runs.service import RunStore
    from firefeed.spec.loader import load_spec_file

    spec = _project(tmp_path, project="snapshot")
    store = RunStore()
    store.apply_spec(load_spec_file(spec), spec_dir=tmp_path)
    run_id = store.request_run("snapshot", "api")
    # The spec changes before the run starts: this run keeps the spec it was requested with.
    _project(tmp_path, project="snapshot", exports=[{"name": "other", "format": "jsonl", "path": "other.jsonl"}])
    store.apply_spec(load_spec_file(spec), spec_dir=tmp_path)
    report = execute_run(run_id)
    assert report["status"] == "SUCCEEDED", report["error"]
    assert [e["name"] for e in report["exports"]] == ["csv", "google"]
    assert run_json(spec)[1]["exports"][0]["name"] == "other"


def test_staging_rows_lost_in_a_crash_are_parsed_again_not_published_empty(run_env: Path, tmp_path: Path) -> None:
    from firefeed.schema.identifiers import company_schema, staging_table

    spec = _project(tmp_path, project="crashed")
    code, first = run_json(spec)
    assert code == 0
    # Crash recovery empties UNLOGGED tables but keeps them.
    with raw_connection() as conn, conn.cursor() as cur:
        for source in ("main", "stock"):
            cur.execute(
                sql.SQL("TRUNCATE {}").format(sql.Identifier(company_schema("acme"), staging_table("crashed", source)))
            )
    code, second = run_json(spec)
    assert code == 0, second["error"]
    assert [s["not_modified"] for s in second["sources"]] == [False, False]
    assert [e["sha256"] for e in second["exports"]] == [e["sha256"] for e in first["exports"]]


def test_a_primary_whose_keys_are_all_empty_fails_instead_of_publishing_nothing(run_env: Path, tmp_path: Path) -> None:
    write_csv(tmp_path / "main.csv", ["id", "title"], [["", "a"], ["  ", "b"]])
    spec = {
        "company": "acme",
        "project": "nokeys",
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [{"name": "csv", "format": "csv", "path": "n.csv"}],
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    code, report = run_json(path)
    assert code == 1
    assert report["error"]["step"] == "MERGE"
    assert "no items" in report["error"]["message"]
    assert not (run_env / "acme" / "nokeys" / "n.csv").exists()


def test_a_spec_sent_without_a_folder_reads_local_files_only_in_its_companys_folder(
    run_env: Path, tmp_path: Path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    from firefeed.config import reset_settings
    from firefeed.pipeline.run import execute_run
    from firefeed.runs.service import RunStore
    from firefeed.spec.loader import parse_spec

    root = tmp_path / "feeds"
    (root / "acme").mkdir(parents=True)
    (root / "globex").mkdir()
    write_csv(root / "acme" / "mine.csv", ["id", "t"], [["1", "mine"]])
    write_csv(root / "globex" / "theirs.csv", ["id", "t"], [["1", "secret"]])
    monkeypatch.setenv("FIREFEED_LOCAL_SOURCES_ROOT", str(root))
    reset_settings()
    store = RunStore()

    def spec(project: str, url: str) -> Any:
        return parse_spec(
            {
                "company": "acme",
                "project": project,
                "sources": [{"name": "main", "url": url}],
                "exports": [{"name": "csv", "format": "csv", "path": "o.csv"}],
            }
        )

    store.apply_spec(spec("own_file", "mine.csv"), spec_dir=None)
    own = execute_run(store.request_run("own_file", "api"))
    assert own["status"] == "SUCCEEDED", own["error"]
    # Another company's file is refused when the spec is applied (#48), naming the company's own folder.
    with pytest.raises(SpecError) as refused:
        store.apply_spec(spec("foreign_file", str(root / "globex" / "theirs.csv")), spec_dir=None)
    assert refused.value.path == "sources[0].url"
    assert "outside the allowed folders" in refused.value.detail
    assert f"allowed folder: {(root / 'acme').resolve()} (the company's folder" in refused.value.detail


def test_a_run_split_in_two_halves_exports_the_same_bytes(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Big runs cut the rules in two halves (a view of two tables); the exports, google-xml read by groups of
    pages of one heap then the other, are byte for byte those of a run in one piece."""
    import firefeed.export._copy as copy_module
    import firefeed.pipeline.rule_passes as rule_passes

    whole = tmp_path / "whole"
    halves = tmp_path / "halves"
    whole.mkdir()
    halves.mkdir()
    # Items of ~1.8 KB: more than one heap page, which the halves cut.
    code, report = run_json(_project(whole, project="in_one_piece", notes=1800))
    assert code == 0, report["error"]
    monkeypatch.setattr(rule_passes, "SPLIT_MIN_ROWS", 1)
    monkeypatch.setattr(copy_module, "_GROUP_PAGES", 1)
    seen: list[list[str] | None] = []
    find_halves = copy_module.parts_of_view

    def spy(*args: Any) -> list[str] | None:
        seen.append(find_halves(*args))
        return seen[-1]

    monkeypatch.setattr(copy_module, "parts_of_view", spy)
    code, split_report = run_json(_project(halves, project="in_two_halves", notes=1800))
    assert code == 0, split_report["error"]
    assert split_report["rules"] == report["rules"]
    assert [len(h or []) for h in seen] == [2], "google-xml read the two heaps in turn"
    for name in ("out.csv", "google.xml"):
        one = (run_env / "acme" / "in_one_piece" / name).read_bytes()
        two = (run_env / "acme" / "in_two_halves" / name).read_bytes()
        assert two.replace(b"in_two_halves", b"in_one_piece") == one, name
    with raw_connection() as conn, conn.cursor() as cur:
        run_hex = split_report["run_id"].replace("-", "")
        cur.execute("SELECT relname FROM pg_class WHERE relname LIKE %s AND relkind IN ('r', 'v')", (f"%{run_hex}%",))
        left = sorted(r[0] for r in cur.fetchall())
    # The run's pass tables and view are gone: its result's halves and view stay, renamed, for `firefeed values`.
    kept = kept_result_table(split_report["run_id"])
    assert left[0] == kept and len(left) == 3 and all(name.startswith(kept + "_") for name in left[1:]), left


def test_a_rule_reading_a_misspelled_field_is_warned_about_in_the_report_and_the_table(
    run_env: Path, tmp_path: Path
) -> None:
    """A misspelled field reads as empty (SPEC 8), so `Quantty eq ""` matches every item: the run goes on as
    written and its report (and the CLI table) names each rule and the name nothing made."""
    rules = [
        {"name": "sold out", "when": {"field": "Quantty", "op": "eq", "value": ""},
         "then": [{"set": "flag", "value": "x"}]},
        {"name": "uses flag", "when": {"field": "flag", "op": "eq", "value": "x"},
         "then": [{"set": "title", "value": "{tittle}"}]},
    ]  # fmt: skip
    exports = [
        {"name": "csv", "format": "csv", "path": "out.csv",
         "rules": [{"name": "own", "then": [{"set": "custom_label_0", "value": "{flag}{brnd}"}]}]},
    ]  # fmt: skip
    path = _project(tmp_path, rules=rules, exports=exports)
    code, report = run_json(path)
    assert code == 0, report["error"]
    ours = [w for w in report["warnings"] if "which no source has" in w]
    assert [w.split(", which")[0] for w in ours] == [
        "rules[0] ('sold out') reads 'Quantty' (did you mean 'quantity'?)",
        "rules[1] ('uses flag') reads 'tittle' (did you mean 'title'?)",
        "exports[0].rules[0] ('own') reads 'brnd' (did you mean 'brand'?)",
    ]
    code, table = cli("run", str(path))
    assert code == 0 and "reads 'Quantty' (did you mean 'quantity'?), which no source has" in table


def test_an_export_field_naming_nothing_is_warned_about_and_written_empty(run_env: Path, tmp_path: Path) -> None:
    """A `fields` value without braces is a field name (P9): `shipping.country: US` writes an empty
    sub-attribute on every item, so the report names the export, the name and where it is read."""
    exports = [
        {"name": "google", "format": "csv", "path": "out.csv",
         "fields": {"id": "id", "shipping.country": "US", "shipping.price": "{price} USD"},
         "rules": [{"name": "own", "then": [{"set": "country", "value": "US"}]}]},
        {"name": "fine", "format": "csv", "path": "fine.csv",
         "fields": {"id": "id", "shipping.country": "country", "shipping.price": "{price} USD"},
         "rules": [{"name": "own", "then": [{"set": "country", "value": "US"}]}]},
    ]  # fmt: skip
    code, report = run_json(_project(tmp_path, exports=exports))
    assert code == 0, report["error"]
    ours = [w for w in report["warnings"] if "no rule sets" in w]
    assert [w.split(". They")[0] for w in ours] == [
        "exports[0] ('google') reads fields that no source has and no rule sets: 'US' (fields.shipping.country)"
    ]
    written = {}
    for name in ("out.csv", "fine.csv"):
        with (run_env / "acme" / "shoes_it" / name).open(newline="", encoding="utf-8") as f:
            written[name] = list(csv.reader(f))
    assert written["out.csv"][0] == written["fine.csv"][0] == ["id", "shipping"]
    price = written["fine.csv"][1][1].removeprefix("US:")
    assert price.endswith(" EUR USD") and written["out.csv"][1] == ["A1", ":" + price], "only the country is empty"
