"""PARSE's kept copy when things go wrong (#52): a file edited between FETCH and the copy (or during a parse in
place), a copy that cannot be written, `--full`, temporaries a killed run left, and parses a patch would
refuse. Each must leave what a fresh project on the same file publishes, and never a digest that is not of
the bytes staged."""

from __future__ import annotations

import csv
import errno
import hashlib
from pathlib import Path

import pytest
from sqlalchemy import Engine

from firefeed.config import get_settings
from firefeed.dataplane import parsed_copy
from firefeed.pipeline.steps import parse as parse_step
from firefeed.runs.service import RunStore
from tests.integration.test_incremental import files, ok, run
from tests.integration.test_parse_patch import edited, main_rows, parse_staging, start, write_main

pytestmark = pytest.mark.integration


def _versions() -> tuple[list[list[str]], list[list[str]]]:
    v1 = edited(main_rows())  # the file FETCH hashes
    v2 = [list(r) for r in v1]
    v2[0][1] = "written while the run ran"
    return v1, v2


def _recorded_sha256(project: str) -> str | None:
    return RunStore().source_rows(project)["main"].content_sha256


def _racing_copy(monkeypatch: pytest.MonkeyPatch, tmp: Path, rows: list[list[str]]) -> None:
    """The writer rewrites the primary after FETCH read it, just before PARSE copies it."""
    original = parsed_copy._copy

    def racing(src: Path, dest: Path) -> None:
        write_main(tmp, rows)
        original(src, dest)

    monkeypatch.setattr(parsed_copy, "_copy", racing)


def test_a_file_edited_between_fetch_and_the_copy_and_put_back_is_parsed_again(
    patch_env: Path, tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    refreshed, _full, fresh = start(tmp_path)
    v1, v2 = _versions()
    write_main(tmp_path, v1)
    with monkeypatch.context() as m:
        _racing_copy(m, tmp_path, v2)
        ok(refreshed)
    # What was recorded is the digest of what was staged (the copy: v2), not FETCH's of v1.
    kept = parsed_copy.path(get_settings(), "increfresh", refreshed.stem, "main")
    assert kept.read_bytes() == (tmp_path / "main.csv").read_bytes()
    assert _recorded_sha256(refreshed.stem) == hashlib.sha256(kept.read_bytes()).hexdigest()
    write_main(tmp_path, v1)  # the writer puts v1 back
    again = ok(refreshed)
    assert again["incremental"]["mode"] != "unchanged", again["incremental"]
    ok(fresh)
    assert files(patch_env, refreshed.stem) == files(patch_env, fresh.stem)


def test_a_file_edited_between_fetch_and_the_copy_and_left_is_unchanged_next(
    patch_env: Path, tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    refreshed, _full, fresh = start(tmp_path)
    v1, v2 = _versions()
    write_main(tmp_path, v1)
    with monkeypatch.context() as m:
        _racing_copy(m, tmp_path, v2)
        ok(refreshed)
    again = ok(refreshed)
    assert again["incremental"]["mode"] == "unchanged", again["incremental"]
    ok(fresh)
    assert files(patch_env, refreshed.stem) == files(patch_env, fresh.stem)


def test_a_file_edited_during_a_parse_in_place_keeps_no_digest(
    run_env: Path, tmp_path: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No copy (the default keeps none of a small file): the parse reads the file itself; edited meanwhile,
    no digest is recorded, so the next run parses it again whatever the writer does."""
    refreshed, _full, fresh = start(tmp_path)
    v1, v2 = _versions()
    write_main(tmp_path, v1)
    original = parse_step.stage_path

    def racing(*args: object, **kwargs: object) -> object:
        write_main(tmp_path, v2)
        return original(*args, **kwargs)  # type: ignore[arg-type]

    with monkeypatch.context() as m:
        m.setattr(parse_step, "stage_path", racing)
        ok(refreshed)
    assert _recorded_sha256(refreshed.stem) is None
    write_main(tmp_path, v1)
    again = ok(refreshed)
    assert again["incremental"]["mode"] != "unchanged", again["incremental"]
    ok(fresh)
    assert files(run_env, refreshed.stem) == files(run_env, fresh.stem)


def test_a_copy_that_cannot_be_written_is_dropped_and_the_file_parsed_in_place(
    patch_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refreshed, _full, fresh = start(tmp_path)
    kept = parsed_copy.path(get_settings(), "increfresh", refreshed.stem, "main")
    assert kept.exists()
    write_main(tmp_path, edited(main_rows()))

    def full_disk(src: Path, dest: Path) -> None:
        dest.write_bytes(b"x")
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(parsed_copy, "_copy", full_disk)
        code, report = run(refreshed)
    assert code == 0, report
    staging = parse_staging(report["run_id"])
    assert staging["staged"] == "full" and "could not be copied" in staging["reason"], staging
    assert "No space left on device" in staging["reason"], staging
    stock = parsed_copy.path(get_settings(), "increfresh", refreshed.stem, "stock")  # an enrich source's copy
    assert not kept.exists() and list(kept.parent.iterdir()) == [stock]
    ok(fresh)
    assert files(patch_env, refreshed.stem) == files(patch_env, fresh.stem)
    # The next run copies again and keeps it; the one after patches.
    rows = edited(main_rows())
    rows[0][1] = "changed again"
    write_main(tmp_path, rows)
    assert "no copy of the last parsed file" in parse_staging(ok(refreshed)["run_id"])["reason"]
    assert kept.exists()
    rows[1][1] = "and again"
    write_main(tmp_path, rows)
    assert parse_staging(ok(refreshed)["run_id"])["staged"] == "patched"


def test_full_parses_a_changed_primary_in_full(patch_env: Path, tmp_path: Path, engine: Engine) -> None:
    refreshed, _full, fresh = start(tmp_path)
    write_main(tmp_path, edited(main_rows()))
    report = ok(refreshed, "--full")
    staging = parse_staging(report["run_id"])
    assert staging == {"staged": "full", "reason": "--full asked"}, staging
    ok(fresh)
    assert files(patch_env, refreshed.stem) == files(patch_env, fresh.stem)
    # Its copy is kept: the next refresh patches.
    rows = edited(main_rows())
    rows[0][1] = "changed again"
    write_main(tmp_path, rows)
    assert parse_staging(ok(refreshed)["run_id"])["staged"] == "patched"


def test_a_parse_a_patch_would_refuse_keeps_no_copy(patch_env: Path, tmp_path: Path) -> None:
    refreshed, _full, _fresh = start(tmp_path)
    kept = parsed_copy.path(get_settings(), "increfresh", refreshed.stem, "main")
    assert kept.exists()
    with (tmp_path / "main.csv").open("a", newline="", encoding="utf-8") as f:
        csv.writer(f).writerow(["99", "too", "many", "cells", "here"])
    report = ok(refreshed)
    assert "malformed" in parse_staging(report["run_id"])["not_kept"], parse_staging(report["run_id"])
    stock = parsed_copy.path(get_settings(), "increfresh", refreshed.stem, "stock")  # an enrich source's copy
    assert not kept.exists() and list(kept.parent.iterdir()) == [stock]


def test_a_copy_drops_the_temporaries_killed_runs_left(tmp_path: Path) -> None:
    """Only the source's own: another source's temporary copy is its run's business."""
    settings = get_settings().model_copy(update={"data_dir": tmp_path / "data"})
    feed = tmp_path / "feed.csv"
    feed.write_bytes(b"id,title\n1,a\n")
    final = parsed_copy.path(settings, "increfresh", "pfaults", "main")
    other = parsed_copy.path(settings, "increfresh", "pfaults", "stock")
    final.parent.mkdir(parents=True)
    left = final.with_name(f".tmp-{final.name}-killed-run")
    left.write_bytes(b"x" * 1000)
    others = other.with_name(f".tmp-{other.name}-killed-run")
    others.write_bytes(b"y")
    tmp = parsed_copy.start(settings, "increfresh", "pfaults", "main", feed, "this-run")
    assert tmp.read_bytes() == feed.read_bytes()
    assert not left.exists() and others.exists()
