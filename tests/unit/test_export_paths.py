"""resolve_export_path keeps every export inside export_dir/<company>/<project>."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from firefeed.errors import UnsafePathError
from firefeed.export import resolve_export_path


def test_a_relative_path_lands_in_the_projects_folder(tmp_path: Path) -> None:
    dest = resolve_export_path(tmp_path, "acme", "shoes_it", "feeds/google.xml")
    assert dest == (tmp_path / "acme" / "shoes_it" / "feeds" / "google.xml").resolve()


def test_gzip_appends_gz_once(tmp_path: Path) -> None:
    base = (tmp_path / "acme" / "p1").resolve()
    assert resolve_export_path(tmp_path, "acme", "p1", "feed.csv", gzip=True) == base / "feed.csv.gz"
    assert resolve_export_path(tmp_path, "acme", "p1", "feed.csv.gz", gzip=True) == base / "feed.csv.gz"
    assert resolve_export_path(tmp_path, "acme", "p1", "feed.csv.gz") == base / "feed.csv.gz"


def test_backslashes_count_as_separators(tmp_path: Path) -> None:
    dest = resolve_export_path(tmp_path, "acme", "p1", "a\\b.csv")
    assert dest == (tmp_path / "acme" / "p1" / "a" / "b.csv").resolve()


@pytest.mark.parametrize(
    "rel",
    [
        "../x.csv",
        "a/../../x.csv",
        "..\\x.csv",
        "/etc/passwd",
        "\\etc\\passwd",
        "~/x.csv",
        "C:/x.csv",
        "",
        "  ",
        ".",
        "a/..",
        "x\x00.csv",
        "sub/",  # a folder, not a file: it would write a file named `sub`
        "sub/.",
        "sub\\",
    ],
)
def test_paths_that_leave_the_folder_are_refused(tmp_path: Path, rel: str) -> None:
    with pytest.raises(UnsafePathError):
        resolve_export_path(tmp_path, "acme", "p1", rel)


@pytest.mark.parametrize(
    ("company", "project"), [("../acme", "p1"), ("acme", "../p1"), ("Acme", "p1"), ("acme", "p/1"), ("", "p1")]
)
def test_bad_company_or_project_ids_are_refused(tmp_path: Path, company: str, project: str) -> None:
    with pytest.raises(UnsafePathError):
        resolve_export_path(tmp_path, company, project, "x.csv")


def test_a_symlinked_folder_pointing_outside_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    project = tmp_path / "exports" / "acme" / "p1"
    project.mkdir(parents=True)
    os.symlink(outside, project / "escape")
    with pytest.raises(UnsafePathError):
        resolve_export_path(tmp_path / "exports", "acme", "p1", "escape/feed.csv")


def test_a_symlinked_file_pointing_outside_is_refused(tmp_path: Path) -> None:
    project = tmp_path / "exports" / "acme" / "p1"
    project.mkdir(parents=True)
    os.symlink(tmp_path / "victim.txt", project / "feed.csv")
    with pytest.raises(UnsafePathError):
        resolve_export_path(tmp_path / "exports", "acme", "p1", "feed.csv")


def test_a_symlink_that_stays_inside_is_allowed(tmp_path: Path) -> None:
    project = tmp_path / "exports" / "acme" / "p1"
    (project / "real").mkdir(parents=True)
    os.symlink(project / "real", project / "alias")
    dest = resolve_export_path(tmp_path / "exports", "acme", "p1", "alias/feed.csv")
    assert dest == (project / "real" / "feed.csv").resolve()


def test_a_symlinked_export_root_is_followed(tmp_path: Path) -> None:
    real = tmp_path / "real_root"
    real.mkdir()
    os.symlink(real, tmp_path / "root")
    dest = resolve_export_path(tmp_path / "root", "acme", "p1", "feed.csv")
    assert dest == real.resolve() / "acme" / "p1" / "feed.csv"
