"""A run that succeeded drops its project's staging and lookup tables that the spec no longer names.

A source or lookup renamed or removed used to leave its table (a whole staged feed) in the company
schema for good. Only the project's own names are claimed: another project whose id starts with this
one's keeps its tables, and a failed run drops nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from psycopg2 import sql

from firefeed.db.engine import raw_connection
from firefeed.schema.identifiers import (
    lookup_staging_table,
    lookup_table,
    project_file_table,
    staging_table,
)
from tests.integration.conftest import run_json, write_csv

pytestmark = pytest.mark.integration

SCHEMA = "company_tidy"


def _spec(tmp: Path, project: str, sources: list[str], lookups: list[str], *, broken: bool = False) -> Path:
    spec: dict[str, Any] = {
        "company": "tidy",
        "project": project,
        "sources": [{"name": sources[0], "url": "main.csv"}]
        + [{"name": name, "url": "extra.csv", "mode": "enrich"} for name in sources[1:]]
        + ([{"name": "gone", "url": "missing.csv", "mode": "enrich"}] if broken else []),
        "lookups": [{"name": name, "url": "cats.csv", "key": "code"} for name in lookups],
        "rules": [
            {"then": [{"lookup": name, "match": "cat", "set": {f"gpc_{i}": "gpc"}}]} for i, name in enumerate(lookups)
        ],
        "exports": [{"name": "out", "format": "csv", "path": "out.csv"}],
    }
    path = tmp / f"{project}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def _tables() -> set[str]:
    with raw_connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (SCHEMA,))
        return {r[0] for r in cur.fetchall()}


def _create(table: str) -> None:
    with raw_connection() as conn, conn.cursor() as cur:
        cur.execute(sql.SQL("CREATE TABLE {} (x int)").format(sql.Identifier(SCHEMA, table)))
        conn.commit()


def _files(tmp: Path) -> None:
    write_csv(tmp / "main.csv", ["id", "cat"], [["1", "Rings"], ["2", "Mugs"]])
    write_csv(tmp / "extra.csv", ["id", "stock"], [["1", "3"]])
    write_csv(tmp / "cats.csv", ["code", "gpc"], [["Rings", "188"]])


def test_renamed_sources_and_lookups_leave_no_table_behind(run_env: Path, tmp_path: Path) -> None:
    _files(tmp_path)
    code, report = run_json(_spec(tmp_path, "shop", ["main", "extra"], ["cats"]))
    assert code == 0, report
    # A project whose id starts with this one's, in the same company.
    code, report = run_json(_spec(tmp_path, "shop_b", ["main"], ["cats"]))
    assert code == 0, report
    before = _tables()
    old = {staging_table("shop", "extra"), lookup_table("shop", "cats")}
    theirs = {staging_table("shop_b", "main"), lookup_table("shop_b", "cats")}
    assert old | theirs | {staging_table("shop", "main")} <= before
    # A lookup's staging table is dropped once its keyed table is built; a crashed run leaves one.
    assert lookup_staging_table("shop", "cats") not in before
    old.add(lookup_staging_table("shop", "cats"))
    _create(lookup_staging_table("shop", "cats"))
    # The lookup staging name of before `stgl_` (no project `lkp_shop` exists).
    legacy = "stg_lkp_shop_0123abcd"
    _create(legacy)

    # A failed run drops nothing.
    code, report = run_json(_spec(tmp_path, "shop", ["main", "stock"], ["categories"], broken=True))
    assert code != 0 and report["status"] == "FAILED"
    assert old | {legacy} <= _tables()

    code, report = run_json(_spec(tmp_path, "shop", ["main", "stock"], ["categories"]))
    assert code == 0, report
    after = _tables()
    assert not (old | {legacy}) & after, sorted(old & after)
    assert {
        staging_table("shop", "main"),
        staging_table("shop", "stock"),
        lookup_table("shop", "categories"),
    } <= after
    assert theirs <= after, "another project's tables are its own"
    assert report["rules"]["lookups"][0]["matched"] == 1


def test_long_project_ids_drop_their_renamed_tables_and_only_theirs(run_env: Path, tmp_path: Path) -> None:
    """At the identifier limit a table's name holds only the start of the project's id (`_bounded`), so
    the name alone cannot say whose it is; the names of the project's recent specs can."""
    _files(tmp_path)
    mine, theirs_id = "l" * 58 + "-mine", "l" * 58 + "-them"
    code, report = run_json(_spec(tmp_path, mine, ["main", "extra"], ["cats"]))
    assert code == 0, report
    code, report = run_json(_spec(tmp_path, theirs_id, ["main", "extra"], ["cats"]))
    assert code == 0, report
    old = {staging_table(mine, "extra"), lookup_table(mine, "cats")}
    theirs = {staging_table(theirs_id, name) for name in ("main", "extra")} | {lookup_table(theirs_id, "cats")}
    assert all(len(table) == 63 for table in old | theirs), "the names are cut at the limit"
    assert all(table[:54] == staging_table(mine, "extra")[:54] for table in theirs if table.startswith("stg_"))
    assert old | theirs <= _tables()

    code, report = run_json(_spec(tmp_path, mine, ["main", "stock"], ["categories"], broken=True))
    assert code != 0 and report["status"] == "FAILED"
    assert old <= _tables(), "a failed run drops nothing"

    code, report = run_json(_spec(tmp_path, mine, ["main", "stock"], ["categories"]))
    assert code == 0, report
    after = _tables()
    assert not old & after, sorted(old & after)
    assert {staging_table(mine, "main"), staging_table(mine, "stock"), lookup_table(mine, "categories")} <= after
    assert theirs <= after, "another project's tables are its own"


def test_the_old_lookup_staging_name_stays_when_a_project_could_own_it(run_env: Path, tmp_path: Path) -> None:
    """`stg_lkp_shop2_<digest>` is also how project `lkp_shop2` names its sources' staging tables."""
    _files(tmp_path)
    code, report = run_json(_spec(tmp_path, "lkp_shop2", ["main"], []))
    assert code == 0, report
    theirs = staging_table("lkp_shop2", "main")
    assert theirs.startswith("stg_lkp_shop2_") and theirs in _tables()
    code, report = run_json(_spec(tmp_path, "shop2", ["main"], []))
    assert code == 0, report
    assert theirs in _tables()


@pytest.mark.parametrize(
    ("table", "project", "claimed"),
    [
        ("stg_shop_0123abcd", "shop", True),
        ("stgl_shop_0123abcd", "shop", True),
        ("lkp_shop_0123abcd", "shop", True),
        ("stg_shop_b_0123abcd", "shop", False),  # project shop_b's
        ("stg_shop_0123abcd_x", "shop", False),
        ("stg_shop_0123ABCD", "shop", False),
        ("items_shop", "shop", False),
        ("rules_tmp_shop_0123abcd", "shop", False),
        # At the identifier limit a name may be a longer project's, cut by _bounded.
        ("stg_" + "p" * 50 + "_0123abcd", "p" * 50, False),
        ("stg_" + "p" * 49 + "_0123abcd", "p" * 49, True),
    ],
)
def test_which_names_are_a_projects_own(table: str, project: str, claimed: bool) -> None:
    assert project_file_table(table, project) is claimed


@pytest.mark.parametrize("project", ["held", "h" * 60], ids=["short id", "id cut at the limit"])
def test_a_table_someone_holds_is_left_for_the_next_run(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: str
) -> None:
    """`firefeed values` may be copying a lookup table of the previous spec: the run does not wait past
    UNUSED_DROP_LOCK_S for it (its files are published), and the next run drops it, also where only the
    spec that named it can say whose it is (a name cut at the identifier limit)."""
    from firefeed.schema import service

    monkeypatch.setattr(service, "UNUSED_DROP_LOCK_S", 0.2)
    _files(tmp_path)
    code, report = run_json(_spec(tmp_path, project, ["main"], ["cats"]))
    assert code == 0, report
    old = lookup_table(project, "cats")
    with raw_connection() as reader, reader.cursor() as cur:
        cur.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(SCHEMA, old)))  # holds its lock
        code, report = run_json(_spec(tmp_path, project, ["main"], ["categories"]))
        assert code == 0, report
        assert old in _tables()
    code, report = run_json(_spec(tmp_path, project, ["main"], ["categories"]))
    assert code == 0, report
    assert old not in _tables()
