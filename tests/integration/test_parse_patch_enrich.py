"""PARSE by patch for an enrich source, and the delta's MERGE from the patch (#52, the stock refresh): a refresh
after some records of the stock csv changed stages only those records again (pipeline/stage_patch.py), keeps
no previous staging of it, and finds the changed items from the patch's new and old rows (`changed_by:
patched items rows`), giving the files and report of a `--full` run and of a fresh project. What the patch
cannot prove (a changed key: the source parsed in full, its previous rows kept) or the values cannot (a
repeated key, a value an earlier source gives going empty, a run that failed after the patch) falls back,
saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from firefeed.runs.contract import Step
from firefeed.runs.service import RunStore
from firefeed.schema.identifiers import company_schema, previous_staging_table
from tests.integration.conftest import write_csv
from tests.integration.test_incremental import merge_detail, ok, run
from tests.integration.test_parse_patch import SOURCES, main_rows, write_main
from tests.integration.test_parse_patch import projects as patch_projects
from tests.integration.test_parse_patch import same_as_full_and_fresh as patch_same_as_full_and_fresh

pytestmark = pytest.mark.integration

COMPANY = "increfresh"


def write_stock(tmp: Path, rows: list[str], header: str = "id,stock") -> None:
    """Rows as raw csv lines: a record may change its bytes (quotes) and not its values."""
    (tmp / "stock.csv").write_bytes(("\n".join([header, *rows]) + "\n").encode("utf-8"))


def stock_rows() -> list[str]:
    return [f"{i},{i % 5}" for i in range(1, 41)]


def projects(tmp: Path, n: int = 3, extra: bool = False) -> list[Path]:
    more = [{"name": "extra", "url": "extra.csv", "mode": "enrich"}] if extra else []
    return patch_projects(tmp, n, sources=[*SOURCES, *more])


def start(tmp: Path, stock: list[str], header: str = "id,stock", extra: bool = False) -> list[Path]:
    """Three projects on the same files, the first two run (refreshed, its `--full` twin; the third is fresh)."""
    write_main(tmp, main_rows())
    write_stock(tmp, stock, header)
    if extra:
        write_csv(tmp / "extra.csv", ["id", "label"], [[str(i), f"l{i}"] for i in range(1, 41, 7)])
    specs = projects(tmp, extra=extra)
    for spec in specs[:-1]:
        ok(spec)
    return specs


def staging_of(run_id: str, source: str = "stock") -> dict[str, Any]:
    detail = next(dict(st.detail or {}) for st in RunStore().steps(run_id) if st.step == Step.PARSE)
    return dict(detail.get("staging", {}).get(source, {}))


def keeps_previous(engine: Engine, project: str) -> bool:
    with engine.connect() as conn:
        found = conn.execute(
            text("SELECT to_regclass(:t)"),
            {"t": f'"{company_schema(COMPANY)}"."{previous_staging_table(project, "stock")}"'},
        ).scalar()
    return found is not None


def same_as_full_and_fresh(
    engine: Engine, exports: Path, refreshed: Path, full: Path, fresh: Path, report: dict[str, Any]
) -> None:
    patch_same_as_full_and_fresh(engine, exports, refreshed, full, fresh, report, source="stock")


def test_a_refresh_after_records_of_the_stock_source_changed_is_patched_and_merged_from_the_patch(
    patch_env: Path, tmp_path: Path, engine: Engine
) -> None:
    refreshed, full, fresh = start(tmp_path, stock_rows())
    rows = stock_rows()
    rows[2] = "3,0"  # item 3: excluded now (rule `low`)
    rows[6] = "7,4"  # item 7: labelled (rule `high`)
    rows[11] = "12,"  # item 12: its stock empty (rule `none`)
    rows[7] = '"8",3'  # item 8: the record's bytes changed, not its values
    rows[39] = "40,1"  # item 40, the file's last record
    write_stock(tmp_path, rows)
    report = ok(refreshed)
    staging = staging_of(report["run_id"])
    assert staging["staged"] == "patched" and staging["changed"] == 5, staging
    assert staging["found_by"] == "keys", staging  # item 8's key quoted now is still its key
    assert report["incremental"]["mode"] == "delta", report["incremental"]
    assert merge_detail(report["run_id"])["changed_by"] == "patched items rows"
    assert report["incremental"]["items_changed"] == 4, report["incremental"]
    assert not keeps_previous(engine, refreshed.stem)  # the patch's old rows stand for them
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)

    # A patch on a patch, then an unchanged run.
    rows[2], rows[20] = "3,3", "21,0"
    write_stock(tmp_path, rows)
    again = ok(refreshed)
    assert staging_of(again["run_id"])["staged"] == "patched"
    assert merge_detail(again["run_id"])["changed_by"] == "patched items rows"
    assert again["incremental"]["items_changed"] == 2, again["incremental"]
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, again)
    assert ok(refreshed)["incremental"]["mode"] == "unchanged"


def test_a_changed_key_parses_the_stock_source_in_full_and_compares_its_kept_rows(
    patch_env: Path, tmp_path: Path, engine: Engine
) -> None:
    refreshed, full, fresh = start(tmp_path, stock_rows())
    rows = stock_rows()
    rows[3] = "4b,1"  # item 4 loses its stock row
    rows[5] = "6,0"
    write_stock(tmp_path, rows)
    report = ok(refreshed)
    staging = staging_of(report["run_id"])
    assert staging["staged"] == "full" and "changes its key" in staging["reason"], staging
    assert report["incremental"]["mode"] == "delta", report["incremental"]
    assert merge_detail(report["run_id"])["changed_by"] == "items rows"  # from the kept previous rows
    assert keeps_previous(engine, refreshed.stem)
    assert report["incremental"]["items_changed"] == 2, report["incremental"]
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)
    # The full parse kept the new file: the next edit is patched, the kept rows dropped.
    rows[5] = "6,2"
    write_stock(tmp_path, rows)
    again = ok(refreshed)
    assert staging_of(again["run_id"])["staged"] == "patched"
    assert merge_detail(again["run_id"])["changed_by"] == "patched items rows"
    assert not keeps_previous(engine, refreshed.stem)
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, again)


def test_a_repeated_key_in_the_stock_source_merges_the_patched_keys_again(
    patch_env: Path, tmp_path: Path, engine: Engine
) -> None:
    """Item 7 has two stock rows (the first wins) and one row has an empty key (a changed one would refuse the
    patch): a changed record may not be its key's first row, so the changed keys are merged again."""
    stock = [*stock_rows(), "7,3", " ,2"]
    refreshed, full, fresh = start(tmp_path, stock)
    rows = list(stock)
    rows[6] = "7,4"  # item 7's first row: the item changes
    rows[40] = "7,0"  # its second: nothing changes
    rows[9] = "10,1"
    write_stock(tmp_path, rows)
    report = ok(refreshed)
    staging = staging_of(report["run_id"])
    # Key 7 is two staged rows: which one changed, its old record's row says.
    assert staging["staged"] == "patched" and staging["found_by"] == "old records", staging
    assert report["incremental"]["mode"] == "delta", report["incremental"]
    assert merge_detail(report["run_id"])["changed_by"] == (
        "patched staged rows: the last succeeded run found an empty or repeated key in 'stock'"
    )
    assert report["incremental"]["items_changed"] == 2, report["incremental"]
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)


def test_a_price_the_primary_also_gives_going_empty_merges_the_patched_keys_again(
    patch_env: Path, tmp_path: Path, engine: Engine
) -> None:
    """The stock source also gives the price (it wins when not empty): one emptied needs the primary's."""
    stock = [f"{i},{i % 5},{'' if i % 4 == 0 else 100 + i}" for i in range(1, 41)]
    refreshed, full, fresh = start(tmp_path, stock, "id,stock,price")
    rows = list(stock)
    rows[0] = "1,1,"  # the primary's price (1: cheap) again
    rows[3] = "4,4,5"  # a price where the primary's stood
    write_stock(tmp_path, rows, "id,stock,price")
    report = ok(refreshed)
    assert staging_of(report["run_id"])["staged"] == "patched"
    assert merge_detail(report["run_id"])["changed_by"] == (
        "patched staged rows: a value an earlier source also gives went empty"
    )
    assert report["incremental"]["items_changed"] == 2, report["incremental"]
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)
    # A price filled again: from the patch's values.
    rows[0] = "1,1,7"
    write_stock(tmp_path, rows, "id,stock,price")
    again = ok(refreshed)
    assert merge_detail(again["run_id"])["changed_by"] == "patched items rows"
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, again)


def test_a_patch_from_rows_the_last_success_did_not_merge_merges_every_item_again(
    patch_env: Path, tmp_path: Path, engine: Engine
) -> None:
    """A run patched the stock source and then failed (another source's parse): the next patch is from rows
    no succeeded run merged, and no previous rows were kept, so every item is merged again."""
    refreshed, full, fresh = start(tmp_path, stock_rows(), extra=True)
    extra = (tmp_path / "extra.csv").read_bytes()
    rows = stock_rows()
    rows[2] = "3,0"
    write_stock(tmp_path, rows)
    # More fields than Postgres allows columns: the parse of `extra` fails, and the run with it.
    write_csv(tmp_path / "extra.csv", ["id", *[f"f{i}" for i in range(1700)]], [["1", *["x"] * 1700]])
    for spec in (refreshed, full):  # the twin too: its report then parses `extra` again as well
        code, failed = run(spec)
        assert code != 0 and failed["status"] == "FAILED", failed
    (tmp_path / "extra.csv").write_bytes(extra)
    rows[6] = "7,4"
    write_stock(tmp_path, rows)
    report = ok(refreshed)
    assert staging_of(report["run_id"])["staged"] == "patched"
    assert report["incremental"]["mode"] == "delta", report["incremental"]
    assert merge_detail(report["run_id"])["changed_by"] == (
        "merged rows: source 'stock' was patched from staged rows the last succeeded run did not merge"
    )
    assert report["incremental"]["items_changed"] == 2, report["incremental"]
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)


def test_two_changed_sources_one_patched_one_parsed_in_full_merge_their_candidates_again(
    patch_env: Path, tmp_path: Path, engine: Engine
) -> None:
    """The stock source patched (its candidates from the patch), `extra` gaining a row (parsed in full, its
    candidates from its kept rows): one UNION of candidates, merged again from every source."""
    refreshed, full, fresh = start(tmp_path, stock_rows(), extra=True)
    rows = stock_rows()
    rows[2] = "3,0"
    write_stock(tmp_path, rows)
    write_csv(tmp_path / "extra.csv", ["id", "label"], [[str(i), f"l{i}"] for i in [*range(1, 41, 7), 2]])
    report = ok(refreshed)
    assert staging_of(report["run_id"])["staged"] == "patched"
    assert staging_of(report["run_id"], "extra")["staged"] == "full"
    assert report["incremental"]["mode"] == "delta", report["incremental"]
    assert merge_detail(report["run_id"])["changed_by"] == "patched staged rows: more than one source changed"
    assert report["incremental"]["items_changed"] == 2, report["incremental"]
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)


def _early_spy(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """What RULES took from the kept result's rows found beside MERGE (`EarlyFound.found_from`), per delta."""
    from firefeed.pipeline.delta_rules import EarlyFound

    taken: list[str | None] = []
    real = EarlyFound.found_from

    def spy(self: EarlyFound, *args: Any, **kwargs: Any) -> str | None:
        taken.append(real(self, *args, **kwargs))
        return taken[-1]

    monkeypatch.setattr(EarlyFound, "found_from", spy)
    return taken


def test_the_kept_rows_of_the_patched_keys_found_beside_merge_are_the_ones_rules_takes(
    patch_env: Path, tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = _early_spy(monkeypatch)
    refreshed, full, fresh = start(tmp_path, stock_rows())
    rows = stock_rows()
    rows[2], rows[6], rows[7] = "3,0", "7,4", '"8",3'  # one excluded now, one labelled, one the same values
    write_stock(tmp_path, rows)
    report = ok(refreshed)
    assert report["incremental"]["items_changed"] == 2, report["incremental"]
    assert len(taken) == 1 and taken[0] is not None and taken[0].endswith("_9000104")
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)


def test_the_kept_rows_are_searched_by_the_keys_read_from_the_records_before_they_are_staged(
    patch_env: Path, tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search begins with the keys PARSE read from the changed records' bytes (`EarlyFound.of_keys`), trimmed
    as MERGE trims them: a quoted key with white space around it finds its item's kept row."""
    from firefeed.pipeline.delta_rules import EarlyFound

    taken = _early_spy(monkeypatch)
    read: list[list[str]] = []
    of_keys = EarlyFound.of_keys.__func__  # type: ignore[attr-defined]

    def spied(cls: type[EarlyFound], ctx: Any, records: Any, keys: Any, *rest: Any, **kw: Any) -> Any:
        read.append(list(keys))
        return of_keys(cls, ctx, records, keys, *rest, **kw)

    monkeypatch.setattr(EarlyFound, "of_keys", classmethod(spied))
    rows = stock_rows()
    rows[4] = '" 5 ",2'
    refreshed, full, fresh = start(tmp_path, rows)
    rows[4], rows[9] = '" 5 ",4', "10,3"
    write_stock(tmp_path, rows)
    report = ok(refreshed)
    assert report["incremental"]["mode"] == "delta" and report["incremental"]["items_changed"] == 2
    assert read == [[" 5 ", "10"]], read
    assert len(taken) == 1 and taken[0] is not None and taken[0].endswith("_9000104")
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)


def test_a_changed_key_not_searched_beside_merge_or_a_failed_search_finds_the_kept_rows_in_rules(
    patch_env: Path, tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from psycopg2 import sql

    from firefeed.pipeline.delta_rules import EarlyFound

    taken = _early_spy(monkeypatch)
    refreshed, full, fresh = start(tmp_path, stock_rows())
    real_init = EarlyFound.__init__

    def one_key_short(self: EarlyFound, ctx: Any, keys: Any, params: list[Any], *rest: Any) -> None:
        # The search misses item 7's key: RULES must not take its rows for the changed items'.
        short = sql.SQL("SELECT k.* FROM ({keys}) k (key) WHERE k.key <> '7'").format(keys=keys)
        real_init(self, ctx, short, params, *rest)

    rows = stock_rows()
    rows[2], rows[6] = "3,0", "7,4"
    write_stock(tmp_path, rows)
    with monkeypatch.context() as m:
        m.setattr(EarlyFound, "__init__", one_key_short)
        report = ok(refreshed)
    assert taken == [None]
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, report)

    def failing(self: EarlyFound, *args: Any) -> None:
        raise RuntimeError("the search failed")

    rows[2], rows[20] = "3,3", "21,0"
    write_stock(tmp_path, rows)
    with monkeypatch.context() as m:
        m.setattr(EarlyFound, "_run", failing)
        again = ok(refreshed)
    assert again["incremental"]["mode"] == "delta" and taken == [None, None]
    same_as_full_and_fresh(engine, patch_env, refreshed, full, fresh, again)
