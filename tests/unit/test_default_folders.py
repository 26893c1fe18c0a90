"""The data and export folders are the same absolute folders for every process, whatever its working folder (#48)."""

from __future__ import annotations

from pathlib import Path

import pytest

from firefeed.config import Settings


@pytest.fixture()
def no_folder_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FIREFEED_DATA_DIR", "FIREFEED_EXPORT_DIR"):
        monkeypatch.delenv(name, raising=False)


def test_the_defaults_are_absolute_and_do_not_follow_the_working_folder(
    no_folder_settings: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = []
    for cwd in (tmp_path / "a", tmp_path / "b"):
        cwd.mkdir()
        monkeypatch.chdir(cwd)
        settings = Settings(_env_file=None)  # type: ignore[call-arg]
        seen.append((settings.data_dir, settings.export_dir))
    assert seen[0] == seen[1]
    data_dir, export_dir = seen[0]
    assert data_dir.is_absolute() and export_dir == data_dir / "exports"
    # A source checkout keeps its data beside its code: two clones never share a folder.
    assert data_dir == Path(__file__).resolve().parents[2] / "var"


def test_exports_follow_a_set_data_folder_and_a_set_export_folder_wins(
    no_folder_settings: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FIREFEED_DATA_DIR", str(tmp_path / "data"))
    assert Settings(_env_file=None).export_dir == tmp_path / "data" / "exports"  # type: ignore[call-arg]
    monkeypatch.setenv("FIREFEED_EXPORT_DIR", str(tmp_path / "feeds"))
    assert Settings(_env_file=None).export_dir == tmp_path / "feeds"  # type: ignore[call-arg]
