"""An unchanged run checks that the last succeeded run's files are still in place (SPEC 11 I2) by their stat
when their identity is kept (`published_files`, #52): the publish keeps the identity of each file it moved into
place (`FileIdentity.written_by_us`), else the first check that reads it does; then it is only stat'ed; any
edit, however it hides, is still seen."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from firefeed.dataplane import file_identity, state
from firefeed.runs.service import RunStore
from firefeed.storage import LocalStorage
from tests.integration.test_incremental import ok, write_project, write_sources

pytestmark = pytest.mark.integration

MARGIN_NS = 200_000_000


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The published files the check reads (their names), with a short racy margin."""
    monkeypatch.setattr(file_identity, "RACY_MARGIN_NS", MARGIN_NS)
    seen: list[str] = []
    digest = state.read_digest

    def counted(f: Any, **kwargs: Any) -> Any:
        seen.append(Path(f.name).name)
        return digest(f, **kwargs)

    monkeypatch.setattr(state, "read_digest", counted)
    return seen


def settle() -> None:
    time.sleep(MARGIN_NS / 1e9 + 0.1)


def keep_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """The publish keeps no identity (as when a file is moved within its last write's stamp): checks read."""
    from firefeed.pipeline import publishing

    monkeypatch.setattr(publishing, "_keep_identities", lambda *args, **kwargs: None)


def move_stamped_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each publish's move comes a clock stamp after its files' last writes (as a 1M export's does)."""
    from firefeed.pipeline import publishing

    switch = publishing.switch

    def later(*args: Any, **kwargs: Any) -> None:
        time.sleep(0.03)
        switch(*args, **kwargs)

    monkeypatch.setattr(publishing, "switch", later)


@pytest.fixture
def unkept(monkeypatch: pytest.MonkeyPatch) -> None:
    keep_none(monkeypatch)


def first_run(tmp_path: Path) -> tuple[str, Path, dict[str, Any]]:
    """A new project on the shared sources, run once: its name, spec and report."""
    project = f"pid{uuid.uuid4().hex[:8]}"
    write_sources(tmp_path)
    spec = write_project(tmp_path, project)
    return project, spec, ok(spec)


def test_the_publish_keeps_each_file_identity_and_no_check_reads_it(
    run_env: Path, tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    move_stamped_apart(monkeypatch)
    project, spec, first = first_run(tmp_path)
    kept = RunStore().published_identities(project)
    assert sorted(kept) == ["feed", "json"]
    for entry in first["exports"]:
        path, identity = kept[entry["name"]]
        assert path == entry["path"] and identity["sha256"] == entry["sha256"] and identity["written"] is True
        assert identity["mtime_ns"] < identity["ctime_ns"]
    assert all("_written_stamp" not in entry for entry in first["exports"])  # not reported
    again = ok(spec)
    assert again["incremental"]["mode"] == "unchanged" and reads == []
    assert RunStore().published_identities(project) == kept


def test_a_published_file_is_read_by_one_check_then_known_by_its_stat(
    run_env: Path, tmp_path: Path, reads: list[str], unkept: None
) -> None:
    project, spec, first = first_run(tmp_path)
    settle()
    assert ok(spec)["incremental"]["mode"] == "unchanged"
    assert sorted(reads) == ["feed.csv", "feed.json"]  # read once: no identity kept yet
    kept = RunStore().published_identities(project)
    assert sorted(kept) == ["feed", "json"]
    assert all(identity["sha256"] == e["sha256"] for e in first["exports"] for _, identity in [kept[e["name"]]])

    reads.clear()
    third = ok(spec)
    assert third["incremental"]["mode"] == "unchanged" and third["incremental"]["reused_from"] == first["run_id"]
    assert reads == []
    assert RunStore().published_identities(project) == kept


@pytest.mark.parametrize("kept_by", ["publish", "check"])
def test_an_edit_of_a_published_file_that_keeps_its_size_and_mtime_is_seen(
    run_env: Path, tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch, kept_by: str
) -> None:
    """Whether its identity was kept by its publish or by the check that read it."""
    if kept_by == "check":
        keep_none(monkeypatch)
    else:
        move_stamped_apart(monkeypatch)
    project, spec, _ = first_run(tmp_path)
    settle()
    ok(spec)
    reads.clear()
    assert ok(spec)["incremental"]["mode"] == "unchanged" and reads == []

    assert RunStore().published_identities(project)["feed"][1].get("written", False) is (kept_by == "publish")
    published = run_env / "increfresh" / project / "feed.csv"
    st = published.stat()
    data = bytearray(published.read_bytes())
    data[-2] = ord("X") if data[-2] != ord("X") else ord("Y")  # the same size
    published.write_bytes(bytes(data))
    os.utime(published, ns=(st.st_atime_ns, st.st_mtime_ns))  # the mtime put back: the ctime moved
    report = ok(spec)
    assert report["incremental"]["mode"] == "full"
    assert report["incremental"]["reason"] == "export 'feed': its published file is gone or changed"


def test_an_identity_kept_for_another_path_is_not_trusted(
    run_env: Path, tmp_path: Path, reads: list[str], unkept: None
) -> None:
    project, spec, _ = first_run(tmp_path)
    settle()
    ok(spec)
    store = RunStore()
    path, identity = store.published_identities(project)["feed"]
    store.keep_published_identity(project, "feed", path + ".old", identity)
    reads.clear()
    assert ok(spec)["incremental"]["mode"] == "unchanged"
    assert reads == ["feed.csv"]  # read again, and its identity kept under its own path
    assert store.published_identities(project)["feed"][0] == path


def test_the_check_reads_beside_fetch_and_parse_and_stops_when_the_run_needs_it_not(
    run_env: Path, tmp_path: Path, reads: list[str], monkeypatch: pytest.MonkeyPatch, unkept: None
) -> None:
    """The files a refresh must read (just published) are read on the check's own thread, begun before FETCH;
    a refresh that turns out full stops the read it no longer needs."""
    from firefeed.pipeline import incremental

    threads: list[str] = []
    digest = state.read_digest

    def on_thread(f: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return digest(f, **kwargs)

    monkeypatch.setattr(state, "read_digest", on_thread)
    project, spec, _ = first_run(tmp_path)
    settle()
    assert ok(spec)["incremental"]["mode"] == "unchanged"
    assert sorted(threads) == [incremental.CHECK_THREAD] * 2  # both files, on the check's thread

    stop = threading.Event()
    stop.set()
    exports = state.last_succeeded(RunStore(), project, before="").exports  # type: ignore[union-attr]
    RunStore().keep_published_identity(project, "feed", "elsewhere.csv", {})  # no identity vouches: a read
    with pytest.raises(state.CheckStopped):
        state.moved_files(LocalStorage(run_env), exports, store=RunStore(), project=project, stop=stop)
