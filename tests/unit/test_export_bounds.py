"""An atomic output stops past its limit (bytes before gzip), leaving the destination as it was, and the
bounds of an export follow its items and the settings (export/bounds.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from firefeed.config import Settings
from firefeed.errors import ExportError
from firefeed.export._atomic import OutputLimitError, atomic_output
from firefeed.export.bounds import HEAD_BYTES, WriteBounds, check_free_space, check_run_bytes, export_bounds

ROW = b"x" * 1000 + b"\n"


def write_rows(dest: Path, rows: int, *, limit: int | None, compress: bool = False) -> None:
    with atomic_output(dest, compress=compress, limit=limit) as out:
        for _ in range(rows):
            out.write(ROW)


@pytest.mark.parametrize("compress", [False, True])
def test_an_output_past_its_limit_stops_and_leaves_the_previous_file(tmp_path: Path, compress: bool) -> None:
    dest = tmp_path / "feed.csv"
    dest.write_bytes(b"previous\n")
    # 3,000 rows of 1,001 bytes: 3 MB rendered, a few KB once gzipped; the limit counts the rendered bytes.
    with pytest.raises(OutputLimitError):
        write_rows(dest, 3000, limit=2 * 1024**2, compress=compress)
    assert dest.read_bytes() == b"previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["feed.csv"]


def test_an_output_at_its_limit_is_written_whole(tmp_path: Path) -> None:
    dest = tmp_path / "feed.csv"
    write_rows(dest, 3000, limit=3000 * len(ROW))
    assert dest.stat().st_size == 3000 * len(ROW)


def test_the_last_partial_batch_counts_too(tmp_path: Path) -> None:
    # 100 rows stay in one batch until the block ends: the limit is checked there as well.
    with pytest.raises(OutputLimitError):
        write_rows(tmp_path / "feed.csv", 100, limit=100 * len(ROW) - 1)
    assert list(tmp_path.iterdir()) == []


def test_an_exports_limit_is_its_items_times_the_per_item_bound_plus_the_head() -> None:
    settings = Settings(export_max_item_bytes=2048, export_min_free_bytes=10)
    bounds = export_bounds(settings, 100, previous_bytes=5000)
    assert bounds.limit == 100 * 2048 + HEAD_BYTES
    assert bounds.bound.startswith("export_max_item_bytes (2048 bytes an item on average: 100 items")
    assert bounds.free_needed == 5010


def test_without_a_count_of_items_the_absolute_bounds_decide() -> None:
    settings = Settings(export_max_bytes=5 * 1024**2, run_max_export_bytes=3 * 1024**2)
    bounds = export_bounds(settings, None)
    assert (bounds.limit, bounds.bound.split(" ")[0]) == (3 * 1024**2, "run_max_export_bytes")
    assert bounds.free_needed == settings.export_min_free_bytes


def test_too_little_free_space_is_an_export_error_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ExportError) as info:
        check_free_space("google", tmp_path, WriteBounds(1, "x", free_needed=2**62))
    assert info.value.export == "google"
    assert "export_min_free_bytes" in str(info.value) and str(tmp_path) not in str(info.value)
    check_free_space("google", tmp_path, WriteBounds(1, "x", free_needed=1))


def test_the_runs_files_are_bounded_together_naming_the_export_that_crosses() -> None:
    entries = [{"name": "a", "bytes": 600}, {"name": "b", "bytes": 500}, {"name": "c", "bytes": 1}]
    check_run_bytes(entries, limit=1101)
    with pytest.raises(ExportError) as info:
        check_run_bytes(entries, limit=1000)
    assert info.value.export == "b" and "run_max_export_bytes (1000 bytes (1.0 KB))" in str(info.value)
