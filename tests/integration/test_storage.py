"""The storage layer on both backends (a local folder, and S3 on a real moto server process).

The same test functions run against each backend; then whole `firefeed run`s with
S3 and with a `file://` storage URL publish byte for byte what a run on the default
local folders publishes.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from firefeed.config import Settings, get_settings, reset_settings
from firefeed.errors import ConfigError, StorageError, UnsafePathError
from firefeed.export.paths import export_key
from firefeed.storage import LocalStorage, Storage, export_storage, parse_storage_url, run_storage
from firefeed.storage.keys import download_key, partial_key, run_prefix
from tests.integration.conftest import run_json, write_csv
from tests.integration.moto_s3 import bucket_objects, new_bucket
from tests.unit.test_fetch import FeedServer, body

pytestmark = pytest.mark.integration


def _settings(tmp_path: Path, **values: Any) -> Settings:
    base: dict[str, Any] = {
        "export_dir": tmp_path / "exports",
        "data_dir": tmp_path / "var",
        "storage_url": None,
        "storage_endpoint_url": None,
    }
    return Settings(_env_file=None, **(base | values))  # type: ignore[call-arg]


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    """The exports area of a fresh storage: the default local folder, or a fresh bucket."""
    if request.param == "local":
        return export_storage(_settings(tmp_path))
    endpoint = request.getfixturevalue("s3_endpoint")
    url = f"s3://{new_bucket(endpoint)}/ff"
    return export_storage(_settings(tmp_path, storage_url=url, storage_endpoint_url=endpoint))


def _spool_files(tmp_path: Path) -> list[Path]:
    spool = tmp_path / "var" / "spool"
    return [p for p in spool.rglob("*") if p.is_file()] if spool.exists() else []


# -- the interface, on both backends -------------------------------------------------------
def test_a_written_file_is_read_back_whole_listed_and_found(storage: Storage, tmp_path: Path) -> None:
    data = os.urandom(300_000)
    with storage.writing("acme/p1/feeds/out.csv") as local:
        local.write_bytes(data)
    assert storage.read_bytes("acme/p1/feeds/out.csv") == data
    with storage.reading("acme/p1/feeds/out.csv") as copy:
        assert copy.read_bytes() == data
        assert copy.name == "out.csv"  # readers that look at the extension still can
    assert storage.exists("acme/p1/feeds/out.csv")
    assert not storage.exists("acme/p1/feeds/other.csv")
    assert storage.list("acme/p1") == ["acme/p1/feeds/out.csv"]
    assert storage.list("acme/nothing") == []
    assert storage.url("acme/p1/feeds/out.csv").endswith("/acme/p1/feeds/out.csv")
    assert (storage.size("acme/p1/feeds/out.csv"), storage.size("acme/p1/feeds/other.csv")) == (300_000, None)
    assert _spool_files(tmp_path) == []


def test_a_write_that_fails_keeps_the_previous_content_and_leaves_nothing_behind(
    storage: Storage, tmp_path: Path
) -> None:
    with storage.writing("acme/p1/out.csv") as local:
        local.write_bytes(b"previous\n")
    with pytest.raises(RuntimeError, match="export broke"), storage.writing("acme/p1/out.csv") as local:
        local.write_bytes(b"half of the new fi")
        raise RuntimeError("export broke")
    assert storage.read_bytes("acme/p1/out.csv") == b"previous\n"
    assert storage.list("acme") == ["acme/p1/out.csv"]
    if isinstance(storage, LocalStorage):
        assert [p.name for p in (tmp_path / "exports" / "acme" / "p1").iterdir()] == ["out.csv"]
    assert _spool_files(tmp_path) == []


def test_put_file_consumes_the_local_file_and_put_stream_stores_a_stream(storage: Storage, tmp_path: Path) -> None:
    src = tmp_path / "download.csv"
    src.write_bytes(b"id\n1\n")
    storage.put_file(src, "run1/fetch/abc/main.csv")
    assert not src.exists()
    assert storage.read_bytes("run1/fetch/abc/main.csv") == b"id\n1\n"
    with (tmp_path / "stream.bin").open("wb") as f:
        f.write(b"x" * 3_000_000)
    with (tmp_path / "stream.bin").open("rb") as f:
        storage.put_stream(f, "run1/stream.bin")
    assert storage.read_bytes("run1/stream.bin") == b"x" * 3_000_000


def test_publishing_replaces_the_final_file_and_removes_the_partial(storage: Storage) -> None:
    final = "acme/p1/google.xml"
    partial = partial_key(final, "0123456789abcdef")
    assert partial == "acme/p1/.google.xml.01234567.partial"
    with storage.writing(final) as local:
        local.write_bytes(b"<old/>")
    with storage.writing(partial) as local:
        local.write_bytes(b"<new/>")
    assert storage.read_bytes(final) == b"<old/>"  # written is not yet published
    storage.move(partial, final)
    assert storage.read_bytes(final) == b"<new/>"
    assert not storage.exists(partial)
    assert storage.list("acme/p1") == [final]


def test_readers_see_a_whole_old_or_new_file_while_exports_are_published(storage: Storage) -> None:
    final = "acme/p1/feed.csv"
    versions = [bytes([65 + i]) * 400_000 for i in range(6)]
    with storage.writing(final) as local:
        local.write_bytes(versions[0])
    seen: list[bytes] = []
    done = threading.Event()

    def reader() -> None:
        while not done.is_set():
            seen.append(storage.read_bytes(final))

    def reads_after(count: int) -> None:
        """Let the reader read again before going on, so reads and publishes interleave even on a busy machine."""
        deadline = time.monotonic() + 10
        while len(seen) <= count and time.monotonic() < deadline:
            time.sleep(0.001)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        reads_after(0)
        for i, content in enumerate(versions[1:], start=1):
            partial = partial_key(final, f"run{i:05d}")
            with storage.writing(partial) as local, local.open("wb") as out:
                for start in range(0, len(content), 50_000):  # written in pieces, as an export is
                    out.write(content[start : start + 50_000])
            before = len(seen)
            storage.move(partial, final)
            reads_after(before)
    finally:
        done.set()
        thread.join(30)
    assert len(seen) >= len(versions), "the reader did not read between the publishes"
    assert all(s in versions for s in seen), sorted({len(s) for s in seen})
    assert storage.read_bytes(final) == versions[-1]


def test_delete_and_delete_tree_remove_keys_and_ignore_missing_ones(storage: Storage) -> None:
    for key in ("r1/fetch/a/main.csv", "r1/fetch/b/stock.csv", "r10/fetch/a/main.csv"):
        with storage.writing(key) as local:
            local.write_bytes(b"id\n")
    storage.delete("r1/fetch/a/main.csv")
    storage.delete("r1/fetch/a/main.csv")
    assert storage.list("r1") == ["r1/fetch/b/stock.csv"]
    storage.delete_tree(run_prefix("r1"))
    storage.delete_tree(run_prefix("r1"))
    storage.delete_tree("never-written")
    assert storage.list("r1") == []
    assert storage.list("r10") == ["r10/fetch/a/main.csv"]  # a prefix is a folder, not the start of a name


def test_reading_a_missing_key_is_a_storage_error_naming_it(storage: Storage) -> None:
    with pytest.raises(StorageError, match=r"acme/p1/missing\.csv"), storage.reading("acme/p1/missing.csv"):
        pass
    with pytest.raises(StorageError, match=r"acme/p1/missing\.csv"):
        storage.move("acme/p1/missing.csv", "acme/p1/there.csv")


BAD_KEYS = ["", "/etc/passwd", "../x.csv", "a/../../x.csv", "a//b.csv", "./a.csv", "a/.", "a\\..\\b", "x\x00.csv"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_keys_that_could_leave_the_storage_are_refused_by_every_operation(storage: Storage, key: str) -> None:
    operations = [
        lambda: storage.writing(key).__enter__(),
        lambda: storage.reading(key).__enter__(),
        lambda: storage.open(key),
        lambda: storage.move(key, "a/b.csv"),
        lambda: storage.move("a/b.csv", key),
        lambda: storage.delete(key),
        lambda: storage.delete_tree(key),
        lambda: storage.exists(key),
        lambda: storage.list(key),
    ]
    for op in operations:
        with pytest.raises(UnsafePathError):
            op()


@pytest.mark.parametrize("rel", ["../x.csv", "a/../../x.csv", "..\\x.csv", "/etc/passwd", "~/x.csv", "C:/x", ".", ""])
def test_export_paths_that_leave_the_project_are_refused(storage: Storage, rel: str) -> None:
    with pytest.raises(UnsafePathError):
        export_key(storage, "acme", "p1", rel)


def test_an_export_key_is_company_project_and_the_normalised_path(storage: Storage) -> None:
    assert export_key(storage, "acme", "p1", "feeds\\./google.xml") == "acme/p1/feeds/google.xml"
    assert export_key(storage, "acme", "p1", "feed.csv", gzip=True) == "acme/p1/feed.csv.gz"
    with pytest.raises(UnsafePathError):
        export_key(storage, "../acme", "p1", "feed.csv")


# -- local only: symlinks ----------------------------------------------------------------------
def test_a_symlink_out_of_the_local_export_folder_is_refused(tmp_path: Path) -> None:
    storage = export_storage(_settings(tmp_path))
    outside = tmp_path / "outside"
    outside.mkdir()
    project = tmp_path / "exports" / "acme" / "p1"
    project.mkdir(parents=True)
    os.symlink(outside, project / "escape")
    os.symlink(tmp_path / "exports" / "acme" / "p2", project / "sibling")
    with pytest.raises(UnsafePathError, match="outside the project's export folder"):
        export_key(storage, "acme", "p1", "escape/feed.csv")
    with pytest.raises(UnsafePathError, match="outside the project's export folder"):
        export_key(storage, "acme", "p1", "sibling/feed.csv")
    with pytest.raises(UnsafePathError):
        storage.writing("acme/p1/escape/feed.csv").__enter__()
    assert list(outside.iterdir()) == []


# -- settings ----------------------------------------------------------------------------------
def test_storage_urls_name_a_folder_or_a_bucket_prefix() -> None:
    assert parse_storage_url("/srv/ff") == ("file", "/srv/ff")
    assert parse_storage_url("file:///srv/ff") == ("file", "/srv/ff")
    assert parse_storage_url("s3://bucket") == ("s3", "bucket")
    assert parse_storage_url("s3://bucket/a/b/") == ("s3", "bucket/a/b")


@pytest.mark.parametrize("url", ["gs://bucket/x", "s3:///x", "s3://bucket/../x", "file://host/x", "s3://b/x?y=1"])
def test_a_bad_storage_url_stops_the_settings_naming_the_variable(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIREFEED_STORAGE_URL", url)
    reset_settings()
    try:
        with pytest.raises(ConfigError, match="FIREFEED_STORAGE_URL"):
            get_settings()
    finally:
        monkeypatch.delenv("FIREFEED_STORAGE_URL")
        reset_settings()


def test_storage_urls_put_exports_and_downloads_in_their_own_areas(tmp_path: Path) -> None:
    default = _settings(tmp_path)
    assert export_storage(default).url() == str((tmp_path / "exports").resolve())
    assert run_storage(default).url() == str((tmp_path / "var" / "runs").resolve())
    shared = _settings(tmp_path, storage_url=f"file://{tmp_path}/shared")
    assert export_storage(shared).url() == str(tmp_path / "shared" / "exports")
    assert run_storage(shared).url() == str(tmp_path / "shared" / "runs")
    s3 = _settings(tmp_path, storage_url="s3://bucket/ff")
    assert export_storage(s3).url("acme/p1/x.csv") == "s3://bucket/ff/exports/acme/p1/x.csv"
    assert run_storage(s3).url(download_key("r1", "abc", "main.csv")) == "s3://bucket/ff/runs/r1/fetch/abc/main.csv"


# -- whole runs ----------------------------------------------------------------------------------
EXPORTS = [
    {"name": "csv", "format": "csv", "path": "out.csv"},
    {"name": "jsonl", "format": "jsonl", "path": "feeds/out.jsonl", "gzip": "true"},
    # C3: these items are not Google-complete; the tests read where a run's files go.
    {"name": "google", "format": "google-xml", "path": "google.xml", "max_invalid": "100%"},
]


def _project(folder: Path, project: str, feed_url: str) -> Path:
    """Three kinds of source: a local CSV read in place, a gzip file and an http download (both via storage)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(
        folder / "main.csv",
        ["id", "title", "price", "quantity"],
        [[f"K{i}", f"item {i}", f"{i}.50 EUR", str(i % 4)] for i in range(60)],
    )
    lines = [json.dumps({"id": f"K{i}", "color": ["red", "blue"][i % 2]}) for i in range(0, 60, 3)]
    (folder / "colors.jsonl.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode(), mtime=0))
    spec = {
        "company": "acme",
        "project": project,
        "name": "Storage test",
        "sources": [
            {"name": "main", "url": "main.csv"},
            {"name": "colors", "url": "colors.jsonl.gz", "format": "jsonl"},
            {"name": "stock", "url": feed_url, "format": "csv", "fields": ["quantity"]},
        ],
        "rules": [{"name": "vat", "then": [{"math": "price", "op": "multiply", "value": "1.22", "round": "2"}]}],
        "exports": EXPORTS,
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return path


@pytest.fixture()
def stock_feed() -> Iterator[str]:
    server = FeedServer()
    rows = "id,quantity\n" + "".join(f"K{i},{i * 10}\n" for i in range(0, 60, 2))
    server.routes["/stock.csv"] = body(rows.encode())
    try:
        yield server.url("/stock.csv")
    finally:
        server.close()


def _run(spec: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, Any]:
    for name in ("FIREFEED_STORAGE_URL", "FIREFEED_STORAGE_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reset_settings()
    code, report = run_json(spec)
    assert code == 0, report["error"]
    return report


@pytest.fixture()
def local_exports(run_env: Path, tmp_path: Path, stock_feed: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    """The exports of a run on the default local folders: relative path -> bytes."""
    monkeypatch.setenv("FIREFEED_FETCH_ALLOW_PRIVATE", "true")
    project = f"st_local_{uuid.uuid4().hex[:8]}"
    _run(_project(tmp_path / "local", project, stock_feed), monkeypatch)
    folder = run_env / "acme" / project
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert sorted(files) == ["feeds/out.jsonl.gz", "google.xml", "out.csv"]
    assert [p for p in (tmp_path / "var" / "runs").rglob("*") if p.is_file()] == []
    return files


def test_a_run_with_s3_storage_publishes_in_the_bucket_the_bytes_a_local_run_writes(
    local_exports: dict[str, bytes],
    s3_endpoint: str,
    run_env: Path,
    tmp_path: Path,
    stock_feed: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = new_bucket(s3_endpoint)
    project = f"st_s3_{uuid.uuid4().hex[:8]}"
    report = _run(
        _project(tmp_path / "s3", project, stock_feed),
        monkeypatch,
        FIREFEED_STORAGE_URL=f"s3://{bucket}/ff",
        FIREFEED_STORAGE_ENDPOINT_URL=s3_endpoint,
    )
    objects = bucket_objects(s3_endpoint, bucket)
    prefix = f"ff/exports/acme/{project}/"
    assert sorted(objects) == sorted(prefix + rel for rel in local_exports)  # no partials, no downloads left
    assert {k.removeprefix(prefix): v for k, v in objects.items()} == local_exports
    assert {e["path"] for e in report["exports"]} == {f"acme/{project}/{rel}" for rel in local_exports}  # the keys
    assert [s["rows"] for s in report["sources"]] == [60, 20, 30]
    assert not (run_env / "acme" / project).exists()  # nothing went to the local export folder


def test_a_run_with_a_shared_folder_url_publishes_the_bytes_a_local_run_writes(
    local_exports: dict[str, bytes], tmp_path: Path, stock_feed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    project = f"st_file_{uuid.uuid4().hex[:8]}"
    _run(_project(tmp_path / "file", project, stock_feed), monkeypatch, FIREFEED_STORAGE_URL=shared.as_uri())
    folder = shared / "exports" / "acme" / project
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert files == local_exports
    assert [p for p in (shared / "runs").rglob("*") if p.is_file()] == []  # downloads went through, then away


def test_cleanup_removes_a_runs_partials_and_downloads_from_the_bucket_and_keeps_published_feeds(
    s3_endpoint: str, run_env: Path, tmp_path: Path, stock_feed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a failed run's driver, or the reaper for a dead one, does: from any machine, through the storage."""
    from firefeed.pipeline.context import load_context
    from firefeed.pipeline.steps import cleanup

    monkeypatch.setenv("FIREFEED_FETCH_ALLOW_PRIVATE", "true")
    bucket = new_bucket(s3_endpoint)
    project = f"st_clean_{uuid.uuid4().hex[:8]}"
    report = _run(
        _project(tmp_path / "clean", project, stock_feed),
        monkeypatch,
        FIREFEED_STORAGE_URL=f"s3://{bucket}/ff",
        FIREFEED_STORAGE_ENDPOINT_URL=s3_endpoint,
    )
    run_id = report["run_id"]
    published = bucket_objects(s3_endpoint, bucket)
    exports, runs = export_storage(get_settings()), run_storage(get_settings())
    for e in EXPORTS:
        key = export_key(exports, "acme", project, e["path"], gzip=e.get("gzip") == "true")
        with exports.writing(partial_key(key, run_id)) as local:
            local.write_bytes(b"half written")
    runs.put_stream(io.BytesIO(b"id\n1\n"), download_key(run_id, "abc", "main.csv"))
    assert len(bucket_objects(s3_endpoint, bucket)) == len(published) + len(EXPORTS) + 1

    cleanup(load_context(run_id))

    assert bucket_objects(s3_endpoint, bucket) == published


# -- firefeed doctor -----------------------------------------------------------------------------
def _storage_line(database_url: str, settings: Settings) -> tuple[str, str, list[str]]:
    from firefeed.commands.ops import run_doctor

    report = run_doctor(settings.model_copy(update={"database_url": database_url}))
    (status, detail) = next((st, d) for st, name, d in report.lines if name == "storage")
    return status, detail, [f for f in report.fixes if f.startswith("storage:")]


def test_doctor_writes_reads_and_deletes_a_probe_in_the_bucket(
    database_url: str, s3_endpoint: str, tmp_path: Path
) -> None:
    bucket = new_bucket(s3_endpoint)
    settings = _settings(tmp_path, storage_url=f"s3://{bucket}/ff", storage_endpoint_url=s3_endpoint)
    status, detail, fixes = _storage_line(database_url, settings)
    assert (status, fixes) == ("ok", [])
    assert f"s3://{bucket}/ff/exports" in detail
    assert bucket_objects(s3_endpoint, bucket) == {}


def test_doctor_fails_on_a_bucket_that_does_not_exist_naming_the_variable(
    database_url: str, s3_endpoint: str, tmp_path: Path
) -> None:
    settings = _settings(tmp_path, storage_url="s3://no-such-bucket-here/ff", storage_endpoint_url=s3_endpoint)
    status, detail, fixes = _storage_line(database_url, settings)
    assert status == "FAIL"
    assert "s3://no-such-bucket-here/ff/runs/" in detail
    assert fixes and "FIREFEED_STORAGE_URL" in fixes[0]
