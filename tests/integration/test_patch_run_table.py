"""A patched export's run table (#52) holds only the changed items' rows and stands for the baseline less theirs
with them; the promote changes the published table in place by it (`SchemaService.promote_export_keys`). The
published table a delta leaves must be a full run's, row for row; a run that fails after its EXPORT, or whose
driver dies between the publish and the promote, must leave the last success's baseline valid."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from firefeed.db.engine import get_engine, raw_connection
from firefeed.runs.service import RunStore
from firefeed.schema.identifiers import checked_keys_table, company_schema, published_keys_table
from tests.integration.test_incremental import files, ok, run
from tests.integration.test_incremental_export import EXPORTS, project, sources, three, written
from tests.integration.test_publishing import _killed_at, _recover

pytestmark = pytest.mark.integration

#: the plain csv and the google-checked tsv (taken over), without the channel-id export (copied)
TAKEN = EXPORTS[:2]


#: a run row's working values, left as the run that wrote the row found them when a take-over keeps the row:
#: no reader takes them from a published table (`schema.service._take_over`)
WORKING = ("d", "w")


def table(project_name: str, name: str) -> tuple[list[tuple[Any, ...]], str | None, str | None]:
    """A run table kept under `name` in the test company: its rows in `o` order (all but the `WORKING` values),
    its key tag and the checks' fingerprint of its comment (the label after it names the run)."""
    where = company_schema("increfresh")
    with raw_connection(get_engine()) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0"
            " AND NOT attisdropped ORDER BY attnum",
            (f'"{where}"."{name}"',),
        )
        read = ", ".join(f'"{c}"' for (c,) in cur.fetchall() if c not in WORKING)
        cur.execute(f'SELECT {read} FROM "{where}"."{name}" ORDER BY o')
        rows = [tuple(r) for r in cur.fetchall()]
        cur.execute(
            "SELECT col_description(c, 1), obj_description(c, 'pg_class') FROM to_regclass(%s) c",
            (f'"{where}"."{name}"',),
        )
        tag, comment = cur.fetchone()
    return rows, tag, comment.split(" ")[1] if comment else None


def published(project_name: str, export: str) -> tuple[list[tuple[Any, ...]], str | None, str | None]:
    return table(project_name, published_keys_table(project_name, export))


def same_tables(refreshed: Path, full: Path, run_env: Path, exports: list[dict[str, Any]]) -> None:
    """Each export's published table of the refreshed project is the full one's, tagged with its own file."""
    for export in exports:
        mine, other = published(refreshed.stem, export["name"]), published(full.stem, export["name"])
        assert mine[0] == other[0], export["name"]
        assert mine[2] == other[2], export["name"]
        data = files(run_env, refreshed.stem)[export["path"]]
        assert mine[1] == "file " + hashlib.sha256(data).hexdigest(), export["name"]


def test_a_delta_and_a_delta_after_it_leave_the_published_tables_of_full_runs(run_env: Path, tmp_path: Path) -> None:
    sources(tmp_path)
    specs = three(tmp_path, TAKEN)
    ok(specs[0])
    ok(specs[1])
    for stock in ({3: "out_of_stock", 7: 'bad, "value"'}, {3: "out_of_stock"}):  # a delta, then one on it
        sources(tmp_path, stock)
        delta = ok(specs[0])
        assert delta["incremental"]["mode"] == "delta", delta["incremental"]
        assert written(delta["run_id"]) == {"feed": "patched", "google": "patched"}
        ok(specs[1], "--full")
        same_tables(specs[0], specs[1], run_env, TAKEN)


@pytest.mark.stress  # six runs, ~6 s
def test_a_run_blocked_after_its_export_leaves_the_baseline_and_keeps_whole_findings(
    run_env: Path, tmp_path: Path
) -> None:
    # Complete google items, none invalid allowed: an unknown availability is an error finding.
    complete = {
        "description": "title",
        "link": "https://www.example.com/{id}",
        "image_link": "https://www.example.com/{id}.jpg",
    }
    exports = [TAKEN[0], {**TAKEN[1], "max_invalid": 0, "fields": {**TAKEN[1]["fields"], **complete}}]
    sources(tmp_path)
    refreshed, full = (project(tmp_path, f"ixb{n}{uuid.uuid4().hex[:8]}", exports) for n in "rf")
    ok(refreshed)
    ok(full)
    before = {e["name"]: published(refreshed.stem, e["name"]) for e in exports}
    sources(tmp_path, {7: "bogus"})
    code, report = run(refreshed)
    assert code == 1 and report["status"] == "FAILED", report
    assert report["incremental"]["mode"] == "delta", report["incremental"]  # its EXPORT failed: no `written`
    assert {e["name"]: published(refreshed.stem, e["name"]) for e in exports} == before
    # The blocked run's findings table is whole: a blocked full run's.
    code, blocked = run(full, "--full")
    assert code == 1, blocked
    mine = table(refreshed.stem, checked_keys_table(refreshed.stem, "google"))
    other = table(full.stem, checked_keys_table(full.stem, "google"))
    assert (len(mine[0]), mine[0], mine[2]) == (20, other[0], other[2])
    assert mine[1] is None  # no longer marked to be taken over

    # The baseline is still the live file's: the next run (full: the last one failed) diffs against it as the full
    # project's does, and a delta after it patches.
    sources(tmp_path, {3: "out_of_stock"})
    after, other_after = ok(refreshed), ok(full, "--full")
    assert [e["diff"] for e in after["exports"]] == [e["diff"] for e in other_after["exports"]]
    assert after["exports"][0]["diff"]["changed"] == 1
    sources(tmp_path, {3: "out_of_stock", 4: "out_of_stock"})
    delta = ok(refreshed)
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert written(delta["run_id"]) == {"feed": "patched", "google": "patched"}
    ok(full, "--full")
    same_tables(refreshed, full, run_env, exports)


@pytest.mark.stress  # a run killed and recovered after its lease, ~7 s
def test_a_driver_killed_between_the_publish_and_the_promote_is_promoted_by_recovery(
    run_env: Path, tmp_path: Path
) -> None:
    sources(tmp_path)
    specs = three(tmp_path, TAKEN)
    ok(specs[0])
    ok(specs[1])
    sources(tmp_path, {3: "out_of_stock", 7: 'bad, "value"'})
    _killed_at(specs[0], tmp_path / "pause", "switched-2")  # both files switched, the baseline not yet changed
    store = RunStore()
    killed = store.runs_of_project(specs[0].stem)[0]
    assert killed.status == "RUNNING"
    _recover()
    assert store.run(str(killed.id)).status == "SUCCEEDED"
    assert written(str(killed.id)) == {"feed": "patched", "google": "patched"}
    ok(specs[1], "--full")
    same_tables(specs[0], specs[1], run_env, TAKEN)

    # The next run (full: recovery keeps no rules result) diffs against that baseline as the full project's does.
    sources(tmp_path)
    after, other_after = ok(specs[0]), ok(specs[1], "--full")
    assert [e["diff"] for e in after["exports"]] == [e["diff"] for e in other_after["exports"]]
    assert after["exports"][0]["diff"]["changed"] == 2
    same_tables(specs[0], specs[1], run_env, TAKEN)


def test_a_changed_item_excluded_before_and_after_is_looked_for_in_the_baseline_and_patched(
    run_env: Path, tmp_path: Path
) -> None:
    specs = three(tmp_path, TAKEN)
    for spec in specs:  # `low` excludes any stock starting with "gone"
        doc = yaml.safe_load(spec.read_text(encoding="utf-8"))
        doc["rules"][0]["when"] = {"field": "stock", "op": "starts_with", "value": "gone"}
        spec.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    sources(tmp_path, {4: "gone"})
    ok(specs[0])
    ok(specs[1])
    sources(tmp_path, {4: "gone again", 3: "out_of_stock"})  # item 4 changes, excluded still
    delta = ok(specs[0])
    assert delta["incremental"]["mode"] == "delta", delta["incremental"]
    assert written(delta["run_id"]) == {"feed": "patched", "google": "patched"}
    ok(specs[1], "--full")
    same_tables(specs[0], specs[1], run_env, TAKEN)


def test_the_take_over_deletes_the_published_rows_by_their_tids_and_refuses_a_tid_of_another_row(
    run_env: Path,
) -> None:
    """The take-over deletes each changed item's published row by the TID EXPORT read beside it (no scan of the
    baseline); a TID that is not the item's row where it was (another item, another position) leaves the
    baseline as it was and drops the run table."""
    from firefeed.schema.service import BASELINE_TID, TAKE_OVER, SchemaService

    company = f"tid{uuid.uuid4().hex[:8]}"
    where, engine = company_schema(company), get_engine()
    cols = "k text, kh bigint, h bigint, f bigint, o bigint, d smallint, fv text[], v bigint, w bigint"

    def rows() -> list[tuple[Any, ...]]:
        with raw_connection(engine) as conn, conn.cursor() as cur:
            cur.execute(f'SELECT k, h, o FROM "{where}".pub ORDER BY o')
            return [tuple(r) for r in cur.fetchall()]

    def run_table(name: str, tid_of: str) -> None:
        """A delta's run table changing item `b` (position 1), its published row's TID that of item `tid_of`."""
        with raw_connection(engine) as conn, conn.cursor() as cur:
            cur.execute(f'CREATE TABLE "{where}".{name} ({cols}, {BASELINE_TID} tid)')
            cur.execute(
                f'INSERT INTO "{where}".{name} SELECT k, kh, 99, f, o, 1, fv, v, w, (SELECT ctid FROM "{where}".pub'
                f" WHERE k = %s) FROM \"{where}\".pub WHERE k = 'b'",
                (tid_of,),
            )
            cur.execute(f'COMMENT ON COLUMN "{where}".{name}.k IS %s', (TAKE_OVER + "file abc",))
            conn.commit()

    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{where}"')
        cur.execute(f'CREATE TABLE "{where}".pub ({cols})')
        cur.execute(
            f'INSERT INTO "{where}".pub SELECT k, hashtextextended(k, 0), 1, 0, o, 0, NULL, NULL, NULL'
            " FROM unnest(ARRAY['a', 'b', 'c']) WITH ORDINALITY AS x(k, o)"
        )
        cur.execute(f'COMMENT ON COLUMN "{where}".pub.k IS %s', ("file abc",))
        conn.commit()
    try:
        service = SchemaService(engine)
        before = rows()
        run_table("wrong", "c")
        service.promote_export_keys(company, [("wrong", "pub")], key_comments={"pub": "file new"})
        assert rows() == before  # refused: the TID was item c's row
        assert published_or_none(where, "wrong") is None
        run_table("right", "b")
        service.promote_export_keys(company, [("right", "pub")], key_comments={"pub": "file new"})
        assert rows() == [("a", 1, 1), ("b", 99, 2), ("c", 1, 3)]
        assert published_or_none(where, "right") is None
    finally:
        with raw_connection(engine) as conn, conn.cursor() as cur:
            cur.execute(f'DROP SCHEMA "{where}" CASCADE')
            conn.commit()


def published_or_none(where: str, name: str) -> str | None:
    with raw_connection(get_engine()) as conn, conn.cursor() as cur:
        cur.execute("SELECT to_regclass(%s)::text", (f'"{where}"."{name}"',))
        return cur.fetchone()[0]


@pytest.mark.parametrize("order", ["g", "random()"])
def test_the_baseline_positions_are_read_ascending_as_they_lie_or_not(run_env: Path, order: str) -> None:
    """`baseline_ords`: every published position, ascending, whether the table holds them in order (a full
    run's) or not (after take-overs); an empty baseline has none."""
    from types import SimpleNamespace

    from firefeed.export.patch import baseline_ords

    company = f"ord{uuid.uuid4().hex[:8]}"
    where, engine = company_schema(company), get_engine()
    with raw_connection(engine) as conn, conn.cursor() as cur:
        cur.execute(f'CREATE SCHEMA "{where}"')
        cur.execute(f'CREATE TABLE "{where}".pub (k text, o bigint)')
        cur.execute(f'CREATE TABLE "{where}".empty (k text, o bigint)')
        cur.execute(
            f'INSERT INTO "{where}".pub SELECT g::text, g * 3 - 2 FROM generate_series(1, 5000) g ORDER BY {order}'
        )
        cur.execute(f'INSERT INTO "{where}".pub VALUES (%s, %s)', ("big", 2**40))
        conn.commit()
    try:
        target = SimpleNamespace(company=company)
        got = baseline_ords(engine, target, SimpleNamespace(baseline=SimpleNamespace(table="pub")))  # type: ignore[arg-type]
        assert list(got) == [g * 3 - 2 for g in range(1, 5001)] + [2**40]
        assert list(baseline_ords(engine, target, SimpleNamespace(baseline=SimpleNamespace(table="empty")))) == []  # type: ignore[arg-type]
    finally:
        with raw_connection(engine) as conn, conn.cursor() as cur:
            cur.execute(f'DROP SCHEMA "{where}" CASCADE')
            conn.commit()
