"""A tiny feed must not write huge exports (#47): what one export, one run and one spec may write.

The two amplifications of the issue, built small: a feed of a few KB whose rules template its values
into 200 fields (each under the growth bound, 30 copies of two values), and one whose rules `join`
a field over the one group of every item, ten times. Unbounded, the first writes ~28 MB, the second
~20 MB. Each run fails at EXPORT naming the export and the bound, the previous files stay as they
were, byte for byte, nothing is left beside them, and the next run of the project succeeds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from firefeed.config import reset_settings
from firefeed.db.engine import raw_connection
from firefeed.export._atomic import OutputLimitError, atomic_output
from tests.integration.conftest import cli, run_json, write_csv

pytestmark = pytest.mark.integration

DERIVED_FIELDS = 200
JOINS = 10


def feed(folder: Path, items: int, *, group: bool = False) -> None:
    """`items` short items (about 80 bytes each): id, title, description, and a group shared by all."""
    rows = [[f"K{i:04d}", f"Title of item {i}", f"A short description of item number {i}.", "g"] for i in range(items)]
    write_csv(folder / "main.csv", ["id", "title", "description", "grp"], rows)


def derived_rules() -> list[dict[str, Any]]:
    """200 fields, each 25 copies of the title and the description: 50 values, under rules_max_growth (64)."""
    value = "{title} {description} " * 25
    return [{"name": f"d{i}", "then": [{"set": f"d{i}", "value": value}]} for i in range(DERIVED_FIELDS)]


def join_rules() -> list[dict[str, Any]]:
    """Ten joins of every item's title and description over the one group: 10,000 characters each."""
    return [
        {"name": f"j{i}", "then": [{"aggregate": f"j{i}", "op": "join", "of": "{title} {description}"}]}
        for i in range(JOINS)
    ]


#: a plain file, a gzip-compressed one (bounded by its bytes before gzip) and google-xml (COPY by groups)
EXPORTS = [
    {"name": "csv", "format": "csv", "path": "out.csv"},
    {"name": "lines", "format": "jsonl", "path": "out.jsonl", "gzip": "true"},
    # C3: these items are not Google-complete; the tests read the bounds on what an export writes.
    {"name": "google", "format": "google-xml", "path": "google.xml", "max_invalid": "100%"},
]


def write_spec(
    folder: Path, project: str, rules: list[dict[str, Any]], *, group: bool = False, exports: Any = None
) -> Path:
    spec: dict[str, Any] = {
        "company": "acme",
        "project": project,
        "sources": [{"name": "main", "url": "main.csv"}],
        "rules": rules,
        "exports": EXPORTS if exports is None else exports,
    }
    if group:
        spec["group"] = "grp"
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


def published(folder: Path) -> dict[str, bytes]:
    """Every file in the project's export folder (temporary ones included), by name."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def set_env(monkeypatch: pytest.MonkeyPatch, **values: int) -> None:
    for name, value in values.items():
        monkeypatch.setenv(f"FIREFEED_{name.upper()}", str(value))
    reset_settings()


def fails_at_export_and_keeps_the_previous_files(
    run_env: Path, folder: Path, project: str, rules: list[dict[str, Any]], *, group: bool = False, exports: Any = None
) -> dict[str, Any]:
    """Run the plain spec, then `rules` (must fail at EXPORT), then the plain spec again; the failed report."""
    plain = write_spec(folder, project, [], group=group, exports=exports)
    assert run_json(plain)[0] == 0
    folder_of_exports = run_env / "acme" / project
    before = published(folder_of_exports)
    assert len(before) == len(exports or EXPORTS)
    code, report = run_json(write_spec(folder, project, rules, group=group, exports=exports))
    assert code == 1, report
    assert report["status"] == "FAILED"
    assert report["error"]["step"] == "EXPORT"
    assert published(folder_of_exports) == before  # byte for byte, and no temporary file left beside them
    again = run_json(write_spec(folder, project, [], group=group, exports=exports))
    assert again[0] == 0, again[1].get("error")  # the project is free
    return report


def test_two_hundred_derived_fields_fail_export_at_the_per_item_bound(run_env: Path, tmp_path: Path) -> None:
    feed(tmp_path, 100)
    assert (tmp_path / "main.csv").stat().st_size < 8_000
    report = fails_at_export_and_keeps_the_previous_files(run_env, tmp_path, "derived", derived_rules())
    message = report["error"]["message"]
    assert message.startswith(("export 'csv': ", "export 'lines': ", "export 'google': "))
    # 100 items x 64 KiB + 1 MiB: the export stops at 7.6 MB, where it would have written 28.
    assert "export_max_item_bytes (65536 bytes an item on average: 100 items" in message


def test_ten_join_aggregates_fail_export_at_the_per_item_bound(run_env: Path, tmp_path: Path) -> None:
    feed(tmp_path, 200)
    assert (tmp_path / "main.csv").stat().st_size < 17_000
    report = fails_at_export_and_keeps_the_previous_files(run_env, tmp_path, "joins", join_rules(), group=True)
    assert "export_max_item_bytes (65536 bytes an item on average: 200 items" in report["error"]["message"]


def test_the_absolute_export_bound_stops_an_export_however_many_items(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_env(monkeypatch, export_max_bytes=1024**2, export_max_item_bytes=1024**2)
    feed(tmp_path, 100)
    report = fails_at_export_and_keeps_the_previous_files(run_env, tmp_path, "absolute", derived_rules()[:20])
    assert "export_max_bytes (1048576 bytes (1.0 MB))" in report["error"]["message"]


def test_the_runs_files_together_are_bounded_before_anything_is_published(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each file alone is under 1 MiB (about 570 KB: 100 items of four fields of 1,400 bytes), together over it.
    set_env(monkeypatch, run_max_export_bytes=1024**2)
    feed(tmp_path, 100)
    rules = derived_rules()[:4]
    exports = [
        {"name": "csv", "format": "csv", "path": "out.csv"},
        {"name": "tsv", "format": "tsv", "path": "out.tsv"},
    ]
    report = fails_at_export_and_keeps_the_previous_files(run_env, tmp_path, "together", rules, exports=exports)
    message = report["error"]["message"]
    assert message.startswith("export 'tsv': the run's files together take ")
    assert "more than run_max_export_bytes (1048576 bytes (1.0 MB)): none was published" in message


def test_too_little_free_disk_fails_export_before_writing(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    feed(tmp_path, 10)
    spec = write_spec(tmp_path, "disk", [])
    assert run_json(spec)[0] == 0
    exports = run_env / "acme" / "disk"
    before = published(exports)
    set_env(monkeypatch, export_min_free_bytes=2**62)  # more than any disk has
    code, report = run_json(spec, "--full")  # the same inputs: without --full nothing would be written
    assert code == 1 and report["status"] == "FAILED" and report["error"]["step"] == "EXPORT"
    message = report["error"]["message"]
    assert "not written: " in message and "export_min_free_bytes besides the export's previous size" in message
    assert str(run_env) not in message  # the tenant sees no server path
    assert published(exports) == before
    monkeypatch.delenv("FIREFEED_EXPORT_MIN_FREE_BYTES")
    reset_settings()
    assert run_json(spec)[0] == 0


def test_two_hundred_derived_fields_are_a_spec_error_past_spec_max_fields(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_env(monkeypatch, spec_max_fields=100)
    feed(tmp_path, 10)
    code, _ = cli("run", str(write_spec(tmp_path, "fields", derived_rules())))
    assert code == 2
    err = capsys.readouterr().err
    assert "rules[100]: rule 'd100' writes 'd100', field number 101 that the rules write; " in err
    assert "at most 100 are supported (spec_max_fields)" in err


def test_an_export_stopped_at_its_limit_cancels_its_copy_instead_of_reading_it_to_the_end(
    database_url: str, tmp_path: Path
) -> None:
    # Each row takes a sequence number, which no rollback gives back: how many rows the server made.
    rows, limit = 2_000_000, 1024**2
    with raw_connection() as conn, conn.cursor() as cur:
        cur.execute("CREATE SEQUENCE bounds_rows_made")
    try:
        with (
            pytest.raises(OutputLimitError),
            atomic_output(tmp_path / "out.csv", limit=limit) as out,
            raw_connection() as conn,
            out.stopping(conn.cancel),
            conn.cursor() as cur,
        ):
            cur.copy_expert(
                "COPY (SELECT repeat('x', 1000) || nextval('bounds_rows_made')"
                f" FROM generate_series(1, {rows})) TO STDOUT",
                out,
            )
        with raw_connection() as conn, conn.cursor() as cur:
            cur.execute("SELECT last_value FROM bounds_rows_made")
            made = cur.fetchone()[0]
            cur.execute("SELECT 1")  # the pooled connection that was cancelled serves the next statement
        # ~1,000 rows were written; a COPY read to its end would have made all 2,000,000.
        assert made < rows // 2
        assert list(tmp_path.iterdir()) == []
    finally:
        with raw_connection() as conn, conn.cursor() as cur:
            cur.execute("DROP SEQUENCE bounds_rows_made")
