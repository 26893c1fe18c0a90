"""The CLI's first-hour answers (issue #48): a missing spec file is said as such, before any database."""

from __future__ import annotations

from pathlib import Path

import pytest

from firefeed.cli import EXIT_BAD_INPUT, main


@pytest.mark.parametrize("arg", ["no_such_spec.yaml", "specs/shoes.yml", "./shoes"])
def test_run_of_a_missing_spec_file_says_there_is_no_such_file(
    arg: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A database that cannot answer: the answer must come before the CLI reaches for one.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FIREFEED_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    from firefeed.config import get_settings

    get_settings.cache_clear()
    try:
        assert main(["run", arg]) == EXIT_BAD_INPUT
    finally:
        get_settings.cache_clear()
    err = capsys.readouterr().err
    assert arg.lstrip("./") in err or arg in err
    assert "No such file" in err
    assert "unknown project" not in err


def test_the_demos_progress_names_each_step_once_when_piped(capsys: pytest.CaptureFixture[str]) -> None:
    from firefeed.demo.runner import _hook
    from firefeed.runs.contract import Step

    for step, info in ((Step.FETCH, {"rows_in": 0, "rows_out": 0}), (Step.PARSE, {"rows_in": 0, "rows_out": 12})):
        _hook(step, "start", {})
        _hook(step, "end", info)
    out = capsys.readouterr().out
    assert "\r" not in out
    assert out.splitlines() == ["  FETCH   ✓ fetched", "  PARSE   ✓      0 rows in      12 rows out"]
