"""A killed export leaves one temporary beside its partial, and the janitor knows FireFeed's names from any other."""

from __future__ import annotations

import gzip
import os
import time
from pathlib import Path

import pytest

from firefeed.export._atomic import atomic_output
from firefeed.storage.keys import partial_key
from firefeed.storage.leftovers import leftover_run, stale_leftovers
from firefeed.storage.local import LocalStorage

RUN = "0123abcd-4567-89ef-0123-456789abcdef"
KEY = "acme/shoes/feeds/google.xml"


def _aged(path: Path, age_s: float, content: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    when = time.time() - age_s
    os.utime(path, (when, when))
    return path


@pytest.mark.parametrize("compress", [False, True])
def test_an_export_through_the_storage_writes_one_temporary_beside_its_partial(tmp_path: Path, compress: bool) -> None:
    storage = LocalStorage(tmp_path)
    folder = tmp_path / "acme" / "shoes" / "feeds"
    with storage.writing(partial_key(KEY, RUN)) as local, atomic_output(local, compress=compress, scratch=True) as out:
        out.write(b"<rss/>")
        (during,) = os.listdir(folder)  # what a worker killed here leaves
    assert leftover_run(during) == RUN[:8]
    assert os.listdir(folder) == [".google.xml.0123abcd.partial"]
    data = (folder / ".google.xml.0123abcd.partial").read_bytes()
    assert (gzip.decompress(data) if compress else data) == b"<rss/>"
    assert (out.bytes, oct((folder / ".google.xml.0123abcd.partial").stat().st_mode & 0o777)) == (len(data), "0o644")


def test_a_failed_export_through_the_storage_leaves_nothing(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    with (
        pytest.raises(RuntimeError),
        storage.writing(partial_key(KEY, RUN)) as local,
        atomic_output(local, scratch=True) as out,
    ):
        out.write(b"x" * (1 << 20))
        raise RuntimeError("the COPY failed")
    assert os.listdir(tmp_path / "acme" / "shoes" / "feeds") == []


@pytest.mark.parametrize(
    "name",
    [
        "..google.xml.0123abcd.partial.8pbmjk9v.tmp",  # the storage's temporary
        "...google.xml.0123abcd.partial.8pbmjk9v.tmp.pcaks_6x.tmp",  # and the writer's former one inside it
        "...hidden.csv.0123abcd.partial.aaaaaaaa.tmp",  # an export named `.hidden.csv`
    ],
)
def test_firefeeds_temporary_names_give_their_run(name: str) -> None:
    assert leftover_run(name) == "0123abcd"


@pytest.mark.parametrize(
    "name",
    [
        "google.xml",
        "google.xml.tmp",
        ".google.xml.abcdefgh.tmp",  # a temporary of no run's partial
        ".google.xml.0123abcd.partial",  # a partial: its run publishes or discards it
        "..google.xml.0123ABCD.partial.abcdefgh.tmp",  # not a run id prefix
        "..google.xml.0123abcd.partial.abcdefg.tmp",  # not mkstemp's eight characters
        "..google.xml.0123abcd.partial.abcdefgh.tmp.bak",
        "....g.0123abcd.partial.aaaaaaaa.tmp.bbbbbbbb.tmp.cccccccc.tmp",  # more layers than FireFeed makes
    ],
)
def test_other_names_are_not_firefeeds(name: str) -> None:
    assert leftover_run(name) is None


def test_only_old_temporaries_of_ended_runs_are_stale(tmp_path: Path) -> None:
    folder = tmp_path / "acme" / "shoes"
    dead = _aged(folder / "..google.xml.0123abcd.partial.8pbmjk9v.tmp", 3600, b"x" * 4096)
    dead_nested = _aged(folder / "feeds" / "...out.csv.0123abcd.partial.aaaaaaaa.tmp.bbbbbbbb.tmp", 3600)
    _aged(folder / "..google.xml.0123abcd.partial.freshone.tmp", 10)  # being written
    _aged(tmp_path / "other" / "proj" / "..google.xml.feedbeef.partial.8pbmjk9v.tmp", 3600)  # a live run's
    _aged(folder / ".google.xml.0123abcd.partial", 3600)  # a partial
    _aged(folder / "google.xml", 3600)
    _aged(folder / "notes.tmp", 3600)

    got = stale_leftovers(tmp_path, older_than_s=300, active_runs={"feedbeef"})

    assert got == sorted([dead, dead_nested])


def test_a_symlink_of_a_temporarys_name_is_neither_followed_nor_returned(tmp_path: Path) -> None:
    target = _aged(tmp_path / "elsewhere" / "keep.xml", 3600)
    link = tmp_path / "acme" / "shoes" / "..google.xml.0123abcd.partial.8pbmjk9v.tmp"
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    os.utime(link, (0, 0), follow_symlinks=False)
    assert stale_leftovers(tmp_path / "acme", older_than_s=300, active_runs=()) == []
