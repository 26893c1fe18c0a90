"""An export path must name a file: the spec refuses one that names a folder, naming `exports[i].path`."""

from __future__ import annotations

from typing import Any

import pytest

from firefeed.errors import SpecError
from firefeed.spec.loader import parse_spec


def _spec(*exports: dict[str, Any]) -> dict[str, Any]:
    return {
        "company": "acme",
        "project": "p1",
        "sources": [{"name": "main", "url": "main.csv"}],
        "exports": [{"name": f"e{i}", "format": "csv", **e} for i, e in enumerate(exports)],
    }


def _error(doc: dict[str, Any]) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec(doc)
    return info.value


@pytest.mark.parametrize("path", [".", "./", "sub/", "sub//", "sub/.", "a/b/", "sub\\", "sub\\."])
def test_a_path_naming_a_folder_is_a_spec_error_naming_the_key(path: str) -> None:
    err = _error(_spec({"path": "ok.csv"}, {"path": path}))
    assert err.path == "exports[1].path"
    assert "names a folder, not a file" in err.detail and repr(path) in err.detail


@pytest.mark.parametrize(("path", "words"), [("", "at least 1 character"), ("  ", "is blank"), ("a/..", "no '..'")])
def test_an_empty_blank_or_climbing_path_is_a_spec_error_naming_the_key(path: str, words: str) -> None:
    err = _error(_spec({"path": path}))
    assert err.path == "exports[0].path" and words in err.detail


@pytest.mark.parametrize("path", ["..feed.csv.0123abcd.partial.abcdefgh.tmp", "sub/..x.0123abcd.partial.a_c1efgh.tmp"])
def test_a_path_shaped_like_firefeeds_temporary_files_is_refused(path: str) -> None:
    # The janitor removes such files from export folders: a feed of that name would vanish.
    err = _error(_spec({"path": path}))
    assert err.path == "exports[0].path" and "temporary files" in err.detail


@pytest.mark.parametrize("path", [".feed.csv.spare", "sub/.google.xml.spare", ".feed.csv.spare.tmp"])
def test_a_path_shaped_like_the_spare_kept_beside_a_large_export_is_refused(path: str) -> None:
    # Another export's next file is written over such a file (storage/spares.py): a feed of that name would be.
    err = _error(_spec({"path": path}))
    assert err.path == "exports[0].path" and "'.<name>.spare'" in err.detail


@pytest.mark.parametrize(
    ("first", "second", "bad"),
    [
        ({"path": "feeds"}, {"path": "feeds/google.xml"}, 0),
        ({"path": "feeds/a/b.csv"}, {"path": "feeds"}, 1),
        ({"path": "feeds.gz/b.csv"}, {"path": "feeds", "gzip": True}, 1),  # gzip writes `feeds.gz`
    ],
)
def test_a_path_that_is_the_folder_of_another_exports_path_is_refused(
    first: dict[str, Any], second: dict[str, Any], bad: int
) -> None:
    err = _error(_spec(first, second))
    assert err.path == f"exports[{bad}].path" and "is the folder of" in err.detail


@pytest.mark.parametrize(
    "paths",
    [
        ["feed.csv", "feeds/google.xml", "feeds/sub/x.json", "a/./b.csv", ".hidden.csv", "feed.tmp", "sub/ "],
        ["feeds/a.csv", "feeds/b.csv"],
    ],
)
def test_paths_that_name_files_are_accepted(paths: list[str]) -> None:
    spec = parse_spec(_spec(*({"path": p} for p in paths)))
    assert [e.path for e in spec.exports] == paths


@pytest.mark.parametrize(
    ("path", "words"),
    [("a" * 151 + ".csv", "name longer than 150 bytes"), ("d/" * 600 + "f.csv", "longer than 1024 bytes")],
)
def test_a_path_too_long_to_write_is_a_spec_error(path: str, words: str) -> None:
    # A name past the file system's 255 bytes (with what a run adds while it writes) failed at EXPORT,
    # with a message naming the server's export folder.
    err = _error(_spec({"path": path}))
    assert err.path == "exports[0].path" and words in err.detail


def test_the_longest_accepted_name_is_written_and_a_failure_names_the_key_only(tmp_path: Any) -> None:
    from firefeed.errors import StorageError
    from firefeed.export.paths import MAX_PATH_PART_BYTES
    from firefeed.storage.keys import partial_key
    from firefeed.storage.local import LocalStorage

    name = "é" * ((MAX_PATH_PART_BYTES - 7) // 2) + ".csv.gz"  # two bytes a letter: at the cap
    assert parse_spec(_spec({"path": name})).exports[0].path == name
    storage = LocalStorage(tmp_path / "exports")
    key = partial_key(f"acme/p1/{name}", "0123456789abcdef0123456789abcdef")
    with storage.writing(key) as local:
        local.write_bytes(b"x")
    storage.move(key, f"acme/p1/{name}")
    assert (tmp_path / "exports" / "acme" / "p1" / name).read_bytes() == b"x"
    with pytest.raises(StorageError) as info, storage.writing("acme/p1/" + "b" * 300):
        pass
    assert str(tmp_path) not in str(info.value) and "acme/p1/bbb" in str(info.value)
