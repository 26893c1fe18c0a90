"""Where the embedded Postgres lives: as root, one folder per data folder, so clones never share a server (#48)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from firefeed.db.embedded import ROOT_EMBEDDED_PARENT, default_embedded_dir


@pytest.fixture()
def as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIREFEED_EMBEDDED_DIR", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)


def test_as_root_two_clones_get_two_embedded_folders_and_one_clone_always_the_same(
    as_root: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "a" / "main", tmp_path / "b" / "main"
    for clone in (first, second):
        clone.mkdir(parents=True)
    one, other = default_embedded_dir(first / "var"), default_embedded_dir(second / "var")
    assert one != other
    assert one.parent == other.parent == ROOT_EMBEDDED_PARENT
    assert one.name.startswith("main-var-") and len(str(one)) < 80  # the socket path stays short
    monkeypatch.chdir(first)
    assert default_embedded_dir(Path("var")) == one  # the relative default names the same folder


def test_the_folder_named_in_the_environment_wins_and_others_keep_theirs_under_the_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIREFEED_EMBEDDED_DIR", str(tmp_path / "pg"))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert default_embedded_dir(tmp_path / "var") == tmp_path / "pg"
    monkeypatch.delenv("FIREFEED_EMBEDDED_DIR")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert default_embedded_dir(tmp_path / "var") == tmp_path / "var" / "embedded-pg"
