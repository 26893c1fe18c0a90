"""A refresh keeps each local source file's stat identity with its digest (#52): the next refresh finds an
unchanged file unchanged without reading it, and its decisions are those a read would give."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from firefeed.dataplane.file_identity import RACY_MARGIN_NS
from firefeed.pipeline import fetch as fetch_module
from firefeed.pipeline.steps.fetch import FILE_IDENTITY
from firefeed.runs.service import RunStore
from tests.integration.conftest import write_csv
from tests.integration.test_incremental import PER_ITEM_RULES, ok, write_project, write_sources

pytestmark = pytest.mark.integration


def identities(project: str) -> dict[str, Any]:
    rows = RunStore().source_rows(project)
    return {name: (row.content_sha256, (row.staged_stats or {}).get(FILE_IDENTITY)) for name, row in rows.items()}


def test_a_refresh_keeps_the_sources_stat_identity_and_the_next_one_does_not_read_unchanged_files(
    run_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = f"fid{uuid.uuid4().hex[:8]}"
    write_sources(tmp_path)
    spec = write_project(tmp_path, project, rules=PER_ITEM_RULES)
    time.sleep(RACY_MARGIN_NS / 1e9 + 0.2)  # the files' stamps older than the margin: their identity holds
    # The first run's digests are taken while PARSE reads the files, with the stat at that read.
    read: list[str] = []
    digest = fetch_module._local_digest

    def counted(path: Path, **kwargs: Any) -> Any:
        read.append(path.name)
        return digest(path, **kwargs)

    monkeypatch.setattr(fetch_module, "_local_digest", counted)
    first = ok(spec)
    assert "main.csv" not in read and "stock.csv" not in read
    kept = identities(project)
    for sha256, identity in kept.values():
        assert identity is not None and identity["sha256"] == sha256
    # So the first refresh reads neither file again.
    second = ok(spec)
    assert second["incremental"]["mode"] == "unchanged"
    assert "main.csv" not in read and "stock.csv" not in read
    assert identities(project) == kept

    third = ok(spec)
    assert third["incremental"]["mode"] == "unchanged" and third["incremental"]["reused_from"] == first["run_id"]
    assert "main.csv" not in read and "stock.csv" not in read  # the lookup's file is still hashed (not a source)
    assert identities(project) == kept  # nothing written again

    # A changed stock file is read (its stat moved) and staged again; PARSE keeps the identity FETCH took
    # with the new digest. The primary's stands.
    write_csv(tmp_path / "stock.csv", ["id", "stock"], [[str(i), str((i + 1) % 5)] for i in range(1, 31)])
    read.clear()
    delta = ok(spec)
    assert delta["incremental"]["mode"] == "delta" and read.count("stock.csv") == 1 and "main.csv" not in read
    after = identities(project)
    assert after["main"] == kept["main"]
    assert after["stock"][1] is not None and after["stock"][1]["sha256"] == after["stock"][0] != kept["stock"][0]

    # That identity was taken within the margin of the write (racy): at most one more read records it anew,
    # and then the file is not read again.
    time.sleep(RACY_MARGIN_NS / 1e9 + 0.2)
    read.clear()
    assert ok(spec)["incremental"]["mode"] == "unchanged" and read.count("stock.csv") <= 1
    read.clear()
    assert ok(spec)["incremental"]["mode"] == "unchanged" and "stock.csv" not in read and "main.csv" not in read
